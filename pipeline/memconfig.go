package pipeline

import (
	"fmt"
	"strconv"

	"github.com/pullhelper/pullhelper/internal/failure"
	"golang.org/x/sys/unix"
)

// memConfigSize bounds the --no-isolation configuration filesystem, as the
// child's private /tmp is bounded (registries.conf, registries.d, the
// certificates, the auth file, containers/image's blob-info cache).
const memConfigSize = 16 << 20

// memConfig is --no-isolation's configuration directory, where the copy
// writes its auth file (the password) and the endpoints' client keys: a
// tmpfs that is mounted nowhere (fsopen, fsmount: a detached mount, in no
// mount namespace's tree), held by one close-on-exec descriptor of this
// process and reached through /proc/self/fd/N. Nothing of it is on a disk
// or under any path another process can name, and it vanishes when the
// descriptor is closed — by close, or by the kernel when this process
// dies, SIGKILL included: nothing is left for gc. (The isolated child keeps
// the same material in the tmpfs of its private mount namespace.)
type memConfig struct {
	fd int
}

// newMemConfig creates it; it needs CAP_SYS_ADMIN (the parent is root).
func newMemConfig() (*memConfig, error) {
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, failure.New(failure.Isolation,
			"--no-isolation keeps the copy's secrets (auth file, client keys) in a private in-memory filesystem and could not create one (fsopen tmpfs: %v); run pullhelper as root", err)
	}
	defer unix.Close(fs)
	for _, kv := range [][2]string{{"size", strconv.Itoa(memConfigSize)}, {"nr_inodes", "4096"}, {"mode", "0700"}} {
		if err := unix.FsconfigSetString(fs, kv[0], kv[1]); err != nil {
			return nil, failure.New(failure.Isolation, "configuring the private in-memory filesystem (%s=%s): %v", kv[0], kv[1], err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return nil, failure.New(failure.Isolation, "creating the private in-memory filesystem: %v", err)
	}
	fd, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return nil, failure.New(failure.Isolation, "mounting the private in-memory filesystem: %v", err)
	}
	return &memConfig{fd: fd}, nil
}

// Path is where this process reaches it (no other process may: its fd
// table is its own).
func (m *memConfig) Path() string { return fmt.Sprintf("/proc/self/fd/%d", m.fd) }

// Close drops it and everything in it.
func (m *memConfig) Close() {
	if m != nil && m.fd >= 0 {
		_ = unix.Close(m.fd)
		m.fd = -1
	}
}
