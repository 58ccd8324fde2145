package pipeline

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/safefs"
	"github.com/pullhelper/pullhelper/internal/state"
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
// changes. stop ends the updates, closes the channel and removes the
// registration.
//
// The file is made and locked under a temporary name (regTemp) and only
// then renamed to the name livePulls counts, so a counted name is held from
// the moment it exists. Created and locked under its final name, another
// pull's livePulls could open it in between, take the lock as nobody's and
// remove it: a pull that every other pull then left out of the split.
func nodeShare(dir string, total int64, layers int, log *slog.Logger) (<-chan pull.NodeShare, func(), error) {
	dfd, err := state.OpenDir(dir)
	if err != nil {
		return nil, nil, failure.Wrap(failure.Destination, err, "pull.node_bandwidth")
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	name := strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(rnd[:])
	tmp := regTemp + name
	fd, err := unix.Openat(dfd, tmp, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		unix.Close(dfd)
		return nil, nil, failure.Wrap(failure.Destination, err, "registering in %s (pull.node_bandwidth)", dir)
	}
	if registering != nil {
		registering()
	}
	fail := func(err error, what string) (<-chan pull.NodeShare, func(), error) {
		unix.Close(fd)
		_ = unix.Unlinkat(dfd, tmp, 0)
		unix.Close(dfd)
		return nil, nil, failure.Wrap(failure.Destination, err, "%s in %s (pull.node_bandwidth)", what, dir)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fail(err, "locking "+tmp)
	}
	if err := unix.Renameat(dfd, tmp, dfd, name); err != nil {
		return fail(err, "registering")
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
			if n := livePulls(dfd, name); n != last {
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
		_ = unix.Unlinkat(dfd, name, 0)
		unix.Close(fd)
		unix.Close(dfd)
	}
	return out, stop, nil
}

// registering, when set (by tests only), is called by nodeShare between
// making the registration's file and locking it: the moment another pull's
// livePulls must not take it for a dead pull's.
var registering func()

// regTemp prefixes a registration's name until it is locked (nodeShare).
const regTemp = ".new-"

// staleTemp: a temporary registration older than this that nobody holds
// was left by a pull that died between creating and renaming it (a live
// one does both within microseconds).
const staleTemp = 10 * time.Second

// livePulls counts the registrations in the directory held as dfd that
// someone holds (ours, self, counts), removing those nobody holds
// (state.RemoveIfUnheld: only root's regular files with one link). At
// least 1. A temporary one (regTemp) is a pull still registering: not
// counted, and removed only when stale.
func livePulls(dfd int, self string) int {
	names, _ := safefs.ReadDirNamesAtMost(dfd, maxNodeShareEntries)
	n := 0
	for _, nm := range names {
		if nm == self {
			n++
			continue
		}
		if strings.HasPrefix(nm, regTemp) {
			var st unix.Stat_t
			if unix.Fstatat(dfd, nm, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && time.Since(time.Unix(st.Mtim.Unix())) > staleTemp {
				state.RemoveIfUnheld(dfd, nm)
			}
			continue
		}
		if held, _ := state.RemoveIfUnheld(dfd, nm); held {
			n++
		}
	}
	return max(n, 1)
}
