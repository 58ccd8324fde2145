package pull

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/internal/failure"
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

// A claimed blob whose keeping fails for want of space says so: PutBlob's
// error carries the write error, which classify turns into exit 9 naming
// DEST's filesystem (it said only "could not keep it whole (see the warning
// above)", a warning --quiet hides). /dev/full answers every write ENOSPC.
func TestPartialCacheKeepingErrorIsSaid(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no /dev/full here to fail writes with ENOSPC: %v", err)
	}
	defer full.Close()
	size := int64(64 << 10)
	h := digest.SHA256.Digester()
	if _, err := io.Copy(h.Hash(), io.LimitReader(zeros{}, size)); err != nil {
		t.Fatal(err)
	}
	d := h.Digest()
	pc := openPartialCache(&Stage{Partial: t.TempDir(), NoSync: true}, nil)
	pc.allow(1 << 40)
	if !pc.acquire(d) {
		t.Fatal("acquire")
	}
	r := &resumeReader{c: pc, f: full, path: "/dev/full", d: d, size: size, h: d.Algorithm().Hash(), keep: true,
		body: io.NopCloser(io.LimitReader(zeros{}, size))}
	pc.track(r)
	if got := pc.claim(d, size); got != r {
		t.Fatal("the blob was not claimed")
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		t.Fatal(err)
	}
	handed, werr := pc.wasHanded(r)
	if handed || !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("handed %v, write error %v; want not handed, ENOSPC", handed, werr)
	}
	p := &Request{Registry: "r", Reference: "r/x:1"}
	got := p.classify(fmt.Errorf("blob %s: keeping it in the partial-blob cache: %w", d, werr))
	if failure.CodeOf(got) != failure.Destination || !strings.Contains(got.Error(), "no space left on DEST's filesystem") {
		t.Fatalf("classified %s: %v; want destination naming the space", failure.CodeOf(got), got)
	}
}
