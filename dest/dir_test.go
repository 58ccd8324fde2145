package dest_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/internal/failure"
	"golang.org/x/sys/unix"
)

func dirManifest(t *testing.T, d string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d, "manifest.json"))
	must(t, err)
	return sha(b)
}

// Replacing a dir: image is one RENAME_EXCHANGE: DEST is a complete image
// at every step (the old code renamed DEST away first: a SIGKILL there
// lost it).
func TestDirReplaceIsOneExchange(t *testing.T) {
	needRoot(t)
	d := filepath.Join(t.TempDir(), "img")
	a, b := newImg("a"), newImg("b")
	must(t, fullPull(t, "dir:"+d, a, dest.StageOptions{Locks: testLocks}))
	if dirManifest(t, d) != a.digest {
		t.Fatal("first pull did not commit a")
	}
	var steps []string
	dest.SetCommitHook(func(step string) {
		steps = append(steps, step)
		if got := dirManifest(t, d); got != b.digest {
			t.Errorf("after %s DEST holds %s, want the new image", step, got)
		}
		if _, err := os.Stat(filepath.Join(d, "version")); err != nil {
			t.Errorf("after %s: %v", step, err)
		}
	})
	defer dest.SetCommitHook(nil)
	must(t, fullPull(t, "dir:"+d, b, dest.StageOptions{Locks: testLocks}))
	if strings.Join(steps, ",") != "exchanged,removed" {
		t.Fatalf("steps = %v", steps)
	}
	ents, _ := os.ReadDir(filepath.Dir(d))
	if len(ents) != 1 {
		t.Fatalf("left behind: %v", ents)
	}
}

// 20 pulls commit into one new DEST at once: every one succeeds (the old
// code failed 1 in 5: rename onto a non-empty directory).
func TestDirConcurrentCommitsIntoNewDest(t *testing.T) {
	needRoot(t)
	d := filepath.Join(t.TempDir(), "img")
	const n = 20
	type pulled struct {
		d  dest.Destination
		st *dest.Stage
	}
	var ps []pulled
	for i := range n {
		dd := parse(t, "dir:"+d)
		st, err := dd.Stage(dest.StageOptions{Locks: testLocks})
		must(t, err)
		defer st.Remove()
		e := pull(t, dd, st, source(t, newImg(strings.Repeat("x", i+1))), nil)
		must(t, dd.Verify(bg, st, e))
		ps = append(ps, pulled{dd, st})
	}
	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs <- p.d.Commit(bg, p.st)
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if _, err := os.Stat(filepath.Join(d, "version")); err != nil {
		t.Fatal(err)
	}
}

func TestDirEmptyDestAndMountPoint(t *testing.T) {
	needRoot(t)
	d := filepath.Join(t.TempDir(), "empty")
	must(t, os.Mkdir(d, 0o755))
	a := newImg("a")
	must(t, fullPull(t, "dir:"+d, a, dest.StageOptions{Locks: testLocks}))
	if dirManifest(t, d) != a.digest {
		t.Fatal("empty DEST did not get the image")
	}
	m := filepath.Join(t.TempDir(), "mnt")
	must(t, os.Mkdir(m, 0o755))
	if err := unix.Mount("tmpfs", m, "tmpfs", 0, "size=4m"); err != nil {
		t.Skipf("cannot mount a tmpfs (needs CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(m, unix.MNT_DETACH) })
	_, err := parse(t, "dir:"+m).Stage(dest.StageOptions{Locks: testLocks})
	wantCode(t, err, failure.Destination, "is a mount point")
}

func TestDirRefusesANonImageDir(t *testing.T) {
	needRoot(t)
	d := filepath.Join(t.TempDir(), "data")
	must(t, os.MkdirAll(d, 0o755))
	must(t, os.WriteFile(filepath.Join(d, "precious"), nil, 0o644))
	_, err := parse(t, "dir:"+d).Stage(dest.StageOptions{Locks: testLocks})
	wantCode(t, err, failure.Destination, "is not a dir: image")
}

// A file named version does not make a directory a dir: image: only one
// containers/image's parseVersion accepts ("Directory Transport Version:
// M.N\n", at most 1.2) does, as its directory destination refuses to
// overwrite anything else (ErrNotContainerImageDir). A FIFO under the name
// is refused without blocking.
func TestDirReplacesOnlyAnImageDir(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		version string
		ok      bool
	}{
		{"Directory Transport Version: 1.1\n", true},
		{"Directory Transport Version: 1.2\n", true},
		{"my notes\n", false},
		{"Directory Transport Version: 1.1", false},
		{"Directory Transport Version: 1.3\n", false},
		{"Directory Transport Version: 01.1\n", false},
	} {
		d := filepath.Join(t.TempDir(), "data")
		must(t, os.MkdirAll(d, 0o755))
		must(t, os.WriteFile(filepath.Join(d, "version"), []byte(tc.version), 0o644))
		must(t, os.WriteFile(filepath.Join(d, "data.txt"), []byte("important"), 0o644))
		st, err := parse(t, "dir:"+d).Stage(dest.StageOptions{Locks: testLocks})
		if tc.ok {
			if err != nil {
				t.Errorf("%q: %v; want it replaceable", tc.version, err)
				continue
			}
			st.Remove()
			continue
		}
		wantCode(t, err, failure.Destination, "is not a dir: image")
		if b, err := os.ReadFile(filepath.Join(d, "data.txt")); err != nil || string(b) != "important" {
			t.Errorf("%q: data.txt %q %v; want it untouched", tc.version, b, err)
		}
	}
	d := filepath.Join(t.TempDir(), "fifo")
	must(t, os.MkdirAll(d, 0o755))
	must(t, unix.Mkfifo(filepath.Join(d, "version"), 0o644))
	_, err := parse(t, "dir:"+d).Stage(dest.StageOptions{Locks: testLocks})
	wantCode(t, err, failure.Destination, "is not a dir: image")
}
