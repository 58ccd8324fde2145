package safefs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func removeNeedRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (owners)")
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func dirFd(t *testing.T, path string) int {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// issue 22 finding 3: a user moves a subdirectory out of the tree while
// root empties it (here deterministically, from the removal's hook between
// levels). The removal must not climb out of the moved directory: the
// victim beside where it was moved stays.
func TestRemoveTreeMovedDuringRemoval(t *testing.T) {
	removeNeedRoot(t)
	base := t.TempDir()
	for _, d := range []string{"tree/a/b/c", "outside/deeper"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"tree/a/b/c/f", "tree/a/b/f", "tree/a/f", "outside/victim", "outside/deeper/victim"} {
		if err := os.WriteFile(filepath.Join(base, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removeHook = func(depth int) {
		if depth == 3 { // tree/a/b opened: move it away, under outside/deeper
			if err := os.Rename(filepath.Join(base, "tree/a/b"), filepath.Join(base, "outside/deeper/b")); err != nil {
				t.Error(err)
			}
		}
	}
	defer func() { removeHook = nil }()
	err := RemoveTree(dirFd(t, base), "tree")
	for _, v := range []string{"outside/victim", "outside/deeper/victim", "outside/deeper"} {
		if _, serr := os.Lstat(filepath.Join(base, v)); serr != nil {
			t.Errorf("%s was removed by a removal of tree (moved out of it meanwhile): %v (RemoveTree: %v)", v, serr, err)
		}
	}
	if err != nil {
		t.Fatalf("RemoveTree: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(base, "tree")); err == nil {
		t.Fatal("tree is still there")
	}
}

// Each level's owner is checked: a directory of an uid nobody handed
// anything to stops the removal (left as it is, named in the error); a
// root directory inside another uid's is never entered; handed uids' are.
func TestRemoveTreeChecksOwners(t *testing.T) {
	removeNeedRoot(t)
	base := t.TempDir()
	mk := func(rel string, uid int) {
		p := filepath.Join(base, rel)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "f"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	fd := dirFd(t, base)
	mk("t1/other", 65534)
	err := RemoveTree(fd, "t1")
	if err == nil || !strings.Contains(err.Error(), "uid 65534") {
		t.Fatalf("RemoveTree of a tree holding another uid's directory: %v, want a refusal naming uid 65534", err)
	}
	if _, err := os.Stat(filepath.Join(base, "t1/other/f")); err != nil {
		t.Fatalf("what is in the other uid's directory was removed: %v", err)
	}
	if err := RemoveTree(fd, "t1", 65534); err != nil {
		t.Fatalf("RemoveTree with uid 65534 handed: %v", err)
	}
	mk("t2/handed/root", 0)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chown(filepath.Join(base, "t2/handed"), 65534, 65534))
	if err := RemoveTree(fd, "t2", 65534); err == nil {
		t.Fatal("RemoveTree entered a root directory inside another uid's")
	}
	if _, err := os.Stat(filepath.Join(base, "t2/handed/root/f")); err != nil {
		t.Fatalf("the root directory inside another uid's was emptied: %v", err)
	}
	// A symlink is removed, never followed.
	must(os.MkdirAll(filepath.Join(base, "t3"), 0o755))
	must(os.Symlink(filepath.Join(base, "t2"), filepath.Join(base, "t3/link")))
	must(RemoveTree(fd, "t3"))
	if _, err := os.Stat(filepath.Join(base, "t2/handed/root/f")); err != nil {
		t.Fatalf("removing a symlink followed it: %v", err)
	}
}

// A tree deeper than the descriptors RemoveTree holds is removed whole,
// with at most removeMaxDepth of them open at once.
func TestRemoveTreeDeep(t *testing.T) {
	base := t.TempDir()
	p := filepath.Join(base, "deep")
	mustOK(t, os.Mkdir(p, 0o755))
	fd := dirFd(t, p)
	cur, err := unix.Dup(fd)
	mustOK(t, err)
	for i := 0; i < 300; i++ { // deeper than PATH_MAX allows by path
		mustOK(t, unix.Mkdirat(cur, "d", 0o755))
		next, err := unix.Openat(cur, "d", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		mustOK(t, err)
		unix.Close(cur)
		cur = next
	}
	unix.Close(cur)
	most := 0
	removeHook = func(depth int) { most = max(most, depth) }
	defer func() { removeHook = nil }()
	mustOK(t, RemoveTree(dirFd(t, base), "deep"))
	if _, err := os.Lstat(p); err == nil {
		t.Fatal("the deep tree is still there")
	}
	if most > removeMaxDepth {
		t.Fatalf("RemoveTree held %d directories at once, more than %d", most, removeMaxDepth)
	}
}

// Review 2 finding 3: a tree someone keeps extending below where the
// removal is (a process holding a directory descriptor inside it; here,
// deterministically, the removal's hook adds two levels each time it
// opens one) must not keep RemoveTree going: past removeMaxWork it stops
// with an error naming the tree. Without the bound the hook's writer
// wins until it gives up (extendMax) and the removal then ends with nil.
func TestRemoveTreeBoundedWhileExtended(t *testing.T) {
	base := t.TempDir()
	pfd := dirFd(t, base)
	mustOK(t, unix.Mkdirat(pfd, "top", 0o700))
	cur, err := unix.Openat(pfd, "top", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	mustOK(t, err)
	defer func() { unix.Close(cur) }()
	extend := func() {
		if unix.Mkdirat(cur, "d", 0o700) != nil {
			return
		}
		if n, err := unix.Openat(cur, "d", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			unix.Close(cur)
			cur = n
		}
	}
	for range 100 {
		extend()
	}
	defer func(old int) { removeMaxWork = old }(removeMaxWork)
	removeMaxWork = 5000
	const extendMax = 50000
	calls := 0
	removeHook = func(int) {
		if calls++; calls < extendMax {
			extend()
			extend()
		}
	}
	defer func() { removeHook = nil }()
	err = RemoveTree(pfd, "top")
	if err == nil {
		t.Fatalf("RemoveTree of a tree extended under it ended with no error after %d opens (the writer gave up at %d): its work is not bounded", calls, extendMax)
	}
	if !strings.Contains(err.Error(), "top") || !strings.Contains(err.Error(), "more than 5000 entries") {
		t.Fatalf("the error does not name the tree and the bound: %v", err)
	}
	if calls >= extendMax {
		t.Fatalf("RemoveTree stopped only after %d opens, past its bound of %d", calls, removeMaxWork)
	}
}

// A flat tree larger than the bound is left (not half-removed silently):
// the error names it.
func TestRemoveTreeBoundFlat(t *testing.T) {
	base := t.TempDir()
	for i := range 300 {
		if err := os.MkdirAll(filepath.Join(base, "top", "d"+strconv.Itoa(i%7), "e"+strconv.Itoa(i)), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	defer func(old int) { removeMaxWork = old }(removeMaxWork)
	removeMaxWork = 100
	err := RemoveTree(dirFd(t, base), "top")
	if err == nil || !strings.Contains(err.Error(), "top: more than 100 entries") {
		t.Fatalf("RemoveTree of more than its bound: %v", err)
	}
	if _, serr := os.Lstat(filepath.Join(base, "top")); serr != nil {
		t.Fatalf("the tree is gone though the removal stopped: %v", serr)
	}
	removeMaxWork = 1_000_000
	mustOK(t, RemoveTree(dirFd(t, base), "top"))
}

// Review 2 finding 4: a root-owned 0700 directory this process holds (its
// staging root) is removed from a parent another uid owns
// (dest.allow_other_owner); the same directory not held, or held but no
// longer 0700, is refused as before, and below the held top the owner
// rules stay (a root directory inside a foreign one is never entered).
func TestRemoveHeldUnderForeignParent(t *testing.T) {
	removeNeedRoot(t)
	base := t.TempDir()
	parent := filepath.Join(base, "u")
	mustOK(t, os.Mkdir(parent, 0o755))
	mustOK(t, os.Chown(parent, 65534, 65534))
	mk := func(name string) int {
		p := filepath.Join(parent, name)
		mustOK(t, os.MkdirAll(filepath.Join(p, "work", "image"), 0o700))
		mustOK(t, os.Chmod(p, 0o700))
		mustOK(t, os.WriteFile(filepath.Join(p, "work", "image", "f"), []byte("x"), 0o600))
		return dirFd(t, p)
	}
	pfd := dirFd(t, parent)
	held := mk("staging")
	if err := RemoveTree(pfd, "staging"); err == nil || !strings.Contains(err.Error(), "owned by uid 0") {
		t.Fatalf("RemoveTree of a root directory in another uid's, not held: %v", err)
	}
	other := mk("other")
	if err := RemoveHeld(pfd, "staging", other); err == nil {
		t.Fatal("RemoveHeld removed a directory that is not the one held")
	}
	mustOK(t, RemoveHeld(pfd, "staging", held))
	if _, err := os.Lstat(filepath.Join(parent, "staging")); err == nil {
		t.Fatal("the held staging directory is still there")
	}
	mustOK(t, os.Chmod(filepath.Join(parent, "other"), 0o755))
	if err := RemoveHeld(pfd, "other", other); err == nil {
		t.Fatal("RemoveHeld removed a held directory that is not 0700")
	}
	mustOK(t, os.Chmod(filepath.Join(parent, "other"), 0o700))
	// Below the top: a directory of uid 65534 holding a root one.
	mustOK(t, os.Chown(filepath.Join(parent, "other", "work"), 65534, 65534))
	if err := RemoveHeld(pfd, "other", other, 65534); err == nil || !strings.Contains(err.Error(), "image is owned by uid 0") {
		t.Fatalf("RemoveHeld entered a root directory inside another uid's: %v", err)
	}
}
