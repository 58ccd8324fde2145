package memfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// FS is one private in-memory filesystem.
type FS struct {
	fd int
}

// New creates one of at most size bytes and inodes inodes; it needs
// CAP_SYS_ADMIN (the parent is root). Errors name the step that failed.
func New(size int64, inodes int) (*FS, error) {
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fsopen tmpfs: %w", err)
	}
	defer unix.Close(fs)
	for _, kv := range [][2]string{{"size", strconv.FormatInt(size, 10)}, {"nr_inodes", strconv.Itoa(inodes)}, {"mode", "0700"}} {
		if err := unix.FsconfigSetString(fs, kv[0], kv[1]); err != nil {
			return nil, fmt.Errorf("configuring the tmpfs (%s=%s): %w", kv[0], kv[1], err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return nil, fmt.Errorf("creating the tmpfs: %w", err)
	}
	fd, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return nil, fmt.Errorf("mounting the tmpfs: %w", err)
	}
	return &FS{fd: fd}, nil
}

// Path is where this process reaches it (no other process may: its fd
// table is its own).
func (m *FS) Path() string { return "/proc/self/fd/" + strconv.Itoa(m.fd) }

// WriteFile writes data at rel (a relative path; its directories are
// created, 0700), 0600.
func (m *FS) WriteFile(rel string, data []byte) (string, error) {
	full := filepath.Join(m.Path(), rel)
	if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
		return "", err
	}
	if err := os.WriteFile(full, data, 0o600); err != nil {
		return "", err
	}
	return full, nil
}

// Close drops it and everything in it; a nil FS or a second Close does
// nothing.
func (m *FS) Close() {
	if m != nil && m.fd >= 0 {
		_ = unix.Close(m.fd)
		m.fd = -1
	}
}
