package privdrop_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/pullhelper/pullhelper/privdrop"
	"golang.org/x/sys/unix"
)

const helperEnv = "PULLHELPER_PRIVDROP_TEST_HELPER"

// TestMain lets the test binary act as a dropped child: the real Drop and
// the real filter run in a separate process, which reports what it could
// still do.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(childHelper())
	}
	if name := os.Getenv(probeEnv); name != "" {
		os.Exit(probeHelper(name))
	}
	os.Exit(m.Run())
}

type report struct {
	DropErr   string            `json:"drop_err"`
	VerifyErr string            `json:"verify_err"`
	Attempts  map[string]string `json:"attempts"` // syscall → errno text ("" = succeeded)
	Threads   int               `json:"threads"`
}

func childHelper() int {
	r := report{Attempts: map[string]string{}}
	id := privdrop.Identity{UID: 61999, GID: 61999}
	// Start some goroutines that pin extra OS threads first: the drop must
	// reach them too.
	ready := make(chan struct{})
	for i := 0; i < 4; i++ {
		go func() {
			runtimeLock()
			ready <- struct{}{}
			select {}
		}()
		<-ready
	}
	if err := privdrop.Drop(id, true); err != nil {
		r.DropErr = err.Error()
	}
	if err := privdrop.Verify(id, true); err != nil {
		r.VerifyErr = err.Error()
	}
	ts, _ := privdrop.ReadThreads("self")
	r.Threads = len(ts)
	if r.DropErr != "" || r.VerifyErr != "" {
		// Still root: trying ptrace on the parent or mount now would stop
		// the test runner or touch the host (a cgo build, where
		// AllThreadsSyscall is not supported, ends here).
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return 0
	}
	try := func(name string, err error) {
		if err == nil {
			r.Attempts[name] = ""
		} else {
			r.Attempts[name] = err.Error()
		}
	}
	dir, _ := os.MkdirTemp("", "pd")
	try("mount", unix.Mount("tmpfs", dir, "tmpfs", 0, ""))
	try("unshare", unix.Unshare(unix.CLONE_NEWUSER))
	fd, err := unix.Open("/proc/self/ns/net", unix.O_RDONLY, 0)
	if err == nil {
		try("setns", unix.Setns(fd, unix.CLONE_NEWNET))
	} else {
		try("setns", err)
	}
	try("ptrace", unix.PtraceAttach(os.Getppid()))
	_, _, e := unix.RawSyscall(unix.SYS_KEYCTL, 0, 0, 0)
	try("keyctl", errnoErr(e))
	try("setuid0", syscall.Setuid(0))
	_, _, e = unix.RawSyscall(unix.SYS_CLONE3, 0, 0, 0)
	try("clone3", errnoErr(e))
	// Ordinary work still works: create and write a file, open a socket.
	f, err := os.CreateTemp("", "pd-ok")
	if err == nil {
		_, err = f.Write([]byte("x"))
		f.Close()
		os.Remove(f.Name())
	}
	try("write-file", err)
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.Close(s)
	}
	try("socket", err)
	_ = json.NewEncoder(os.Stdout).Encode(r)
	return 0
}

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func TestDropInAChild(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the drop starts from root")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "TMPDIR="+tmpForUID(t))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	var r report
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}
	if r.DropErr != "" || r.VerifyErr != "" {
		t.Fatalf("drop: %q, verify: %q", r.DropErr, r.VerifyErr)
	}
	if r.Threads < 5 {
		t.Errorf("only %d threads: the test did not exercise many threads", r.Threads)
	}
	for _, sc := range []string{"mount", "unshare", "setns", "ptrace", "keyctl", "setuid0"} {
		if r.Attempts[sc] == "" {
			t.Errorf("%s succeeded after the drop", sc)
		} else if !strings.Contains(r.Attempts[sc], "not permitted") {
			t.Errorf("%s: %s, want EPERM", sc, r.Attempts[sc])
		}
	}
	if !strings.Contains(r.Attempts["clone3"], "not implemented") {
		t.Errorf("clone3: %q, want ENOSYS", r.Attempts["clone3"])
	}
	for _, ok := range []string{"write-file", "socket"} {
		if r.Attempts[ok] != "" {
			t.Errorf("%s failed after the drop: %s", ok, r.Attempts[ok])
		}
	}
}

