package dest_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pullhelper/pullhelper/dest"
)

func ownerOf(t *testing.T, path string) (uint32, uint64) {
	t.Helper()
	fi, err := os.Lstat(path)
	must(t, err)
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Ino
}

// issue 22 finding 1: a cache directory another user made beside DEST (a
// sticky /tmp) is not adopted: OpenPartial refuses it (resume off, the
// pull goes on), and neither it nor its entries change owner.
func TestOpenPartialRefusesAnotherUsersCache(t *testing.T) {
	needRoot(t)
	top := t.TempDir()
	must(t, syscall.Chmod(top, 0o1777))
	for i, mode := range []os.FileMode{0o700, 0o777} {
		name := "d" + string(rune('a'+i))
		cache := filepath.Join(top, dest.PartialCacheName(name))
		must(t, os.MkdirAll(filepath.Join(cache, "blobs"), 0o700))
		planted := filepath.Join(cache, "sha256-"+strings.Repeat("a", 64)+".partial")
		must(t, os.WriteFile(planted, nil, 0o666))
		for _, p := range []string{planted, filepath.Join(cache, "blobs"), cache} {
			must(t, os.Chown(p, 65534, 65534))
		}
		must(t, os.Chmod(cache, mode))
		st, err := parse(t, "oci:"+filepath.Join(top, name)).Stage(dest.StageOptions{Locks: testLocks, HandTo: &dest.Identity{UID: 4000, GID: 4000}})
		must(t, err)
		p, err := st.OpenPartial(&dest.Identity{UID: 4000, GID: 4000}, nil)
		var refused *dest.CacheRefused
		if p != nil || !errors.As(err, &refused) || !strings.Contains(err.Error(), "uid 65534") || !strings.Contains(err.Error(), cache) {
			t.Fatalf("OpenPartial of a cache owned by uid 65534 (mode %o): %v, %v; want a refusal naming it", mode, p, err)
		}
		for _, f := range []string{planted, filepath.Join(cache, "blobs"), cache} {
			if uid, _ := ownerOf(t, f); uid != 65534 {
				t.Fatalf("%s is now owned by uid %d", f, uid)
			}
		}
		st.Remove()
		if _, err := os.Stat(planted); err != nil {
			t.Fatalf("the other user's file was removed: %v", err)
		}
	}
}

