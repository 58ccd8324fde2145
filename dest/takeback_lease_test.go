package dest

import (
	"os"
	"path/filepath"
	"testing"

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
	tr := &tree{dirs: map[string]int{"": dfd}, files: map[string]*entry{"blob": {size: st.Size, ino: st.Ino, sum: "presummed", alg: "sha256"}}}
	defer tr.close()
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
