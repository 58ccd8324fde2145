package pipeline_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/auth"
	"github.com/pullhelper/pullhelper/pipeline"
	"github.com/pullhelper/pullhelper/policy"
)

// containerdPlan is a plan into containerd:, with flags (name, key, value).
func containerdPlan(t *testing.T, set ...[3]string) *pipeline.Plan {
	t.Helper()
	l := policy.Defaults()
	empty := filepath.Join(t.TempDir(), "registries.conf")
	storeMust(t, os.WriteFile(empty, nil, 0o644))
	storeMust(t, l.Set("--registries-conf", "pull.registries_conf", policy.String, empty))
	for _, s := range set {
		kind := policy.String
		if s[1] == "dest.pin" {
			kind = policy.Bool
		}
		storeMust(t, l.Set(s[0], s[1], kind, s[2]))
	}
	p, err := pipeline.NewPlan(l, pipeline.Inputs{Image: "reg.example/app:1", Dest: "containerd:reg.example/app:1", Env: auth.Env{Home: t.TempDir()}, Explain: true})
	storeMust(t, err)
	return p
}

func storeMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// --containerd-config gives the defaults; flags win with a warning each;
// --pin=false is an explicit unpin; the source is IMAGE.
func TestContainerdSettingsFromConfig(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.toml")
	storeMust(t, os.WriteFile(cfg, []byte("version = 3\n[grpc]\n address = \"/run/k/c.sock\"\n[plugins.\"io.containerd.cri.v1.images\"]\n snapshotter = \"native\"\n"), 0o600))

	p := containerdPlan(t, [3]string{"--containerd-config", "auth.containerd_config", cfg})
	c := p.Containerd
	if c.Address != "/run/k/c.sock" || c.Snapshotter != "native" || c.Namespace != "k8s.io" || c.Config != cfg {
		t.Fatalf("from the config: %+v", c)
	}
	if c.From["address"] != cfg+": [grpc] address" || !strings.Contains(c.From["snapshotter"], "io.containerd.cri.v1.images") {
		t.Errorf("from: %v", c.From)
	}
	if c.Source != "reg.example/app:1" || c.Pin || c.Unpin {
		t.Errorf("source/pin: %+v", c)
	}
	if len(p.Warnings) != 0 {
		t.Errorf("warnings without flags: %v", p.Warnings)
	}

	p = containerdPlan(t, [3]string{"--containerd-config", "auth.containerd_config", cfg},
		[3]string{"--containerd-snapshotter", "dest.containerd_snapshotter", "overlayfs"},
		[3]string{"--containerd-address", "dest.containerd_address", "/run/k/c.sock"},
		[3]string{"--pin", "dest.pin", "false"})
	c = p.Containerd
	if c.Snapshotter != "overlayfs" || c.From["snapshotter"] != "--containerd-snapshotter" || c.Address != "/run/k/c.sock" || !c.Unpin {
		t.Fatalf("flags: %+v", c)
	}
	if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], `--containerd-snapshotter "overlayfs" differs from the snapshotter`) {
		t.Errorf("warnings: %q", p.Warnings)
	}

	// Without a config: the defaults, and no unpin.
	p = containerdPlan(t)
	if c := p.Containerd; c.Address != "/run/containerd/containerd.sock" || c.From["address"] != "default" || c.Unpin || c.Config != "" {
		t.Errorf("no config: %+v", c)
	}
}
