package safefs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// ReadAtMost refuses a FIFO planted under the name at once: without
// O_NONBLOCK its open waits until someone opens the FIFO for writing,
// which for a name in a directory another user writes (DEST's
// index.json, a known blob) is for ever. The regular file beside it
// reads as before.
func TestReadAtMostRefusesFIFOWithoutBlocking(t *testing.T) {
	dir := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(dir, "index.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ok"), []byte("content"), 0o644); err != nil {
		t.Fatal(err)
	}
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)

	type res struct {
		b   []byte
		err error
	}
	done := make(chan res, 1)
	go func() {
		b, err := ReadAtMost(dfd, "index.json", 1024)
		done <- res{b, err}
	}()
	select {
	case r := <-done:
		if r.err == nil || !strings.Contains(r.err.Error(), "not a regular file") {
			t.Fatalf("FIFO: got %q, %v; want a not-a-regular-file error", r.b, r.err)
		}
	case <-time.After(30 * time.Second): // a hang guard, not a timing assertion
		// Unblock the open so that the goroutine ends.
		if w, err := os.OpenFile(filepath.Join(dir, "index.json"), os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		t.Fatal("ReadAtMost blocked opening a FIFO")
	}
	b, err := ReadAtMost(dfd, "ok", 1024)
	if err != nil || string(b) != "content" {
		t.Fatalf("regular file: %q, %v", b, err)
	}
}
