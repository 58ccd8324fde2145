package auth_test

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/auth"
)

// TestContainerdConfigVersionsAndImports mirrors containerd's LoadConfig
// (2.x cmd/containerd/server/config/config.go: LoadConfigWithPlugins,
// resolveImports, mergeConfig) and the registry's plugin per version: 3
// io.containerd.cri.v1.images, 2 io.containerd.grpc.v1.cri, 1 (or none) cri.
// Imports are relative to the importing file, globbed, loaded breadth-first;
// a later file's plugin table replaces the earlier one whole.
func TestContainerdConfigVersionsAndImports(t *testing.T) {
	const (
		v3 = `plugins."io.containerd.cri.v1.images".registry`
		v2 = `plugins."io.containerd.grpc.v1.cri".registry`
		v1 = `plugins.cri.registry`
	)
	auth := func(section, user string) string {
		return "[" + section + `.configs."reg.example.com".auth]` + "\nusername = \"" + user + "\"\npassword = \"p\"\n"
	}
	tests := []struct {
		name    string
		files   map[string]string // relative to the test dir; "config.toml" is the root
		want    string            // "user@file" of the configs auth, "" = none
		wantErr []string
	}{
		{"version 3: the images plugin", map[string]string{"config.toml": "version = 3\n" + auth(v3, "three")}, "three@config.toml", nil},
		{"version 3 ignores the v2 section", map[string]string{"config.toml": "version = 3\n" + auth(v2, "two")}, "", nil},
		{"version 2: the CRI plugin", map[string]string{"config.toml": "version = 2\n" + auth(v2, "two")}, "two@config.toml", nil},
		{"version 2 ignores the v3 section", map[string]string{"config.toml": "version = 2\n" + auth(v3, "three")}, "", nil},
		{"no version is version 1", map[string]string{"config.toml": auth(v1, "one")}, "one@config.toml", nil},
		{"version 5 is refused", map[string]string{"config.toml": "version = 5\n" + auth(v3, "x")}, "",
			[]string{"config.toml: unsupported version 5 (containerd reads versions 1 to 4)"}},
		{"negative version is refused", map[string]string{"config.toml": "version = -1\n"}, "", []string{"config.toml: unsupported version -1"}},
		{"unparsable root", map[string]string{"config.toml": "version = 3\n[plugins\n"}, "", []string{"parsing containerd config", "config.toml: invalid TOML at line"}},
		{"glob import relative to the file", map[string]string{
			"config.toml":       "version = 3\nimports = [\"conf.d/*.toml\"]\n",
			"conf.d/10-a.toml":  "version = 3\n" + auth(v3, "dropin"),
			"conf.d/ignored.md": auth(v3, "not-toml"),
		}, "dropin@conf.d/10-a.toml", nil},
		{"later import wins", map[string]string{
			"config.toml":      "version = 3\nimports = [\"conf.d/*.toml\"]\n" + auth(v3, "root"),
			"conf.d/10-a.toml": "version = 3\n" + auth(v3, "a"),
			"conf.d/20-b.toml": "version = 3\n" + auth(v3, "b"),
		}, "b@conf.d/20-b.toml", nil},
		{"a plugin table replaces the earlier one whole", map[string]string{
			"config.toml": "version = 3\nimports = [\"snap.toml\"]\n" + auth(v3, "root"),
			"snap.toml":   "version = 3\n[plugins.\"io.containerd.cri.v1.images\"]\nsnapshotter = \"overlayfs\"\n",
		}, "", nil},
		{"another plugin's table leaves the registry alone", map[string]string{
			"config.toml": "version = 3\nimports = [\"rt.toml\"]\n" + auth(v3, "root"),
			"rt.toml":     "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\"]\nenable_cdi = true\n",
		}, "root@config.toml", nil},
		{"a version 2 drop-in under a version 3 root is migrated", map[string]string{
			"config.toml": "version = 3\nimports = [\"old.toml\"]\n",
			"old.toml":    "version = 2\n" + auth(v2, "old"),
		}, "old@old.toml", nil},
		{"a drop-in above the root's version is refused", map[string]string{
			"config.toml": "version = 2\nimports = [\"new.toml\"]\n",
			"new.toml":    "version = 3\n",
		}, "", []string{"new.toml: drop-in config version 3 higher than root config version 2"}},
		{"a missing import is an error", map[string]string{"config.toml": "version = 3\nimports = [\"gone.toml\"]\n"}, "",
			[]string{"config.toml: imports: a file its entry 1 names: no such file"}},
		{"a glob without matches is nothing", map[string]string{"config.toml": "version = 3\nimports = [\"none/*.toml\"]\n" + auth(v3, "root")}, "root@config.toml", nil},
		{"an unparsable import names the import", map[string]string{
			"config.toml": "version = 3\nimports = [\"bad.toml\"]\n",
			"bad.toml":    "password = \"s3cret\n",
		}, "", []string{"parsing containerd config", "bad.toml: invalid TOML at line 1"}},
		{"circular imports load each file once", map[string]string{
			"config.toml": "version = 3\nimports = [\"a.toml\"]\n",
			"a.toml":      "version = 3\nimports = [\"config.toml\"]\n" + auth(v3, "a"),
		}, "a@a.toml", nil},
		{"imports are breadth-first", map[string]string{
			"config.toml": "version = 3\nimports = [\"a.toml\", \"b.toml\"]\n",
			"a.toml":      "version = 3\nimports = [\"c.toml\"]\n" + auth(v3, "a"),
			"b.toml":      "version = 3\n" + auth(v3, "b"),
			"c.toml":      "version = 3\n" + auth(v3, "c"),
		}, "c@c.toml", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range tt.files {
				write(t, dir, name, content)
			}
			c := hermetic(t, dir)
			c.ContainerdConfig = filepath.Join(dir, "config.toml")
			k, err := authNewKeyring(c)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatal("no error")
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Errorf("the error quotes the file: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			for _, cr := range k.Lookup("reg.example.com", "reg.example.com/app") {
				if cr.Source == "containerd-config" {
					rel, _ := filepath.Rel(dir, cr.File)
					got = cr.Username + "@" + rel
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("configs auth %q, want %q", got, tt.want)
			}
		})
	}
	t.Run("a missing root file is containerd's defaults", func(t *testing.T) {
		dir := t.TempDir()
		c := hermetic(t, dir)
		c.ContainerdConfig = filepath.Join(dir, "absent.toml")
		if _, err := authNewKeyring(c); err != nil {
			t.Fatal(err)
		}
	})
}

func authNewKeyring(c auth.TestConfig) (*auth.Keyring, error) { return auth.NewTestKeyring(c) }
