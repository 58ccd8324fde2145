package cgroup_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	cg "github.com/opencontainers/cgroups"
	"github.com/pullhelper/pullhelper/cgroup"
	"golang.org/x/sys/unix"
)

// needCgroupfs skips the test unless it can create cgroupfs cgroups, and
// returns the directory to mark cgroup parents in (Config.StateDir).
func needCgroupfs(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		t.Skip("systemd is PID 1: the cgroupfs driver is proven on hosts without it")
	}
	return t.TempDir()
}

// v1: a process forked by a thread inside the cgroup is born inside (it
// reads its own /proc/self/cgroup as its first act), and the thread goes
// back where it was.
func TestEnterThreadForksInside(t *testing.T) {
	state := needCgroupfs(t)
	if cgroup.Version() == "v2" {
		t.Skip("cgroup v2 forks into the cgroup with CLONE_INTO_CGROUP; EnterThread is v1's")
	}
	g, err := cgroup.Create(context.Background(), cgroup.Config{Driver: "cgroupfs", Parent: fmt.Sprintf("/pullhelper-unittest-%d", os.Getpid()), StateDir: state, Limits: cgroup.Limits{PidsMax: 30}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	if !g.BornInside() {
		t.Fatal("BornInside is false on v1 with cgroupfs")
	}
	type out struct {
		child, before, after string
		err                  error
	}
	res := make(chan out, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		var o out
		b, _ := os.ReadFile("/proc/thread-self/cgroup")
		o.before = string(b)
		leave, err := g.EnterThread()
		if err != nil {
			o.err = err
			res <- o
			return
		}
		c, err := exec.Command("cat", "/proc/self/cgroup").Output()
		if lerr := leave(); lerr != nil {
			o.err = lerr
			res <- o
			return
		}
		o.child, o.err = string(c), err
		b, _ = os.ReadFile("/proc/thread-self/cgroup")
		o.after = string(b)
		res <- o
	}()
	o := <-res
	if o.err != nil {
		t.Fatal(o.err)
	}
	rel := strings.TrimPrefix(g.Paths()["pids"], "/sys/fs/cgroup/pids")
	if !strings.Contains(o.child, ":pids:"+rel+"\n") {
		t.Fatalf("the child was not born in %s:\n%s", rel, o.child)
	}
	if o.after != o.before {
		t.Fatalf("the thread did not go back:\nbefore %s\nafter %s", o.before, o.after)
	}
}

// A joined cgroup gets the pull's own sub-cgroup: Kill kills a grandchild
// too, Remove removes the sub-cgroup and leaves the joined one.
func TestJoinedSubCgroup(t *testing.T) {
	needCgroupfs(t)
	pod := fmt.Sprintf("/pullhelper-unittest-pod-%d", os.Getpid())
	var made []string
	for _, ctl := range []string{"pids", "memory", "cpu", "freezer"} {
		d := filepath.Join("/sys/fs/cgroup", ctl, pod)
		if cgroup.Version() == "v2" {
			d = filepath.Join("/sys/fs/cgroup", pod)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Skipf("cannot create the pod cgroup %s: %v", d, err)
		}
		made = append(made, d)
	}
	defer func() {
		for _, d := range made {
			_ = os.Remove(d)
		}
	}()
	g, err := cgroup.Create(context.Background(), cgroup.Config{Driver: "cgroupfs", Path: pod})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	if g.Path() != pod || !strings.HasPrefix(g.SubPath(), pod+"/pull-") {
		t.Fatalf("Path %s SubPath %s", g.Path(), g.SubPath())
	}
	// sh forks its grandchild only once it is placed (the line on stdin).
	cmd := exec.Command("sh", "-c", "read x; sleep 1000 & echo $!; wait")
	stdout, _ := cmd.StdoutPipe()
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := g.Place(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(stdin, "placed")
	var grandchild int
	if _, err := fmt.Fscan(stdout, &grandchild); err != nil {
		t.Fatal(err)
	}
	if err := g.Kill(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", grandchild)); err == nil && !strings.Contains(string(st), ") Z ") {
		t.Fatalf("the grandchild %d survived Kill", grandchild)
	}
	paths := g.Paths()
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	for _, d := range paths {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("sub-cgroup %s left", d)
		}
	}
	for _, d := range made {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("the joined cgroup %s was removed", d)
		}
	}
}

