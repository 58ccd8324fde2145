package pull

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/opencontainers/go-digest"
)

// A blob kept whole for the parent (handed over) is synced at close, so
// that a reboot keeps it for a later pull, unless the stage is NoSync
// (DEST is a store, whose own write is the durable one): then nothing the
// cache appends is synced, and the blob is kept all the same.
func TestPartialCacheSyncsUnlessNoSync(t *testing.T) {
	var syncs atomic.Int64
	old := syncFile
	syncFile = func(f *os.File) error { syncs.Add(1); return old(f) }
	t.Cleanup(func() { syncFile = old })

	data := bytes.Repeat([]byte("layer bytes "), 50000)
	d := digest.FromBytes(data)
	for _, c := range []struct {
		noSync bool
		want   int64
	}{{false, 1}, {true, 0}} {
		syncs.Store(0)
		dir := t.TempDir()
		pc := openPartialCache(&Stage{Partial: dir, NoSync: c.noSync}, nil)
		pc.allow(1 << 40)
		path := filepath.Join(dir, "blob.partial")
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		r := &resumeReader{c: pc, f: f, path: path, d: d, size: int64(len(data)), h: d.Algorithm().Hash(), keep: true,
			body: io.NopCloser(bytes.NewReader(data)), handover: true}
		got, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("noSync %v: read %d bytes, %v; want the blob's %d", c.noSync, len(got), err, len(data))
		}
		if !r.handed {
			t.Fatalf("noSync %v: the whole blob was not kept for the parent", c.noSync)
		}
		if kept, err := os.ReadFile(path); err != nil || !bytes.Equal(kept, data) {
			t.Fatalf("noSync %v: the kept file has %d bytes (%v), want the blob", c.noSync, len(kept), err)
		}
		if n := syncs.Load(); n != c.want {
			t.Errorf("noSync %v: %d fsyncs, want %d", c.noSync, n, c.want)
		}
	}
}
