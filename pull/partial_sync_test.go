package pull

import (
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/opencontainers/go-digest"
)

// A blob kept whole for the parent (handed over) is synced every
// partialSyncEvery bytes and at close, so that a reboot keeps it for a
// later pull, unless the stage is NoSync (DEST is a store, which does not
// need the staged copy on disk): then nothing the cache appends is synced,
// and the blob is kept all the same.
func TestPartialCacheSyncsUnlessNoSync(t *testing.T) {
	var syncs atomic.Int64
	old := syncFile
	syncFile = func(f *os.File) error { syncs.Add(1); return old(f) }
	t.Cleanup(func() { syncFile = old })

	// Past one periodic sync, not a multiple of the read size.
	size := int64(partialSyncEvery + 1<<20 + 12345)
	blob := func() io.Reader { return io.LimitReader(zeros{}, size) }
	h := digest.SHA256.Digester()
	if _, err := io.Copy(h.Hash(), blob()); err != nil {
		t.Fatal(err)
	}
	d := h.Digest()
	for _, c := range []struct {
		noSync bool
		want   int64
	}{{false, 2}, {true, 0}} {
		syncs.Store(0)
		dir := t.TempDir()
		pc := openPartialCache(&Stage{Partial: dir, NoSync: c.noSync}, nil)
		pc.allow(1 << 40)
		path := filepath.Join(dir, "blob.partial")
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		r := &resumeReader{c: pc, f: f, path: path, d: d, size: size, h: d.Algorithm().Hash(), keep: true,
			body: io.NopCloser(blob()), handover: true}
		got := digest.SHA256.Digester()
		if n, err := io.Copy(got.Hash(), r); err != nil || n != size || got.Digest() != d {
			t.Fatalf("noSync %v: read %d bytes of %s, %v; want the blob's %d of %s", c.noSync, n, got.Digest(), err, size, d)
		}
		if !r.handed {
			t.Fatalf("noSync %v: the whole blob was not kept for the parent", c.noSync)
		}
		kf, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		kept, err := digest.SHA256.FromReader(kf)
		kf.Close()
		if err != nil || kept != d {
			t.Fatalf("noSync %v: the kept file is %s (%v), want the blob %s", c.noSync, kept, err, d)
		}
		if n := syncs.Load(); n != c.want {
			t.Errorf("noSync %v: %d fsyncs, want %d", c.noSync, n, c.want)
		}
	}
}

// A blob fetched by two streams at once (a manifest naming it twice) is
// claimed by neither: the second stream is not the keeping reader's, and
// claiming by digest handed it that reader, unfinished, so its PutBlob
// failed ("could not keep it whole"). A blob fetched once is claimed.
func TestPartialCacheSharedBlobIsNotClaimed(t *testing.T) {
	pc := openPartialCache(&Stage{Partial: t.TempDir()}, nil)
	once, twice := digest.FromString("once"), digest.FromString("twice")
	for _, d := range []digest.Digest{once, twice} {
		if !pc.acquire(d) {
			t.Fatalf("%s: the first stream did not acquire the blob", d)
		}
		pc.track(&resumeReader{c: pc, d: d, size: 4, keep: true})
	}
	if pc.acquire(twice) {
		t.Fatal("a second stream acquired a busy blob")
	}
	if r := pc.claim(twice, 4); r != nil {
		t.Fatal("a blob fetched by two streams at once was claimed")
	}
	if r := pc.claim(once, 4); r == nil || r.d != once {
		t.Fatalf("the blob fetched once was not claimed: %v", r)
	}
}
