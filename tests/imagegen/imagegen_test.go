package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

func mustPlatforms(t *testing.T, s string) []Platform {
	t.Helper()
	p, err := ParsePlatforms(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func gen(t *testing.T, o Options) (string, Descriptor) {
	t.Helper()
	o.Out = filepath.Join(t.TempDir(), "layout")
	if o.Tag == "" {
		o.Tag = "latest"
	}
	if o.GzipLevel == 0 {
		o.GzipLevel = gzip.BestSpeed
	}
	d, err := Generate(o)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return o.Out, d
}

// readTree returns every regular file under dir, keyed by slash path.
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			t.Errorf("unexpected non-regular file %s", rel)
			return nil
		}
		b, err := os.ReadFile(path)
		files[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// checker verifies a layout: every descriptor must match its blob, and every
// blob must be referenced.
type checker struct {
	t       *testing.T
	files   map[string][]byte
	visited map[string]bool
}

func (c *checker) blob(d Descriptor) []byte {
	c.t.Helper()
	if !strings.HasPrefix(d.Digest, "sha256:") {
		c.t.Fatalf("digest %q is not sha256", d.Digest)
	}
	path := "blobs/sha256/" + strings.TrimPrefix(d.Digest, "sha256:")
	b, ok := c.files[path]
	if !ok {
		c.t.Fatalf("blob %s missing", path)
	}
	if got := sha(b); got != d.Digest {
		c.t.Errorf("blob %s has digest %s", path, got)
	}
	if int64(len(b)) != d.Size {
		c.t.Errorf("descriptor %s: size %d, blob has %d bytes", d.Digest, d.Size, len(b))
	}
	c.visited[path] = true
	return b
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decoding %T: %v\n%s", v, err, b)
	}
	return v
}

// checkImage verifies an image manifest, its config and its layers and
// returns the manifest.
func (c *checker) checkImage(d Descriptor, want Platform, o Options) Manifest {
	c.t.Helper()
	if d.MediaType != mediaTypeManifest {
		c.t.Errorf("manifest media type %q", d.MediaType)
	}
	m := decode[Manifest](c.t, c.blob(d))
	if m.SchemaVersion != 2 || m.MediaType != mediaTypeManifest {
		c.t.Errorf("bad manifest header %+v", m)
	}
	if m.Config.MediaType != mediaTypeConfig {
		c.t.Errorf("config media type %q", m.Config.MediaType)
	}
	cfg := decode[ImageConfig](c.t, c.blob(m.Config))
	if cfg.OS != want.OS || cfg.Architecture != want.Architecture || cfg.Variant != want.Variant {
		c.t.Errorf("config platform %s/%s/%s, want %s", cfg.OS, cfg.Architecture, cfg.Variant, want)
	}
	if cfg.RootFS.Type != "layers" || len(cfg.RootFS.DiffIDs) != len(m.Layers) || len(m.Layers) != o.Layers {
		c.t.Fatalf("rootfs %+v vs %d layers (want %d)", cfg.RootFS, len(m.Layers), o.Layers)
	}
	if len(cfg.History) != len(m.Layers) {
		c.t.Errorf("%d history entries for %d layers", len(cfg.History), len(m.Layers))
	}
	for k, l := range m.Layers {
		if l.MediaType != mediaTypeLayer {
			c.t.Errorf("layer media type %q", l.MediaType)
		}
		compressed := c.blob(l)
		if len(compressed) < 10 || compressed[3]&0x08 != 0 || !bytes.Equal(compressed[4:8], []byte{0, 0, 0, 0}) {
			c.t.Errorf("layer %d: gzip header has a name or an mtime: % x", k, compressed[:min(10, len(compressed))])
		}
		zr, err := gzip.NewReader(bytes.NewReader(compressed))
		if err != nil {
			c.t.Fatal(err)
		}
		raw, err := io.ReadAll(zr)
		if err != nil {
			c.t.Fatal(err)
		}
		if got := sha(raw); got != cfg.RootFS.DiffIDs[k] {
			c.t.Errorf("layer %d: diff_id %s, uncompressed digest %s", k, cfg.RootFS.DiffIDs[k], got)
		}
		c.checkTar(raw, k, o.LayerSize)
	}
	return m
}

func (c *checker) checkTar(raw []byte, layer int, size int64) {
	c.t.Helper()
	tr := tar.NewReader(bytes.NewReader(raw))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			c.t.Fatal(err)
		}
		names = append(names, h.Name)
		if !h.ModTime.Equal(fixedTime) || h.Uid != 0 || h.Gid != 0 {
			c.t.Errorf("%s: mtime %v uid %d gid %d", h.Name, h.ModTime, h.Uid, h.Gid)
		}
		if h.Typeflag == tar.TypeReg {
			if h.Mode != 0o644 || h.Size != size {
				c.t.Errorf("%s: mode %o size %d, want 644 and %d", h.Name, h.Mode, h.Size, size)
			}
		}
	}
	want := []string{"layer-" + strconv.Itoa(layer) + "/", "layer-" + strconv.Itoa(layer) + "/data.bin"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		c.t.Errorf("tar entries %q, want %q", names, want)
	}
}

