package dest

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"io"
	"os"
	"testing"

	"go.podman.io/storage/pkg/archive"
)

// The tar the pre-apply writes is gzip without compression that both
// gzip readers take back byte for byte, CRC and length checked, and that
// the store detects as gzip (so it records the layer's compression as it
// does for the blob); it is an unnamed file.
func TestTarWriterIsStoredGzip(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 3*storedMax+1234) // four stored blocks
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	orig := bytes.Clone(data)
	var w tarWriter
	w.open(dir)
	if w.f == nil {
		t.Fatalf("no unnamed file in %s", dir)
	}
	// written in pieces of several sizes, one larger than a block
	for _, n := range []int{1, 100, storedMax + 7, 40000} {
		if _, err := w.Write(data[:n]); err != nil {
			t.Fatal(err)
		}
		data = data[n:]
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	f := w.done()
	if f == nil {
		t.Fatal("done: no file")
	}
	defer f.Close()
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Fatalf("the file has a name in %s: %v", dir, names)
	}
	raw, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	if c := archive.DetectCompression(raw); c != archive.Gzip {
		t.Fatalf("detected as %v, not gzip", c)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(zr) // checks CRC-32 and ISIZE
	if err != nil {
		t.Fatalf("compress/gzip: %v", err)
	}
	un, err := archive.DecompressStream(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	got2, err := io.ReadAll(un)
	if err != nil {
		t.Fatalf("the store's decompressor: %v", err)
	}
	if !bytes.Equal(got, orig) || !bytes.Equal(got2, orig) {
		t.Fatalf("read back %d and %d bytes, not the %d written", len(got), len(got2), len(orig))
	}
}

// Past its room the file is dropped (the store reads the blob instead),
// and where no unnamed file can be made nothing is written; either way
// every write is taken.
func TestTarWriterDropsPastItsRoom(t *testing.T) {
	var w tarWriter
	w.open(t.TempDir())
	if w.f == nil {
		t.Fatal("no unnamed file")
	}
	w.room = 1000
	if n, err := w.Write(make([]byte, 500)); n != 500 || err != nil || w.f == nil {
		t.Fatalf("a write within room: %d %v, file %v", n, err, w.f)
	}
	if n, err := w.Write(make([]byte, 600)); n != 600 || err != nil {
		t.Fatalf("a write past room: %d %v", n, err)
	}
	if w.f != nil || w.done() != nil {
		t.Fatal("the file was kept past its room")
	}
	var none tarWriter
	none.open(t.TempDir() + "/absent")
	if n, err := none.Write([]byte("x")); n != 1 || err != nil || none.done() != nil {
		t.Fatalf("without a file: %d %v", n, err)
	}
}
