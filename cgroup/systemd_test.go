package cgroup

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// TestMain runs the anchor when the test binary is re-executed as one
// (startAnchor execs /proc/self/exe as AnchorName).
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == AnchorName {
		RunAnchor()
	}
	if os.Getenv("PH_CGROUP_TEST_KILLALL_ZERO") == "1" {
		killAll([]int{0}) // TestKillAllSkipsPidZero: in a process group of its own
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The IO limits become systemd's own properties (IOWeight=,
// IO{Read,Write}{Bandwidth,IOPS}Max=), a device named by the policy's path
// or, for MAJ:MIN, by /dev/block/MAJ:MIN.
func TestSystemdIOProps(t *testing.T) {
	l := Limits{IOWeight: 300, IO: []IODevice{
		{Source: "/var/lib", Major: 254, Minor: 0, ReadBPS: 10_000_000, WriteBPS: 1 << 20},
		{Source: "8:16", Major: 8, Minor: 16, WriteBPS: 5, ReadIOPS: 500, WriteIOPS: 600},
	}}
	got := map[string]any{}
	var names []string
	for _, p := range systemdIOProps(l) {
		names = append(names, p.Name)
		got[p.Name] = p.Value.Value()
	}
	if want := []string{"IOWeight", "IOReadBandwidthMax", "IOWriteBandwidthMax", "IOReadIOPSMax", "IOWriteIOPSMax"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("properties %v, want %v", names, want)
	}
	want := map[string]any{
		"IOWeight":            uint64(300),
		"IOReadBandwidthMax":  []ioDeviceLimit{{"/var/lib", 10_000_000}},
		"IOWriteBandwidthMax": []ioDeviceLimit{{"/var/lib", 1 << 20}, {"/dev/block/8:16", 5}},
		"IOReadIOPSMax":       []ioDeviceLimit{{"/dev/block/8:16", 500}},
		"IOWriteIOPSMax":      []ioDeviceLimit{{"/dev/block/8:16", 600}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v\nwant %#v", got, want)
	}
	// The D-Bus signature systemd's setters take.
	for _, n := range names[1:] {
		if s := dbus.MakeVariant(got[n]).Signature().String(); s != "a(st)" {
			t.Errorf("%s has signature %s, want a(st)", n, s)
		}
	}
	if p := systemdIOProps(Limits{}); len(p) != 0 {
		t.Errorf("no IO limits gave properties %v", p)
	}
}

// The anchor holds a scope open: a Kill of the pull's cgroup kills every
// process in it but the anchor; Remove kills and reaps the anchor too.
// (Proven here with the cgroupfs driver on a host without systemd; the
// systemd scope itself in make test-vm-systemd.)
func TestKillSparesTheAnchor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		t.Skip("systemd is PID 1: this test uses the cgroupfs driver")
	}
	g, err := Create(context.Background(), Config{Driver: "cgroupfs", Parent: fmt.Sprintf("/pullhelper-unittest-anchor-%d", os.Getpid()), StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	a, err := startAnchor()
	if err != nil {
		t.Fatal(err)
	}
	g.anchor = a
	if err := g.Place(a.pid); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", a.pid)); string(b) != AnchorName+"\x00" {
		t.Fatalf("the anchor's cmdline is %q", b)
	}
	sl := exec.Command("sleep", "60")
	if err := sl.Start(); err != nil {
		t.Fatal(err)
	}
	if err := g.Place(sl.Process.Pid); err != nil {
		_ = sl.Process.Kill()
		t.Fatal(err)
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := sl.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("the process in the cgroup was not killed: %v", err)
	}
	if st := procState(a.pid); st == "" || st == "Z" {
		t.Fatalf("Kill killed the anchor (state %q)", st)
	}
	if err := g.Contains(a.pid); err != nil {
		t.Fatalf("the anchor left the cgroup: %v", err)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Remove did not reap the anchor")
	}
	if procState(a.pid) != "" {
		t.Fatalf("the anchor %d still exists after Remove", a.pid)
	}
}

func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return f[0]
}

// A listing's pid 0 (a task of a pid namespace the reader cannot see, in
// a v2 cgroup.procs) is not signalled: kill(0, SIGKILL) would take the
// caller's whole process group. Run in a process group of its own, so that
// the old code kills only that.
func TestKillAllSkipsPidZero(t *testing.T) {
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.Env = append(os.Environ(), "PH_CGROUP_TEST_KILLALL_ZERO=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("killAll([0]) in its own process group: %v (%s)", err, out)
	}
}