// checkLayout verifies the whole layout and returns the tagged descriptor as
// recorded in index.json.
func checkLayout(t *testing.T, dir string, o Options) Descriptor {
	t.Helper()
	c := &checker{t: t, files: readTree(t, dir), visited: map[string]bool{}}
	if got := string(c.files["oci-layout"]); got != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %q", got)
	}
	idx := decode[Index](t, c.files["index.json"])
	if idx.SchemaVersion != 2 || len(idx.Manifests) != 1 {
		t.Fatalf("index.json: %+v", idx)
	}
	top := idx.Manifests[0]
	if got := top.Annotations[annotationRefName]; got != o.Tag {
		t.Errorf("ref.name annotation %q, want %q", got, o.Tag)
	}
	if len(o.Platforms) == 1 {
		c.checkImage(top, o.Platforms[0], o)
	} else {
		if top.MediaType != mediaTypeIndex {
			t.Fatalf("tagged media type %q, want index", top.MediaType)
		}
		sub := decode[Index](t, c.blob(top))
		if sub.MediaType != mediaTypeIndex || len(sub.Manifests) != len(o.Platforms) {
			t.Fatalf("image index %+v", sub)
		}
		layerSeen := map[string]bool{}
		for i, d := range sub.Manifests {
			if d.Platform == nil || *d.Platform != o.Platforms[i] {
				t.Errorf("manifest %d platform %v, want %v", i, d.Platform, o.Platforms[i])
			}
			m := c.checkImage(d, o.Platforms[i], o)
			for _, l := range m.Layers {
				if layerSeen[l.Digest] {
					t.Errorf("layer %s shared between platforms", l.Digest)
				}
				layerSeen[l.Digest] = true
			}
		}
	}
	for _, name := range sortedKeys(c.files) {
		if strings.HasPrefix(name, "blobs/") && !c.visited[name] {
			t.Errorf("unreferenced file %s", name)
		}
		if name != "oci-layout" && name != "index.json" && !strings.HasPrefix(name, "blobs/sha256/") {
			t.Errorf("unexpected file %s", name)
		}
	}
	return top
}

