package dest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/internal/failure"
	"golang.org/x/sys/unix"
)

// Another user holding an flock on DEST (any user can open a directory and
// lock it) does not hold up a commit: the commit lock is a root-only file.
func TestCommitIgnoresAnotherUsersFlock(t *testing.T) {
	needRoot(t)
	old, im := newImg("old"), newImg("new")
	d := filepath.Join(t.TempDir(), "layout")
	writeLayout(t, d, old, "prod")
	f, err := os.Open(d)
	must(t, err)
	defer f.Close()
	must(t, unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB))
	dd := parse(t, "oci:"+d+":a")
	st, err := dd.Stage(dest.StageOptions{Locks: testLocks, HandTo: &dest.Identity{UID: 65534, GID: 65534}})
	must(t, err)
	defer st.Remove()
	e := pull(t, dd, st, source(t, im), nil)
	must(t, dd.Verify(bg, st, e))
	must(t, dd.Commit(bg, st))
	if got := readIndex(t, d); got["a"] != im.digest || got["prod"] != old.digest {
		t.Fatalf("index after commit: %v", got)
	}
	var sd unix.Stat_t
	must(t, unix.Stat(d, &sd))
	if _, err := os.Stat(filepath.Join(testLocks, fmt.Sprintf("%d-%d.lock", sd.Dev, sd.Ino))); !os.IsNotExist(err) {
		t.Errorf("the commit lock file of %s is left (%v)", d, err)
	}
}

// The pull lock's wait ends with the pull's context: a signal is
// failure.Interrupted, the deadline its own cause, not exit 9 after the
// lock timeout.
func TestLockPullEndsWithContext(t *testing.T) {
	needRoot(t)
	locks := t.TempDir()
	spec := dest.Spec{Transport: "oci", Path: "/srv/x"}
	unlock, err := dest.LockPull(context.Background(), locks, spec, "registry.example/x", time.Minute)
	must(t, err)
	defer unlock()
	for _, c := range []struct {
		cause error
		want  failure.Code
	}{
		{errors.New("interrupted"), failure.Interrupted},
		{failure.New(failure.Network, "pull timed out after 5s (--timeout)"), failure.Network},
	} {
		_, err := dest.LockPull(done(c.cause), locks, spec, "registry.example/x", 15*time.Second)
		if failure.CodeOf(err) != c.want || !strings.Contains(fmt.Sprint(err), "waiting for the pull lock") {
			t.Errorf("LockPull with an ended context (%v): %v, want %s", c.cause, err, c.want)
		}
	}
}

// The lock directory is the caller's to name: none (or a relative one)
// is refused, never the working directory.
func TestLockDirRequired(t *testing.T) {
	spec := dest.Spec{Transport: "oci", Path: "/srv/x"}
	for _, dir := range []string{"", "locks"} {
		if _, err := dest.LockPull(context.Background(), dir, spec, "registry.example/x", time.Second); err == nil {
			t.Errorf("LockPull in %q: no error", dir)
		}
		if _, err := dest.SweepLocks(dir); err == nil {
			t.Errorf("SweepLocks in %q: no error", dir)
		}
	}
}

