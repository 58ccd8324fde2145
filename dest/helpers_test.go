package dest_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/dest/target"
	"github.com/pullhelper/pullhelper/internal/failure"
	"go.podman.io/image/v5/copy"
	"go.podman.io/image/v5/manifest"
	ocilayout "go.podman.io/image/v5/oci/layout"
	"go.podman.io/image/v5/signature"
	"go.podman.io/image/v5/types"
)

// bg is the context the tests verify and commit with.
var bg = context.Background()

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the tests chown files to other uids and mount tmpfs (CI runs them as root)")
	}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// layer returns a small valid tar holding one file with content c.
func layer(c string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "f", Mode: 0o644, Size: int64(len(c)), Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte(c))
	_ = tw.Close()
	return buf.Bytes()
}

// img is a hand-written image.
type img struct {
	layer, config, manifest []byte
	digest                  string
}

func newImg(content string) img {
	raw := layer(content)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(raw)
	_ = zw.Close()
	l := gz.Bytes()
	cfg := fmt.Appendf(nil, `{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[%q]},"config":{}}`, sha(raw))
	m := fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":%q,"size":%d},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":%q,"size":%d}]}`,
		sha(cfg), len(cfg), sha(l), len(l))
	return img{layer: l, config: cfg, manifest: m, digest: sha(m)}
}

// writeLayout writes an OCI layout holding im under tag ("" for none).
func writeLayout(t testing.TB, dir string, im img, tag string) {
	t.Helper()
	bl := filepath.Join(dir, "blobs", "sha256")
	must(t, os.MkdirAll(bl, 0o755))
	for _, b := range [][]byte{im.layer, im.config, im.manifest} {
		must(t, os.WriteFile(filepath.Join(bl, sha(b)[7:]), b, 0o644))
	}
	ann := ""
	if tag != "" {
		ann = fmt.Sprintf(`,"annotations":{"org.opencontainers.image.ref.name":%q}`, tag)
	}
	must(t, os.WriteFile(filepath.Join(dir, "index.json"), fmt.Appendf(nil,
		`{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":%q,"size":%d%s}]}`, im.digest, len(im.manifest), ann), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644))
}

// The media types of indexes.
const (
	mtOCIIndex   = "application/vnd.oci.image.index.v1+json"
	mtDockerList = "application/vnd.docker.distribution.manifest.list.v2+json"
)

// stageTop makes raw (of media type mt) the staged image's top: its blob
// written and index.json naming it, tagged tag ("": no tag), as the copy
// writes a layout.
func stageTop(t testing.TB, st *dest.Stage, mt string, raw []byte, tag string) {
	t.Helper()
	img := filepath.Join(st.WorkPath, "image")
	must(t, os.WriteFile(filepath.Join(img, "blobs", "sha256", sha(raw)[7:]), raw, 0o644))
	ann := ""
	if tag != "" {
		ann = fmt.Sprintf(`,"annotations":{"org.opencontainers.image.ref.name":%q}`, tag)
	}
	must(t, os.WriteFile(filepath.Join(img, "index.json"), fmt.Appendf(nil, `{"schemaVersion":2,"manifests":[{"mediaType":%q,"digest":%q,"size":%d%s}]}`, mt, sha(raw), len(raw), ann), 0o644))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func parse(t testing.TB, raw string) dest.Destination {
	t.Helper()
	d, err := dest.Parse(raw)
	must(t, err)
	return d
}

// pull copies src (an OCI layout with tag "src") into the stage with
// containers/image, the way the copy does in the child, and returns what
// the copy reports.
func pull(t testing.TB, d dest.Destination, st *dest.Stage, src string, progress chan types.ProgressProperties) dest.Expect {
	t.Helper()
	pc, err := signature.NewPolicyContext(&signature.Policy{Default: []signature.PolicyRequirement{signature.NewPRInsecureAcceptAnything()}})
	must(t, err)
	defer pc.Destroy()
	srcRef, err := ocilayout.NewReference(src, "src")
	must(t, err)
	dstRef, err := target.StagedReference(d.Spec(), st.WorkPath, st.Known)
	must(t, err)
	o := &copy.Options{ReportWriter: io.Discard}
	if progress != nil {
		o.Progress, o.ProgressInterval = progress, 1
	}
	copied, err := copy.Image(context.Background(), pc, dstRef, srcRef, o)
	must(t, err)
	if progress != nil {
		close(progress)
	}
	md, err := manifest.Digest(copied)
	must(t, err)
	srcDigest := md
	var idx struct {
		Manifests []struct{ Digest string } `json:"manifests"`
	}
	b, err := os.ReadFile(filepath.Join(src, "index.json"))
	must(t, err)
	must(t, json.Unmarshal(b, &idx))
	e := dest.Expect{Digest: idx.Manifests[0].Digest, Manifest: copied}
	// What the registry served: the source layout's manifest.
	alg, hx, _ := strings.Cut(e.Digest, ":")
	e.Served, err = os.ReadFile(filepath.Join(src, "blobs", alg, hx))
	must(t, err)
	if srcDigest.String() != e.Digest {
		e.DestDigest = srcDigest.String()
	}
	return e
}

// source writes a source layout for im and returns its path.
func source(t testing.TB, im img) string {
	dir := filepath.Join(t.TempDir(), "src")
	writeLayout(t, dir, im, "src")
	return dir
}

// wantCode fails unless err has the failure code and mentions sub.
func wantCode(t testing.TB, err error, code failure.Code, sub string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s mentioning %q", code, sub)
	}
	if failure.CodeOf(err) != code || !bytes.Contains([]byte(err.Error()), []byte(sub)) {
		t.Fatalf("err = %v (%s), want %s mentioning %q", err, failure.CodeOf(err), code, sub)
	}
}

// fullPull runs Stage → copy → Verify → Commit.
func fullPull(t testing.TB, raw string, im img, o dest.StageOptions) error {
	t.Helper()
	d := parse(t, raw)
	st, err := d.Stage(o)
	if err != nil {
		return err
	}
	defer st.Remove()
	e := pull(t, d, st, source(t, im), nil)
	if err := d.Verify(bg, st, e); err != nil {
		return err
	}
	return d.Commit(bg, st)
}

func readIndex(t testing.TB, dir string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "index.json"))
	must(t, err)
	var idx struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	must(t, json.Unmarshal(b, &idx))
	out := map[string]string{}
	for _, m := range idx.Manifests {
		out[m.Annotations["org.opencontainers.image.ref.name"]] = m.Digest
	}
	return out
}

// manifestDesc is the config and layers a test image's manifest names.
type manifestDesc struct {
	Config struct {
		Digest string `json:"digest"`
		Size   int    `json:"size"`
	} `json:"config"`
	Layers []struct {
		Digest string `json:"digest"`
		Size   int    `json:"size"`
	} `json:"layers"`
}

func descOf(t *testing.T, im img) manifestDesc {
	t.Helper()
	var m manifestDesc
	must(t, json.Unmarshal(im.manifest, &m))
	return m
}

// dockerManifest is a Docker schema 2 manifest naming m's config and one
// layer (as a registry serves what an oci: layout stores converted).
func dockerManifest(m manifestDesc, layerDigest string, layerSize int) []byte {
	return fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{"mediaType":"application/vnd.docker.container.image.v1+json","digest":%q,"size":%d},"layers":[{"mediaType":"application/vnd.docker.image.rootfs.diff.tar.gzip","digest":%q,"size":%d}]}`,
		m.Config.Digest, m.Config.Size, layerDigest, layerSize)
}
