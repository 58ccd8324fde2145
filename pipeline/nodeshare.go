package pipeline

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/pull"
	"golang.org/x/sys/unix"
)

// nodeShareTick is how often the live pulls are counted.
const nodeShareTick = 500 * time.Millisecond

// maxNodeShareEntries bounds the directory read (a full node has a few).
const maxNodeShareEntries = 4096

// nodeShare registers this pull in dir (the state root's Bandwidth: one
// file per pull that takes part in the node's bandwidth budget,
// pull.node_bandwidth, each held with an flock by its pull, so that a file
// nobody holds belongs to a pull that is gone) and returns a channel
// carrying its share of the node's budgets: total bytes/s and layers
// concurrent downloads, each divided by the pulls that hold a file there
// (at least one download each), sent at once and again whenever that count
// changes. stop ends
// the updates, closes the channel and removes the registration.
func nodeShare(dir string, total int64, layers int, log *slog.Logger) (<-chan pull.NodeShare, func(), error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, failure.Wrap(failure.Destination, err, "creating %s (pull.node_bandwidth)", dir)
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	name := strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(rnd[:])
	path := filepath.Join(dir, name)
	fd, err := unix.Open(path, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, nil, failure.Wrap(failure.Destination, err, "registering in %s (pull.node_bandwidth)", dir)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		unix.Close(fd)
		_ = unix.Unlink(path)
		return nil, nil, failure.Wrap(failure.Destination, err, "locking %s", path)
	}
	out := make(chan pull.NodeShare, 1)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		defer close(out)
		last := 0
		t := time.NewTicker(nodeShareTick)
		defer t.Stop()
		for {
			if n := livePulls(dir, name); n != last {
				last = n
				share := pull.NodeShare{Rate: total / int64(n)}
				if layers > 0 {
					share.Layers = max(1, layers/n)
				}
				log.Debug("node share", "pulls", n, "rate", share.Rate, "layers", share.Layers)
				select {
				case <-out: // only the latest share matters
				default:
				}
				out <- share
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	stop := func() {
		close(done)
		<-finished
		_ = unix.Unlink(path)
		unix.Close(fd)
	}
	return out, stop, nil
}

// livePulls counts the registrations in dir someone holds (ours, self, counts),
// removing those nobody holds. At least 1.
func livePulls(dir, self string) int {
	d, err := os.Open(dir)
	if err != nil {
		return 1
	}
	names, _ := d.Readdirnames(maxNodeShareEntries)
	d.Close()
	n := 0
	for _, nm := range names {
		if nm == self {
			n++
			continue
		}
		p := filepath.Join(dir, nm)
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			continue
		}
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err == unix.EWOULDBLOCK {
			n++ // held: a live pull
		} else if err == nil {
			_ = unix.Unlink(p) // nobody holds it: a pull that is gone
		}
		unix.Close(fd)
	}
	return max(n, 1)
}
