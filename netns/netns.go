package netns

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// nsGetNsType is NS_GET_NSTYPE, _IO(0xb7, 0x3).
const nsGetNsType = 0xb703

// Resolve turns "PATH", "NAME" (an `ip netns` name, /run/netns/NAME) or
// "pid:PID" into a path and checks that it is a network namespace, whose ID
// it returns (Open, when the pull runs, refuses another namespace at the
// path). The error says what the path is instead.
func Resolve(spec string) (string, ID, error) {
	var path string
	switch {
	case spec == "":
		return "", ID{}, errors.New("empty network namespace")
	case strings.HasPrefix(spec, "pid:"):
		pid, err := strconv.Atoi(strings.TrimPrefix(spec, "pid:"))
		if err != nil || pid <= 0 {
			return "", ID{}, fmt.Errorf("%q: want pid:PID with a process id", spec)
		}
		path = fmt.Sprintf("/proc/%d/ns/net", pid)
	case strings.Contains(spec, "/"):
		path = spec
	default:
		path = filepath.Join("/run/netns", spec)
	}
	h, err := Open(path)
	if err != nil {
		return path, ID{}, err
	}
	defer h.Close()
	return path, h.ID, nil
}

// Handle is a network namespace held open: what was checked is what is
// entered (EnterOnThisThread setns's through the descriptor), and the
// namespace lives while it is held, whatever becomes of its path.
type Handle struct {
	Path string
	fd   int
	ID   ID
}

// ID is a namespace's identity: its nsfs device and inode.
type ID struct{ Dev, Ino uint64 }

// Open opens the network namespace file at path (nsfs, type net) once, as
// root, without blocking on anything else (a FIFO, a device), and holds
// it. The caller closes it.
func Open(path string) (*Handle, error) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s does not exist", path)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return nil, fmt.Errorf("%s: %v", path, pe.Err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if st.IsDir() {
		return nil, fmt.Errorf("%s is a directory, not a network namespace", path)
	}
	if !st.Mode().IsRegular() {
		// nsfs files stat as regular files; never open anything else (a
		// FIFO would block).
		return nil, fmt.Errorf("%s is %s, not a network namespace", path, kind(st.Mode()))
	}
	// O_NONBLOCK: a FIFO swapped in under the name since the stat fails
	// the checks below instead of blocking the open.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %v", path, err)
	}
	h := &Handle{Path: path, fd: fd}
	if err := h.check(); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return h, nil
}

// check: the held file is nsfs, of a network namespace; it records the ID.
func (h *Handle) check() error {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(h.fd, &sfs); err != nil {
		return fmt.Errorf("%s: %v", h.Path, err)
	}
	if sfs.Type != unix.NSFS_MAGIC {
		return fmt.Errorf("%s is a regular file, not a network namespace (use /run/netns/NAME, /proc/PID/ns/net or a bind-mounted nsfs file)", h.Path)
	}
	t, err := unix.IoctlRetInt(h.fd, nsGetNsType)
	if err != nil {
		return fmt.Errorf("%s: reading the namespace type: %v", h.Path, err)
	}
	if t != unix.CLONE_NEWNET {
		return fmt.Errorf("%s is a %s namespace, not a network namespace", h.Path, typeName(t))
	}
	var st unix.Stat_t
	if err := unix.Fstat(h.fd, &st); err != nil {
		return fmt.Errorf("%s: %v", h.Path, err)
	}
	h.ID = ID{Dev: st.Dev, Ino: st.Ino}
	return nil
}

// Close lets the namespace go (nil-safe, once).
func (h *Handle) Close() error {
	if h == nil || h.fd < 0 {
		return nil
	}
	err := unix.Close(h.fd)
	h.fd = -1
	return err
}

func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "a special file"
}

func typeName(t int) string {
	switch t {
	case unix.CLONE_NEWNS:
		return "mount"
	case unix.CLONE_NEWUTS:
		return "UTS"
	case unix.CLONE_NEWIPC:
		return "IPC"
	case unix.CLONE_NEWUSER:
		return "user"
	case unix.CLONE_NEWPID:
		return "PID"
	case unix.CLONE_NEWCGROUP:
		return "cgroup"
	case unix.CLONE_NEWTIME:
		return "time"
	}
	return fmt.Sprintf("type-%#x", t)
}

// EnterOnThisThread moves the calling OS thread into the held network
// namespace (setns on the descriptor Open checked, never the path again).
// The caller must have locked the goroutine to its thread
// (runtime.LockOSThread) and must never unlock it: the thread is spent.
func (h *Handle) EnterOnThisThread() error {
	if h == nil || h.fd < 0 {
		return errors.New("entering a network namespace that is not held")
	}
	if err := unix.Setns(h.fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("entering network namespace %s: %v", h.Path, err)
	}
	return nil
}
