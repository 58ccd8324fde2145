package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestFilesLayer(t *testing.T) {
	host := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(host, []byte("#!payload\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	o := Options{Layers: 1, LayerSize: 16, Seed: 1, Platforms: mustPlatforms(t, "linux/amd64"),
		Files:    []FileSpec{{Host: host, Path: "/bin/prog"}},
		Symlinks: []SymlinkSpec{{Path: "/bin/sh", Target: "prog"}},
		Cmd:      []string{"/bin/sh", "-c", "echo hi"}}
	out, d := gen(t, o)
	_, d2 := gen(t, o)
	if d.Digest != d2.Digest {
		t.Fatalf("not deterministic: %s vs %s", d.Digest, d2.Digest)
	}
	files := readTree(t, out)
	c := &checker{t: t, files: files, visited: map[string]bool{}}
	m := decode[Manifest](t, c.blob(d))
	if len(m.Layers) != 2 {
		t.Fatalf("want 2 layers (1 generated + files), got %d", len(m.Layers))
	}
	var cfg ImageConfig
	if err := json.Unmarshal(c.blob(m.Config), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Config.Cmd) != 3 || cfg.Config.Cmd[2] != "echo hi" {
		t.Errorf("Cmd = %q", cfg.Config.Cmd)
	}
	if len(cfg.RootFS.DiffIDs) != 2 || len(cfg.History) != 2 {
		t.Errorf("diff_ids %d, history %d; want 2 each", len(cfg.RootFS.DiffIDs), len(cfg.History))
	}
	gz, err := gzip.NewReader(bytes.NewReader(c.blob(m.Layers[1])))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(gz)
	if err != nil {
		t.Fatal(err)
	}
	if sha(raw) != cfg.RootFS.DiffIDs[1] {
		t.Errorf("diff_id mismatch")
	}
	tr := tar.NewReader(bytes.NewReader(raw))
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, h.Name)
		switch h.Name {
		case "bin/prog":
			b, _ := io.ReadAll(tr)
			if string(b) != "#!payload\n" || h.Mode != 0o755 {
				t.Errorf("bin/prog: mode %o content %q", h.Mode, b)
			}
		case "bin/sh":
			if h.Typeflag != tar.TypeSymlink || h.Linkname != "prog" {
				t.Errorf("bin/sh: type %c link %q", h.Typeflag, h.Linkname)
			}
		}
	}
	if want := []string{"bin/", "bin/prog", "bin/sh"}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("entries %q, want %q", got, want)
	}
}

// TestUser: -user sets the config's User; without it there is no User key
// (the other fixtures' config digests stay what they were).
func TestUser(t *testing.T) {
	for _, user := range []string{"www-data:www-data", ""} {
		o := Options{Layers: 1, LayerSize: 16, Seed: 1, Platforms: mustPlatforms(t, "linux/amd64"), User: user}
		out, d := gen(t, o)
		c := &checker{t: t, files: readTree(t, out), visited: map[string]bool{}}
		m := decode[Manifest](t, c.blob(d))
		var cfg struct {
			Config map[string]json.RawMessage `json:"config"`
		}
		if err := json.Unmarshal(c.blob(m.Config), &cfg); err != nil {
			t.Fatal(err)
		}
		got, ok := cfg.Config["User"]
		switch {
		case user == "" && ok:
			t.Errorf("no -user: the config has User %s", got)
		case user != "" && string(got) != `"`+user+`"`:
			t.Errorf("-user %s: the config's User is %s", user, got)
		}
	}
}

func TestWrongDiffID(t *testing.T) {
	o := Options{Layers: 3, LayerSize: 16, Seed: 1, Platforms: mustPlatforms(t, "linux/amd64")}
	_, good := gen(t, o)
	o.WrongDiffID = 2
	out, d := gen(t, o)
	c := &checker{t: t, files: readTree(t, out), visited: map[string]bool{}}
	m := decode[Manifest](t, c.blob(d))
	var cfg ImageConfig
	if err := json.Unmarshal(c.blob(m.Config), &cfg); err != nil {
		t.Fatal(err)
	}
	for k, l := range m.Layers {
		gz, err := gzip.NewReader(bytes.NewReader(c.blob(l)))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(gz)
		if err != nil {
			t.Fatal(err)
		}
		if wrong := sha(raw) != cfg.RootFS.DiffIDs[k]; wrong != (k == 1) {
			t.Errorf("-wrong-diff-id 2: layer %d's diff_id wrong: %v", k+1, wrong)
		}
	}
	if d.Digest == good.Digest {
		t.Error("-wrong-diff-id 2 left the image's digest as it was")
	}
	if _, err := Generate(Options{Out: t.TempDir(), Layers: 3, LayerSize: 16, Seed: 1, Platforms: o.Platforms, WrongDiffID: 4}); err == nil {
		t.Error("-wrong-diff-id 4 of 3 layers: no error")
	}
}
