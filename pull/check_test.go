package pull

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/internal/failure"
	"go.podman.io/image/v5/docker/reference"
)

func TestValidDigest(t *testing.T) {
	for _, ok := range []string{"sha256:" + strings.Repeat("0", 64), "sha512:" + strings.Repeat("f", 128)} {
		if !ValidDigest(ok) {
			t.Errorf("%q refused", ok)
		}
	}
	for _, bad := range []string{"", "sha256:", "sha256:ab", "sha256:" + strings.Repeat("A", 64), "sha256:" + strings.Repeat("0", 65),
		"md5:" + strings.Repeat("0", 32), strings.Repeat("0", 64), "sha256:" + strings.Repeat("0", 2<<20)} {
		if ValidDigest(bad) {
			t.Errorf("%.80q accepted", bad)
		}
	}
}

func TestValidMediaType(t *testing.T) {
	for _, ok := range []string{"application/vnd.oci.image.layer.v1.tar+gzip", "application/vnd.docker.image.rootfs.diff.tar.gzip",
		"application/vnd.oci.image.config.v1+json", strings.Repeat("a", 127) + "/" + strings.Repeat("b", 127)} {
		if !ValidMediaType(ok) {
			t.Errorf("%q refused", ok)
		}
	}
	for _, bad := range []string{"", "application", "/json", "application/", "a/b/c", "application/json; charset=utf-8", "a b/c",
		"application/\x00", strings.Repeat("a", 128) + "/b", "a/" + strings.Repeat("b", 2<<20), "-a/b"} {
		if ValidMediaType(bad) {
			t.Errorf("%.80q accepted", bad)
		}
	}
}

func TestValidHost(t *testing.T) {
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)
	for _, ok := range []string{"registry-1.docker.io", "reg.example:5000", "127.0.0.1", "127.0.0.1:5000", "[::1]", "[::1]:5000", "localhost", "my_host.local", long, long + ":65535"} {
		if !ValidHost(ok) {
			t.Errorf("%q refused", ok)
		}
	}
	for _, bad := range []string{"", "Reg.example", "reg.example:0", "reg.example:65536", "reg.example:05000", "reg.example:", "::1", "[::1", "[::1]x", "[127.0.0.1]",
		"[fe80::1%eth0]", "a..b", "-a.b", "a-.b", "a b", "a/b", "user@host", long + "e", strings.Repeat("h", 2<<20), strings.Repeat("a", 64) + ".b"} {
		if ValidHost(bad) {
			t.Errorf("%.80q accepted", bad)
		}
	}
}

func TestCheckEvent(t *testing.T) {
	d := "sha256:" + strings.Repeat("a", 64)
	good := api.Event{Type: api.EventLayerProgress, Digest: d, MediaType: "application/vnd.oci.image.layer.v1.tar+gzip", Size: 10, Bytes: 5, Host: "reg.example:5000"}
	if err := CheckEvent(good); err != nil {
		t.Fatal(err)
	}
	if err := CheckEvent(api.Event{Type: api.EventLayerStart}); err != nil {
		t.Fatalf("an event without digest, media type or host: %v", err)
	}
	resolved := api.Event{Type: api.EventResolved, Digest: d, InstanceDigest: d, MediaType: "application/vnd.oci.image.index.v1+json", Layers: 3, Size: 100, ConfigSize: 10}
	if err := CheckEvent(resolved); err != nil {
		t.Fatalf("a resolved event: %v", err)
	}
	for name, mod := range map[string]func(*api.Event){
		"type":       func(e *api.Event) { e.Type = api.EventDone },
		"digest":     func(e *api.Event) { e.Digest = "sha256:" + strings.Repeat("a", 2<<20) },
		"media type": func(e *api.Event) { e.MediaType = strings.Repeat("m", 2<<20) },
		"host":       func(e *api.Event) { e.Host = strings.Repeat("h", 2<<20) },
		"size":       func(e *api.Event) { e.Size = -1 },
		"bytes":      func(e *api.Event) { e.Bytes = MaxCount + 1 },
		"instance":   func(e *api.Event) { e.InstanceDigest = "sha256:abc" },
		"layers":     func(e *api.Event) { e.Layers = MaxLayers + 1 },
		"neg layers": func(e *api.Event) { e.Layers = -1 },
		"attempt":    func(e *api.Event) { e.Attempt = -1 },
		"config":     func(e *api.Event) { e.ConfigSize = e.Size + 1 },
	} {
		e := good
		mod(&e)
		if CheckEvent(e) == nil {
			t.Errorf("a bad %s passed", name)
		}
	}
}

