package dest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// plantCache makes the partial-blob cache name in dir, owned by uid with
// mode 0700, holding blobs/sha256-aa.partial; it returns the file's path.
func plantCache(t *testing.T, dir, name string, uid int) string {
	t.Helper()
	c := filepath.Join(dir, name)
	f := filepath.Join(c, partialBlobs, "sha256-aa.partial")
	for _, err := range []error{
		os.MkdirAll(filepath.Join(c, partialBlobs), 0o700),
		os.WriteFile(f, []byte("kept"), 0o600),
		os.Chown(filepath.Join(c, partialBlobs), uid, uid),
		os.Chown(f, uid, uid),
		os.Chown(c, uid, uid),
		os.Chmod(c, 0o700),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// The shared cache every containerd: DEST used before the per-image names
// (.pullhelper-partial-image) is no image's: a containerd pull's sweep
// removes it whatever its age, unless a pull holds it; another user's, or
// a symbolic link in its place, is neither entered nor followed.
func TestSweepLegacyContainerdCache(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the caches must be root-owned to be swept")
	}
	legacy := partialPrefix + legacyContainerdBase
	sweep := func(dir string) []string {
		d, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		return sweepOtherCaches(d, "image-00000000000000dd", time.Now())
	}
	t.Run("root's, fresh", func(t *testing.T) {
		dir := t.TempDir()
		plantCache(t, dir, legacy, 0)
		if got := sweep(dir); !slices.Equal(got, []string{filepath.Join(dir, legacy)}) {
			t.Errorf("removed %v, want the old shared cache %s", got, legacy)
		}
		if _, err := os.Lstat(filepath.Join(dir, legacy)); !os.IsNotExist(err) {
			t.Errorf("the old shared cache is still there: %v", err)
		}
	})
	t.Run("held by a pull", func(t *testing.T) {
		dir := t.TempDir()
		f := plantCache(t, dir, legacy, 0)
		h, err := os.Open(filepath.Join(dir, legacy))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		if err := unix.Flock(int(h.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			t.Fatal(err)
		}
		if got := sweep(dir); len(got) != 0 {
			t.Errorf("removed %v while a pull holds it", got)
		}
		if _, err := os.Stat(f); err != nil {
			t.Errorf("the held cache was touched: %v", err)
		}
	})
	t.Run("another user's", func(t *testing.T) {
		dir := t.TempDir()
		f := plantCache(t, dir, legacy, 65534)
		if got := sweep(dir); len(got) != 0 {
			t.Errorf("removed %v, another user's", got)
		}
		if _, err := os.Stat(f); err != nil {
			t.Errorf("another user's cache was entered: %v", err)
		}
	})
	t.Run("a symbolic link", func(t *testing.T) {
		dir, elsewhere := t.TempDir(), t.TempDir()
		f := plantCache(t, elsewhere, "target", 0)
		if err := os.Symlink(filepath.Join(elsewhere, "target"), filepath.Join(dir, legacy)); err != nil {
			t.Fatal(err)
		}
		if got := sweep(dir); len(got) != 0 {
			t.Errorf("removed %v through a link", got)
		}
		if _, err := os.Stat(f); err != nil {
			t.Errorf("the link was followed: %v", err)
		}
	})
}

// pullhelper gc containerd:REF looks in the staging directory given
// (--containerd-staging) under REF's own name (containerdStageName) and
// removes that image's cache and the old shared one, not another image's;
// another user's old shared one is refused (a warning), not entered.
func TestGCContainerdCaches(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the caches must be root-owned to be swept")
	}
	const ref = "registry.example/app:1"
	mine := PartialCacheName(containerdStageName("registry.example/app:1"))
	other := PartialCacheName(containerdStageName("registry.example/other:1"))
	legacy := partialPrefix + legacyContainerdBase
	for _, owner := range []int{0, 65534} {
		dir := filepath.Join(t.TempDir(), "staging")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		plantCache(t, dir, mine, 0)
		keep := plantCache(t, dir, other, 0)
		old := plantCache(t, dir, legacy, owner)
		s, err := OpenSweep("containerd:"+ref, dir)
		if err != nil {
			t.Fatal(err)
		}
		got := s.ReclaimPartial()
		s.Close()
		want := []string{filepath.Join(dir, mine), filepath.Join(dir, legacy)}
		if owner != 0 {
			want = want[:1]
			if len(s.Refused) != 1 || !strings.Contains(s.Refused[0], legacy) || !strings.Contains(s.Refused[0], "uid 65534") {
				t.Errorf("owner %d: refused %q, want the old shared cache named with its owner", owner, s.Refused)
			}
			if _, err := os.Stat(old); err != nil {
				t.Errorf("owner %d: the old shared cache was entered: %v", owner, err)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("owner %d: removed %v, want %v", owner, got, want)
		}
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("owner %d: another image's cache was touched: %v", owner, err)
		}
	}
	if _, err := OpenSweep("containerd:"+ref, "relative/dir"); err == nil || !strings.Contains(err.Error(), "--containerd-staging") {
		t.Errorf("a relative staging directory: %v, want an error naming --containerd-staging", err)
	}
}