// A parent pullhelper created goes with the last pull to leave it, even
// when another pull created it; a parent that existed before stays.
func TestParentRemovedByLastPull(t *testing.T) {
	state := needCgroupfs(t)
	parent := fmt.Sprintf("/pullhelper-unittest-parent-%d", os.Getpid())
	cfg := cgroup.Config{Driver: "cgroupfs", Parent: parent, StateDir: state}
	a, err := cgroup.Create(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cgroup.Create(context.Background(), cfg) // the parent exists now: b did not create it
	if err != nil {
		t.Fatal(err)
	}
	apaths := maps.Clone(a.Paths()) // Remove empties the library's map
	pdir := filepath.Dir(a.Paths()["pids"])
	if cgroup.Version() == "v2" {
		pdir = filepath.Dir(a.Paths()[""])
	}
	if err := a.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pdir); err != nil {
		t.Fatalf("the parent went while a pull was still in it: %v", err)
	}
	if err := b.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pdir); err == nil {
		t.Fatalf("the parent %s pullhelper created is left", pdir)
	}
	// Its marker went with it (only the parents lock stays).
	if entries, _ := os.ReadDir(state); len(entries) != 1 || entries[0].Name() != ".lock" {
		t.Errorf("state directory after the parent went: %v, want only .lock", entries)
	}
	// An existing parent is the administrator's.
	for _, d := range apaths {
		if err := os.Mkdir(filepath.Dir(d), 0o755); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
		defer os.Remove(filepath.Dir(d))
	}
	c, err := cgroup.Create(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pdir); err != nil {
		t.Fatalf("a parent that existed before was removed: %v", err)
	}
}

// hierarchies are the mounted cgroup hierarchies' roots (v1: each
// /sys/fs/cgroup/X with a cgroup.procs, the unified one in hybrid mode
// included; v2: /sys/fs/cgroup).
func hierarchies(t *testing.T) []string {
	t.Helper()
	if cgroup.Version() == "v2" {
		return []string{"/sys/fs/cgroup"}
	}
	m, _ := filepath.Glob("/sys/fs/cgroup/*/cgroup.procs")
	var out []string
	for _, f := range m {
		// Co-mounted controllers: cpu and cpuacct are links to
		// cpu,cpuacct on systemd's v1 layout, one hierarchy.
		if d, err := filepath.EvalSymlinks(filepath.Dir(f)); err == nil && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		t.Fatal("no cgroup hierarchy mounted")
	}
	return out
}

// removeEverywhere removes the cgroup path (and what is below it) from
// every hierarchy: what a failed test left.
func removeEverywhere(t *testing.T, path string) {
	for _, h := range hierarchies(t) {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, path), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i])
		}
	}
}

// existsIn lists the hierarchies in which the cgroup path exists.
func existsIn(t *testing.T, path string) []string {
	var out []string
	for _, h := range hierarchies(t) {
		if _, err := os.Lstat(filepath.Join(h, path)); err == nil {
			out = append(out, h)
		}
	}
	return out
}

