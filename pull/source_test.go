package pull

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/internal/failure"
)

func ociManifest(config string, configSize int64, layers map[string]int64) []byte {
	type desc struct {
		MediaType string `json:"mediaType"`
		Digest    string `json:"digest"`
		Size      int64  `json:"size"`
	}
	m := struct {
		SchemaVersion int    `json:"schemaVersion"`
		MediaType     string `json:"mediaType"`
		Config        desc   `json:"config"`
		Layers        []desc `json:"layers"`
	}{2, "application/vnd.oci.image.manifest.v1+json", desc{"application/vnd.oci.image.config.v1+json", config, configSize}, nil}
	for d, n := range layers {
		m.Layers = append(m.Layers, desc{"application/vnd.oci.image.layer.v1.tar+gzip", d, n})
	}
	b, _ := json.Marshal(m)
	return b
}

func sha(s string) string { return digest.FromString(s).String() }

func TestCheckManifest(t *testing.T) {
	const mt = "application/vnd.oci.image.manifest.v1+json"
	index := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"` + sha("m") + `","size":10,"platform":{"architecture":"amd64","os":"linux"}}]}`)
	badIndex := bytes.Replace(index, []byte(sha("m")), []byte("sha256:nothex"), 1)
	for _, tc := range []struct {
		name     string
		raw      []byte
		mime     string
		instance bool
		max      int64
		wantErr  string
	}{
		{"ok", ociManifest(sha("c"), 100, map[string]int64{sha("l"): 1000}), mt, false, 1 << 20, ""},
		{"index ok", index, "application/vnd.oci.image.index.v1+json", false, 1 << 20, ""},
		{"nested index", index, "application/vnd.oci.image.index.v1+json", true, 1 << 20, "nested indexes"},
		{"invalid index entry", badIndex, "application/vnd.oci.image.index.v1+json", false, 1 << 20, "invalid digest"},
		{"invalid layer digest", ociManifest(sha("c"), 100, map[string]int64{"sha256:xyz": 1}), mt, false, 1 << 20, "invalid digest"},
		{"sha384 layer", ociManifest(sha("c"), 100, map[string]int64{digest.SHA384.FromString("l").String(): 1}), mt, false, 1 << 20, "only sha256"},
		{"sha512 config", ociManifest(digest.SHA512.FromString("c").String(), 100, nil), mt, false, 1 << 20, "only sha256"},
		{"declared over max", ociManifest(sha("c"), 100, map[string]int64{sha("a"): 600, sha("b"): 600}), mt, false, 1000, "maximum image size"},
		{"declared overflow", ociManifest(sha("c"), 100, map[string]int64{sha("a"): 1 << 62, sha("b"): 1 << 62}), mt, false, DefaultMaxImageBytes, "maximum image size"},
		{"negative size", ociManifest(sha("c"), 100, map[string]int64{sha("a"): -5}), mt, false, 1 << 20, "negative size"},
		{"huge config", ociManifest(sha("c"), MaxConfigBytes+1, nil), mt, false, 1 << 30, "config"},
		{"oversized manifest", append(ociManifest(sha("c"), 1, nil), bytes.Repeat([]byte(" "), MaxManifestBytes)...), mt, false, 1 << 30, "more than the maximum"},
	} {
		err := checkManifest(tc.raw, tc.mime, tc.instance, tc.max)
		if tc.wantErr == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) || failure.CodeOf(err) != failure.Verification {
			t.Errorf("%s: got %v (%s), want a verification error containing %q", tc.name, err, failure.CodeOf(err), tc.wantErr)
		}
	}
}

// endless is a blob stream that never ends.
type endless struct{ n int64 }

func (e *endless) Read(b []byte) (int, error) {
	e.n += int64(len(b))
	return rand.Read(b)
}
func (e *endless) Close() error { return nil }

func TestCappedReaderStopsAtDeclaredSize(t *testing.T) {
	g := newGuard("r", 1<<30)
	src := &endless{}
	r := &cappedReader{rc: src, d: digest.FromString("x"), limit: 1024, g: g, done: func() {}}
	n, err := io.Copy(io.Discard, r)
	if !errors.Is(err, errBlobTooLarge) || failure.CodeOf(err) != failure.Verification {
		t.Fatalf("err %v, want errBlobTooLarge", err)
	}
	if !strings.Contains(err.Error(), "larger than its declared size 1024") {
		t.Errorf("message %q", err)
	}
	if n > 1024 || src.n > 1025 {
		t.Errorf("passed %d bytes and read %d from the source, want at most 1024 / 1025", n, src.n)
	}
	// Exactly the declared size is fine.
	r = &cappedReader{rc: io.NopCloser(bytes.NewReader(make([]byte, 1024))), limit: 1024, g: g, done: func() {}}
	if n, err := io.Copy(io.Discard, r); err != nil || n != 1024 {
		t.Errorf("exact size: %d %v", n, err)
	}
}

func TestImageLimitOnReadAndWrite(t *testing.T) {
	g := newGuard("r", 4096)
	r := &cappedReader{rc: &endless{}, d: digest.FromString("x"), limit: -1, g: g, done: func() {}}
	if _, err := io.Copy(io.Discard, r); !errors.Is(err, errImageTooLarge) {
		t.Errorf("unknown-size blob: %v, want errImageTooLarge", err)
	}
	if g.read.Load() > 4096+32<<10 {
		t.Errorf("read %d bytes", g.read.Load())
	}
	w := &countingReader{r: &endless{}, g: newGuard("r", 4096)}
	if _, err := io.Copy(io.Discard, w); !errors.Is(err, errImageTooLarge) || failure.CodeOf(err) != failure.Verification {
		t.Errorf("destination stream: %v, want errImageTooLarge", err)
	}
}

func TestStallNamesWhatStalled(t *testing.T) {
	g := newGuard("reg.example:5000", 1)
	if s := g.stalled(time.Second).Error(); !strings.Contains(s, "the next request from reg.example:5000") {
		t.Errorf("idle: %q", s)
	}
	end := g.begin("the manifest")
	end2 := g.begin("blob sha256:abc")
	s := g.stalled(time.Second)
	if !errors.Is(s, errStalled) || !strings.Contains(s.Error(), "while fetching the manifest (and 1 more) from reg.example:5000") {
		t.Errorf("in flight: %q", s)
	}
	end()
	end()
	if s := g.stalled(time.Second).Error(); !strings.Contains(s, "blob sha256:abc from") {
		t.Errorf("after the manifest: %q", s)
	}
	end2()
}

func TestNeedsSignatures(t *testing.T) {
	for policy, want := range map[string]bool{
		``: false,
		`{"default":[{"type":"insecureAcceptAnything"}]}`:                                                                                                false,
		`{"default":[{"type":"reject"}],"transports":{"docker":{"r.example":[{"type":"insecureAcceptAnything"}]}}}`:                                      false,
		`{"default":[{"type":"insecureAcceptAnything"}],"transports":{"docker":{"r.example":[{"type":"signedBy","keyType":"GPGKeys","keyPath":"/k"}]}}}`: true,
		`{"default":[{"type":"sigstoreSigned","keyPath":"/k"}]}`:                                                                                         true,
		`not json`: true,
	} {
		var b []byte
		if policy != "" {
			b = []byte(policy)
		}
		if got := NeedsSignatures(b); got != want {
			t.Errorf("NeedsSignatures(%s) = %v, want %v", policy, got, want)
		}
	}
}
