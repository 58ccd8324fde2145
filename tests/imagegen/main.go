package main

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
	annotationRefName = "org.opencontainers.image.ref.name"

	// blockSize is the unit in which payload is interleaved: each block
	// holds the compressible fraction as text followed by random bytes.
	blockSize = 64 << 10
)

// fixedTime is the timestamp used for every tar entry and config field.
var fixedTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// textBlock is highly compressible filler text, one block long.
var textBlock = func() []byte {
	const line = "imagegen compressible filler: lorem ipsum dolor sit amet, consectetur adipiscing elit.\n"
	b := make([]byte, 0, blockSize+len(line))
	for len(b) < blockSize {
		b = append(b, line...)
	}
	return b[:blockSize]
}()

// Platform is an OCI platform as written on descriptors and in configs.
type Platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Variant      string `json:"variant,omitempty"`
}

func (p Platform) String() string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// ParsePlatforms parses a comma-separated list like "linux/amd64,linux/arm/v7".
func ParsePlatforms(list string) ([]Platform, error) {
	var out []Platform
	seen := map[string]bool{}
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		parts := strings.Split(item, "/")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" || (len(parts) == 3 && parts[2] == "") {
			return nil, fmt.Errorf("invalid platform %q (want OS/ARCH[/VARIANT])", item)
		}
		p := Platform{OS: parts[0], Architecture: parts[1]}
		if len(parts) == 3 {
			p.Variant = parts[2]
		}
		if seen[p.String()] {
			return nil, fmt.Errorf("duplicate platform %q", item)
		}
		seen[p.String()] = true
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, errors.New("no platform given")
	}
	return out, nil
}

// Options are the generator's inputs; the output is a pure function of them.
type Options struct {
	Out          string
	Tag          string
	Layers       int
	LayerSize    int64
	Compressible float64
	Seed         uint64
	Platforms    []Platform
	// GzipLevel is the compress/gzip level used for layers.
	GzipLevel int
	// Files and Symlinks, when any is given, make one more layer (the last,
	// the same for every platform) holding them.
	Files    []FileSpec
	Symlinks []SymlinkSpec
	// Cmd is the config's Cmd (default ["/bin/true"]).
	Cmd []string
	// User is the config's User (UID, NAME, UID:GID or NAME:GROUP); empty
	// leaves it out, so the other fixtures' digests do not change.
	User string
	// WrongDiffID, when N > 0, gives layer N (1-based) of every platform a
	// diff_id in the config that is not its uncompressed digest: an image
	// whose every digest verifies but which no runtime can unpack.
	WrongDiffID int
}

// Descriptor is an OCI content descriptor.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *Platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Index is an OCI image index (also the layout's index.json).
type Index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []Descriptor `json:"manifests"`
}

// Manifest is an OCI image manifest.
type Manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type history struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

type execConfig struct {
	User   string            `json:"User,omitempty"`
	Env    []string          `json:"Env"`
	Cmd    []string          `json:"Cmd"`
	Labels map[string]string `json:"Labels"`
}

// ImageConfig is the OCI image configuration written for every image.
type ImageConfig struct {
	Created      string     `json:"created"`
	Architecture string     `json:"architecture"`
	OS           string     `json:"os"`
	Variant      string     `json:"variant,omitempty"`
	Config       execConfig `json:"config"`
	RootFS       rootFS     `json:"rootfs"`
	History      []history  `json:"history"`
}