// issue 22 finding 2: blobs/ left to the uid of a pull whose parent was
// killed (a uid the next pull may hold again, with a descriptor on a kept
// file) is not adopted: its kept files are copied into a fresh root-owned
// blobs/ — new inodes that the old descriptor does not reach — and the old
// directory is removed. A root-owned kept file that a descriptor is open
// on is discarded.
func TestOpenPartialCopiesAKilledPullsBlobs(t *testing.T) {
	needRoot(t)
	top := t.TempDir()
	cache := filepath.Join(top, dest.PartialCacheName("d"))
	old := filepath.Join(cache, "blobs")
	must(t, os.MkdirAll(old, 0o700))
	must(t, os.Chmod(cache, 0o700))
	a := layer("kept")
	name := "sha256-" + sha(a)[7:] + ".partial"
	must(t, os.WriteFile(filepath.Join(old, name), a, 0o600))
	must(t, os.Chown(filepath.Join(old, name), 4001, 4001))
	must(t, os.Chown(old, 4001, 4001))
	_, oldIno := ownerOf(t, filepath.Join(old, name))
	held, err := os.OpenFile(filepath.Join(old, name), os.O_RDWR, 0)
	must(t, err)
	defer held.Close()

	d := parse(t, "oci:"+filepath.Join(top, "d"))
	st, err := d.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	p, err := st.OpenPartial(nil, nil)
	must(t, err)
	uid, ino := ownerOf(t, filepath.Join(cache, "blobs", name))
	if uid != 0 || ino == oldIno {
		t.Fatalf("the kept file is uid %d, inode %d (old inode %d): want a fresh root-owned copy", uid, ino, oldIno)
	}
	if u, _ := ownerOf(t, filepath.Join(cache, "blobs")); u != 0 {
		t.Fatalf("blobs/ is owned by uid %d, want root", u)
	}
	if p.Kept != int64(len(a)) {
		t.Fatalf("Kept = %d, want %d", p.Kept, len(a))
	}
	_, _ = held.WriteAt([]byte("XXXX"), 0)
	if got, err := os.ReadFile(filepath.Join(cache, "blobs", name)); err != nil || !bytes.Equal(got, a) {
		t.Fatalf("a write through the old descriptor reached the kept copy: %v", err)
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 1 {
		t.Fatalf("the cache holds %v, want blobs/ only (the old directory removed)", ents)
	}
	p.Close()
	st.Remove()

	// Root's now; a descriptor open on it: discarded at the next adoption.
	held2, err := os.OpenFile(filepath.Join(cache, "blobs", name), os.O_RDWR, 0)
	must(t, err)
	defer held2.Close()
	st, err = d.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	defer st.Remove()
	p, err = st.OpenPartial(nil, nil)
	must(t, err)
	defer p.Close()
	if _, err := os.Stat(filepath.Join(cache, "blobs", name)); !os.IsNotExist(err) || p.Kept != 0 {
		t.Fatalf("a kept file another descriptor is open on was adopted (Kept %d): %v", p.Kept, err)
	}
}

// issue 22 finding 5: taken back from a child, the cache keeps only the
// blobs the image asked for (Want), each at most its declared size, in
// all at most the image's limit.
func TestTakeBackKeepsOnlyWantedBlobs(t *testing.T) {
	needRoot(t)
	st, p, file, put := childCache(t, 4002, 100)
	defer st.Remove()
	defer p.Close()
	put("unasked", 50)  // a digest-shaped name no blob of the image has
	put("asked", 40)    // a prefix of an asked-for blob of 60
	put("long", 30)     // longer than its declared 20
	put("overflow", 70) // asked for, but beyond the image's limit with "asked"
	p.Want(sha([]byte("asked")), 60)
	p.Want(sha([]byte("long")), 20)
	p.Want(sha([]byte("overflow")), 70)
	p.Want("sha256:zz", 10)
	must(t, p.TakeBack())
	ents, err := os.ReadDir(p.Path)
	must(t, err)
	// "asked" and "overflow" do not fit together: one of them is kept.
	if len(ents) != 1 || (ents[0].Name() != file("asked") && ents[0].Name() != file("overflow")) || p.Kept > 100 {
		t.Fatalf("the cache keeps %v (%d bytes), want one of %s, %s (at most 100 bytes)", ents, p.Kept, file("asked"), file("overflow"))
	}
}

// Review 2 finding 2(a): the age limit counts on the parent's clock. A
// file the child left with a time in the future (or long past) is, once
// taken back, dated now; one found in the future at the start of a pull
// (adopted) is brought back to now, so PartialMaxAge still removes it.
func TestTakeBackDatesKeptBlobsNow(t *testing.T) {
	needRoot(t)
	top := t.TempDir()
	id := &dest.Identity{UID: 4003, GID: 4003}
	d := parse(t, "oci:"+filepath.Join(top, "d"))
	st, err := d.Stage(dest.StageOptions{Locks: testLocks, HandTo: id})
	must(t, err)
	p, err := st.OpenPartial(id, nil)
	must(t, err)
	c := []byte("kept")
	f := filepath.Join(p.Path, "sha256-"+sha(c)[7:]+".partial")
	must(t, os.WriteFile(f, c, 0o600))
	must(t, os.Chown(f, id.UID, id.GID))
	future := time.Now().Add(10 * 365 * 24 * time.Hour)
	must(t, os.Chtimes(f, future, future))
	p.Want(sha(c), int64(len(c)))
	must(t, p.TakeBack())
	after := time.Now()
	fi, err := os.Stat(f)
	must(t, err)
	if fi.ModTime().After(after) {
		t.Fatalf("taken back, the kept file is dated %s, in the future (the child's time kept)", fi.ModTime())
	}
	p.Close()
	st.Remove()

	// Planted in the future while no pull held it: adopted, dated now.
	must(t, os.Chtimes(f, future, future))
	st, err = d.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	defer st.Remove()
	p, err = st.OpenPartial(nil, nil)
	must(t, err)
	defer p.Close()
	fi, err = os.Stat(f)
	must(t, err)
	if fi.ModTime().After(time.Now()) {
		t.Fatalf("adopted, the kept file is still dated %s, in the future: it would never expire", fi.ModTime())
	}
}

// Review 2 finding 2(b): with a manifest the parent checked itself (its
// bytes are the pinned digest's), what the child announced does not
// count: only the manifest's config and layers are kept, each at most the
// size the manifest declares. A manifest that is not the pinned one (or
// no pin) changes nothing.
func TestRestrictKeepsOnlyTheCheckedManifestsBlobs(t *testing.T) {
	needRoot(t)
	st, p, file, put := childCache(t, 4004, 1000)
	defer st.Remove()
	defer p.Close()
	put("config", 5)
	put("layer", 40)
	put("announced", 50) // announced by the child, in no manifest
	for _, c := range []string{"config", "layer", "announced"} {
		p.Want(sha([]byte(c)), 100)
	}
	manifest := []byte(`{"schemaVersion":2,"config":{"digest":"` + sha([]byte("config")) + `","size":10},"layers":[{"digest":"` + sha([]byte("layer")) + `","size":30}]}`)
	if p.Restrict("", nil, manifest) || p.Restrict(sha([]byte("other")), nil, manifest) {
		t.Fatal("Restrict took a manifest that is not the pinned digest's")
	}
	if !p.Restrict(sha(manifest), nil, manifest) {
		t.Fatal("Restrict refused the pinned manifest")
	}
	must(t, p.TakeBack())
	ents, err := os.ReadDir(p.Path)
	must(t, err)
	// The layer (40 bytes) is longer than the manifest's 30: removed too.
	if len(ents) != 1 || ents[0].Name() != file("config") {
		t.Fatalf("the cache keeps %v, want only %s (the announced blob is in no manifest, the layer longer than declared)", ents, file("config"))
	}
}

// childCache is a stage handed to uid with its partial-blob cache open,
// and how a test names (file) and plants (put: n bytes, owned by uid) a
// cache entry for the blob whose content is c, as that uid's child would.
func childCache(t *testing.T, uid int, maxBytes int64) (*dest.Stage, *dest.Partial, func(c string) string, func(c string, n int)) {
	t.Helper()
	id := &dest.Identity{UID: uid, GID: uid}
	st, err := parse(t, "oci:"+filepath.Join(t.TempDir(), "d")).Stage(dest.StageOptions{Locks: testLocks, HandTo: id, MaxBytes: maxBytes})
	must(t, err)
	p, err := st.OpenPartial(id, nil)
	if err != nil {
		st.Remove()
		t.Fatal(err)
	}
	file := func(c string) string { return "sha256-" + sha([]byte(c))[7:] + ".partial" }
	put := func(c string, n int) {
		f := filepath.Join(p.Path, file(c))
		must(t, os.WriteFile(f, bytes.Repeat([]byte("x"), n), 0o600))
		must(t, os.Chown(f, id.UID, id.GID))
	}
	return st, p, file, put
}
