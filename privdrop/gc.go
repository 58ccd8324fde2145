package privdrop

import (
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Sweep removes the uid lock files in lockDir that no pull holds (a
// pullhelper killed before its Release leaves its file; its flock died with
// it), each under its own flock and only while it is still the file at its
// path, as Release does, and returns their paths. A file held by a live pull
// is never touched. (Every dynamic allocation sweeps too; this is
// `pullhelper gc`'s, which reports what it removed.)
func Sweep(lockDir string) []string {
	names, _ := filepath.Glob(filepath.Join(lockDir, "*.lock"))
	var out []string
	for _, p := range names {
		fd, err := unix.Open(p, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // gone meanwhile, or not a lock file
		}
		if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil {
			var held, now unix.Stat_t
			if unix.Fstat(fd, &held) == nil && unix.Lstat(p, &now) == nil &&
				held.Dev == now.Dev && held.Ino == now.Ino && unix.Unlink(p) == nil {
				out = append(out, p)
			}
		}
		unix.Close(fd)
	}
	return out
}
