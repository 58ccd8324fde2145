package dest_test

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/pullhelper/pullhelper/dest"
)

// The complete-looking blobs of a stale staging directory of the same DEST
// move into its partial-blob cache when the next pull reclaims it: regular,
// singly linked files under a blob's name only; a symlink, a hard link, a
// temporary name and another DEST's staging are removed, never kept.
func TestReclaimSalvagesCompleteBlobs(t *testing.T) {
	needRoot(t)
	top := t.TempDir()
	dead := []byte("2147483646-1") // pid 1 started later than tick 1: gone
	stale := func(name string) string {
		root := filepath.Join(top, name)
		must(t, os.MkdirAll(filepath.Join(root, "work", "image", "blobs", "sha256"), 0o700))
		must(t, os.WriteFile(filepath.Join(root, "owner"), dead, 0o600))
		return filepath.Join(root, "work")
	}
	a, b, c := layer("a"), layer("b"), layer("c")
	hx := func(x []byte) string { return sha(x)[len("sha256:"):] }

	w := stale(".pullhelper-staging-d-0123456789abcdef")
	blobs := filepath.Join(w, "image", "blobs", "sha256")
	must(t, os.WriteFile(filepath.Join(blobs, hx(a)), a, 0o644))                                // oci:
	must(t, os.WriteFile(filepath.Join(w, "image", hx(b)), b, 0o644))                           // dir:
	must(t, os.MkdirAll(filepath.Join(w, "container_images_oci123", "blobs", "sha256"), 0o700)) // oci-archive:
	must(t, os.WriteFile(filepath.Join(w, "container_images_oci123", "blobs", "sha256", hx(c)), c, 0o644))
	must(t, os.WriteFile(filepath.Join(w, "image", "oci-put-blob1234"), []byte("half"), 0o644)) // a temporary file
	outside := filepath.Join(t.TempDir(), "secret")
	must(t, os.WriteFile(outside, []byte("secret"), 0o600))
	must(t, os.Symlink(outside, filepath.Join(blobs, hx([]byte("link")))))
	must(t, os.Link(outside, filepath.Join(blobs, hx([]byte("hardlink")))))
	// Another DEST ("d-x") whose name starts like this one's.
	other := stale(".pullhelper-staging-d-x-0123456789abcdef")
	must(t, os.WriteFile(filepath.Join(other, "image", "blobs", "sha256", hx([]byte("x"))), []byte("x"), 0o644))

	d := parse(t, "oci:"+filepath.Join(top, "d"))
	st, err := d.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	defer st.Remove()
	if len(st.Reclaimed) != 2 {
		t.Fatalf("Reclaimed = %v, want both stale directories", st.Reclaimed)
	}
	want := int64(len(a) + len(b) + len(c))
	if st.Salvaged != 3 || st.SalvagedBytes != want {
		t.Fatalf("Salvaged = %d blobs, %d bytes; want 3, %d", st.Salvaged, st.SalvagedBytes, want)
	}
	p, err := st.OpenPartial(nil, nil)
	must(t, err)
	if p == nil {
		t.Fatal("OpenPartial: the cache the reclaim opened was not handed over")
	}
	defer p.Close()
	if p.Kept != want {
		t.Fatalf("Kept = %d, want %d", p.Kept, want)
	}
	ents, err := os.ReadDir(p.Path)
	must(t, err)
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	wantNames := []string{"sha256-" + hx(a) + ".partial", "sha256-" + hx(b) + ".partial", "sha256-" + hx(c) + ".partial"}
	sort.Strings(wantNames)
	if len(got) != 3 || got[0] != wantNames[0] || got[1] != wantNames[1] || got[2] != wantNames[2] {
		t.Fatalf("cache holds %v, want %v", got, wantNames)
	}
	for _, x := range [][]byte{a, b, c} {
		f := filepath.Join(p.Path, "sha256-"+hx(x)+".partial")
		data, err := os.ReadFile(f)
		must(t, err)
		fi, err := os.Stat(f)
		must(t, err)
		if !bytes.Equal(data, x) || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %d bytes, mode %o", f, len(data), fi.Mode().Perm())
		}
	}
	if data, err := os.ReadFile(outside); err != nil || string(data) != "secret" {
		t.Fatalf("the file outside changed: %q %v", data, err)
	}
	if fi, err := os.Stat(outside); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the file outside changed mode: %v %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(top, dest.PartialCacheName("d-x"))); !os.IsNotExist(err) {
		t.Fatalf("another DEST's cache was made: %v", err)
	}
}

