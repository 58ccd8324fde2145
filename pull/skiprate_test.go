package pull

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/registry"
	"go.podman.io/image/v5/types"
)

// A resume the registry answers in full (200, Range ignored) has its kept
// prefix skipped inside GetBlob: a registry trickling those bytes is below
// the minimum rate and the rate watchdog ends it, as it ends a body that
// trickles. Before, the skip was watched only by the stall timeout (a byte
// every two minutes kept it going: the 100 kB here would have taken days).
func TestSkippedPrefixIsRateWatched(t *testing.T) {
	blob := make([]byte, 200<<10)
	_, _ = rand.Read(blob)
	d := digest.FromBytes(blob)
	const kept = 100 << 10
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "204800")
		w.WriteHeader(http.StatusOK) // the Range ignored
		for _, b := range blob {
			if _, err := w.Write([]byte{b}); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, partialFile(d)), blob[:kept], 0o600); err != nil {
		t.Fatal(err)
	}
	pc := openPartialCache(&Stage{Partial: dir, NoSync: true}, nil)
	pc.allow(1 << 30)
	g := newGuard(u.Host, 1<<30)
	rc := registry.New([]registry.Endpoint{{Scheme: "http", Host: u.Host, Path: "/v2", Repository: "app"}},
		registry.Hooks{Discard: g.discarded})
	defer rc.Close()
	src := &guardedSource{ImageSource: &remoteSource{rc: rc, partial: pc, cache: &manifestCache{}}, g: g}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	g.ctx = ctx
	done := make(chan struct{})
	defer close(done)
	go g.watchRates(1<<10, time.Second, cancel, done)
	type result struct {
		err error
	}
	got := make(chan result, 1)
	go func() {
		body, _, err := src.GetBlob(ctx, types.BlobInfo{Digest: d, Size: int64(len(blob))}, nil)
		if body != nil {
			body.Close()
		}
		got <- result{err}
	}()
	select {
	case r := <-got:
		if r.err == nil || !errors.Is(context.Cause(ctx), errTooSlow) {
			t.Errorf("GetBlob: %v (cause %v); want the skip ended by the minimum-rate watchdog", r.err, context.Cause(ctx))
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the skip of a kept prefix trickling at 50 B/s was still going after 60 s: the minimum-rate watchdog (1 KiB/s over 1 s) did not see it")
	}
}