func main() {
	var o Options
	var platforms string
	flag.StringVar(&o.Out, "out", "", "output directory for the OCI layout (created; must not exist or be empty)")
	flag.StringVar(&o.Tag, "tag", "latest", "tag, stored as the "+annotationRefName+" annotation in index.json")
	flag.IntVar(&o.Layers, "layers", 1, "number of layers per image")
	flag.Int64Var(&o.LayerSize, "layer-size", 4096, "uncompressed payload bytes per layer")
	flag.Float64Var(&o.Compressible, "compressible", 0.5, "fraction (0..1) of each layer's payload that is compressible text")
	flag.Uint64Var(&o.Seed, "seed", 1, "seed for all generated content")
	flag.StringVar(&platforms, "platforms", "linux/amd64", "comma-separated OS/ARCH[/VARIANT] list; more than one writes an image index")
	flag.IntVar(&o.GzipLevel, "gzip-level", gzip.BestSpeed, "gzip compression level for layers")
	flag.Var(fileList{&o.Files}, "file", "HOST:PATH: copy the host file into the image at PATH, in an extra last layer (repeatable)")
	flag.Var(symlinkList{&o.Symlinks}, "symlink", "PATH=TARGET: a symlink in the extra last layer (repeatable)")
	flag.Var(cmdFlag{&o.Cmd}, "cmd", `the config's Cmd as a JSON array (default ["/bin/true"])`)
	flag.StringVar(&o.User, "user", "", "the config's User (UID, NAME, UID:GID or NAME:GROUP; default none)")
	flag.IntVar(&o.WrongDiffID, "wrong-diff-id", 0, "N > 0: layer N's diff_id (1-based) in the config is not its uncompressed digest")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: imagegen -out DIR [flags]\n\nWrites a deterministic OCI image layout.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	var err error
	if o.Platforms, err = ParsePlatforms(platforms); err != nil {
		fmt.Fprintln(os.Stderr, "imagegen:", err)
		os.Exit(2)
	}
	d, err := Generate(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "imagegen:", err)
		os.Exit(1)
	}
	fmt.Println(d.Digest)
}

func (o *Options) validate() error {
	switch {
	case o.Out == "":
		return errors.New("-out is required")
	case o.Tag == "":
		return errors.New("-tag must not be empty")
	case o.Layers < 0:
		return errors.New("-layers must be >= 0")
	case o.LayerSize < 0:
		return errors.New("-layer-size must be >= 0")
	case !(o.Compressible >= 0 && o.Compressible <= 1):
		return errors.New("-compressible must be within 0..1")
	case len(o.Platforms) == 0:
		return errors.New("no platform given")
	case o.GzipLevel < gzip.HuffmanOnly || o.GzipLevel > gzip.BestCompression:
		return fmt.Errorf("invalid -gzip-level %d", o.GzipLevel)
	}
	return nil
}

