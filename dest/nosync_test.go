package dest_test

import (
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/pullhelper/pullhelper/dest"
)

// A store's stage is NoSync (its blobs are read into the store and
// removed): its files are synced neither when they are hashed ahead nor by
// Verify. An oci: DEST's staged files are renamed into place: each is
// synced first.
func TestNoSyncStagesAreNotSynced(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	sd, err := dest.ParseWith("containers-storage:[vfs@"+filepath.Join(dir, "g")+"+"+filepath.Join(dir, "r")+"]h.example/t/x:v1",
		dest.ParseOptions{StorageConf: noSystemConf(t)})
	must(t, err)
	sst, err := sd.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	noSync := sst.NoSync
	sst.Remove()
	if !noSync {
		t.Error("a containers-storage: stage is not NoSync")
	}

	count, restore := dest.CountSyncs()
	defer restore()
	for _, tr := range []bool{false, true} {
		// Verify.
		dd, st, e, _ := staged(t, newImg("x"))
		if st.NoSync {
			t.Fatal("an oci: stage is NoSync")
		}
		st.NoSync = tr
		before := count()
		must(t, dd.Verify(bg, st, e))
		if n := count() - before; tr && n != 0 || !tr && n < 2 {
			t.Errorf("NoSync %v: Verify synced %d staged files and directories", tr, n)
		}

		// Hashing ahead.
		od := parse(t, "oci:"+filepath.Join(t.TempDir(), "d"))
		ost, err := od.Stage(dest.StageOptions{Locks: testLocks})
		must(t, err)
		ost.NoSync = tr
		p, err := ost.OpenPartial(nil, nil)
		must(t, err)
		b := layer("ahead")
		path := filepath.Join(p.Path, "sha256-"+sha(b)[7:]+".partial")
		must(t, os.WriteFile(path, b, 0o600))
		sigio := make(chan os.Signal, 1)
		signal.Notify(sigio, syscall.SIGIO)
		h := p.Prehash(1<<30, sigio, func() { signal.Stop(sigio) })
		if h == nil {
			t.Fatal("Prehash returned nil for an open cache")
		}
		before = count()
		h.Blob(sha(b))
		dest.WaitPrehash(h)
		n := count() - before
		if got, ok := dest.PresumOf(h.Finish(), path); !ok || "sha256:"+got.Sum != sha(b) {
			t.Errorf("NoSync %v: no digest hashed ahead (%+v)", tr, got)
		}
		if tr && n != 0 || !tr && n != 1 {
			t.Errorf("NoSync %v: hashing ahead synced %d files, want %d", tr, n, map[bool]int{false: 1, true: 0}[tr])
		}
		h.Abort()
		p.Close()
		ost.Remove()
	}
}
