package dest_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/internal/failure"
	"golang.org/x/sys/unix"
)

// A staging directory whose owner died is reclaimed; a symlink with the
// staging prefix is never followed, a live owner's directory is kept.
func TestReclaim(t *testing.T) {
	needRoot(t)
	top := t.TempDir()
	stale := filepath.Join(top, ".pullhelper-staging-x-1")
	must(t, os.MkdirAll(filepath.Join(stale, "work"), 0o700))
	must(t, os.WriteFile(filepath.Join(stale, "work", "key"), []byte("k"), 0o600))
	must(t, os.WriteFile(filepath.Join(stale, "owner"), []byte("2147483646-1"), 0o600)) // pid 1 started later than tick 1
	outside := t.TempDir()
	must(t, os.WriteFile(filepath.Join(outside, "owner"), []byte("2147483646-1"), 0o600))
	must(t, os.Symlink(outside, filepath.Join(top, ".pullhelper-staging-y-2")))
	d := parse(t, "oci:"+filepath.Join(top, "d"))
	st, err := d.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	defer st.Remove()
	if len(st.Reclaimed) != 1 || st.Reclaimed[0] != stale {
		t.Fatalf("Reclaimed = %v", st.Reclaimed)
	}
	if _, err := os.Stat(filepath.Join(outside, "owner")); err != nil {
		t.Fatalf("reclaim followed a symlink: %v", err)
	}
	// Our own live staging directory survives a concurrent Stage.
	st2, err := d.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	defer st2.Remove()
	if len(st2.Reclaimed) != 0 {
		t.Fatalf("a live staging directory was reclaimed: %v", st2.Reclaimed)
	}
	st.Remove()
	ents, _ := os.ReadDir(top)
	if len(ents) != 2 { // st2's staging and the symlink
		t.Fatalf("left: %v", ents)
	}
}

// Without openat2 (old kernels) the component walk refuses symlinks too.
func TestWalkFallbackRefusesSymlinks(t *testing.T) {
	needRoot(t)
	restore := dest.ForceWalk()
	defer restore()
	TestOCIPlantedSymlinksInDest(t)
	TestVerifyRefusesWhatTheChildPlanted(t)
}

// DEST's path is resolved from / one component at a time: an ancestor of
// another user, or a symlink another user planted, is refused; root's own
// symlinks are followed.
func TestStageChecksEveryAncestor(t *testing.T) {
	needRoot(t)
	base := t.TempDir()
	victim := filepath.Join(base, "victim")
	must(t, os.Mkdir(victim, 0o755))
	// 1. An ancestor owned by another user, DEST's parent root's.
	must(t, os.MkdirAll(filepath.Join(base, "anc", "images"), 0o755))
	must(t, os.Chown(filepath.Join(base, "anc"), 65534, 65534))
	_, err := parse(t, "oci-archive:"+filepath.Join(base, "anc", "images", "app.tar")).Stage(dest.StageOptions{Locks: testLocks})
	wantCode(t, err, failure.Destination, "ancestor")
	// 2. A symlink owned by another user on the way.
	must(t, os.Mkdir(filepath.Join(base, "r"), 0o755))
	must(t, os.Symlink(victim, filepath.Join(base, "r", "link")))
	must(t, os.Lchown(filepath.Join(base, "r", "link"), 65534, 65534))
	_, err = parse(t, "oci-archive:"+filepath.Join(base, "r", "link", "app.tar")).Stage(dest.StageOptions{Locks: testLocks})
	wantCode(t, err, failure.Destination, "symbolic link owned by uid 65534")
	// 3. Root's symlink is followed (as /var/run → /run is).
	must(t, os.Symlink(victim, filepath.Join(base, "r", "rootlink")))
	st, err := parse(t, "oci-archive:"+filepath.Join(base, "r", "rootlink", "app.tar")).Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	st.Remove()
	entries, err := os.ReadDir(victim)
	must(t, err)
	if len(entries) != 0 {
		t.Fatalf("staging left in %s: %v", victim, entries)
	}
}

// A staging tree deeper than the descriptor limit (a child can build one)
// is still removed: removal holds one directory fd at a time.
func TestRemoveDeepTree(t *testing.T) {
	needRoot(t)
	dd := parse(t, "oci:"+filepath.Join(t.TempDir(), "layout"))
	st, err := dd.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	// 400 levels below work/, built relative to fds (paths would grow
	// past PATH_MAX).
	fd, err := unix.Dup(int(st.Work.Fd()))
	must(t, err)
	for range 400 {
		must(t, unix.Mkdirat(fd, "d", 0o755))
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		must(t, err)
		unix.Close(fd)
		fd = next
	}
	unix.Close(fd)
	var lim unix.Rlimit
	must(t, unix.Getrlimit(unix.RLIMIT_NOFILE, &lim))
	low := lim
	low.Cur = 128 // far fewer than the tree's depth
	must(t, unix.Setrlimit(unix.RLIMIT_NOFILE, &low))
	st.Remove()
	must(t, unix.Setrlimit(unix.RLIMIT_NOFILE, &lim))
	left, err := filepath.Glob(filepath.Join(filepath.Dir(dd.Spec().Path), ".pullhelper-staging-*"))
	must(t, err)
	if len(left) != 0 {
		t.Fatalf("staging left after Remove: %v", left)
	}
}
