package pull

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/auth"
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
	p := &Request{Registry: ru.Host, StallTimeout: 400 * time.Millisecond, TLSVerify: true, Endpoints: []auth.Endpoint{
		{Host: l.Addr().String(), Scheme: "http", Repository: ru.Host + "/app", Mirror: true, Source: auth.EndpointContainerdServer},
		{Host: ru.Host, Scheme: "http", Repository: ru.Host + "/app", Source: auth.EndpointContainerdServer},
	}}
	rc, err := p.remoteClient(&Material{}, &types.SystemContext{}, 0, nil, nil, slog.New(slog.DiscardHandler))
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
