package privdrop

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// capLine is the hex mask of a Cap* line of a /proc status file.
func capLine(t *testing.T, status, key string) uint64 {
	t.Helper()
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in %q", key, status)
	return 0
}

// A root program started by a thread that limited its bounding set is
// granted ChildCaps and nothing else; the rest of this process keeps its
// own.
func TestLimitBoundingSetIsWhatTheChildGets(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (LimitBoundingSet drops from the bounding set; CI runs as root)")
	}
	var want uint64
	for _, c := range ChildCaps {
		want |= 1 << c
	}
	type result struct {
		status string
		err    error
	}
	got := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if err := LimitBoundingSet(ChildCaps); err != nil {
			got <- result{err: err}
			return
		}
		out, err := exec.Command("/bin/cat", "/proc/self/status").Output()
		got <- result{string(out), err}
	}()
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	for _, k := range []string{"CapBnd", "CapPrm", "CapEff"} {
		if v := capLine(t, r.status, k); v != want {
			t.Errorf("the child's %s = %016x, want %016x (ChildCaps)", k, v, want)
		}
	}
	// The limited thread ended with its goroutine (or, the main thread,
	// runs nothing else): a program started now has the full set.
	out, err := exec.Command("/bin/cat", "/proc/self/status").Output()
	if err != nil {
		t.Fatal(err)
	}
	if v := capLine(t, string(out), "CapBnd"); v&^want == 0 {
		t.Errorf("a program started by another thread got the limited bounding set too (%016x)", v)
	}
}
