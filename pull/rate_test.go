package pull

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/registry"
	"go.podman.io/image/v5/types"
)

// A virtual clock: sleeping advances it, so the limiter's arithmetic is
// checked without real time passing.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }
func (c *fakeClock) sleep(_ context.Context, d time.Duration) error {
	c.t = c.t.Add(d)
	return nil
}

func TestLimiterHoldsTheRate(t *testing.T) {
	for _, rate := range []int64{100, 10 << 10, 20 << 20} {
		c := &fakeClock{t: time.Unix(1000, 0)}
		l := newLimiter(rate)
		l.now, l.sleep, l.last = c.now, c.sleep, c.t
		start := c.t
		total := int64(0)
		want := rate * 10 // ten seconds' worth
		for total < want {
			n := min(l.chunk(), int(want-total))
			total += int64(n)
			if err := l.wait(context.Background(), n); err != nil {
				t.Fatal(err)
			}
		}
		got := c.t.Sub(start).Seconds()
		// The first burst is free: 10 s less at most burst/rate.
		lo := 10 - l.burst/float64(rate)
		if got < lo-0.001 || got > 10.001 {
			t.Errorf("rate %d: %d bytes took %.3fs of virtual time, want within [%.3f, 10]", rate, total, got, lo)
		}
	}
	if l, s := nodeLimits(0, nil); l != nil || s != nil {
		t.Error("a zero rate and no node share must mean no limiter")
	}
}

func TestLimiterSharedByReaders(t *testing.T) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	l := newLimiter(1 << 20)
	l.now, l.sleep, l.last = c.now, c.sleep, c.t
	// Two readers taking turns share one budget: 4 MiB take ~4 s.
	for i := 0; i < 2*2*(1<<20)/l.chunk(); i++ {
		_ = l.wait(context.Background(), l.chunk())
	}
	if got := c.t.Sub(time.Unix(1000, 0)).Seconds(); got < 3.7 || got > 4.001 {
		t.Errorf("4 MiB at 1 MiB/s across two readers took %.3fs, want ~4s", got)
	}
}

func TestMeterWindow(t *testing.T) {
	m := &meter{}
	const n = 5 // 4 ticks span the window
	var got int64
	var full bool
	for i, b := range []int64{0, 100, 200, 300} {
		if _, full = m.observe(n, b); full {
			t.Fatalf("tick %d: full before %d samples", i, n)
		}
	}
	if got, full = m.observe(n, 400); !full || got != 400 {
		t.Fatalf("5th sample: got %d full %v, want 400 true", got, full)
	}
	// a stall: the count stops; the window slides over it
	for i := 0; i < 4; i++ {
		got, _ = m.observe(n, 400)
	}
	if got != 0 {
		t.Errorf("after a window without bytes: %d, want 0", got)
	}
	if got, _ = m.observe(n, 450); got != 50 {
		t.Errorf("one tick of 50 bytes after the stall: %d, want 50", got)
	}
}

func TestRateErrorNamesBlobHostAndRate(t *testing.T) {
	e := &rateError{what: "blob sha256:abc", host: "mirror:5000", rate: 102.4, min: 1024, window: time.Minute, received: 6144}
	want := "blob sha256:abc from mirror:5000 arrived at 102 B/s over the last 1m0s (6144 bytes), below the minimum rate of 1024 B/s (pull.min_rate, --min-rate)"
	if e.Error() != want {
		t.Errorf("got %q\nwant %q", e.Error(), want)
	}
}

func TestSlotsBoundDownloads(t *testing.T) {
	node := make(chan NodeShare, 1)
	node <- NodeShare{Layers: 1}
	_, sl := nodeLimits(0, node)
	if sl == nil {
		t.Fatal("no slots with a node share")
	}
	ctx := context.Background()
	if err := sl.acquire(ctx); err != nil {
		t.Fatal(err)
	}
	// A second acquire waits until the first is released, or its context ends.
	cctx, cancel := context.WithCancel(ctx)
	got := make(chan error, 1)
	go func() { got <- sl.acquire(cctx) }()
	cancel()
	if err := <-got; err == nil {
		t.Fatal("a second download got a slot while the only one was taken")
	}
	go func() { got <- sl.acquire(ctx) }()
	sl.release()
	if err := <-got; err != nil {
		t.Fatalf("after release: %v", err)
	}
	// Raising the limit wakes waiters.
	go func() { got <- sl.acquire(ctx) }()
	node <- NodeShare{Layers: 2}
	if err := <-got; err != nil {
		t.Fatalf("after raising the limit: %v", err)
	}
	close(node)
}

// manifestSource serves a manifest the way the registry client does: each
// chunk of the body is told to the function the context carries
// (registry.WithReceived), here one byte at a time, with a tick of the rate
// watchdog after each.
type manifestSource struct {
	types.ImageSource
	t     *testing.T
	g     *guard
	ticks int
	errs  []*rateError
	// untouched counts the bytes after which the stall watchdog's
	// last-data time was not set
	untouched int
}

func (s *manifestSource) GetManifest(ctx context.Context, _ *digest.Digest) ([]byte, string, error) {
	f := registry.Received(ctx)
	if f == nil {
		s.t.Fatal("the manifest fetch is not metered: no byte callback in its context")
	}
	for i := 0; i < s.ticks; i++ {
		s.g.last.Store(0)
		f(1)
		if s.g.last.Load() == 0 {
			s.untouched++
		}
		if e := s.g.checkRates(s.ticks, 10*time.Second, 1024); e != nil {
			s.errs = append(s.errs, e)
		}
	}
	return []byte(`{}`), "application/vnd.oci.image.manifest.v1+json", nil
}

// A manifest trickling in is below the minimum rate, not a stall: every
// byte counts as data for the stall watchdog, and the rate watchdog judges
// the manifest (issue 22, finding 16).
func TestManifestBelowTheMinimumRate(t *testing.T) {
	g := newGuard("reg.example", 1<<30)
	src := &manifestSource{t: t, g: g, ticks: 5}
	gs := &guardedSource{ImageSource: src, g: g}
	_, _, _ = gs.GetManifest(context.Background(), nil)
	if src.untouched > 0 {
		t.Errorf("%d bytes of the manifest did not count as data for the stall watchdog", src.untouched)
	}
	if len(src.errs) == 0 {
		t.Fatal("a manifest at 1 B/s under a minimum of 1024 B/s passed the rate watchdog")
	}
	msg := src.errs[0].Error()
	for _, want := range []string{"the manifest from reg.example", "below the minimum rate of 1024 B/s", "over the last 10s"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not say %q", msg, want)
		}
	}
	if len(g.meters.list()) != 0 {
		t.Error("the manifest's meter is left after the fetch")
	}
}
