package dest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/safefs"
	"github.com/pullhelper/pullhelper/internal/state"
	"golang.org/x/sys/unix"
)

// The locks of a pull, all flock(2)s on root-only files in the state
// root's lock directory (state.Root.Locks, passed in: StageOptions.Locks,
// LockPull's and SweepLocks' dir), so that a killed holder releases them:
// the pull lock of one image into one DEST (LockPull), the commit lock of
// a directory a commit changes (lockInode), and gc's sweep of the files
// nobody holds (SweepLocks).

// LockPull serializes pulls of one image (its repository name) into one
// DEST: the second waits, at most timeout, for the first to finish, and
// then stages against what the first committed (an oci: layout's blobs are
// known and not fetched again). The lock is a root-only file in dir (the
// state root's lock directory, state.Root.Locks)
// named by a hash of DEST's absolute path and the repository; it is held
// by flock, so a killed holder releases it. The returned function releases
// it. Waiting longer than timeout is failure.Destination (exit 9); the
// wait ends with ctx too (SIGINT, SIGTERM: exit 130/143; the --timeout
// deadline: its cause, exit 6).
func LockPull(ctx context.Context, dir string, spec Spec, repository string, timeout time.Duration) (func(), error) {
	if timeout <= 0 {
		timeout = LockTimeout
	}
	dfd, err := openLockDir(dir)
	if err != nil {
		return nil, failure.Wrap(failure.Destination, err, "the pull lock")
	}
	sum := sha256.Sum256([]byte(spec.Path + "\x00" + repository))
	name := "pull-" + hex.EncodeToString(sum[:16]) + ".lock"
	path := filepath.Join(dir, name)
	fd, unlock, err := lockFile(ctx, dfd, name, timeout)
	if err != nil {
		if cerr := failure.Context(ctx, "waiting for the pull lock of "+repository+" into "+spec.Path); cerr != nil {
			return nil, cerr
		}
		if errors.Is(err, state.ErrLocked) {
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
	sweepLocks(dfd, dir, "pull-", maxPullLockSweep)
	return unlock, nil
}

// maxPullLockSweep bounds the stale pull locks one pull removes.
const maxPullLockSweep = 4096

// lockInode takes the commit lock of the directory held as fd: a
// root-only file in dir (StageOptions.Locks) named by the directory's
// device and inode, so that no other user can hold a pull's lock (any
// user may flock a directory it can open, and so could stall every commit
// into a shared parent until LockTimeout). It waits at
// most d (and not past ctx: SIGINT, SIGTERM, the --timeout deadline), and
// returns the function that releases it. The lock file is
// removed on release, under the lock; a waiter that then holds a removed
// file notices (its inode is no longer the path's) and tries again.
func lockInode(ctx context.Context, dir string, fd int, d time.Duration) (func(), error) {
	st, err := safefs.Fstat(fd)
	if err != nil {
		return nil, err
	}
	dfd, err := openLockDir(dir)
	if err != nil {
		return nil, err
	}
	_, unlock, err := lockFile(ctx, dfd, fmt.Sprintf("%d-%d.lock", st.Dev, st.Ino), d)
	return unlock, err
}

// openLockDir opens the lock directory (state.OpenDir: created root's
// 0700 when missing, and refused unless only root can change it or any
// directory above it, so nobody else can plant or swap a lock file). An
// empty or relative one is refused: the caller forgot to pass it, and the
// locks would land in the working directory.
func openLockDir(dir string) (int, error) {
	if !filepath.IsAbs(dir) {
		return -1, fmt.Errorf("the lock directory %q is not an absolute path", dir)
	}
	return state.OpenDir(dir)
}

// lockFile takes an exclusive flock on the lock file name (created 0600)
// in the lock directory held as dfd, which it takes over (closed on every
// path: on failure, or by the release), waiting at most d and not past ctx
// (then ctx's error: the caller checks failure.Context first; state.ErrLocked once
// d has passed), and returns the lock file's descriptor and the function
// that releases it. The file is removed on release, under the lock; a
// waiter that then holds a removed file notices (state.LockAt compares
// inodes) and tries again.
func lockFile(ctx context.Context, dfd int, name string, d time.Duration) (int, func(), error) {
	lfd, err := state.LockAt(ctx, dfd, name, d)
	if err != nil {
		unix.Close(dfd)
		return -1, nil, err
	}
	var once sync.Once // a second call must not close reused descriptors
	return lfd, func() {
		once.Do(func() {
			_ = unix.Unlinkat(dfd, name, 0)
			_ = unix.Flock(lfd, unix.LOCK_UN)
			unix.Close(lfd)
			unix.Close(dfd)
		})
	}, nil
}

// SweepLocks removes the commit and pull lock files in dir (the state
// root's lock directory, state.Root.Locks) that no process holds
// (left by a pullhelper killed while it committed), each under its own
// flock, as a holder removes its own on release: a waiter that holds a
// removed file notices and tries again (lockInode). It returns their paths.
// A missing dir has none (it is not created); one that root alone cannot
// change (state.OpenExistingDir) is an error, and nothing is removed.
func SweepLocks(dir string) ([]string, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("the lock directory %q is not an absolute path", dir)
	}
	dfd, err := state.OpenExistingDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // no pull has locked anything yet
	}
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	return sweepLocks(dfd, dir, "", 0), nil
}

// sweepLocks removes the unheld lock files named PREFIX*.lock in the
// directory dir held as dfd, at most max of them when max > 0: each only
// when it is what a pull makes (state.RemoveIfUnheld: a regular file of
// root's with one link, still the one at its name once locked).
func sweepLocks(dfd int, dir, prefix string, max int) []string {
	names, _ := safefs.ReadDirNamesAtMost(dfd, maxLockSweepEntries)
	sort.Strings(names)
	var out []string
	for _, nm := range names {
		if max > 0 && len(out) >= max {
			break
		}
		if !strings.HasPrefix(nm, prefix) || !strings.HasSuffix(nm, ".lock") {
			continue
		}
		if _, removed := state.RemoveIfUnheld(dfd, nm); removed {
			out = append(out, filepath.Join(dir, nm))
		}
	}
	return out
}

// maxLockSweepEntries bounds the entries one sweep of the lock directory
// looks at.
const maxLockSweepEntries = 65536