func TestReportCheck(t *testing.T) {
	d := "sha256:" + strings.Repeat("a", 64)
	good := func() *Report {
		return &Report{Digest: d, MediaType: "application/vnd.oci.image.manifest.v1+json", Layers: 3, Bytes: 100, Attempts: 1,
			Credential: &api.Credential{Source: "anonymous"}, Copied: Copied{Manifest: []byte("{}"), Handed: []string{d},
				ServedInstances: [][]byte{make([]byte, MaxManifestBytes/2), make([]byte, MaxManifestBytes/2)}}}
	}
	if err := good().Check(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*Report){
		"digest":             func(r *Report) { r.Digest = "sha256:x" },
		"instance":           func(r *Report) { r.InstanceDigest = strings.Repeat("i", 1000) },
		"destination digest": func(r *Report) { r.DestinationDigest = "x" },
		"media type":         func(r *Report) { r.MediaType = strings.Repeat("m", 2<<20) },
		"layers":             func(r *Report) { r.Layers = -1 },
		"bytes":              func(r *Report) { r.Bytes = -1 },
		"attempts":           func(r *Report) { r.Attempts = MaxLayers + 1 },
		"handed name":        func(r *Report) { r.Copied.Handed = []string{"../../etc/passwd"} },
		"handed count":       func(r *Report) { r.Copied.Handed = make([]string, MaxHanded+1) },
		"manifest":           func(r *Report) { r.Copied.Served = make([]byte, MaxManifestBytes+1) },
		"signatures":         func(r *Report) { r.Copied.Signatures = make([][]byte, MaxSignatures+1) },
		"credential":         func(r *Report) { r.Credential.File = strings.Repeat("f", 5000) },
		"served instances":   func(r *Report) { r.Copied.ServedInstances = make([][]byte, MaxServedInstances+1) },
		"served configs":     func(r *Report) { r.Copied.ServedConfigs = make([][]byte, MaxServedInstances+2) },
		"served configs' bytes": func(r *Report) {
			r.Copied.ServedConfigs = [][]byte{make([]byte, MaxServedConfigBytes/2), make([]byte, MaxServedConfigBytes/2+1)}
		},
		"served instances' bytes": func(r *Report) {
			r.Copied.ServedInstances = [][]byte{make([]byte, MaxManifestBytes/2), make([]byte, MaxManifestBytes/2+1)}
		},
	} {
		r := good()
		mod(r)
		if r.Check() == nil {
			t.Errorf("a report with a bad %s passed", name)
		}
	}
}

// The endpoints block is bounded: sane entries pass, invalid or negative
// ones are dropped, and at most MaxEndpoints remain.
func TestBoundEndpoints(t *testing.T) {
	got := BoundEndpoints([]api.EndpointUse{
		{Host: "mirror.example", Manifests: 2, Blobs: 3, Bytes: 100},
		{Host: strings.Repeat("h", 256), Blobs: 1},
		{Host: "", Blobs: 1},
		{Host: "neg.example", Bytes: -1},
		{Host: "bad host", Blobs: 1},
		{Host: "huge.example", Bytes: MaxCount + 1},
	})
	if len(got) != 1 || got[0] != (api.EndpointUse{Host: "mirror.example", Manifests: 2, Blobs: 3, Bytes: 100}) {
		t.Fatalf("got %+v", got)
	}
	var many []api.EndpointUse
	for i := 0; i < 1000; i++ {
		many = append(many, api.EndpointUse{Host: fmt.Sprintf("h%d.example", i), Blobs: 1})
	}
	if got := BoundEndpoints(many); len(got) != MaxEndpoints || got[0].Host != "h0.example" {
		t.Fatalf("got %d endpoints, first %+v", len(got), got[0])
	}
}