// SweepLocks (gc) removes only the lock files a pull makes (root's regular
// files with one link that nobody holds), and nothing at all in a lock
// directory someone else could write or own; LockPull refuses such a
// directory.
func TestSweepLocksOwnerChecks(t *testing.T) {
	needRoot(t)
	dir := filepath.Join(t.TempDir(), "locks")
	must(t, os.Mkdir(dir, 0o700))
	stale := filepath.Join(dir, "1-1.lock")
	foreign := filepath.Join(dir, "1-2.lock")
	linked := filepath.Join(dir, "1-3.lock")
	fifo := filepath.Join(dir, "1-4.lock")
	for _, f := range []string{stale, foreign, linked} {
		must(t, os.WriteFile(f, nil, 0o600))
	}
	must(t, os.Chown(foreign, 65534, 65534))
	must(t, os.Link(linked, filepath.Join(dir, "other")))
	must(t, unix.Mkfifo(fifo, 0o600))
	spec := dest.Spec{Transport: "oci", Path: "/srv/x"}
	for _, c := range []struct {
		mode os.FileMode
		uid  int
		want string
	}{{0o700, 65534, "owned by uid 65534"}, {0o777, 0, "writable by group or others"}} {
		must(t, os.Chmod(dir, c.mode))
		must(t, os.Chown(dir, c.uid, c.uid))
		if got, err := dest.SweepLocks(dir); err == nil || !strings.Contains(err.Error(), c.want) || len(got) != 0 {
			t.Errorf("mode %o, uid %d: swept %v (%v), want a refusal saying %q", c.mode, c.uid, got, err, c.want)
		}
		if unlock, err := dest.LockPull(context.Background(), dir, spec, "registry.example/x", time.Second); err == nil {
			unlock()
			t.Errorf("mode %o, uid %d: LockPull took a lock there", c.mode, c.uid)
		} else if !strings.Contains(err.Error(), c.want) {
			t.Errorf("mode %o, uid %d: LockPull: %v, want a refusal saying %q", c.mode, c.uid, err, c.want)
		}
	}
	must(t, os.Chmod(dir, 0o700))
	must(t, os.Chown(dir, 0, 0))
	got, err := dest.SweepLocks(dir)
	if err != nil || len(got) != 1 || got[0] != stale {
		t.Fatalf("swept %v (%v), want [%s] alone", got, err, stale)
	}
	for _, f := range []string{foreign, linked, fifo} {
		if _, err := os.Lstat(f); err != nil {
			t.Errorf("%s was removed: %v", f, err)
		}
	}
	if got, err := dest.SweepLocks(filepath.Join(dir, "missing")); err != nil || len(got) != 0 {
		t.Errorf("a missing lock directory: %v, %v; want nothing swept, no error", got, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "missing")); err == nil {
		t.Error("SweepLocks created the missing lock directory")
	}
}

// A lock is released in the directory it was taken in, held open, not by
// path: with the lock directory moved and another put at its path, the
// release removes its own file and nothing at the path.
func TestLockReleasedInItsOwnDirectory(t *testing.T) {
	needRoot(t)
	top := t.TempDir()
	dir := filepath.Join(top, "locks")
	spec := dest.Spec{Transport: "oci", Path: "/srv/x"}
	unlock, err := dest.LockPull(context.Background(), dir, spec, "registry.example/x", time.Second)
	must(t, err)
	names, _ := filepath.Glob(filepath.Join(dir, "pull-*.lock"))
	if len(names) != 1 {
		t.Fatalf("lock files: %v, want one", names)
	}
	name := filepath.Base(names[0])
	must(t, os.Rename(dir, filepath.Join(top, "moved")))
	must(t, os.Mkdir(dir, 0o700))
	must(t, os.WriteFile(filepath.Join(dir, name), nil, 0o600))
	unlock()
	if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
		t.Errorf("the release removed the file now at its old path: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(top, "moved", name)); !os.IsNotExist(err) {
		t.Errorf("the release left its own lock file (%v)", err)
	}
}

// Releasing a lock twice is harmless: the second call does not touch the
// descriptors the first one closed, which the next lock may have reused.
func TestLockReleaseTwice(t *testing.T) {
	needRoot(t)
	dir := filepath.Join(t.TempDir(), "locks")
	spec := dest.Spec{Transport: "oci", Path: "/srv/x"}
	first, err := dest.LockPull(context.Background(), dir, spec, "registry.example/x", time.Second)
	must(t, err)
	first()
	second, err := dest.LockPull(context.Background(), dir, spec, "registry.example/y", time.Second)
	must(t, err)
	defer second()
	first()
	names, _ := filepath.Glob(filepath.Join(dir, "pull-*.lock"))
	if len(names) != 1 {
		t.Fatalf("lock files after a second release of the first lock: %v, want the second's", names)
	}
	f, err := os.Open(names[0])
	must(t, err)
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != unix.EWOULDBLOCK {
		t.Errorf("the second lock is no longer held after a second release of the first (flock: %v)", err)
	}
}
