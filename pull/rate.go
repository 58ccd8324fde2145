package pull

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Rates: the bandwidth cap and the minimum-rate watchdog. Both act on the
// bytes read from the network, in the guard's reader (source.go), which
// sees every blob byte of the attempt.

// errTooSlow marks an attempt ended by the minimum-rate watchdog.
var errTooSlow = errors.New("data arriving below the minimum rate")

// nodeLimits are the limiter and the download slots of one Copy: the
// rate is the tighter of the pull's own cap (max) and the node's share,
// the slots the node's share of concurrent downloads; each follows the
// updates on node. Nil when nothing limits.
func nodeLimits(max int64, node <-chan NodeShare) (*limiter, *slots) {
	if max <= 0 && node == nil {
		return nil, nil
	}
	l := newLimiter(max)
	if node == nil {
		return l, nil
	}
	sl := &slots{}
	sl.cond = sync.NewCond(&sl.mu)
	apply := func(share NodeShare) {
		r := share.Rate
		if max > 0 && (r <= 0 || max < r) {
			r = max
		}
		l.set(r)
		sl.set(share.Layers)
	}
	// The first share comes at once (the parent sends it right after the
	// request): wait for it, so no download starts unlimited.
	if share, ok := <-node; ok {
		apply(share)
	}
	go func() {
		for share := range node {
			apply(share)
		}
	}()
	return l, sl
}

// slots bounds the blob downloads in flight; the bound may change (0:
// none).
type slots struct {
	mu    sync.Mutex
	cond  *sync.Cond
	limit int
	inUse int
}

func (s *slots) set(n int) {
	s.mu.Lock()
	s.limit = max(n, 0)
	s.mu.Unlock()
	s.cond.Broadcast()
}

// acquire waits for a free slot, or until ctx ends.
func (s *slots) acquire(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.limit > 0 && s.inUse >= s.limit {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		s.cond.Wait()
	}
	s.inUse++
	return nil
}

func (s *slots) release() {
	s.mu.Lock()
	s.inUse--
	s.mu.Unlock()
	s.cond.Broadcast()
}

// slotReader releases its slot once, on Close.
type slotReader struct {
	io.ReadCloser
	once sync.Once
	s    *slots
}

func (r *slotReader) Close() error {
	err := r.ReadCloser.Close()
	r.once.Do(r.s.release)
	return err
}

// limiter is a token bucket shared by every blob read of one pull: a
// reader takes what it read and, when the bucket is in debt, waits before
// reading again, so the socket is not read and TCP flow control slows the
// sender.
type limiter struct {
	rate  float64 // bytes per second
	burst float64
	now   func() time.Time
	sleep func(context.Context, time.Duration) error

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// newLimiter is a limiter at rate (bytes per second; 0: none until set),
// its burst available at once.
func newLimiter(rate int64) *limiter {
	l := &limiter{now: time.Now, sleep: sleepCtx}
	l.set(rate)
	l.tokens, l.last = l.burst, time.Now()
	return l
}

// set changes the rate (bytes per second; 0: none). A quarter of a
// second's worth of burst, between 1 KiB and 256 KiB: small enough to hold
// the rate over a second, large enough for few waits.
func (l *limiter) set(rate int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rate = float64(rate)
	if rate <= 0 {
		l.burst = 256 << 10
		return
	}
	l.burst = min(max(float64(rate)/4, 1<<10), 256<<10)
	l.tokens = min(l.tokens, l.burst)
}

// chunk is the most a reader should read at once.
func (l *limiter) chunk() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.burst)
}

// wait accounts n bytes read and sleeps off any debt (or until ctx ends).
func (l *limiter) wait(ctx context.Context, n int) error {
	l.mu.Lock()
	if l.rate <= 0 {
		l.mu.Unlock()
		return nil
	}
	now := l.now()
	l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	l.last = now
	l.tokens -= float64(n)
	var d time.Duration
	if l.tokens < 0 {
		d = time.Duration(-l.tokens / l.rate * float64(time.Second))
	}
	l.mu.Unlock()
	if d <= 0 {
		return nil
	}
	return l.sleep(ctx, d)
}

// meter counts one fetch's bytes (a blob's, a manifest's) for the rate
// watchdog.
type meter struct {
	what  string        // "blob sha256:…", "the manifest"
	host  func() string // where it is being fetched from
	start time.Time
	bytes atomic.Int64

	// samples[i] is bytes at the i-th tick since start (a ring of the
	// last window's ticks), owned by the watchdog goroutine.
	samples []int64
	ticks   int
}

// meters are the blob fetches in flight.
type meters struct {
	mu sync.Mutex
	m  map[*meter]bool
}

func (ms *meters) add(what string, host func() string) *meter {
	m := &meter{what: what, host: host, start: time.Now()}
	ms.mu.Lock()
	if ms.m == nil {
		ms.m = map[*meter]bool{}
	}
	ms.m[m] = true
	ms.mu.Unlock()
	return m
}

func (ms *meters) remove(m *meter) {
	ms.mu.Lock()
	delete(ms.m, m)
	ms.mu.Unlock()
}

func (ms *meters) list() []*meter {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	out := make([]*meter, 0, len(ms.m))
	for m := range ms.m {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start.Before(out[j].start) })
	return out
}

// rateError is the cause of an attempt ended by the watchdog.
type rateError struct {
	what     string
	host     string
	rate     float64
	min      int64
	window   time.Duration
	received int64
}

func (e *rateError) Error() string {
	return fmt.Sprintf("%s from %s arrived at %.0f B/s over the last %s (%d bytes), below the minimum rate of %d B/s (pull.min_rate, --min-rate)",
		e.what, e.host, e.rate, e.window, e.received, e.min)
}

func (e *rateError) Is(target error) bool { return target == errTooSlow }

// watchRates ends the attempt (cancel) when a blob or manifest in flight for at least
// window received fewer than minRate×window bytes in the last window. It
// samples every window/20 (at most every second) until done closes.
func (g *guard) watchRates(minRate int64, window time.Duration, cancel context.CancelCauseFunc, done <-chan struct{}) {
	tick := min(window/20, time.Second)
	n := int(window/tick) + 1 // samples spanning one window
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		if e := g.checkRates(n, time.Duration(n-1)*tick, minRate); e != nil {
			cancel(e)
			return
		}
	}
}

// checkRates is one tick of the watchdog: it samples every fetch in flight
// (rings of n samples spanning span) and returns the error of the first
// that received fewer than minRate×span bytes over a whole span.
func (g *guard) checkRates(n int, span time.Duration, minRate int64) *rateError {
	for _, m := range g.meters.list() {
		got, full := m.observe(n, m.bytes.Load())
		if full && float64(got) < float64(minRate)*span.Seconds() {
			return &rateError{what: m.what, host: m.host(), rate: float64(got) / span.Seconds(),
				min: minRate, window: span, received: got}
		}
	}
	return nil
}

// observe records the byte count b at one tick, in a ring of n samples,
// and returns the bytes received since the oldest one (n-1 ticks ago) once
// the ring is full.
func (m *meter) observe(n int, b int64) (got int64, full bool) {
	if m.samples == nil {
		m.samples = make([]int64, n)
	}
	m.samples[m.ticks%n] = b
	m.ticks++
	if m.ticks < n {
		return 0, false
	}
	return b - m.samples[m.ticks%n], true
}
