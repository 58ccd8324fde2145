package privdrop

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Sweep removes the uid lock files in lockDir that no pull holds (a
// pullhelper killed before its Release leaves its file; its flock died with
// it), each under its own flock and only while it is still the file at its
// path, as Release does, and returns their paths. A file held by a live pull
// is never touched, nor anything that is not a lock file of this user's
// (a regular file with one link, owned by the effective uid, in a directory
// of its own that nobody else may write). Every pull sweeps at its start
// (pipeline), every dynamic allocation once it holds its uid, and
// `pullhelper gc`, which reports what it removed.
func Sweep(lockDir string) []string { return sweepExcept(lockDir, "") }

// sweepExcept is Sweep leaving the file keep alone (the caller's own).
func sweepExcept(lockDir, keep string) []string {
	var dir unix.Stat_t
	if unix.Lstat(lockDir, &dir) != nil || dir.Mode&unix.S_IFMT != unix.S_IFDIR ||
		dir.Uid != uint32(os.Geteuid()) || dir.Mode&0o022 != 0 {
		return nil // not a lock directory of this user's: nothing in it is ours to remove
	}
	names, _ := filepath.Glob(filepath.Join(lockDir, "*.lock"))
	var out []string
	for _, p := range names {
		if p == keep {
			continue
		}
		// O_NONBLOCK: a FIFO planted here never blocks the sweep.
		fd, err := unix.Open(p, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			continue // gone meanwhile, or not a lock file
		}
		if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil {
			var held, now unix.Stat_t
			if unix.Fstat(fd, &held) == nil && held.Mode&unix.S_IFMT == unix.S_IFREG && held.Nlink == 1 &&
				held.Uid == uint32(os.Geteuid()) && unix.Lstat(p, &now) == nil &&
				held.Dev == now.Dev && held.Ino == now.Ino && unix.Unlink(p) == nil {
				out = append(out, p)
			}
		}
		unix.Close(fd)
	}
	return out
}