// Generate writes the layout described by o and returns the descriptor of
// the tagged manifest (an image index when there are several platforms).
func Generate(o Options) (Descriptor, error) {
	if err := o.validate(); err != nil {
		return Descriptor{}, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return Descriptor{}, err
	}
	if ents, err := os.ReadDir(o.Out); err != nil {
		return Descriptor{}, err
	} else if len(ents) != 0 {
		return Descriptor{}, fmt.Errorf("output directory %s is not empty", o.Out)
	}
	blobDir := filepath.Join(o.Out, "blobs", "sha256")
	if err := os.MkdirAll(blobDir, 0o755); err != nil {
		return Descriptor{}, err
	}
	g := &generator{o: o, blobDir: blobDir}

	layers, diffIDs, err := g.writeAllLayers()
	if err != nil {
		return Descriptor{}, err
	}
	if len(o.Files)+len(o.Symlinks) > 0 {
		d, diffID, err := g.writeFilesLayer()
		if err != nil {
			return Descriptor{}, err
		}
		for pi := range layers {
			layers[pi] = append(layers[pi], d)
			diffIDs[pi] = append(diffIDs[pi], diffID)
		}
	}
	cmd := o.Cmd
	if len(cmd) == 0 {
		cmd = []string{"/bin/true"}
	}

	var manifests []Descriptor
	for pi, p := range o.Platforms {
		cfg := ImageConfig{
			Created:      fixedTime.Format(time.RFC3339),
			Architecture: p.Architecture,
			OS:           p.OS,
			Variant:      p.Variant,
			Config: execConfig{
				User: o.User,
				Env:  []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
				Cmd:  cmd,
				Labels: map[string]string{
					"org.pullhelper.imagegen.seed":     strconv.FormatUint(o.Seed, 10),
					"org.pullhelper.imagegen.platform": p.String(),
				},
			},
			RootFS: rootFS{Type: "layers", DiffIDs: diffIDs[pi]},
		}
		if cfg.RootFS.DiffIDs == nil {
			cfg.RootFS.DiffIDs = []string{}
		}
		if n := o.WrongDiffID; n > 0 {
			if n > len(cfg.RootFS.DiffIDs) {
				return Descriptor{}, fmt.Errorf("-wrong-diff-id %d: the image has %d layers", n, len(cfg.RootFS.DiffIDs))
			}
			ids := slices.Clone(cfg.RootFS.DiffIDs)
			sum := sha256.Sum256([]byte("not layer " + strconv.Itoa(n)))
			ids[n-1] = "sha256:" + hex.EncodeToString(sum[:])
			cfg.RootFS.DiffIDs = ids
		}
		for k := range layers[pi] {
			by := fmt.Sprintf("imagegen seed=%d platform=%s layer=%d", o.Seed, p, k)
			if k >= o.Layers {
				by = fmt.Sprintf("imagegen files=%d symlinks=%d", len(o.Files), len(o.Symlinks))
			}
			cfg.History = append(cfg.History, history{Created: cfg.Created, CreatedBy: by})
		}
		cfgDesc, err := g.writeJSON(mediaTypeConfig, cfg)
		if err != nil {
			return Descriptor{}, err
		}
		m := Manifest{SchemaVersion: 2, MediaType: mediaTypeManifest, Config: cfgDesc, Layers: layers[pi]}
		if m.Layers == nil {
			m.Layers = []Descriptor{}
		}
		md, err := g.writeJSON(mediaTypeManifest, m)
		if err != nil {
			return Descriptor{}, err
		}
		pp := p
		md.Platform = &pp
		manifests = append(manifests, md)
	}

	top := manifests[0]
	top.Platform = nil
	if len(manifests) > 1 {
		top, err = g.writeJSON(mediaTypeIndex, Index{SchemaVersion: 2, MediaType: mediaTypeIndex, Manifests: manifests})
		if err != nil {
			return Descriptor{}, err
		}
	}
	top.Annotations = map[string]string{annotationRefName: o.Tag}

	if err := writeFile(filepath.Join(o.Out, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return Descriptor{}, err
	}
	idx, err := json.Marshal(Index{SchemaVersion: 2, MediaType: mediaTypeIndex, Manifests: []Descriptor{top}})
	if err != nil {
		return Descriptor{}, err
	}
	// index.json is written last: its presence marks a complete layout.
	if err := writeFile(filepath.Join(o.Out, "index.json"), idx); err != nil {
		return Descriptor{}, err
	}
	return top, nil
}

type generator struct {
	o       Options
	blobDir string
}

func digestOf(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

func writeFile(path string, data []byte) error {
	return os.WriteFile(path, data, 0o644)
}

// writeJSON stores v as a blob and returns its descriptor.
func (g *generator) writeJSON(mediaType string, v any) (Descriptor, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return Descriptor{}, err
	}
	sum := sha256.Sum256(data)
	hexSum := hex.EncodeToString(sum[:])
	if err := writeFile(filepath.Join(g.blobDir, hexSum), data); err != nil {
		return Descriptor{}, err
	}
	return Descriptor{MediaType: mediaType, Digest: "sha256:" + hexSum, Size: int64(len(data))}, nil
}

// writeAllLayers generates every (platform, layer) pair concurrently and
// returns the layer descriptors and diff IDs indexed by platform then layer.
func (g *generator) writeAllLayers() ([][]Descriptor, [][]string, error) {
	np, nl := len(g.o.Platforms), g.o.Layers
	descs := make([][]Descriptor, np)
	diffIDs := make([][]string, np)
	for i := range descs {
		descs[i] = make([]Descriptor, nl)
		diffIDs[i] = make([]string, nl)
	}
	type job struct{ p, l int }
	jobs := make(chan job)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	workers := min(runtime.GOMAXPROCS(0), np*nl)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				d, diffID, err := g.writeLayer(g.o.Platforms[j.p], j.l)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				descs[j.p][j.l], diffIDs[j.p][j.l] = d, diffID
			}
		}()
	}
	for p := range np {
		for l := range nl {
			jobs <- job{p, l}
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return nil, nil, firstErr
	}
	return descs, diffIDs, nil
}

