package pull

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/internal/wire"
	"go.podman.io/image/v5/types"
)

// A mirror that accepts connections and never answers costs half the stall
// timeout per request, then the next endpoint serves (review finding: it
// used to hold the request until the attempt's end, so that no attempt
// ever reached the registry).
func TestHangingMirrorFallsBack(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // never answered
		}
	}()
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "blob")
	}))
	defer reg.Close()
	ru, _ := url.Parse(reg.URL)
	p := &Request{Registry: ru.Host, StallTimeout: 400 * time.Millisecond, TLSVerify: true, Endpoints: []wire.Endpoint{
		{Host: l.Addr().String(), Scheme: "http", Repository: ru.Host + "/app", Mirror: true, Source: wire.EndpointContainerdServer},
		{Host: ru.Host, Scheme: "http", Repository: ru.Host + "/app", Source: wire.EndpointContainerdServer},
	}}
	rc, err := p.remoteClient(&Material{}, &types.SystemContext{}, 0, nil, nil, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	// The context stands for the attempt (bounded so that a failing test
	// ends); the mirror's header timeout must end the request well before.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	body, _, err := rc.Blob(ctx, digest.FromString("blob"), -1)
	if err != nil {
		t.Fatalf("the registry behind a hanging mirror was not asked: %v", err)
	}
	defer body.Close()
	if b, _ := io.ReadAll(body); string(b) != "blob" {
		t.Errorf("body %q", b)
	}
}

// A server that answers a Range request (a resume) with the whole blob
// makes the client skip what it already has: those bytes arrived (the
// stall watchdog sees them) and count toward the image limit on the bytes
// read from the registry (review finding: they counted for neither, so a
// registry ignoring Range could send up to maxResumes times each blob
// beyond the limit, and a long skip looked like a stall).
func TestSkippedBytesCountAndTouch(t *testing.T) {
	blob := make([]byte, 1<<20)
	d := digest.FromBytes(blob)
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(blob) // Range ignored
	}))
	defer reg.Close()
	ru, _ := url.Parse(reg.URL)
	p := &Request{Registry: ru.Host, TLSVerify: true, Endpoints: []wire.Endpoint{
		{Host: ru.Host, Scheme: "http", Repository: ru.Host + "/app", Source: wire.EndpointContainerdServer},
	}}
	g := newGuard(ru.Host, 1<<20)
	g.last.Store(0) // long idle
	rc, err := p.remoteClient(&Material{}, &types.SystemContext{}, 0, nil, nil, g.discarded, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	body, _, err := rc.BlobFrom(context.Background(), d, int64(len(blob)), 3<<18)
	if err != nil {
		t.Fatal(err)
	}
	body.Close()
	if got := g.read.Load(); got != 3<<18 {
		t.Errorf("the guard counted %d skipped bytes, want %d", got, 3<<18)
	}
	if g.idle() > time.Minute {
		t.Error("skipped bytes did not reach the stall watchdog")
	}
	// Over the image limit, the skip itself is refused.
	g.read.Store(1<<20 - 100)
	_, _, err = rc.BlobFrom(context.Background(), d, int64(len(blob)), 3<<18)
	if !errors.Is(err, errImageTooLarge) {
		t.Errorf("err = %v, want the image limit", err)
	}
}

// Plain http is a fallback of the insecure registries.conf endpoints alone
// (containers/image's detectPropertiesHelper, for a registry whose TLS is
// not verified): a verified endpoint next to it keeps verified https, so
// its credential never goes over plain http; a containerd endpoint keeps
// containerd's rule (plain http only for an http:// host), skip_verify or
// not.
func TestHTTPFallbackOnlyForInsecureRegistriesConf(t *testing.T) {
	p := &Request{Registry: "reg.example", TLSVerify: true, Endpoints: []wire.Endpoint{
		{Host: "mirror.example", Repository: "mirror.example/app", Mirror: true, Insecure: true, Source: wire.EndpointRegistriesMirror, Trust: wire.Trust{Verify: false}},
		{Host: "other.example", Repository: "other.example/app", Mirror: true, Source: wire.EndpointRegistriesMirror, Trust: wire.Trust{Verify: false, InsecureBy: "trust.insecure_registries other.example"}},
		{Host: "ctrd.example", Scheme: "https", Repository: "ctrd.example/app", Mirror: true, Source: wire.EndpointContainerdHost, Trust: wire.Trust{Verify: false}},
		{Host: "reg.example", Repository: "reg.example/app", Source: wire.EndpointRegistry, Trust: wire.Trust{Verify: true}},
	}}
	rc, err := p.remoteClient(&Material{}, &types.SystemContext{}, 0, nil, nil, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	want := map[string]bool{"mirror.example": true, "other.example": true, "ctrd.example": false, "reg.example": false}
	for _, e := range rc.Endpoints() {
		if e.HTTPFallback != want[e.Host] {
			t.Errorf("%s: HTTPFallback %v, want %v", e.Host, e.HTTPFallback, want[e.Host])
		}
		if e.Host == "reg.example" && (e.Scheme != "https" || e.TLS.InsecureSkipVerify) {
			t.Errorf("the verified registry is asked over %s, skip verify %v", e.Scheme, e.TLS.InsecureSkipVerify)
		}
	}
}
