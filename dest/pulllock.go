package dest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
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
// it. Waiting longer than timeout is failure.Destination (exit 9); the
// wait ends with ctx too (SIGINT, SIGTERM: exit 130/143; the --timeout
// deadline: its cause, exit 6).
func LockPull(ctx context.Context, spec Spec, repository string, timeout time.Duration) (func(), error) {
	if timeout <= 0 {
		timeout = LockTimeout
	}
	if err := os.MkdirAll(LockDir, 0o700); err != nil {
		return nil, failure.Wrap(failure.Destination, err, "creating the lock directory %s", LockDir)
	}
	sum := sha256.Sum256([]byte(spec.Path + "\x00" + repository))
	path := filepath.Join(LockDir, "pull-"+hex.EncodeToString(sum[:16])+".lock")
	fd, unlock, err := lockFile(ctx, path, timeout)
	if err != nil {
		if cerr := ctxErr(ctx, "waiting for the pull lock of "+repository+" into "+spec.Path); cerr != nil {
			return nil, cerr
		}
		if errors.Is(err, errStillLocked) {
			return nil, failure.New(failure.Destination,
				"another pull of %s into %s has held its lock for %s (--lock-timeout, dest.lock_timeout); lock file %s",
				repository, spec.Path, timeout, path)
		}
		return nil, failure.Wrap(failure.Destination, err, "opening the pull lock %s", path)
	}
	_, _ = unix.Write(fd, []byte(fmt.Sprintf("%d\n", os.Getpid())))
	// The pull lock files killed pulls left (nobody holds them); a pull
	// that created one and has not locked it yet notices its file is gone
	// (lockFile compares inodes) and tries again.
	_, _ = sweepLockGlob(filepath.Join(LockDir, "pull-*.lock"), maxPullLockSweep)
	return unlock, nil
}

// maxPullLockSweep bounds the stale pull locks one pull removes.
const maxPullLockSweep = 4096
