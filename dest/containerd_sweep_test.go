package dest

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// In a containerd staging directory each image has its own partial-blob
// cache; a pull sweeps the other images' caches that have not changed for
// PartialMaxAge and that no pull holds, and nothing else: not its own, not
// a fresh one, not a held one, not a cache of another kind of DEST, not
// one that is not root's 0700.
func TestSweepOtherCaches(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the caches must be root-owned to be swept")
	}
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(dir, 0o700))
	old := time.Now().Add(-PartialMaxAge - time.Hour)
	mk := func(base string, mtime time.Time, mode os.FileMode) string {
		c := filepath.Join(dir, partialPrefix+base)
		must(os.MkdirAll(filepath.Join(c, partialBlobs), 0o700))
		must(os.Chmod(c, mode))
		must(os.WriteFile(filepath.Join(c, partialBlobs, "sha256-aa.partial"), []byte("kept"), 0o600))
		must(os.Chtimes(filepath.Join(c, partialBlobs), mtime, mtime))
		return c
	}
	stale := mk("image-00000000000000aa", old, 0o700)
	fresh := mk("image-00000000000000bb", time.Now(), 0o700)
	held := mk("image-00000000000000cc", old, 0o700)
	mine := mk("image-00000000000000dd", old, 0o700)
	other := mk("dest", old, 0o700) // an oci: DEST's cache beside it
	open := mk("image-00000000000000ee", old, 0o755)
	h, err := os.Open(held)
	must(err)
	defer h.Close()
	must(unix.Flock(int(h.Fd()), unix.LOCK_EX|unix.LOCK_NB))

	d, err := os.Open(dir)
	must(err)
	defer d.Close()
	got := sweepOtherCaches(d, "image-00000000000000dd", time.Now())
	if !slices.Equal(got, []string{stale}) {
		t.Errorf("removed %v, want only %s", got, stale)
	}
	for _, c := range []string{fresh, held, mine, other, open} {
		if _, err := os.Stat(filepath.Join(c, partialBlobs, "sha256-aa.partial")); err != nil {
			t.Errorf("%s was touched: %v", c, err)
		}
	}
	if _, err := os.Lstat(stale); !os.IsNotExist(err) {
		t.Errorf("%s is still there: %v", stale, err)
	}
}
