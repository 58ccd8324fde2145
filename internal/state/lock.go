package state

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// ErrLocked is LockAt's error when another process still holds the lock
// once its wait is over.
var ErrLocked = errors.New("still locked by another process")

// locked adds the wait to ErrLocked.
func locked(err error, d time.Duration) error {
	if err == ErrLocked && d > 0 {
		return fmt.Errorf("%w after %s", ErrLocked, d)
	}
	return err
}

// flockUntil takes an exclusive flock on fd, waiting until deadline and not
// past ctx (context.Cause(ctx) then). flock(2) itself can be neither
// bounded nor cancelled, so a lock is never waited for in it: the wait
// polls, every 5 ms at first and at most every 200 ms.
func flockUntil(ctx context.Context, fd int, deadline time.Time) error {
	wait := 5 * time.Millisecond
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return ErrLocked
		}
		t := time.NewTimer(min(wait, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
		if wait < 200*time.Millisecond {
			wait *= 2
		}
	}
}

// LockAt takes an exclusive flock on the lock file name in the directory
// held as dfd (a state directory: OpenDir), created 0600 when missing and
// never opened through a symbolic link, waiting at most d (0: one try) and
// not past ctx (flockUntil); it returns
// the locked descriptor. A holder may remove its lock file before it
// drops the flock (the pull, commit and uid locks do, so that lock files
// do not pile up): a waiter then holds a file that is no longer the one
// at name, which locks nothing, and LockAt tries again on the file there
// now, within the same wait.
func LockAt(ctx context.Context, dfd int, name string, d time.Duration) (int, error) {
	deadline := time.Now().Add(d)
	for {
		fd, err := unix.Openat(dfd, name, unix.O_CREAT|unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return -1, err
		}
		if err := flockUntil(ctx, fd, deadline); err != nil {
			unix.Close(fd)
			return -1, locked(err, d)
		}
		var held, now unix.Stat_t
		err1 := unix.Fstat(fd, &held)
		err2 := unix.Fstatat(dfd, name, &now, unix.AT_SYMLINK_NOFOLLOW)
		if err1 == nil && err2 == nil && held.Dev == now.Dev && held.Ino == now.Ino {
			return fd, nil
		}
		unix.Close(fd) // removed by the holder we waited for: again
	}
}
