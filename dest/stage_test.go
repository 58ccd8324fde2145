package dest_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/pullhelper/pullhelper/dest"
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
