package cgroup_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/cgroup"
)

func TestResolveDevice(t *testing.T) {
	maj, min, err := cgroup.ResolveDevice("/")
	if err != nil {
		t.Skipf("the root filesystem has no block device here: %v", err)
	}
	// The result is a whole disk: /sys/dev/block/MAJ:MIN has no "partition".
	dir := filepath.Join("/sys/dev/block", itoa(maj)+":"+itoa(min))
	if _, err := os.Stat(filepath.Join(dir, "partition")); err == nil {
		t.Fatalf("%s is a partition, want its disk", dir)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("%d:%d is not a block device: %v", maj, min, err)
	}
	if m, n, err := cgroup.ResolveDevice(itoa(maj) + ":" + itoa(min)); err != nil || m != maj || n != min {
		t.Fatalf("MAJ:MIN passthrough = %d:%d %v", m, n, err)
	}
	// A device this host does not have: the kernel would refuse its
	// throttle after the cgroup is made.
	if _, _, err := cgroup.ResolveDevice("4095:1048575"); err == nil || !strings.Contains(err.Error(), "4095:1048575 is no block device of this host") {
		t.Fatalf("a missing MAJ:MIN: %v", err)
	}
	// A partition's MAJ:MIN stands for its disk, as a path on it does.
	t.Run("partition", func(t *testing.T) {
		parts, _ := filepath.Glob("/sys/dev/block/*/partition")
		if len(parts) == 0 {
			t.Skip("this host has no partitions in /sys/dev/block")
		}
		part := filepath.Base(filepath.Dir(parts[0]))
		real, err := filepath.EvalSymlinks(filepath.Dir(parts[0]))
		if err != nil {
			t.Fatal(err)
		}
		disk, err := os.ReadFile(filepath.Join(filepath.Dir(real), "dev"))
		if err != nil {
			t.Fatal(err)
		}
		m, n, err := cgroup.ResolveDevice(part)
		if err != nil || itoa(m)+":"+itoa(n) != strings.TrimSpace(string(disk)) {
			t.Fatalf("partition %s = %d:%d %v, want its disk %s", part, m, n, err, disk)
		}
	})
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// TestLifecycle creates a real per-pull cgroup with limits, places a
// process, reads usage, kills and removes it. It needs root and a cgroupfs
// host (no systemd as PID 1).
func TestLifecycle(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		t.Skip("systemd is PID 1: the cgroupfs lifecycle is proven on hosts without it")
	}
	// The parent is this process's: a second test run at the same time
	// (make test-unit twice) has its own.
	parent := fmt.Sprintf("/pullhelper-unittest-lifecycle-%d", os.Getpid())
	g, err := cgroup.Create(context.Background(), cgroup.Config{Driver: "cgroupfs", Parent: parent, StateDir: t.TempDir(), Limits: cgroup.Limits{
		CPUQuota: 0.25, MemoryMax: 32 << 20, PidsMax: 16,
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	paths := g.Paths()
	if cgroup.Version() != "v2" {
		for file, want := range map[string]string{
			filepath.Join(paths["cpu"], "cpu.cfs_quota_us"):         "25000",
			filepath.Join(paths["cpu"], "cpu.cfs_period_us"):        "100000",
			filepath.Join(paths["memory"], "memory.limit_in_bytes"): "33554432",
			filepath.Join(paths["pids"], "pids.max"):                "16",
		} {
			b, err := os.ReadFile(file)
			if err != nil || strings.TrimSpace(string(b)) != want {
				t.Errorf("%s = %q (%v), want %s", file, b, err, want)
			}
		}
	} else {
		b, _ := os.ReadFile(filepath.Join(paths[""], "cpu.max"))
		if strings.TrimSpace(string(b)) != "25000 100000" {
			t.Errorf("cpu.max = %q", b)
		}
	}
	// An empty cgroup is left as it is: nothing in it to freeze.
	frozen := cgroup.Freezes()
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	if n := cgroup.Freezes() - frozen; n != 0 {
		t.Fatalf("Kill froze the empty cgroup %d times", n)
	}
	cmd := exec.Command("sh", "-c", "read x")
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := g.Place(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if err := g.Contains(cmd.Process.Pid); err != nil {
		t.Fatalf("placed process not in the cgroup: %v", err)
	}
	if err := g.Contains(os.Getpid()); err == nil {
		t.Fatal("Contains is true for a process outside the cgroup")
	}
	// Kill must kill it even though it waits on stdin.
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	stdin.Close()
	if cmd.ProcessState == nil || cmd.ProcessState.Success() {
		t.Fatal("process was not killed")
	}
	if cgroup.Version() != "v2" && cgroup.Freezes() == frozen {
		t.Fatal("Kill did not freeze the v1 cgroup with a process in it")
	}
	u := g.Usage()
	if u.CPUUsageNS == nil || *u.CPUUsageNS == 0 {
		t.Errorf("no CPU usage: %+v", u)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range paths {
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("%s still exists", dir)
		}
		if _, err := os.Stat(filepath.Dir(dir)); err == nil {
			t.Errorf("parent %s created by the pull still exists", filepath.Dir(dir))
		}
	}
}

// TestReclaim leaves a cgroup named for a process that no longer exists and
// checks that Reclaim removes it and leaves a live one alone.
func TestReclaim(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		t.Skip("systemd is PID 1: systemd collects stale scopes itself")
	}
	parent := fmt.Sprintf("/pullhelper-reclaimtest-%d", os.Getpid())
	live, err := cgroup.Create(context.Background(), cgroup.Config{Driver: "cgroupfs", Parent: parent, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Remove()
	// A stale one: pid 1's start time is never 1 tick after boot here,
	// and pid 2147483 does not exist.
	var dirs []string
	for _, p := range live.Paths() {
		if _, err := os.Stat(filepath.Dir(p)); err != nil {
			continue // a hierarchy the pull does not join (devices)
		}
		d := filepath.Join(filepath.Dir(p), "pull-2147483-1-deadbeef")
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
		t.Cleanup(func() { _ = os.Remove(d) })
	}
	got, err := cgroup.Reclaim(cgroup.Config{Driver: "cgroupfs", Parent: parent})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !strings.HasSuffix(got[0], "pull-2147483-1-deadbeef") {
		t.Fatalf("reclaimed %v", got)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s not removed", d)
		}
	}
	if err := live.Contains(os.Getpid()); err == nil {
		t.Fatal("test process unexpectedly in the live cgroup")
	}
	for sub, p := range live.Paths() {
		if sub == "devices" {
			continue // not joined
		}
		if _, err := os.Stat(p); err != nil {
			t.Errorf("live cgroup %s was removed", p)
		}
	}
}
