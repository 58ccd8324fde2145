package dest_test

import (
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/pullhelper/pullhelper/dest"
	"golang.org/x/sys/unix"
)

// Prehash keeps a digest only when nothing could have changed the file
// after it was read: a file opened for writing afterwards (the writer,
// here in this process, waits until the lease is let go on SIGIO),
// truncated by open(O_RDONLY|O_TRUNC), open for writing when it was to be
// leased, or replaced under its name has no digest; an untouched one has
// its own.
func TestPrehashKeepsOnlyUnchangedFiles(t *testing.T) {
	needRoot(t)
	d := parse(t, "oci:"+filepath.Join(t.TempDir(), "d"))
	st, err := d.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	defer st.Remove()
	p, err := st.OpenPartial(nil, nil)
	must(t, err)
	defer p.Close()
	blobs := map[string][]byte{}
	path := func(name string) string {
		return filepath.Join(p.Path, "sha256-"+sha(blobs[name])[7:]+".partial")
	}
	for _, name := range []string{"untouched", "written", "truncated", "busy", "swapped"} {
		blobs[name] = layer(name)
		must(t, os.WriteFile(path(name), blobs[name], 0o600))
	}
	busy, err := os.OpenFile(path("busy"), os.O_WRONLY, 0)
	must(t, err)

	// A FIFO under a blob's name is never opened for reading; a file
	// beyond what is left of the budget is not hashed.
	fifo := filepath.Join(p.Path, "sha256-"+sha([]byte("fifo"))[7:]+".partial")
	must(t, syscall.Mkfifo(fifo, 0o600))
	// The budget is the five files' sizes; the sixth is larger than all
	// of it, so whatever order the workers take them in, it never fits.
	var budget int64
	for _, name := range []string{"untouched", "written", "truncated", "busy", "swapped"} {
		budget += int64(len(blobs[name]))
	}
	big := make([]byte, budget+1)
	blobs["big"] = big
	must(t, os.WriteFile(path("big"), big, 0o600))
	// The owner of the process's signals (pipeline) installs SIGIO's.
	sigio := make(chan os.Signal, 1)
	signal.Notify(sigio, syscall.SIGIO)
	h := p.Prehash(budget, sigio, func() { signal.Stop(sigio) })
	if h == nil {
		t.Fatal("Prehash returned nil for an open cache")
	}
	for _, name := range []string{"untouched", "written", "truncated", "busy", "swapped"} {
		h.Blob(sha(blobs[name]))
	}
	h.Blob("sha256:../../etc/passwd") // not a digest: ignored
	h.Blob(sha([]byte("fifo")))
	h.Blob(sha(big))
	dest.WaitPrehash(h)
	busy.Close()

	// Opening for writing breaks the lease; the open returns once the
	// lease is let go.
	w, err := os.OpenFile(path("written"), os.O_WRONLY, 0)
	must(t, err)
	_, err = w.WriteAt([]byte{'X'}, 3)
	must(t, err)
	must(t, w.Close())
	fd, err := syscall.Open(path("truncated"), syscall.O_RDONLY|syscall.O_TRUNC, 0)
	must(t, err)
	syscall.Close(fd)
	other := filepath.Join(p.Path, "other")
	must(t, os.WriteFile(other, blobs["swapped"], 0o600))
	must(t, os.Rename(other, path("swapped")))

	ps := h.Finish()
	if got, ok := dest.PresumOf(ps, path("untouched")); !ok || "sha256:"+got.Sum != sha(blobs["untouched"]) || got.Size != int64(len(blobs["untouched"])) {
		t.Fatalf("untouched: presum %+v %v, want its digest", got, ok)
	}
	for _, name := range []string{"written", "truncated", "busy", "swapped", "big"} {
		if got, ok := dest.PresumOf(ps, path(name)); ok {
			t.Errorf("%s: kept a digest ahead (%+v) though the file may have changed", name, got)
		}
	}
	if len(ps) != 1 {
		t.Errorf("%d digests kept, want only the untouched file's: %v", len(ps), ps)
	}
	if h.Finish() != nil {
		t.Error("a second Finish returned digests")
	}
}

// Hashing ahead is only for local filesystems whose files have one inode
// (a lease there is broken by every write); NFS, FUSE and overlayfs files
// can be written without breaking it.
func TestLeaseFS(t *testing.T) {
	for _, c := range []struct {
		name  string
		magic int64
		want  bool
	}{
		{"ext4", unix.EXT4_SUPER_MAGIC, true}, {"xfs", unix.XFS_SUPER_MAGIC, true},
		{"btrfs", unix.BTRFS_SUPER_MAGIC, true}, {"tmpfs", unix.TMPFS_MAGIC, true},
		{"nfs", unix.NFS_SUPER_MAGIC, false}, {"fuse", unix.FUSE_SUPER_MAGIC, false},
		{"overlayfs", unix.OVERLAYFS_SUPER_MAGIC, false}, {"cifs", unix.CIFS_SUPER_MAGIC, false},
	} {
		if got := dest.LeaseFS(c.magic); got != c.want {
			t.Errorf("%s: leaseFS = %v, want %v", c.name, got, c.want)
		}
	}
}
