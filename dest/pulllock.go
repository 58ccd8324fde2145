package dest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/pullhelper/pullhelper/internal/failure"
	"golang.org/x/sys/unix"
)

// LockPull serializes pulls of one image (its repository name) into one
// DEST: the second waits, at most timeout, for the first to finish, and
// then stages against what the first committed (an oci: layout's blobs are
// known and not fetched again). The lock is a root-only file in LockDir
// named by a hash of DEST's absolute path and the repository; it is held
// by flock, so a killed holder releases it. The returned function releases
// it. Waiting longer than timeout is failure.Destination (exit 9).
func LockPull(spec Spec, repository string, timeout time.Duration) (func(), error) {
	if timeout <= 0 {
		timeout = LockTimeout
	}
	if err := os.MkdirAll(LockDir, 0o700); err != nil {
		return nil, failure.Wrap(failure.Destination, err, "creating the lock directory %s", LockDir)
	}
	sum := sha256.Sum256([]byte(spec.Path + "\x00" + repository))
	path := filepath.Join(LockDir, "pull-"+hex.EncodeToString(sum[:16])+".lock")
	for {
		fd, err := unix.Open(path, unix.O_CREAT|unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, failure.Wrap(failure.Destination, err, "opening the pull lock %s", path)
		}
		if err := flockWait(fd, timeout); err != nil {
			unix.Close(fd)
			return nil, failure.New(failure.Destination,
				"another pull of %s into %s has held its lock for %s (--lock-timeout, dest.lock_timeout); lock file %s",
				repository, spec.Path, timeout, path)
		}
		held, err1 := fstat(fd)
		var now unix.Stat_t
		err2 := unix.Stat(path, &now)
		if err1 == nil && err2 == nil && held.Dev == now.Dev && held.Ino == now.Ino {
			_, _ = unix.Write(fd, []byte(fmt.Sprintf("%d\n", os.Getpid())))
			sweepPullLocks(path)
			return func() {
				_ = unix.Unlink(path)
				_ = unix.Flock(fd, unix.LOCK_UN)
				unix.Close(fd)
			}, nil
		}
		unix.Close(fd) // removed by the holder we waited for: again
	}
}

// sweepPullLocks removes the pull lock files nobody holds (left by killed
// pulls), but own. A pull that created a file and has not locked it yet
// notices its file is gone (LockPull compares inodes) and tries again.
func sweepPullLocks(own string) {
	names, err := filepath.Glob(filepath.Join(LockDir, "pull-*.lock"))
	if err != nil {
		return
	}
	for i, p := range names {
		if i >= 4096 {
			return
		}
		if p == own {
			continue
		}
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			continue
		}
		if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil {
			_ = unix.Unlink(p)
		}
		unix.Close(fd)
	}
}