// A nested parent whose ancestors did not exist leaves none of them, in
// any hierarchy (they were all made for the pull); a level the
// administrator made stays, in the hierarchies it was made in, whichever
// they are, and what the pull made of it in the others goes; a parent
// whose path is too long for a marker named by its hex (over 127 bytes) is
// marked and removed like any other.
func TestNestedAndLongParentsRemoved(t *testing.T) {
	state := needCgroupfs(t)
	top := fmt.Sprintf("/pullhelper-unittest-nest-%d", os.Getpid())
	t.Cleanup(func() { removeEverywhere(t, top) })
	pull := func(parent string) {
		t.Helper()
		g, err := cgroup.Create(context.Background(), cgroup.Config{Driver: "cgroupfs", Parent: parent, StateDir: state})
		if err != nil {
			t.Fatalf("%s: %v", parent, err)
		}
		for ctl, d := range g.Paths() {
			if !strings.HasSuffix(filepath.Dir(d), parent) {
				t.Fatalf("%s: the pull's cgroup %s is not below it (%s)", parent, d, ctl)
			}
		}
		if err := g.Remove(); err != nil {
			t.Fatal(err)
		}
		if entries, _ := os.ReadDir(state); len(entries) != 1 {
			t.Errorf("%s: state directory after the parents went: %v, want only .lock", parent, entries)
		}
	}
	for _, parent := range []string{top + "/a/b", top + "/" + strings.Repeat("l", 200)} {
		pull(parent)
		if got := existsIn(t, top); len(got) > 0 {
			t.Fatalf("%s: the ancestor %s made for the pull is left in %v", parent, top, got)
		}
	}
	// A parent named as a control file (policy refuses such names; made
	// here directly) cannot be made: what was made above it goes, and no
	// marker stays.
	if _, err := cgroup.Create(context.Background(), cgroup.Config{Driver: "cgroupfs", Parent: top + "/cgroup.procs", StateDir: state}); err == nil {
		t.Fatal("a cgroup named cgroup.procs was made")
	}
	if got := existsIn(t, top); len(got) > 0 {
		t.Fatalf("after the failed Create, %s is left in %v", top, got)
	}
	if entries, _ := os.ReadDir(state); len(entries) != 1 {
		t.Errorf("state directory after the failed Create: %v, want only .lock", entries)
	}
	// The administrator's level in some hierarchies only (one, then all
	// but one of those the library uses): it stays there, and goes from
	// the others.
	hs := hierarchies(t)
	admins := [][]string{{hs[0]}}
	if len(hs) > 2 {
		admins = append(admins, hs[1:])
	}
	for _, admin := range admins {
		for _, h := range admin {
			if err := os.Mkdir(filepath.Join(h, top), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		pull(top + "/a/b")
		if got := existsIn(t, top); !slices.Equal(got, admin) {
			t.Fatalf("the administrator's %s was in %v; after the pull it is in %v", top, admin, got)
		}
		if got := existsIn(t, top+"/a"); len(got) > 0 {
			t.Fatalf("%s/a made for the pull is left in %v", top, got)
		}
		removeEverywhere(t, top)
	}
}

// A marker an older version left (its path alone, standing for every
// hierarchy it made the level in) never removes the level's directory in
// the devices hierarchy, where no version made one: it is someone else's.
func TestOldMarkerSparesDevices(t *testing.T) {
	state := needCgroupfs(t)
	if cgroup.Version() == "v2" {
		t.Skip("cgroup v2 has no devices hierarchy")
	}
	top := fmt.Sprintf("/pullhelper-unittest-old-%d", os.Getpid())
	t.Cleanup(func() { removeEverywhere(t, top) })
	dev := filepath.Join("/sys/fs/cgroup/devices", top)
	if err := os.Mkdir(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, cgroup.MarkerName(top)), []byte(top+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g, err := cgroup.Create(context.Background(), cgroup.Config{Driver: "cgroupfs", Parent: top, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dev); err != nil {
		t.Fatalf("the devices directory %s was removed: %v", dev, err)
	}
	if got := existsIn(t, top); len(got) != 1 {
		t.Fatalf("%s is left in %v, want only the devices hierarchy", top, got)
	}
}

// ParentMustExist (a pod's cgroup, for pullhelper cri): a missing parent is
// an error and is not created; an existing one holds the pull's cgroup and
// stays after it.
func TestParentMustExist(t *testing.T) {
	state := needCgroupfs(t)
	parent := fmt.Sprintf("/pullhelper-unittest-pod-%d", os.Getpid())
	cfg := cgroup.Config{Driver: "cgroupfs", Parent: parent, StateDir: state, ParentMustExist: true}
	if g, err := cgroup.Create(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "does not exist") {
		if g != nil {
			_ = g.Remove()
		}
		t.Fatalf("missing parent: %v", err)
	}
	if cgroup.ExistingParent(parent, false) {
		t.Fatal("the missing parent was created")
	}
	// On v1, a parent in one hierarchy only is refused too, and not made
	// in the others.
	if cgroup.Version() != "v2" {
		pids := filepath.Join("/sys/fs/cgroup/pids", parent)
		if err := os.Mkdir(pids, 0o755); err != nil {
			t.Fatal(err)
		}
		if g, err := cgroup.Create(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "does not exist (any more) in the") {
			if g != nil {
				_ = g.Remove()
			}
			t.Fatalf("parent in pids only: %v", err)
		}
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", parent)); err == nil {
			t.Fatal("the parent was made in the memory hierarchy")
		}
		if err := os.Remove(pids); err != nil {
			t.Fatal(err)
		}
	}
	// The parent in every hierarchy, as a runtime makes a pod's.
	made, err := cgroup.Create(context.Background(), cgroup.Config{Driver: "cgroupfs", Parent: parent, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, d := range made.Paths() {
		dirs = append(dirs, filepath.Dir(d))
	}
	if err := made.Remove(); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
		defer os.Remove(d)
	}
	g, err := cgroup.Create(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(g.Path(), parent+"/pull-") {
		t.Fatalf("the pull's cgroup %s is not under %s", g.Path(), parent)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if !cgroup.ExistingParent(parent, false) {
		t.Fatal("the existing parent was removed")
	}
}

// Kernel releases as uname gives them: CLONE_INTO_CGROUP is Linux 5.7's.
func TestKernelAtLeast(t *testing.T) {
	for rel, want := range map[string]bool{
		"6.18.44-fc-v1252": true, "5.7.0": true, "5.10.0-30-amd64": true, "5.15": true,
		"5.4.0-150-generic": false, "5.6.19": false, "4.18.0-553.el8_10.x86_64": false,
		"": false, "6": false, "x.y": false, "5.": false,
	} {
		if got := cgroup.KernelAtLeast(rel, 5, 7); got != want {
			t.Errorf("%q at least 5.7: %v, want %v", rel, got, want)
		}
	}
}

// Hybrid mode: OpenDir gives the unified hierarchy's cgroup (for
// CLONE_INTO_CGROUP) where the kernel has it; on a kernel without it
// (forced here) none, and the child is placed there by pid after the
// fork: a process forked by the thread inside the v1 cgroups and then
// Placed is in the cgroup in every hierarchy, the unified one included.
func TestHybridUnifiedPlacement(t *testing.T) {
	state := needCgroupfs(t)
	if cgroup.Version() != "hybrid" {
		t.Skipf("cgroup %s: the unified hierarchy of hybrid mode is what this tests", cgroup.Version())
	}
	g, err := cgroup.Create(context.Background(), cgroup.Config{Driver: "cgroupfs", Parent: fmt.Sprintf("/pullhelper-unittest-%d", os.Getpid()), StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	unified := g.Paths()[""]
	if unified == "" {
		t.Fatal("hybrid mode, and the group has no unified path")
	}
	d, err := g.OpenDir()
	if err != nil {
		t.Fatal(err)
	}
	if cgroup.CloneIntoCgroup() {
		if d == nil || !sameFile(t, d, unified) {
			t.Fatalf("OpenDir on a kernel with CLONE_INTO_CGROUP: %v, want %s", d, unified)
		}
	}
	if d != nil {
		d.Close()
	}

	defer cgroup.NoCloneIntoCgroup()()
	if d, err := g.OpenDir(); d != nil || err != nil {
		t.Fatalf("OpenDir without CLONE_INTO_CGROUP: %v %v, want none", d, err)
	}
	type out struct {
		pid int
		err error
	}
	res := make(chan out, 1)
	cmd := exec.Command("sleep", "60")
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		leave, err := g.EnterThread()
		if err != nil {
			res <- out{err: err}
			return
		}
		err = cmd.Start()
		if lerr := leave(); lerr != nil && err == nil {
			err = lerr
		}
		if err != nil {
			res <- out{err: err}
			return
		}
		res <- out{pid: cmd.Process.Pid}
	}()
	o := <-res
	if o.err != nil {
		t.Fatal(o.err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if err := g.Contains(o.pid); err == nil {
		t.Fatal("the forked process is in the unified cgroup before Place: the check proves nothing")
	}
	if err := g.Place(o.pid); err != nil {
		t.Fatal(err)
	}
	if err := g.Contains(o.pid); err != nil {
		t.Fatalf("after Place: %v", err)
	}
}

func sameFile(t *testing.T, f *os.File, path string) bool {
	t.Helper()
	a, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(a, b)
}

// holdParentsLock takes the parents lock of state the way another pull
// would (its own open file description) and returns the release.
func holdParentsLock(t *testing.T, state string) func() {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(state, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	return func() { f.Close() }
}

// A pull whose parents lock another pullhelper holds (stopped, hung) waits
// no longer than its context: Create ends with the context's cause and
// makes nothing. flock(2) without LOCK_NB waited for the holder, past
// --timeout and SIGTERM.
func TestCreateWaitsForParentsLockNoLongerThanItsContext(t *testing.T) {
	state := needCgroupfs(t)
	parent := fmt.Sprintf("/pullhelper-unittest-lockwait-%d", os.Getpid())
	release := holdParentsLock(t, state)
	defer release()
	cause := errors.New("pull timed out")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	type res struct {
		g   *cgroup.Group
		err error
	}
	done := make(chan res, 1)
	go func() {
		g, err := cgroup.Create(ctx, cgroup.Config{Driver: "cgroupfs", Parent: parent, StateDir: state})
		done <- res{g, err}
	}()
	var r res
	select {
	case r = <-done:
	case <-time.After(30 * time.Second): // hang guard only
		t.Fatal("Create waited for the held parents lock past its context (30 s)")
	}
	if r.err == nil {
		r.g.Remove()
		t.Fatal("Create succeeded while another process held the parents lock")
	}
	if !errors.Is(r.err, cause) {
		t.Errorf("Create = %v; want the context's cause in its chain", r.err)
	}
	if entries, _ := os.ReadDir(state); len(entries) != 1 || entries[0].Name() != ".lock" {
		t.Errorf("state directory after the refused Create: %v, want only .lock (no marker)", entries)
	}
	if cgroupExists(parent) {
		t.Errorf("the parent %s was made although the lock was never taken", parent)
	}
}

// A pull that leaves while another pullhelper holds the parents lock ends
// after parentsReleaseWait, with its own cgroup gone and the parent left in
// place (still marked): the next pull to leave it removes it.
func TestRemoveLeavesParentWhenParentsLockHeld(t *testing.T) {
	state := needCgroupfs(t)
	parent := fmt.Sprintf("/pullhelper-unittest-lockleave-%d", os.Getpid())
	cfg := cgroup.Config{Driver: "cgroupfs", Parent: parent, StateDir: state}
	g, err := cgroup.Create(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	paths := maps.Clone(g.Paths())
	release := holdParentsLock(t, state)
	done := make(chan error, 1)
	go func() { done <- g.Remove() }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second): // hang guard only
		release()
		t.Fatal("Remove waited for the held parents lock for 30 s")
	}
	release()
	if err == nil || !strings.Contains(err.Error(), "leaving cgroup parent "+parent+" in place") || !strings.Contains(err.Error(), "fuser -v") {
		t.Errorf("Remove with the parents lock held = %v; want the parent left in place, naming how to find the holder", err)
	}
	for _, d := range paths {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("the pull's cgroup %s is left", d)
		}
	}
	if !cgroupExists(parent) {
		t.Fatalf("the parent %s went without its lock", parent)
	}
	// The next pull to leave takes it with it.
	h, err := cgroup.Create(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Remove(); err != nil {
		t.Fatal(err)
	}
	if cgroupExists(parent) {
		t.Errorf("the parent %s is left after the next pull left it", parent)
	}
}

// cgroupExists reports whether the cgroup parent is there: in the pids
// hierarchy on v1 (where Create makes it in each), else the unified one.
func cgroupExists(parent string) bool {
	root := "/sys/fs/cgroup"
	if cgroup.Version() != "v2" {
		m, err := cg.FindCgroupMountpoint("", "pids")
		if err != nil {
			return false
		}
		root = m
	}
	_, err := os.Stat(filepath.Join(root, parent))
	return err == nil
}