// layerRNG returns the random source for one layer's payload; it depends on
// the seed, the platform and the layer index only.
func layerRNG(seed uint64, p Platform, layer int) *rand.ChaCha8 {
	h := sha256.New()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], seed)
	fmt.Fprintf(h, "pullhelper-imagegen-v1\x00")
	h.Write(b[:])
	fmt.Fprintf(h, "\x00%s\x00%d", p, layer)
	var key [32]byte
	copy(key[:], h.Sum(nil))
	return rand.NewChaCha8(key)
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// writeLayer streams one gzip-compressed tar layer to a temporary file while
// hashing both the compressed and the uncompressed stream, then renames the
// file to its digest.
func (g *generator) writeLayer(p Platform, layer int) (_ Descriptor, diffID string, err error) {
	lf, err := g.newLayerFile()
	if err != nil {
		return Descriptor{}, "", err
	}
	defer lf.discard()
	tw := lf.tw

	dir := fmt.Sprintf("layer-%d", layer)
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeDir,
		Name:     dir + "/",
		Mode:     0o755,
		ModTime:  fixedTime,
		Format:   tar.FormatUSTAR,
	}); err != nil {
		return Descriptor{}, "", err
	}
	size := g.o.LayerSize
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg,
		Name:     dir + "/data.bin",
		Mode:     0o644,
		Size:     size,
		ModTime:  fixedTime,
		Format:   tar.FormatUSTAR,
	}); err != nil {
		return Descriptor{}, "", err
	}
	rng := layerRNG(g.o.Seed, p, layer)
	textPerBlock := int(g.o.Compressible*blockSize + 0.5)
	// The text starts with a line naming the layer, so that layers differ
	// even when they are entirely compressible text.
	text := fmt.Appendf(make([]byte, 0, blockSize), "imagegen seed=%d platform=%s layer=%d\n", g.o.Seed, p, layer)
	text = append(text, textBlock[:blockSize-len(text)]...)
	buf := make([]byte, blockSize)
	for size > 0 {
		n := int(min(size, blockSize))
		t := textPerBlock
		if n < blockSize {
			t = int(g.o.Compressible*float64(n) + 0.5)
		}
		copy(buf[:t], text)
		_, _ = rng.Read(buf[t:n]) // never fails
		if _, err := tw.Write(buf[:n]); err != nil {
			return Descriptor{}, "", err
		}
		size -= int64(n)
	}
	return lf.finish(g.blobDir)
}

// layerFile is a gzip-compressed layer being written to a temporary file
// in Out: tw writes the tar stream; the uncompressed (diff_id) and the
// compressed (digest) streams are hashed as they are written.
type layerFile struct {
	f              *os.File // nil once finished
	bw             *bufio.Writer
	gz             *gzip.Writer
	tw             *tar.Writer
	counter        *countingWriter
	compressedHash hash.Hash
	diffHash       hash.Hash
}

func (g *generator) newLayerFile() (*layerFile, error) {
	f, err := os.CreateTemp(g.o.Out, ".imagegen-layer-*")
	if err != nil {
		return nil, err
	}
	lf := &layerFile{f: f, bw: bufio.NewWriterSize(f, 1<<20), compressedHash: sha256.New(), diffHash: sha256.New()}
	lf.counter = &countingWriter{w: io.MultiWriter(lf.bw, lf.compressedHash)}
	// gzip.Writer's zero Header has no name, no comment and a zero mtime,
	// which keeps the stream deterministic.
	if lf.gz, err = gzip.NewWriterLevel(lf.counter, g.o.GzipLevel); err != nil {
		lf.discard()
		return nil, err
	}
	lf.tw = tar.NewWriter(io.MultiWriter(lf.gz, lf.diffHash))
	return lf, nil
}

// discard removes the temporary file of a layer that was not finished.
func (lf *layerFile) discard() {
	if lf.f != nil {
		lf.f.Close()
		os.Remove(lf.f.Name())
		lf.f = nil
	}
}

// finish closes the streams and renames the file into blobDir under its
// digest; it returns the layer's descriptor and diff_id.
func (lf *layerFile) finish(blobDir string) (Descriptor, string, error) {
	if err := lf.tw.Close(); err != nil {
		return Descriptor{}, "", err
	}
	if err := lf.gz.Close(); err != nil {
		return Descriptor{}, "", err
	}
	if err := lf.bw.Flush(); err != nil {
		return Descriptor{}, "", err
	}
	if err := lf.f.Close(); err != nil {
		return Descriptor{}, "", err
	}
	digest := digestOf(lf.compressedHash)
	name := lf.f.Name()
	lf.f = nil
	if err := os.Chmod(name, 0o644); err != nil {
		os.Remove(name)
		return Descriptor{}, "", err
	}
	if err := os.Rename(name, filepath.Join(blobDir, strings.TrimPrefix(digest, "sha256:"))); err != nil {
		os.Remove(name)
		return Descriptor{}, "", err
	}
	return Descriptor{MediaType: mediaTypeLayer, Digest: digest, Size: lf.counter.n}, digestOf(lf.diffHash), nil
}