// tmpForUID is a directory the dropped helper (uid 61999) can write.
func tmpForUID(t *testing.T) string {
	d, err := os.MkdirTemp("", "privdrop-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chown(d, 61999, 61999); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestVerifyRejectsRoot(t *testing.T) {
	// This test process has not dropped anything: Verify must say so.
	err := privdrop.Verify(privdrop.Identity{UID: 61999, GID: 61999}, true)
	if err == nil {
		t.Fatal("Verify passed for an undropped process")
	}
}

func TestAllocate(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for the lock directory")
	}
	dir := t.TempDir()
	a, err := privdrop.Allocate("dynamic", dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := privdrop.Allocate("dynamic", dir)
	if err != nil {
		t.Fatal(err)
	}
	if a.UID == b.UID || a.UID < privdrop.DynamicMin || b.UID > privdrop.DynamicMax || a.GID != a.UID {
		t.Fatalf("leases %+v %+v", a.Identity, b.Identity)
	}
	a.Release()
	c, err := privdrop.Allocate("dynamic", dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.UID != a.UID {
		t.Fatalf("released uid %d not reused (got %d)", a.UID, c.UID)
	}
	b.Release()
	c.Release()
	for _, bad := range []string{"root", "0", "", "-5", "no-such-user-xyz"} {
		if _, err := privdrop.Allocate(bad, dir); err == nil {
			t.Errorf("Allocate(%q) accepted", bad)
		}
	}
	if l, err := privdrop.Allocate("nobody", dir); err != nil || l.UID == 0 {
		t.Errorf("Allocate(nobody) = %+v, %v", l, err)
	}
	// One spelling per uid (policy.CheckUser refuses the others first):
	// "+65534" and "065534" would miss nobody's passwd group.
	for _, spec := range []string{"+65534", "065534"} {
		if _, err := privdrop.Allocate(spec, dir); err == nil || !strings.Contains(err.Error(), "plain decimal") {
			t.Errorf("Allocate(%q): %v; want a refusal naming the plain decimal form", spec, err)
		}
	}
	if l, err := privdrop.Allocate("12345", dir); err != nil || l.UID != 12345 || l.GID != 12345 {
		t.Errorf("Allocate(12345) = %+v, %v", l, err)
	}
}

// The uid lock directory must be root's and writable by nobody else
// (state.CheckDir): in another user's, that user could plant or swap the
// lock files that decide which uid is free.
func TestAllocateRefusesLockDirOthersControl(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the directory is given to uid 65534")
	}
	dir := t.TempDir()
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	l, err := privdrop.Allocate("dynamic", dir)
	if err == nil {
		l.Release()
		t.Fatal("allocated a uid with its lock in another user's directory")
	}
	if !strings.Contains(err.Error(), "uid lock directory") || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("refusal %q does not name the directory and its owner", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left in the refused directory: %v", entries)
	}
}

// Sweep goes through the directory it checked: with another user's
// directory on the way, or a symbolic link to a directory of root's, it
// removes nothing, not even root's unheld lock files there (with a glob
// by path it removed them, and a swap after its check could point it at
// any such directory).
func TestSweepRefusesPathOthersControl(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a directory is given to uid 65534")
	}
	top := t.TempDir()
	victim := filepath.Join(top, "victim", "uids")
	if err := os.MkdirAll(victim, 0o700); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(victim, "xtables.lock")
	if err := os.WriteFile(lock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	eve := filepath.Join(top, "eve")
	if err := os.Mkdir(eve, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(top, "victim"), filepath.Join(eve, "ph")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(eve, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(eve, "ph", "uids"), filepath.Join(top, "link")} {
		if dir == filepath.Join(top, "link") {
			if err := os.Symlink(victim, dir); err != nil {
				t.Fatal(err)
			}
		}
		if got := privdrop.Sweep(dir); len(got) != 0 {
			t.Errorf("Sweep(%s) removed %v", dir, got)
		}
		if _, err := os.Lstat(lock); err != nil {
			t.Fatalf("Sweep(%s) removed root's lock file behind it: %v", dir, err)
		}
	}
	if got := privdrop.Sweep(victim); len(got) != 1 || got[0] != lock {
		t.Errorf("Sweep of the directory itself: %v, want [%s]", got, lock)
	}
}

// Release removes the lock file in the directory the lease was taken in
// (held open), not whatever is at its path by then.
func TestReleaseInItsOwnDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for the lock directory")
	}
	top := t.TempDir()
	dir := filepath.Join(top, "uids")
	l, err := privdrop.Allocate("dynamic", dir)
	if err != nil {
		t.Fatal(err)
	}
	name := strconv.Itoa(l.UID) + ".lock"
	if err := os.Rename(dir, filepath.Join(top, "moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	l.Release()
	if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
		t.Errorf("Release removed the file now at its old path: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(top, "moved", name)); !os.IsNotExist(err) {
		t.Errorf("Release left its own lock file (%v)", err)
	}
}

// A copy of a lease released after the original is harmless: the lock the
// next allocation takes (maybe on the same descriptor numbers) stays.
func TestReleaseOfACopyAfterRelease(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for the lock directory")
	}
	dir := t.TempDir()
	a, err := privdrop.Allocate("dynamic", dir)
	if err != nil {
		t.Fatal(err)
	}
	copied := *a
	a.Release()
	b, err := privdrop.Allocate("dynamic", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	copied.Release()
	if _, err := os.Lstat(filepath.Join(dir, strconv.Itoa(b.UID)+".lock")); err != nil {
		t.Errorf("the live lease's lock file went with the copy's release: %v", err)
	}
}

func TestFilterDeniesTheIssueList(t *testing.T) {
	want := []string{"mount", "umount2", "setns", "unshare", "ptrace", "bpf", "keyctl", "kexec_load",
		"init_module", "finit_module", "delete_module", "reboot", "swapon", "open_by_handle_at",
		"process_vm_readv", "process_vm_writev"}
	have := map[string]bool{}
	for _, n := range privdrop.Denied {
		have[n] = true
	}
	for _, n := range want {
		if !have[n] {
			t.Errorf("%s is not denied", n)
		}
	}
	if _, err := privdrop.Filter(); err != nil {
		t.Fatalf("the filter does not assemble: %v", err)
	}
}

// Released dynamic uids leave no lock file behind (issue 10 item 19).
func TestReleaseRemovesLockFile(t *testing.T) {
	dir := t.TempDir()
	var leases []*privdrop.Lease
	for range 3 {
		l, err := privdrop.Allocate("dynamic", dir)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 {
		t.Fatalf("want 3 lock files while held, got %d", len(ents))
	}
	for _, l := range leases {
		l.Release()
		l.Release() // idempotent
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("lock files left after release: %v", ents)
	}
}

// Concurrent allocations and releases (each release unlinks its file) never
// hand one uid to two holders at once.
func TestAllocateExclusiveUnderUnlink(t *testing.T) {
	dir := t.TempDir()
	var (
		mu     sync.Mutex
		holder = map[int]int{}
		wg     sync.WaitGroup
		errs   = make(chan error, 64)
	)
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 40 {
				l, err := privdrop.Allocate("dynamic", dir)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if h, ok := holder[l.UID]; ok {
					errs <- fmt.Errorf("uid %d held by workers %d and %d", l.UID, h, w)
				}
				holder[l.UID] = w
				mu.Unlock()
				for range 20 {
					runtime.Gosched() // hold it a while
				}
				mu.Lock()
				delete(holder, l.UID)
				mu.Unlock()
				l.Release()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("lock files left: %d", len(ents))
	}
}

// A lock file left by a killed pull (present, not held) is removed by the
// next allocation, even when that allocation takes another uid.
func TestAllocateSweepsStaleLockFiles(t *testing.T) {
	dir := t.TempDir()
	held, err := privdrop.Allocate("dynamic", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	stale := fmt.Sprintf("%s/%d.lock", dir, privdrop.DynamicMax)
	if err := os.WriteFile(stale, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := privdrop.Allocate("dynamic", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale lock file %s not swept: %v", stale, err)
	}
	if _, err := os.Stat(fmt.Sprintf("%s/%d.lock", dir, held.UID)); err != nil {
		t.Fatalf("the held lock file was removed: %v", err)
	}
}

// Sweep removes only unheld lock files of this user's, in a directory
// nobody else may write: never a file of another owner, a FIFO (without
// blocking), a file with another link, or anything in a directory others
// can write (issue 22, finding 16).
func TestSweepOwnerChecks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (files of another owner)")
	}
	dir := t.TempDir()
	stale := filepath.Join(dir, "61200.lock")
	foreign := filepath.Join(dir, "61201.lock")
	fifo := filepath.Join(dir, "61202.lock")
	linked := filepath.Join(dir, "61203.lock")
	for _, f := range []string{stale, foreign, linked} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(foreign, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(linked, filepath.Join(dir, "other")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if got := privdrop.Sweep(dir); len(got) != 0 {
		t.Fatalf("swept %v in a directory others may write", got)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	got := privdrop.Sweep(dir)
	if len(got) != 1 || got[0] != stale {
		t.Fatalf("swept %v, want [%s] alone", got, stale)
	}
	for _, f := range []string{foreign, fifo, linked} {
		if _, err := os.Lstat(f); err != nil {
			t.Errorf("%s was removed: %v", f, err)
		}
	}
}
