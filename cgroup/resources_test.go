package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestResourcesTranslation checks the one translation of Limits into the
// library's Resources for both cgroup versions (v2 is proven end to end in
// the VM tests; this pins the mapping).
func TestResourcesTranslation(t *testing.T) {
	swap := int64(16 << 20)
	l := Limits{CPUQuota: 0.5, CPUWeight: 100, MemoryMax: 64 << 20, MemoryHigh: 48 << 20, SwapMax: &swap,
		PidsMax: 32, IOWeight: 100, IO: []IODevice{{Major: 8, Minor: 0, ReadBPS: 1e6, WriteIOPS: 50}}}
	v1 := resources(l, false)
	if v1.CpuQuota != 50000 || v1.CpuPeriod != 100000 {
		t.Errorf("v1 cpu quota/period = %d/%d", v1.CpuQuota, v1.CpuPeriod)
	}
	if v1.CpuShares != 2+(99*262142)/9999 || v1.CpuWeight != 0 {
		t.Errorf("v1 cpu weight 100 → shares %d (weight %d)", v1.CpuShares, v1.CpuWeight)
	}
	if v1.Memory != 64<<20 || v1.MemoryReservation != 48<<20 || v1.MemorySwap != 80<<20 {
		t.Errorf("v1 memory = %d/%d/%d", v1.Memory, v1.MemoryReservation, v1.MemorySwap)
	}
	if v1.PidsLimit == nil || *v1.PidsLimit != 32 {
		t.Errorf("v1 pids = %v", v1.PidsLimit)
	}
	if len(v1.BlkioThrottleReadBpsDevice) != 1 || v1.BlkioThrottleReadBpsDevice[0].Rate != 1e6 ||
		len(v1.BlkioThrottleWriteIOPSDevice) != 1 || v1.BlkioThrottleWriteIOPSDevice[0].Rate != 50 ||
		len(v1.BlkioThrottleWriteBpsDevice) != 0 {
		t.Errorf("v1 io = %+v", v1)
	}
	if v1.BlkioWeight != uint16(10+(99*990)/9999) || v1.Unified != nil {
		t.Errorf("v1 io weight = %d, unified %v", v1.BlkioWeight, v1.Unified)
	}
	v2 := resources(l, true)
	if v2.CpuWeight != 100 || v2.CpuShares != 0 {
		t.Errorf("v2 cpu weight = %d (shares %d)", v2.CpuWeight, v2.CpuShares)
	}
	if v2.Unified["memory.high"] != "50331648" || v2.MemoryReservation != 0 {
		t.Errorf("v2 memory.high = %q (reservation %d)", v2.Unified["memory.high"], v2.MemoryReservation)
	}
	if v2.Unified["io.weight"] != "default 100" || v2.BlkioWeight != 0 {
		t.Errorf("v2 io.weight = %q", v2.Unified["io.weight"])
	}
	if tiny := resources(Limits{CPUQuota: 0.001}, true); tiny.CpuQuota != 1000 {
		t.Errorf("a quota below the kernel's 1ms minimum must be raised to it, got %d", tiny.CpuQuota)
	}
	if none := resources(Limits{}, false); none.Memory != 0 || none.PidsLimit != nil || none.CpuQuota != 0 || none.Unified != nil {
		t.Errorf("no limits must write nothing: %+v", none)
	}
}

func TestAccountingRule(t *testing.T) {
	// Two whole disks of this host (accounting resolves what it is given).
	ents, _ := os.ReadDir("/sys/dev/block")
	var disks [][2]int64
	for _, e := range ents {
		var d [2]int64
		if _, err := fmt.Sscanf(e.Name(), "%d:%d", &d[0], &d[1]); err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join("/sys/dev/block", e.Name(), "partition")); err != nil {
			disks = append(disks, d)
		}
	}
	if len(disks) < 2 {
		t.Skipf("this host has %d whole disks in /sys/dev/block; the case needs two", len(disks))
	}
	a, b := disks[0], disks[1]
	l := accounting(Limits{IO: []IODevice{{Major: a[0], Minor: a[1], ReadBPS: 5}}}, []string{fmt.Sprintf("%d:%d", a[0], a[1]), fmt.Sprintf("%d:%d", b[0], b[1])})
	if len(l.IO) != 2 || l.IO[0].ReadBPS != 5 || l.IO[1].Major != b[0] || l.IO[1].Minor != b[1] || l.IO[1].WriteBPS != noLimit {
		t.Fatalf("accounting = %+v", l.IO)
	}
}

func TestSystemdSlice(t *testing.T) {
	for in, want := range map[string]string{
		"/pullhelper": "pullhelper.slice",
		"/a/b":        "a-b.slice",
		"/kubepods.slice/kubepods-burstable.slice": "kubepods-burstable.slice",
		"system.slice": "system.slice",
		"/":            "system.slice",
	} {
		if got := systemdSlice(in); got != want {
			t.Errorf("systemdSlice(%q) = %q, want %q", in, got, want)
		}
	}
}
