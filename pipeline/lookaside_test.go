package pipeline

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/pull"
	"go.podman.io/image/v5/docker/reference"
)

const signedByPolicy = `{"default":[{"type":"signedBy","keyType":"GPGKeys","keyData":"eA=="}]}`

// The lookaside containers/image reads a repository's signatures from:
// the most specific docker namespace naming one, then default-docker, then
// the built-in default; the older key sigstore counts as lookaside.
func TestLookasideFor(t *testing.T) {
	repo, _ := reference.ParseNormalizedNamed("reg.example:5000/ns/app")
	for _, tc := range []struct {
		name       string
		files      map[string]string
		want       string
		configured bool
	}{
		{"none", nil, defaultLookaside, false},
		{"default-docker", map[string]string{"a.yaml": "default-docker:\n  lookaside: file:///d\n"}, "file:///d", true},
		{"the repository before its namespace and the default", map[string]string{
			"a.yaml": "default-docker:\n  lookaside: file:///d\ndocker:\n  reg.example:5000/ns:\n    lookaside: file:///ns\n",
			"b.yaml": "docker:\n  reg.example:5000/ns/app:\n    sigstore: file:///app\n"}, "file:///app", true},
		{"the host", map[string]string{"a.yaml": "docker:\n  reg.example:5000:\n    lookaside: http://sigs.example\n"}, "http://sigs.example", true},
		{"another repository's does not apply", map[string]string{"a.yaml": "docker:\n  reg.example:5000/other:\n    lookaside: file:///o\n"}, defaultLookaside, false},
		{"default-docker without a lookaside", map[string]string{"a.yaml": "default-docker:\n  use-sigstore-attachments: true\n"}, defaultLookaside, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string][]byte{}
			for n, b := range tc.files {
				files[n] = []byte(b)
			}
			got, configured := lookasideFor(files, repo)
			if got != tc.want || configured != tc.configured {
				t.Fatalf("lookaside %q (configured %v), want %q (%v)", got, configured, tc.want, tc.configured)
			}
		})
	}
}

// A file:// lookaside's signatures for the image's repository are read by
// the parent (every digest's, signature-1 up to the first missing one, as
// containers/image reads them), bounded, and handed to the copy; nothing
// when the policy needs no signature or the lookaside is http(s); a FIFO is
// refused without blocking.
func TestLoadFileLookaside(t *testing.T) {
	la := t.TempDir()
	hex := strings.Repeat("ab", 32)
	write := func(rel, content string) {
		f := filepath.Join(la, rel)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ns/app@sha256="+hex+"/signature-1", "s1")
	write("ns/app@sha256="+hex+"/signature-2", "s2")
	write("ns/app@sha256="+hex+"/signature-4", "after a gap")
	write("ns/app2@sha256="+hex+"/signature-1", "another repository")
	write("ns/app@sha256=short/signature-1", "not a digest")
	regD := map[string][]byte{"a.yaml": []byte("docker:\n  reg.example:5000/ns:\n    lookaside: file://" + la + "\n")}
	p := &Plan{}
	p.Reference = "reg.example:5000/ns/app:1"
	m := &pull.Material{SignaturePolicy: []byte(signedByPolicy), RegistriesD: regD}
	if err := p.loadFileLookaside(m); err != nil {
		t.Fatal(err)
	}
	if m.Lookaside == nil || m.Lookaside.Base != "file://"+la || len(m.Lookaside.Files) != 2 ||
		string(m.Lookaside.Files["ns/app@sha256="+hex+"/signature-1"]) != "s1" || string(m.Lookaside.Files["ns/app@sha256="+hex+"/signature-2"]) != "s2" {
		t.Fatalf("lookaside %+v", m.Lookaside)
	}
	for rel := range m.Lookaside.Files {
		if !pull.ValidLookasideFile(rel) {
			t.Errorf("%s is not a lookaside file's path", rel)
		}
	}

	// The namespace's directory holds every repository's digests: more of
	// them than the files handed over is fine, only this repository's count.
	for i := range maxLookasideFiles + 100 {
		if err := os.Mkdir(filepath.Join(la, "ns", "other-"+strconv.Itoa(i)+"@sha256="+hex), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mm := &pull.Material{SignaturePolicy: []byte(signedByPolicy), RegistriesD: regD}
	if err := p.loadFileLookaside(mm); err != nil || len(mm.Lookaside.Files) != 2 {
		t.Fatalf("beside %d other repositories' digests: %+v, %v", maxLookasideFiles+100, mm.Lookaside, err)
	}

	// No signature needed, or an http lookaside: nothing read.
	m2 := &pull.Material{SignaturePolicy: []byte(`{"default":[{"type":"insecureAcceptAnything"}]}`), RegistriesD: regD}
	if err := p.loadFileLookaside(m2); err != nil || m2.Lookaside != nil {
		t.Fatalf("no signature needed: %+v, %v", m2.Lookaside, err)
	}
	m3 := &pull.Material{SignaturePolicy: []byte(signedByPolicy), RegistriesD: map[string][]byte{"a.yaml": []byte("default-docker:\n  lookaside: http://sigs.example\n")}}
	if err := p.loadFileLookaside(m3); err != nil || m3.Lookaside != nil {
		t.Fatalf("http lookaside: %+v, %v", m3.Lookaside, err)
	}

	// A FIFO where a signature would be: exit 2 naming it, at once.
	if err := syscall.Mkfifo(filepath.Join(la, "ns/app@sha256="+hex+"/signature-3"), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- p.loadFileLookaside(&pull.Material{SignaturePolicy: []byte(signedByPolicy), RegistriesD: regD})
	}()
	select {
	case err := <-done:
		if err == nil || failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), "signature-3") {
			t.Errorf("a FIFO signature: %v, want exit 2 naming it", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("reading the lookaside still blocked on the FIFO after the hang guard")
	}
}
