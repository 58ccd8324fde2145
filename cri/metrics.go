package cri

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/internal/failure"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The metrics HTTP server's bounds: a scraper that sends its request
// slowly, reads the answer slowly or sends huge headers is cut off.
// (Variables: a test shortens the read timeout.)
var (
	metricsReadTimeout   = 10 * time.Second
	metricsWriteTimeout  = 30 * time.Second
	metricsIdleTimeout   = 60 * time.Second
	metricsMaxHeader     = 8 << 10
	metricsMaxInFlight   = 4
	metricsShutdownGrace = 2 * time.Second
)

// pullDurationBuckets are the request-duration histogram's upper bounds in
// seconds: the kubelet's own image pull histogram's (pkg/kubelet/metrics
// imagePullDurationBuckets, 1 s to an hour), with 0.5 s in front for a
// pull whose layers are all present already.
var pullDurationBuckets = []float64{0.5, 1, 5, 10, 20, 30, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600}

// metrics are the service's Prometheus metrics, in a registry of their own
// (never the global default) beside the Go and process collectors. No
// label carries a request's value (image, pod, registry): the label sets
// are the failure codes and gRPC codes only, a bounded number.
type metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	pulls     *prometheus.CounterVec
	duration  prometheus.Histogram
	bytes     prometheus.Counter
	wireBytes prometheus.Counter
	inFlight  prometheus.Gauge
	waiting   prometheus.Gauge
	joined    prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pullhelper_cri_pull_requests_total",
			Help: "PullImage requests answered, by result (the failure code: ok, unauthorized, not_found, network, ...) and grpc_code (the status the caller got).",
		}, []string{"result", "grpc_code"}),
		pulls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pullhelper_cri_pulls_total",
			Help: "Pulls run (requests that joined a pull in flight share one), by result (the failure code).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pullhelper_cri_pull_request_duration_seconds",
			Help:    "Time from a PullImage request to its answer, every result.",
			Buckets: pullDurationBuckets,
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pullhelper_cri_pull_bytes_total",
			Help: "Bytes of the images pulled (each successful pull's result bytes: the layers the parent verified).",
		}),
		wireBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pullhelper_cri_pull_wire_bytes_total",
			Help: "Blob bytes the registries and mirrors sent (each successful pull's endpoints' bytes; not what a resume cache kept).",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pullhelper_cri_pulls_in_flight",
			Help: "Pulls running now (holding a --max-parallel slot).",
		}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pullhelper_cri_pulls_waiting",
			Help: "Pulls waiting for a --max-parallel slot.",
		}),
		joined: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pullhelper_cri_pull_requests_joined_total",
			Help: "PullImage requests that joined an equal pull in flight instead of starting one.",
		}),
	}
	m.reg.MustRegister(m.requests, m.pulls, m.duration, m.bytes, m.wireBytes, m.inFlight, m.waiting, m.joined,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// resultOf is the failure code of a PullImage answer: "ok", else the
// pull's failure code, interrupted for a cancelled or timed-out request
// (what statusOf reports in its message).
func resultOf(st *status.Status, err error) failure.Code {
	switch {
	case err == nil:
		return "ok"
	case st.Code() == codes.Canceled || st.Code() == codes.DeadlineExceeded:
		return failure.Interrupted
	}
	return failure.CodeOf(err)
}

// The counting methods do nothing on a nil *metrics (a Server a test
// builds without Serve).

// request counts one answered PullImage request.
func (m *metrics) request(result failure.Code, c codes.Code, d time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(string(result), c.String()).Inc()
	m.duration.Observe(d.Seconds())
}

// pulled counts one finished pull (once, however many requests shared it).
func (m *metrics) pulled(res *api.Result, err error) {
	if m == nil {
		return
	}
	if err != nil {
		code := failure.CodeOf(err)
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			// Every caller went, or the service stops.
			code = failure.Interrupted
		}
		m.pulls.WithLabelValues(string(code)).Inc()
		return
	}
	m.pulls.WithLabelValues("ok").Inc()
	m.bytes.Add(float64(max(res.Bytes, 0)))
	m.wireBytes.Add(float64(wireBytes(res)))
}

// joinedOne counts a request that joined a pull in flight.
func (m *metrics) joinedOne() {
	if m != nil {
		m.joined.Inc()
	}
}

// waitingAdd and inFlightAdd move the gauges of pulls waiting for a slot
// and pulls holding one.
func (m *metrics) waitingAdd(d float64) {
	if m != nil {
		m.waiting.Add(d)
	}
}

func (m *metrics) inFlightAdd(d float64) {
	if m != nil {
		m.inFlight.Add(d)
	}
}

// wireBytes is the sum of a result's endpoints' bytes.
func wireBytes(res *api.Result) int64 {
	var n int64
	for _, e := range res.Endpoints {
		n += max(e.Bytes, 0)
	}
	return n
}

// MetricsAddr checks a --metrics-listen value, HOST:PORT with HOST an IP
// address (never a name, not even localhost: nothing is resolved; empty:
// every address) and a numeric port, and returns it. A unix socket is not
// offered: Prometheus scrapes TCP.
func MetricsAddr(v string) (string, error) {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return "", failure.New(failure.Usage, "--metrics-listen %q: want HOST:PORT, e.g. 127.0.0.1:9471", v)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "", failure.New(failure.Usage, "--metrics-listen %q: the port must be a number 0-65535", v)
	}
	if host != "" && net.ParseIP(host) == nil {
		return "", failure.New(failure.Usage, "--metrics-listen %q: HOST must be an IP address, e.g. 127.0.0.1 (no name is resolved)", v)
	}
	return v, nil
}

// listenMetrics opens --metrics-listen's TCP socket (exit 2 naming the flag).
func listenMetrics(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, failure.New(failure.Usage, "--metrics-listen %s: %s", addr, failure.Reason(err))
	}
	return l, nil
}

// serveMetrics serves GET /metrics of m on l until stop is called: read
// and write timeouts, a bounded header, at most metricsMaxInFlight scrapes
// at once. stop closes the listener and waits (a bounded grace) for
// scrapes in progress.
func serveMetrics(l net.Listener, m *metrics, log *slog.Logger) (stop func()) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:            slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: metricsMaxInFlight,
		Timeout:             metricsWriteTimeout - time.Second,
		Registry:            m.reg,
	}))
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: metricsReadTimeout,
		ReadTimeout:       metricsReadTimeout,
		WriteTimeout:      metricsWriteTimeout,
		IdleTimeout:       metricsIdleTimeout,
		MaxHeaderBytes:    metricsMaxHeader,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics server", "error", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), metricsShutdownGrace)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			srv.Close()
		}
		<-done
	}
}