// --all-architectures copies at most MaxServedInstances instances, of at
// most MaxManifestBytes declared in all: an index with more is refused once
// resolved (exit 8), before any blob; without --all-architectures its size
// is no matter.
func TestCheckAllArchitecturesBoundsInstances(t *testing.T) {
	named, err := reference.ParseNormalizedNamed("registry.example/big/index:v1")
	if err != nil {
		t.Fatal(err)
	}
	index := func(n int) []byte {
		ms := make([]string, n)
		for i := range ms {
			ms[i] = fmt.Sprintf(`{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%064x","size":1,"platform":{"architecture":"amd64","os":"linux"}}`, i)
		}
		return []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[` + strings.Join(ms, ",") + `]}`)
	}
	const mt = "application/vnd.oci.image.index.v1+json"
	p := &Request{AllArchitectures: true}
	if err := p.checkAllArchitectures(named, index(MaxServedInstances), mt); err != nil {
		t.Fatalf("an index of %d instances: %v", MaxServedInstances, err)
	}
	err = p.checkAllArchitectures(named, index(MaxServedInstances+1), mt)
	if c := failure.CodeOf(err); c != failure.Verification || !strings.Contains(fmt.Sprint(err), "more than the 1024 pullhelper copies") {
		t.Fatalf("an index of %d instances: %v (%s)", MaxServedInstances+1, err, c)
	}
	// Declared sizes over MaxManifestBytes in all.
	huge := []byte(strings.Replace(string(index(2)), `"size":1`, fmt.Sprintf(`"size":%d`, MaxManifestBytes), 1))
	err = p.checkAllArchitectures(named, huge, mt)
	if c := failure.CodeOf(err); c != failure.Verification || !strings.Contains(fmt.Sprint(err), "bytes of instance manifests") {
		t.Fatalf("an index declaring %d bytes of instances: %v (%s)", MaxManifestBytes+1, err, c)
	}
	p.AllArchitectures = false
	if err := p.checkAllArchitectures(named, index(MaxServedInstances+1), mt); err != nil {
		t.Fatalf("without --all-architectures: %v", err)
	}
}

// The child hands over a registry's config unless its OCI re-encoding,
// which names the stored config by sha256, is named by the served digest:
// a config that re-encodes to itself but is named by sha512 is needed
// (the stored config's sha256 differs from it).
func TestNeedsConfig(t *testing.T) {
	var oci imgspecv1.Image
	oci.Architecture, oci.OS = "amd64", "linux"
	canonical, err := json.Marshal(&oci)
	if err != nil {
		t.Fatal(err)
	}
	docker := []byte(`{"architecture":"amd64","os":"linux","docker_version":"20.10.23"}`)
	for name, c := range map[string]struct {
		b    []byte
		d    digest.Digest
		want bool
	}{
		"re-encodes to itself, sha256": {canonical, digest.SHA256.FromBytes(canonical), false},
		"re-encodes to itself, sha512": {canonical, digest.SHA512.FromBytes(canonical), true},
		"a docker build config":        {docker, digest.SHA256.FromBytes(docker), true},
		"not JSON":                     {[]byte("x"), digest.SHA256.FromBytes([]byte("x")), true},
	} {
		if got := needsConfig(c.b, c.d); got != c.want {
			t.Errorf("%s: needsConfig = %v, want %v", name, got, c.want)
		}
	}
}
