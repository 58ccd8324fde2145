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
// "pid:PID" into a path and checks that it is a network namespace. The error
// says what the path is instead.
func Resolve(spec string) (string, error) {
	var path string
	switch {
	case spec == "":
		return "", errors.New("empty network namespace")
	case strings.HasPrefix(spec, "pid:"):
		pid, err := strconv.Atoi(strings.TrimPrefix(spec, "pid:"))
		if err != nil || pid <= 0 {
			return "", fmt.Errorf("%q: want pid:PID with a process id", spec)
		}
		path = fmt.Sprintf("/proc/%d/ns/net", pid)
	case strings.Contains(spec, "/"):
		path = spec
	default:
		path = filepath.Join("/run/netns", spec)
	}
	return path, Check(path)
}

// Check verifies that path is a network namespace file (nsfs, type net).
func Check(path string) error {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s does not exist", path)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %v", path, pe.Err)
	}
	if err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	if st.IsDir() {
		return fmt.Errorf("%s is a directory, not a network namespace", path)
	}
	if !st.Mode().IsRegular() {
		// nsfs files stat as regular files; never open anything else (a
		// FIFO would block).
		return fmt.Errorf("%s is %s, not a network namespace", path, kind(st.Mode()))
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %v", path, err)
	}
	defer unix.Close(fd)
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	if sfs.Type != unix.NSFS_MAGIC {
		return fmt.Errorf("%s is a regular file, not a network namespace (use /run/netns/NAME, /proc/PID/ns/net or a bind-mounted nsfs file)", path)
	}
	t, err := unix.IoctlRetInt(fd, nsGetNsType)
	if err != nil {
		return fmt.Errorf("%s: reading the namespace type: %v", path, err)
	}
	if t != unix.CLONE_NEWNET {
		return fmt.Errorf("%s is a %s namespace, not a network namespace", path, typeName(t))
	}
	return nil
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

// EnterOnThisThread moves the calling OS thread into the network namespace
// at path. The caller must have locked the goroutine to its thread
// (runtime.LockOSThread) and must never unlock it: the thread is spent.
func EnterOnThisThread(path string) error {
	// O_NONBLOCK: a FIFO swapped in under the name since Check fails
	// setns instead of blocking the open.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %v", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("entering network namespace %s: %v", path, err)
	}
	return nil
}
