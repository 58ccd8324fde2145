package pull

import (
	"errors"
	"net/url"
	"reflect"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/api"
	"go.podman.io/image/v5/types"
)

// The URLs containers/image asks for, through the DockerProxy hook, say
// which host served each manifest and blob: the last host asked wins.
func TestHostLogRecordsLastHostPerManifestAndBlob(t *testing.T) {
	blob1, blob2 := digest.FromString("one"), digest.FromString("two")
	h := newHostLog()
	sys := h.wrap(&types.SystemContext{DockerProxy: func(u *url.URL) (*url.URL, error) {
		if u.Host == "refused.example" {
			return nil, errors.New("refused")
		}
		return nil, nil
	}})
	for _, raw := range []string{
		"https://mirror.example:5000/v2/",
		"https://mirror.example:5000/v2/fixtures/tiny/manifests/latest?ns=reg.example",
		"https://auth.example/token?scope=repository:fixtures/tiny:pull",
		"https://reg.example/v2/fixtures/tiny/manifests/latest", // fallback: the registry serves the tag
		"https://Mirror.Example:5000/v2/prefix/fixtures/tiny/manifests/" + blob1.String(),
		"https://mirror.example:5000/v2/fixtures/tiny/blobs/" + blob1.String(),
		"https://reg.example/v2/fixtures/tiny/blobs/" + blob2.String(),
		"https://mirror.example:5000/v2/fixtures/tiny/blobs/" + blob2.String(), // a retry on the mirror
		"https://storage.example/some/redirect/target",
		"https://reg.example/v2/fixtures/tiny/blobs/uploads/",
		"https://reg.example/v2/fixtures/tiny/blobs/not-a-digest",
		"https://refused.example/v2/fixtures/tiny/blobs/" + blob1.String(), // refused by the guard: never reached
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		_, err = sys.DockerProxy(u)
		if (err != nil) != (u.Host == "refused.example") {
			t.Fatalf("%s: %v", raw, err)
		}
	}
	h.startBlob(blob1)
	h.addBytes(blob1, 10)
	h.startBlob(blob2)
	h.addBytes(blob2, 5)
	h.startBlob(blob2) // a second fetch of blob2: only its bytes count
	h.addBytes(blob2, 7)
	if got := h.blobHost(blob1); got != "mirror.example:5000" {
		t.Errorf("blob1 host %q", got)
	}
	if got := h.blobHost(digest.FromString("never")); got != "" {
		t.Errorf("unknown blob host %q", got)
	}
	want := []api.EndpointUse{
		{Host: "mirror.example:5000", Manifests: 1, Blobs: 2, Bytes: 17},
		{Host: "reg.example", Manifests: 1},
	}
	if got := h.endpoints(); !reflect.DeepEqual(got, want) {
		t.Fatalf("endpoints\n got %+v\nwant %+v", got, want)
	}
}

// A host that was asked but served nothing in the end (a mirror that
// refused, then the registry served everything) is not an endpoint.
func TestHostLogFallbackDropsTheRefusingMirror(t *testing.T) {
	h := newHostLog()
	for _, raw := range []string{
		"https://mirror.example/v2/r/manifests/latest",
		"https://reg.example/v2/r/manifests/latest",
	} {
		u, _ := url.Parse(raw)
		h.record(u)
	}
	want := []api.EndpointUse{{Host: "reg.example", Manifests: 1}}
	if got := h.endpoints(); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// The guard's blob reader counts bytes per blob into the attempt's host log.
func TestGuardCountsBlobBytesPerDigest(t *testing.T) {
	g := newGuard("r", 1<<20)
	d := digest.FromString("layer")
	u, _ := url.Parse("https://m.example/v2/x/blobs/" + d.String())
	g.hosts.record(u)
	g.hosts.startBlob(d)
	r := &cappedReader{rc: nopCloser{}, d: d, limit: -1, g: g, done: func() {}}
	buf := make([]byte, 100)
	for i := 0; i < 3; i++ {
		if n, err := r.Read(buf); n != 100 || err != nil {
			t.Fatalf("read %d %v", n, err)
		}
	}
	got := g.hosts.endpoints()
	if len(got) != 1 || got[0].Host != "m.example" || got[0].Blobs != 1 || got[0].Bytes != 300 {
		t.Fatalf("got %+v", got)
	}
}

type nopCloser struct{}

func (nopCloser) Read(b []byte) (int, error) { return len(b), nil }
func (nopCloser) Close() error               { return nil }
