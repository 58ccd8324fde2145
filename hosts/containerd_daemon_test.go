package hosts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// One reader of config.toml for the registry and the daemon: a version 4
// file (containerd 2.4's version.ConfigVersion, whose serviceMigrate moves
// only the server tables) keeps the registry in the image service's table
// and the socket in the grpc server plugin's; a drop-in of version 3 under
// it is read; version 5 is refused by both; a filesystem-wide imports
// pattern is refused by both.
func TestContainerdConfigOneReader(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	root := write("config.toml", "version = 4\nimports = [\"conf.d/*.toml\"]\n[plugins.\"io.containerd.server.v1.grpc\"]\naddress = \"/v4.sock\"\n")
	write("conf.d/10.toml", "version = 3\n[plugins.\"io.containerd.cri.v1.images\"]\nsnapshotter = \"native\"\n[plugins.\"io.containerd.cri.v1.images\".registry.configs.\"reg.io\".auth]\nusername = \"u\"\npassword = \"p\"\n")
	reg, err := loadContainerdConfig(root)
	if err != nil {
		t.Fatal(err)
	}
	if a := reg.Configs["reg.io"].Auth; a == nil || a.Username != "u" || !strings.HasSuffix(reg.file, "10.toml") {
		t.Errorf("registry of a version 4 config: %+v from %s", reg.Configs, reg.file)
	}
	d, err := ReadContainerdDaemon(root)
	if err != nil {
		t.Fatal(err)
	}
	if d.Address != "/v4.sock" || d.AddressKey != root+`: plugins."io.containerd.server.v1.grpc".address` ||
		d.Snapshotter != "native" || !strings.HasSuffix(d.SnapshotterKey, `10.toml: plugins."io.containerd.cri.v1.images".snapshotter`) {
		t.Errorf("daemon of a version 4 config: %+v", d)
	}
	// A version 4 file's top-level [grpc] is not read (serviceMigrate
	// moved it), as containerd 2.4 reads it.
	top := write("top.toml", "version = 4\n[grpc]\naddress = \"/old.sock\"\n")
	if d, err := ReadContainerdDaemon(top); err != nil || d.Address != "" {
		t.Errorf("version 4 [grpc]: %+v %v", d, err)
	}
	v5 := write("v5.toml", "version = 5\n")
	if _, err := loadContainerdConfig(v5); err == nil || !strings.Contains(err.Error(), v5+": unsupported version 5") {
		t.Errorf("version 5 (registry): %v", err)
	}
	if _, err := ReadContainerdDaemon(v5); err == nil || !strings.Contains(err.Error(), "unsupported version 5") {
		t.Errorf("version 5 (daemon): %v", err)
	}
	deep := write("deep.toml", "version = 2\nimports = [\"/*/*/*/*.toml\"]\n")
	if _, err := loadContainerdConfig(deep); err == nil || !strings.Contains(err.Error(), "wildcard above the last two path elements") {
		t.Errorf("a filesystem-wide pattern (registry): %v", err)
	}
}
