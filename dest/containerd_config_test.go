package dest_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/dest"
)

func writeCfg(t *testing.T, path, body string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(path), 0o700))
	must(t, os.WriteFile(path, []byte(body), 0o600))
}

// ReadContainerdConfig as containerd's LoadConfig reads the socket and
// the CRI's snapshotter: per version, through imports (relative, globbed),
// the last file with the CRI's table deciding the snapshotter.
func TestReadContainerdConfig(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, body, addr, snap, snapKey string
	}{
		{"v1", "[grpc]\n address = \"/a.sock\"\n[plugins.cri.containerd]\n snapshotter = \"native\"\n", "/a.sock", "native", `plugins."cri".containerd.snapshotter`},
		{"v2", "version = 2\n[grpc]\n address = \"/b.sock\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n snapshotter = \"native\"\n", "/b.sock", "native", `plugins."io.containerd.grpc.v1.cri".containerd.snapshotter`},
		{"v3", "version = 3\n[grpc]\n address = \"/c.sock\"\n[plugins.\"io.containerd.cri.v1.images\"]\n snapshotter = \"zfs\"\n", "/c.sock", "zfs", `plugins."io.containerd.cri.v1.images".snapshotter`},
		{"v4", "version = 4\n[plugins.\"io.containerd.server.v1.grpc\"]\n address = \"/d.sock\"\n[plugins.\"io.containerd.cri.v1.images\"]\n snapshotter = \"native\"\n", "/d.sock", "native", `plugins."io.containerd.cri.v1.images".snapshotter`},
		// A v3 file's CRI table is the image service's: the v2 one is not read.
		{"v3-old-table", "version = 3\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n snapshotter = \"native\"\n", dest.DefaultContainerdAddress, "overlayfs", ""},
	} {
		p := filepath.Join(dir, c.name+".toml")
		writeCfg(t, p, c.body)
		got, err := dest.ReadContainerdConfig(p)
		must(t, err)
		if got.Address != c.addr || got.Snapshotter != c.snap || got.Namespace != "k8s.io" {
			t.Errorf("%s: %+v", c.name, got)
		}
		if want := p + ": " + c.snapKey; c.snapKey != "" && got.SnapshotterKey != want {
			t.Errorf("%s: snapshotter key %q, want %q", c.name, got.SnapshotterKey, want)
		}
	}

	// Imports: relative to the importing file, globbed; a later file's CRI
	// table replaces the earlier one as a whole (its snapshotter unset:
	// the default again); the address is the last one set.
	root := filepath.Join(dir, "imp", "config.toml")
	writeCfg(t, root, "version = 2\nimports = [\"base.toml\", \"conf.d/*.toml\"]\n[grpc]\n address = \"/root.sock\"\n")
	writeCfg(t, filepath.Join(dir, "imp", "base.toml"), "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n snapshotter = \"native\"\n")
	got, err := dest.ReadContainerdConfig(root)
	must(t, err)
	if got.Address != "/root.sock" || got.Snapshotter != "native" || !strings.HasSuffix(got.SnapshotterKey, "base.toml: "+`plugins."io.containerd.grpc.v1.cri".containerd.snapshotter`) {
		t.Errorf("imports: %+v", got)
	}
	writeCfg(t, filepath.Join(dir, "imp", "conf.d", "10.toml"), "version = 2\n[grpc]\n address = \"/dropin.sock\"\n[plugins.\"io.containerd.grpc.v1.cri\".registry]\n config_path = \"/x\"\n")
	got, err = dest.ReadContainerdConfig(root)
	must(t, err)
	if got.Address != "/dropin.sock" || got.Snapshotter != "overlayfs" || got.SnapshotterKey != "" {
		t.Errorf("drop-in: %+v", got)
	}

	// A missing file is containerd's defaults.
	got, err = dest.ReadContainerdConfig(filepath.Join(dir, "none.toml"))
	must(t, err)
	if got.Address != dest.DefaultContainerdAddress || got.Snapshotter != "overlayfs" || got.AddressKey != "" {
		t.Errorf("missing: %+v", got)
	}

	// Errors name the file; a secret in a broken file is not quoted.
	for name, body := range map[string]string{
		"v9":     "version = 9\n",
		"syntax": "version = 2\npassword = \"s3cret\n",
		"import": "version = 2\nimports = [\"gone.toml\"]\n",
	} {
		p := filepath.Join(dir, "bad-"+name+".toml")
		writeCfg(t, p, body)
		_, err := dest.ReadContainerdConfig(p)
		if err == nil || !strings.Contains(err.Error(), p) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: %v", name, err)
		}
	}
	higher := filepath.Join(dir, "higher.toml")
	writeCfg(t, higher, "version = 2\nimports = [\"higher-3.toml\"]\n")
	writeCfg(t, filepath.Join(dir, "higher-3.toml"), "version = 3\n")
	if _, err := dest.ReadContainerdConfig(higher); err == nil || !strings.Contains(err.Error(), "higher than root") {
		t.Errorf("a drop-in of a higher version: %v", err)
	}
}

