package dest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/safefs"
	"golang.org/x/sys/unix"
)

// Reaching containerd's socket: the path and every directory above it
// root's, connected through the descriptor that was checked.

// ctrdErr is a destination error naming the socket and the setting.
func (d *containerdDest) ctrdErr(err error, what string) error {
	msg := err.Error()
	if errdefs.IsUnavailable(err) || errors.Is(err, context.DeadlineExceeded) || errdefs.IsDeadlineExceeded(err) {
		msg = "cannot reach containerd at " + d.set.Address + " (set --containerd-address or [dest] containerd_address)"
		if from := d.set.From["address"]; d.set.Config != "" && from != "" && !strings.HasPrefix(from, "-") {
			msg = "cannot reach containerd at " + d.set.Address + ", which " + from + " names (set --containerd-address or [dest] containerd_address)"
		}
	}
	msg = strings.ReplaceAll(msg, "\n", " ")
	return d.destErr("%s: %s", what, msg)
}

// ctrdClient is a connection to containerd and the descriptor of the
// socket it was made through.
type ctrdClient struct {
	*containerd.Client
	sock int
}

func (c *ctrdClient) Close() {
	_ = c.Client.Close()
	unix.Close(c.sock)
}

// connect checks the socket (openSocket) and connects through the
// descriptor it checked (/proc/self/fd/N: the path cannot be swapped
// after the check).
func (d *containerdDest) connect() (*ctrdClient, error) {
	fd, err := d.openSocket()
	if err != nil {
		return nil, err
	}
	c, err := containerd.New(fmt.Sprintf("/proc/self/fd/%d", fd), containerd.WithDefaultNamespace(d.set.Namespace), containerd.WithTimeout(containerdDial))
	if err != nil {
		unix.Close(fd)
		return nil, d.ctrdErr(err, "connecting")
	}
	return &ctrdClient{Client: c, sock: fd}, nil
}

// openSocket opens containerd's socket O_PATH, refusing one root does not
// own or that someone else could replace (openRootSocket). Root would
// otherwise stream the image (and trust what answers) to a listener
// another user made. Errors name the path and the owner found.
func (d *containerdDest) openSocket() (int, error) {
	fd, err := openRootSocket(d.set.Address, "containerd socket", "set --containerd-address or [dest] containerd_address")
	if err != nil {
		return -1, d.destErr("%v", err)
	}
	return fd, nil
}

// openRootSocket opens the socket at addr O_PATH, refusing one root does
// not own or that someone else could replace: every directory above it is
// checked as DEST's are (root's, not writable by group or others unless
// sticky; openAncestors), it must be a socket owned by root (a symbolic
// link is followed only when root's and its target checked the same way).
// Errors start with what and the path, and end with fix.
func openRootSocket(address, what, fix string) (int, error) {
	addr := filepath.Clean(address)
	for links := 0; ; links++ {
		dir, name := filepath.Dir(addr), filepath.Base(addr)
		dfd, err := openAncestors(dir, false)
		if err != nil {
			return -1, fmt.Errorf("%s %s: %v (%s)", what, address, err, fix)
		}
		pst, err := safefs.Fstat(dfd)
		if err == nil {
			err = safefs.RootOnly(pst, dir, true)
		}
		if err != nil {
			unix.Close(dfd)
			return -1, fmt.Errorf("%s %s: %v (%s)", what, address, err, fix)
		}
		st, err := safefs.FstatAt(dfd, name)
		if err != nil {
			unix.Close(dfd)
			return -1, fmt.Errorf("%s %s: %s (%s)", what, address, safefs.ErrnoText(err), fix)
		}
		if safefs.IsLink(st) && st.Uid == 0 && links < 8 {
			target, err := readlinkAt(dfd, name)
			unix.Close(dfd)
			if err != nil {
				return -1, fmt.Errorf("%s %s: %s (%s)", what, address, safefs.ErrnoText(err), fix)
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(dir, target)
			}
			addr = filepath.Clean(target)
			continue
		}
		if st.Uid != 0 {
			unix.Close(dfd)
			return -1, fmt.Errorf("%s %s is owned by uid %d, not root; refusing to connect to it as root (%s)", what, filepath.Join(dir, name), st.Uid, fix)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
			unix.Close(dfd)
			return -1, fmt.Errorf("%s %s: not a socket (%s)", what, filepath.Join(dir, name), fix)
		}
		fd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(dfd)
		if err != nil {
			return -1, fmt.Errorf("%s %s: %s (%s)", what, address, safefs.ErrnoText(err), fix)
		}
		if got, err := safefs.Fstat(fd); err != nil || got.Ino != st.Ino || got.Dev != st.Dev || got.Uid != 0 {
			unix.Close(fd)
			return -1, fmt.Errorf("%s %s changed while it was checked; retry", what, address)
		}
		return fd, nil
	}
}

// DialRootSocket connects to the unix socket at path as openRootSocket
// checks it (root's, in root's directories), through the descriptor it
// checked (/proc/self/fd/N: the path cannot be swapped after the check).
// Each dial checks again, so a runtime that recreated its socket is
// reached. Errors (failure.Destination) start with what and the path and
// end with fix.
func DialRootSocket(ctx context.Context, path, what, fix string) (net.Conn, error) {
	fd, err := openRootSocket(path, what, fix)
	if err != nil {
		return nil, failure.New(failure.Destination, "%v", err)
	}
	defer unix.Close(fd)
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		msg := err.Error()
		var se *os.SyscallError
		if errors.As(err, &se) {
			msg = se.Err.Error()
		}
		return nil, failure.New(failure.Destination, "%s %s: %s (%s)", what, path, msg, fix)
	}
	return c, nil
}

// CheckRootDir checks dir as a directory where root may create a socket
// others connect to (pullhelper cri's --listen): it and every directory
// above it root's, not writable by group or others unless sticky (then
// nobody else can rename or remove root's entries), no symbolic link of
// another owner on the way (openAncestors). Another user who could write
// there could move root's socket aside and listen in its place, and so
// receive what the caller sends (a PullImage request's credentials).
func CheckRootDir(dir string) error {
	fd, err := openAncestors(dir, false)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	st, err := safefs.Fstat(fd)
	if err != nil {
		return err
	}
	return safefs.RootOnly(st, dir, true)
}
