package cgroup_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/cgroups/systemd"
	"github.com/pullhelper/pullhelper/cgroup"
)

// A host weighs a cgroup's IO when a scheduler does: CFQ's or BFQ's files
// in the v1 blkio root, the iocost root file on v2, or BFQ registered
// (listed by a block queue); otherwise io_weight is refused at the plan.
func TestNoIOWeight(t *testing.T) {
	write := func(t *testing.T, p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	noBFQ := t.TempDir()
	write(t, filepath.Join(noBFQ, "vda/queue/scheduler"), "[none] mq-deadline kyber\n")
	bfq := t.TempDir()
	write(t, filepath.Join(bfq, "vda/queue/scheduler"), "[none] mq-deadline kyber\n")
	write(t, filepath.Join(bfq, "sda/queue/scheduler"), "mq-deadline kyber [bfq] none\n")
	bfqNotSelected := t.TempDir()
	write(t, filepath.Join(bfqNotSelected, "sda/queue/scheduler"), "[mq-deadline] kyber bfq none\n")

	blkio := t.TempDir()
	write(t, filepath.Join(blkio, "cgroup.procs"), "")
	cfq := t.TempDir()
	write(t, filepath.Join(cfq, "blkio.weight"), "500\n")
	v2 := t.TempDir()
	write(t, filepath.Join(v2, "cgroup.controllers"), "cpuset cpu io memory pids\n")
	v2iocost := t.TempDir()
	write(t, filepath.Join(v2iocost, "cgroup.controllers"), "cpu io memory pids\n")
	write(t, filepath.Join(v2iocost, "io.cost.qos"), "")
	v2noIO := t.TempDir()
	write(t, filepath.Join(v2noIO, "cgroup.controllers"), "cpu memory pids\n")
	write(t, filepath.Join(v2noIO, "io.cost.qos"), "")

	for _, tc := range []struct {
		name, unified, blkio, block, want string
	}{
		{"v1 without a weighing scheduler", "", blkio, noBFQ, "bfq IO scheduler is not loaded"},
		{"v1 with bfq on one queue", "", blkio, bfq, ""},
		{"v1 with bfq registered, not selected", "", blkio, bfqNotSelected, ""},
		{"v1 with CFQ", "", cfq, noBFQ, ""},
		{"v1 without blkio", "", "", bfq, "blkio controller is not mounted"},
		{"v2 without iocost or bfq", v2, "", noBFQ, "no iocost"},
		{"v2 with iocost", v2iocost, "", noBFQ, ""},
		{"v2 with bfq", v2, "", bfq, ""},
		{"v2 without the io controller", v2noIO, "", bfq, "io controller is not available"},
	} {
		got := cgroup.NoIOWeight(tc.unified, tc.blkio, tc.block)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// Preflight refuses what this host cannot apply before anything exists.
func TestPreflight(t *testing.T) {
	if err := cgroup.Preflight(cgroup.Config{Driver: "cgroupfs", Parent: "/pullhelper"}); err != nil {
		t.Fatalf("a plain config: %v", err)
	}
	for _, p := range []string{"/pullhelper-unittest-none/x", "/sys/fs/cgroup/pids/pullhelper-unittest-none"} {
		err := cgroup.Preflight(cgroup.Config{Driver: "cgroupfs", Path: p})
		if err == nil || !strings.Contains(err.Error(), "cgroup.path "+p+" does not exist") || !errors.Is(err, cgroup.ErrNoJoined) {
			t.Errorf("missing joined cgroup %s: %v", p, err)
		}
		if strings.HasPrefix(p, "/sys/") && !strings.Contains(err.Error(), "not a directory of /sys/fs/cgroup") {
			t.Errorf("a hierarchy's directory given as the cgroup: no hint in %v", err)
		}
	}
	if err := cgroup.Preflight(cgroup.Config{Driver: "cgroupfs", Path: "/"}); err != nil {
		t.Errorf("the root cgroup exists: %v", err)
	}
	err := cgroup.Preflight(cgroup.Config{Driver: "systemd", Parent: "/pullhelper"})
	if systemd.IsRunningSystemd() {
		if err != nil {
			t.Errorf("systemd driver with systemd: %v", err)
		}
	} else if err == nil || !strings.Contains(err.Error(), "systemd is not running") {
		t.Errorf("systemd driver without systemd: %v", err)
	}
}