// A stale staging directory with nothing to keep leaves no cache behind
// when the stage is removed without opening it; a cache held by another
// pull is never written into.
func TestReclaimSalvageNeedsTheCache(t *testing.T) {
	needRoot(t)
	top := t.TempDir()
	root := filepath.Join(top, ".pullhelper-staging-d-0123456789abcdef")
	blobs := filepath.Join(root, "work", "image", "blobs", "sha256")
	must(t, os.MkdirAll(blobs, 0o700))
	must(t, os.WriteFile(filepath.Join(root, "owner"), []byte("2147483646-1"), 0o600))
	d := parse(t, "oci:"+filepath.Join(top, "d"))
	st, err := d.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	st.Remove()
	if _, err := os.Stat(filepath.Join(top, dest.PartialCacheName("d"))); !os.IsNotExist(err) {
		t.Fatalf("an empty cache is left: %v", err)
	}

	// Another pull holds the cache: the stale blob goes with its staging.
	holder, err := d.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	defer holder.Remove()
	hp, err := holder.OpenPartial(nil, nil)
	must(t, err)
	defer hp.Close()
	must(t, os.MkdirAll(blobs, 0o700))
	must(t, os.WriteFile(filepath.Join(root, "owner"), []byte("2147483646-1"), 0o600))
	x := layer("x")
	must(t, os.WriteFile(filepath.Join(blobs, sha(x)[len("sha256:"):]), x, 0o644))
	st, err = d.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	defer st.Remove()
	if st.Salvaged != 0 || len(st.Reclaimed) != 1 {
		t.Fatalf("Salvaged %d, Reclaimed %v: want 0 and the stale directory", st.Salvaged, st.Reclaimed)
	}
	if ents, _ := os.ReadDir(hp.Path); len(ents) != 0 {
		t.Fatalf("wrote into a cache another pull holds: %v", ents)
	}
}

// A pull that ends without a commit keeps the blobs it finished: Close
// moves them from its own staging area into the cache; after a commit
// (Remove) nothing is kept.
func TestPartialCloseKeepsFinishedBlobs(t *testing.T) {
	needRoot(t)
	top := t.TempDir()
	d := parse(t, "oci:"+filepath.Join(top, "d"))
	a := layer("a")
	stageWithBlob := func() (*dest.Stage, *dest.Partial) {
		st, err := d.Stage(dest.StageOptions{Locks: testLocks})
		must(t, err)
		p, err := st.OpenPartial(nil, nil)
		must(t, err)
		blobs := filepath.Join(st.WorkPath, "image", "blobs", "sha256")
		must(t, os.MkdirAll(blobs, 0o700))
		must(t, os.WriteFile(filepath.Join(blobs, sha(a)[len("sha256:"):]), a, 0o644))
		return st, p
	}
	kept := filepath.Join(top, dest.PartialCacheName("d"), "blobs", "sha256-"+sha(a)[len("sha256:"):]+".partial")

	st, p := stageWithBlob()
	p.Close()
	st.Remove()
	if data, err := os.ReadFile(kept); err != nil || !bytes.Equal(data, a) {
		t.Fatalf("the finished blob was not kept: %v", err)
	}

	st, p = stageWithBlob()
	must(t, p.Remove())
	p.Close()
	st.Remove()
	if _, err := os.Stat(filepath.Dir(filepath.Dir(kept))); !os.IsNotExist(err) {
		t.Fatalf("the cache is left after Remove: %v", err)
	}
}