func TestDeterministicAndConsistent(t *testing.T) {
	cases := map[string]Options{
		"single": {Layers: 3, LayerSize: 200_000, Compressible: 0.5, Seed: 7, Platforms: mustPlatforms(t, "linux/amd64")},
		"multi":  {Layers: 2, LayerSize: 5000, Compressible: 0.25, Seed: 7, Tag: "v1", Platforms: mustPlatforms(t, "linux/amd64,linux/arm64,linux/arm/v7")},
		"text":   {Layers: 2, LayerSize: 70_000, Compressible: 1, Seed: 1, Platforms: mustPlatforms(t, "linux/amd64,linux/arm64")},
		"random": {Layers: 1, LayerSize: 70_000, Compressible: 0, Seed: 1, Platforms: mustPlatforms(t, "linux/s390x")},
		"empty":  {Layers: 1, LayerSize: 0, Compressible: 0.5, Seed: 1, Platforms: mustPlatforms(t, "linux/amd64")},
	}
	for name, o := range cases {
		t.Run(name, func(t *testing.T) {
			dir1, d1 := gen(t, o)
			dir2, d2 := gen(t, o)
			if o.Tag == "" {
				o.Tag = "latest"
			}
			top := checkLayout(t, dir1, o)
			if top.Digest != d1.Digest || top.Size != d1.Size {
				t.Errorf("Generate returned %+v, index.json has %+v", d1, top)
			}
			if d1.Digest != d2.Digest {
				t.Errorf("digests differ between runs: %s vs %s", d1.Digest, d2.Digest)
			}
			f1, f2 := readTree(t, dir1), readTree(t, dir2)
			k1, k2 := sortedKeys(f1), sortedKeys(f2)
			if strings.Join(k1, "\n") != strings.Join(k2, "\n") {
				t.Fatalf("file lists differ:\n%v\n%v", k1, k2)
			}
			for _, k := range k1 {
				if !bytes.Equal(f1[k], f2[k]) {
					t.Errorf("%s differs between runs", k)
				}
			}
		})
	}
}

func TestSeedChangesDigests(t *testing.T) {
	o := Options{Layers: 2, LayerSize: 10_000, Compressible: 0.5, Seed: 1, Platforms: mustPlatforms(t, "linux/amd64,linux/arm64")}
	dir1, d1 := gen(t, o)
	o.Seed = 2
	dir2, d2 := gen(t, o)
	if d1.Digest == d2.Digest {
		t.Fatal("different seeds gave the same tagged digest")
	}
	b1, b2 := readTree(t, dir1), readTree(t, dir2)
	for k := range b1 {
		if strings.HasPrefix(k, "blobs/") {
			if _, ok := b2[k]; ok {
				t.Errorf("blob %s is the same for seeds 1 and 2", k)
			}
		}
	}
}

func TestSizesAndCompressibility(t *testing.T) {
	const size = 1 << 20
	layerSize := func(frac float64) int64 {
		o := Options{Layers: 1, LayerSize: size, Compressible: frac, Seed: 3, Platforms: mustPlatforms(t, "linux/amd64")}
		dir, d := gen(t, o)
		m := decode[Manifest](t, readTree(t, dir)["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")])
		return m.Layers[0].Size
	}
	random, half, text := layerSize(0), layerSize(0.5), layerSize(1)
	if random < size {
		t.Errorf("random layer compressed to %d < %d", random, size)
	}
	if half > size*6/10 || half < size*4/10 {
		t.Errorf("half-compressible layer is %d bytes, want about %d", half, size/2)
	}
	if text > size/20 {
		t.Errorf("text layer is %d bytes, want < %d", text, size/20)
	}
}

func TestGenerateRefusesNonEmptyDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Generate(Options{Out: dir, Tag: "latest", Layers: 1, LayerSize: 1, Platforms: mustPlatforms(t, "linux/amd64"), GzipLevel: 1})
	if err == nil {
		t.Fatal("Generate wrote into a non-empty directory")
	}
}

func TestParsePlatforms(t *testing.T) {
	p := mustPlatforms(t, "linux/amd64, linux/arm/v7")
	if len(p) != 2 || p[1] != (Platform{OS: "linux", Architecture: "arm", Variant: "v7"}) {
		t.Errorf("got %+v", p)
	}
	for _, bad := range []string{"", "linux", "linux/", "linux/amd64,linux/amd64", "a/b/c/d"} {
		if _, err := ParsePlatforms(bad); err == nil {
			t.Errorf("ParsePlatforms(%q) succeeded", bad)
		}
	}
}
