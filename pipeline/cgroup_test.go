package pipeline_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/pipeline"
	"github.com/pullhelper/pullhelper/policy"
)

func loaded(t *testing.T, doc string) *policy.Loaded {
	t.Helper()
	f, err := policy.Parse("p.toml", []byte("version = 1\n"+doc))
	if err != nil {
		t.Fatal(err)
	}
	l, err := f.Select("")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// disks are two whole disks of this host, as MAJ:MIN (the kernel, and so
// CgroupConfig, takes throttles only for devices it has).
func disks(t *testing.T) (a, b [2]int64) {
	t.Helper()
	ents, _ := os.ReadDir("/sys/dev/block")
	var found [][2]int64
	for _, e := range ents {
		var d [2]int64
		if _, err := fmt.Sscanf(e.Name(), "%d:%d", &d[0], &d[1]); err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join("/sys/dev/block", e.Name(), "partition")); err == nil {
			continue
		}
		found = append(found, d)
	}
	if len(found) < 2 {
		t.Skipf("this host has %d whole disks in /sys/dev/block; the case needs two", len(found))
	}
	return found[0], found[1]
}

func TestCgroupConfig(t *testing.T) {
	c, err := pipeline.CgroupConfig(loaded(t, "[cgroup]\ncpu_quota = \"500m\"\nmemory_max = \"64Mi\"\nmemory_swap_max = 0\npids_max = 32\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Parent != "/pullhelper" || c.Limits.CPUQuota != 0.5 || c.Limits.MemoryMax != 64<<20 || c.Limits.PidsMax != 32 {
		t.Fatalf("config = %+v", c)
	}
	if c.Limits.SwapMax == nil || *c.Limits.SwapMax != 0 {
		t.Fatalf("memory_swap_max = 0 must mean no swap, got %v", c.Limits.SwapMax)
	}
	// Unset swap stays unset.
	c, _ = pipeline.CgroupConfig(loaded(t, "[cgroup]\nmemory_max = \"64Mi\"\n"))
	if c.Limits.SwapMax != nil {
		t.Fatal("swap must be unset")
	}
	for doc, want := range map[string]string{
		"[cgroup]\nmemory_swap_max = \"1Gi\"\n":           "needs cgroup.memory_max",
		"[cgroup]\nio_read_bps = [\"/proc=1M\"]\n":        "without a block device",
		"[cgroup]\nio_read_bps = [\"4095:1048575=1M\"]\n": "4095:1048575 is no block device of this host",
	} {
		if _, err := pipeline.CgroupConfig(loaded(t, doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", doc, err, want)
		}
	}
	// The IO limits of two of this host's disks, merged by device.
	t.Run("io", func(t *testing.T) {
		d1, d2 := disks(t)
		c, err := pipeline.CgroupConfig(loaded(t, fmt.Sprintf("[cgroup]\nio_read_bps = [\"%d:%d=1M\"]\nio_write_bps = [\"%[1]d:%[2]d=2MB/s\", \"%d:%d=3M\"]\n", d1[0], d1[1], d2[0], d2[1])))
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Limits.IO) != 2 || c.Limits.IO[0].ReadBPS != 1e6 || c.Limits.IO[0].WriteBPS != 2e6 || c.Limits.IO[1].Major != d2[0] || c.Limits.IO[1].Minor != d2[1] {
			t.Fatalf("io = %+v", c.Limits.IO)
		}
	})
}