// An imports pattern that would walk the filesystem as root (a wildcard
// above the last two path elements) is refused before it is globbed
// (review of issue 24); containerd's own conf.d form is followed.
func TestReadContainerdConfigImportBounds(t *testing.T) {
	dir := t.TempDir()
	deep := filepath.Join(dir, "deep.toml")
	writeCfg(t, deep, "version = 2\nimports = [\"/*/*/*/*.toml\"]\n")
	if _, err := dest.ReadContainerdConfig(deep); err == nil || !strings.Contains(err.Error(), "wildcard") {
		t.Errorf("a filesystem-wide pattern: %v, want refused", err)
	}
	ok := filepath.Join(dir, "ok.toml")
	writeCfg(t, ok, "version = 2\nimports = [\""+dir+"/conf.d/*.toml\"]\n")
	writeCfg(t, filepath.Join(dir, "conf.d", "a.toml"), "version = 2\n[grpc]\n address = \"/x.sock\"\n")
	d, err := dest.ReadContainerdConfig(ok)
	if err != nil || d.Address != "/x.sock" {
		t.Errorf("conf.d/*.toml: %+v, %v; want the import's address", d, err)
	}
}

// The runtime handlers' own snapshotters, as containerd's CRI maps them
// (snapshotterFromPodSandboxConfig's runtimePlatforms): the image service's
// runtime_platforms.NAME.snapshotter first (versions 3 and 4), then the
// runtime's containerd.runtimes.NAME.snapshotter, which does not override
// it (UpdateRuntimeSnapshotter); versions 1 and 2 keep the runtimes in the
// CRI table. A handler without its own snapshotter is not listed.
func TestReadContainerdRuntimeSnapshotters(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, body string
		want       map[string]string
	}{
		{"v3", "version = 3\n" +
			"[plugins.\"io.containerd.cri.v1.images\".runtime_platforms.kata]\n snapshotter = \"devmapper\"\n" +
			"[plugins.\"io.containerd.cri.v1.images\".runtime_platforms.plain]\n platform = \"linux/amd64\"\n" +
			"[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.kata]\n snapshotter = \"other\"\n" +
			"[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.gvisor]\n snapshotter = \"native\"\n" +
			"[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc]\n runtime_type = \"io.containerd.runc.v2\"\n",
			map[string]string{"kata": "devmapper", "gvisor": "native"}},
		{"v2", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.kata]\n snapshotter = \"devmapper\"\n",
			map[string]string{"kata": "devmapper"}},
		{"none", "version = 3\n[plugins.\"io.containerd.cri.v1.images\"]\n snapshotter = \"native\"\n", map[string]string{}},
	} {
		p := filepath.Join(dir, c.name+".toml")
		writeCfg(t, p, c.body)
		got, err := dest.ReadContainerdConfig(p)
		must(t, err)
		if len(got.RuntimeSnapshotters) != len(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got.RuntimeSnapshotters, c.want)
		}
		for h, s := range c.want {
			if got.RuntimeSnapshotters[h] != s {
				t.Errorf("%s: %v, want %v", c.name, got.RuntimeSnapshotters, c.want)
			}
		}
	}
}
