package dest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Review 2 finding 6: what takeBack found alone (a write lease) must still
// be alone when it is hashed for the commit: a descriptor opened on it
// after takeBack (here by the test; in a pull, nothing can reach it by
// path any more) makes the commit a fresh copy, never the inode itself.
func TestOpenChecksTheLeaseAgain(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	f, st, tr := oneBlobTree(t)
	defer tr.close()
	tr.files["blob"].sum, tr.files["blob"].alg = "presummed", "sha256"
	w, err := os.OpenFile(f, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	sum, err := tr.sum("blob", "sha256")
	if err != nil {
		t.Fatal(err)
	}
	var now unix.Stat_t
	if err := unix.Stat(f, &now); err != nil {
		t.Fatal(err)
	}
	if !tr.files["blob"].fresh || now.Ino == st.Ino || sum == "presummed" {
		t.Fatalf("a file another descriptor is open on is committed itself (fresh %v, same inode %v, sum %s)", tr.files["blob"].fresh, now.Ino == st.Ino, sum)
	}
}

// A staged name swapped for a FIFO after the take-back fails the inode
// check at once: the open does not wait for a writer.
func TestTreeOpenFIFODoesNotBlock(t *testing.T) {
	f, _, tr := oneBlobTree(t)
	defer tr.close()
	if err := os.Remove(f); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(f, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		g, _, err := tr.open("blob")
		if err == nil {
			g.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "changed after it was taken back") {
			t.Fatalf("a FIFO in place of a staged blob: %v", err)
		}
	case <-time.After(30 * time.Second): // a hang guard, not a timing assertion
		if w, err := os.OpenFile(f, os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		t.Fatal("tree.open blocked opening a FIFO")
	}
}

// oneBlobTree is a taken-back tree of one staged file, "blob": its path,
// its stat and the tree (close it).
func oneBlobTree(t *testing.T) (string, unix.Stat_t, *tree) {
	t.Helper()
	dir := t.TempDir()
	f := filepath.Join(dir, "blob")
	if err := os.WriteFile(f, []byte("content"), 0o644); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(f, &st); err != nil {
		t.Fatal(err)
	}
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return f, st, &tree{dirs: map[string]int{"": dfd}, files: map[string]*entry{"blob": {size: st.Size, ino: st.Ino}}}
}
