package pipeline_test

import (
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

func TestCgroupConfig(t *testing.T) {
	l := loaded(t, "[cgroup]\ncpu_quota = \"500m\"\nmemory_max = \"64Mi\"\nmemory_swap_max = 0\npids_max = 32\nio_read_bps = [\"7:0=1M\"]\nio_write_bps = [\"7:0=2MB/s\", \"8:16=3M\"]\n")
	c, err := pipeline.CgroupConfig(l)
	if err != nil {
		t.Fatal(err)
	}
	if c.Parent != "/pullhelper" || c.Limits.CPUQuota != 0.5 || c.Limits.MemoryMax != 64<<20 || c.Limits.PidsMax != 32 {
		t.Fatalf("config = %+v", c)
	}
	if c.Limits.SwapMax == nil || *c.Limits.SwapMax != 0 {
		t.Fatalf("memory_swap_max = 0 must mean no swap, got %v", c.Limits.SwapMax)
	}
	if len(c.Limits.IO) != 2 || c.Limits.IO[0].ReadBPS != 1e6 || c.Limits.IO[0].WriteBPS != 2e6 || c.Limits.IO[1].Major != 8 || c.Limits.IO[1].Minor != 16 {
		t.Fatalf("io = %+v", c.Limits.IO)
	}
	// Unset swap stays unset.
	c, _ = pipeline.CgroupConfig(loaded(t, "[cgroup]\nmemory_max = \"64Mi\"\n"))
	if c.Limits.SwapMax != nil {
		t.Fatal("swap must be unset")
	}
	for doc, want := range map[string]string{
		"[cgroup]\nmemory_swap_max = \"1Gi\"\n":    "needs cgroup.memory_max",
		"[cgroup]\nio_read_bps = [\"/proc=1M\"]\n": "without a block device",
	} {
		if _, err := pipeline.CgroupConfig(loaded(t, doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", doc, err, want)
		}
	}
}
