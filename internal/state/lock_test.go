package state

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// holdLock opens dir/name itself and takes its flock: another open file
// description, so the process's own LockAt conflicts with it as another
// process's would.
func holdLock(t *testing.T, dfd int, name string) int {
	t.Helper()
	fd, err := unix.Openat(dfd, name, unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	return fd
}

func lockDir(t *testing.T) int {
	t.Helper()
	dfd, err := unix.Open(t.TempDir(), unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(dfd) })
	return dfd
}

// A held lock: no wait is one try; a wait ends with ErrLocked naming it
// once it has passed, not before.
func TestLockAtHeldEndsAfterItsWait(t *testing.T) {
	dfd := lockDir(t)
	defer unix.Close(holdLock(t, dfd, "a.lock"))
	if fd, err := LockAt(context.Background(), dfd, "a.lock", 0); !errors.Is(err, ErrLocked) || err.Error() != ErrLocked.Error() {
		t.Fatalf("LockAt(0) on a held lock = %d, %v; want ErrLocked alone", fd, err)
	}
	const d = 300 * time.Millisecond
	start := time.Now()
	fd, err := LockAt(context.Background(), dfd, "a.lock", d)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "after 300ms") {
		t.Fatalf("LockAt(%s) on a held lock = %d, %v; want ErrLocked after 300ms", d, fd, err)
	}
	if waited := time.Since(start); waited < d {
		t.Errorf("gave up after %s, before its wait of %s", waited, d)
	}
}

// The wait ends with the context, with its cause, however long the bound.
func TestLockAtEndsWithItsContext(t *testing.T) {
	dfd := lockDir(t)
	defer unix.Close(holdLock(t, dfd, "a.lock"))
	cause := errors.New("the pull's deadline")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	done := make(chan error, 1)
	go func() {
		_, err := LockAt(ctx, dfd, "a.lock", time.Hour)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, cause) {
			t.Fatalf("LockAt with a cancelled context = %v, want its cause", err)
		}
	case <-time.After(30 * time.Second): // hang guard only
		t.Fatal("LockAt did not end with its context within 30 s")
	}
}

// A holder that removes its lock file before it drops the flock (the pull,
// commit and uid locks) leaves a waiter holding a file no longer at the
// name: the waiter takes the file there now, never the removed one.
func TestLockAtTakesTheFileAtTheName(t *testing.T) {
	dfd := lockDir(t)
	first, err := LockAt(context.Background(), dfd, "a.lock", 0)
	if err != nil {
		t.Fatal(err)
	}
	var old unix.Stat_t
	if err := unix.Fstat(first, &old); err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 1)
	go func() {
		fd, err := LockAt(context.Background(), dfd, "a.lock", time.Minute)
		if err != nil {
			t.Error(err)
		}
		got <- fd
	}()
	// The holder's release: remove, then unlock. Whether the waiter
	// opened the old file before the removal or the new one after it, it
	// must end holding the file at the name. (keep holds the removed
	// inode, unlocked, so that its number is not reused.)
	keep, err := unix.Openat(dfd, "a.lock", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(keep)
	if err := unix.Unlinkat(dfd, "a.lock", 0); err != nil {
		t.Fatal(err)
	}
	unix.Close(first)
	var fd int
	select {
	case fd = <-got:
	case <-time.After(30 * time.Second): // hang guard only
		t.Fatal("the waiter did not get the lock within 30 s of its release")
	}
	if fd < 0 {
		return
	}
	defer unix.Close(fd)
	var held, now unix.Stat_t
	if err := unix.Fstat(fd, &held); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fstatat(dfd, "a.lock", &now, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatalf("no lock file at the name after LockAt: %v", err)
	}
	if held.Ino != now.Ino || held.Ino == old.Ino {
		t.Errorf("the waiter holds inode %d; the name's is %d, the removed one %d", held.Ino, now.Ino, old.Ino)
	}
	// And it is really held.
	if _, err := LockAt(context.Background(), dfd, "a.lock", 0); !errors.Is(err, ErrLocked) {
		t.Errorf("a third LockAt while the waiter holds it = %v, want ErrLocked", err)
	}
}

// A symbolic link at the name is never followed.
func TestLockAtRefusesSymlink(t *testing.T) {
	dfd := lockDir(t)
	if err := unix.Symlinkat("/etc/passwd", dfd, "a.lock"); err != nil {
		t.Fatal(err)
	}
	if fd, err := LockAt(context.Background(), dfd, "a.lock", 0); !errors.Is(err, unix.ELOOP) {
		t.Fatalf("LockAt on a symbolic link = %d, %v; want ELOOP", fd, err)
	}
}
