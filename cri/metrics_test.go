package cri

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/pipeline"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// syncBuffer is a log destination the test reads while Serve writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// lines are the JSON log lines whose msg is msg.
func (s *syncBuffer) lines(t *testing.T, msg string) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// scrape GETs /metrics and returns its samples, "name{labels}" → value.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", l, err)
		}
		out[l[:i]] = v
	}
	return out
}

// waitMetric polls the endpoint until sample has value want (bounded).
func waitMetric(t *testing.T, addr, sample string, want float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, ok := scrape(t, addr)[sample]
		if ok && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v (present %v), want %v within 30 s", sample, got, ok, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startServe runs Serve with cfg (a fake runtime behind it, a JSON log,
// metrics on 127.0.0.1:0) and returns a client, the metrics address, the
// log and a stop function that returns Serve's error.
func startServe(t *testing.T, cfg Config) (runtimeapi.ImageServiceClient, string, *syncBuffer, func() error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: Serve refuses a --listen directory that is not root's (dest.CheckRootDir)")
	}
	dir := t.TempDir()
	cfg.Runtime, cfg.Listen = filepath.Join(dir, "rt.sock"), filepath.Join(dir, "ph", "cri.sock")
	serveFake(t, cfg.Runtime, &fakeRuntime{gotMD: make(chan metadata.MD, 16), listAny: true}, nil)
	logs := &syncBuffer{}
	cfg.Log = slog.New(slog.NewJSONHandler(logs, nil))
	if cfg.MetricsListen == "" {
		cfg.MetricsListen = "127.0.0.1:0"
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { _, err := Serve(ctx, cfg); served <- err }()
	conn := dialCRI(t, cfg.Listen)
	t.Cleanup(func() { conn.Close() })
	// The "serving" line names the metrics address (port 0 resolved).
	var addr string
	deadline := time.Now().Add(30 * time.Second)
	for addr == "" {
		if s := logs.lines(t, "serving"); len(s) == 1 {
			addr, _ = s[0]["metrics_listen"].(string)
			break
		}
		select {
		case err := <-served:
			t.Fatalf("Serve: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("Serve did not log serving within 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-served
	}
	t.Cleanup(func() { _ = stop() })
	return runtimeapi.NewImageServiceClient(conn), addr, logs, stop
}

func u64(v uint64) *uint64 { return &v }

// Every outcome is counted once per request by its failure code and gRPC
// code; a pull two requests share is one pull (its bytes once) and one
// join; a pull waiting for --max-parallel's slot and one running show in
// the gauges, which go back to 0; the histogram counts every request; the
// log line has the result's fields beside the codes.
func TestMetricsPerOutcome(t *testing.T) {
	release := make(chan struct{})
	cfg := Config{
		MaxParallel: 1,
		Plan: func(r Request) (*pipeline.Plan, error) {
			if r.Image == "docker.io/library/missing:latest" {
				return nil, failure.New(failure.NotFound, "docker.io/library/missing:latest: manifest unknown")
			}
			return &pipeline.Plan{}, nil
		},
		Run: func(ctx context.Context, p *pipeline.Plan, o pipeline.Options) (*api.Result, error) {
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &api.Result{
				ImageID: "sha256:cfg", Digest: "sha256:man", Bytes: 1000, DurationMS: 7,
				Endpoints: []api.EndpointUse{{Host: "a", Bytes: 300}, {Host: "b", Bytes: 200}},
				Isolation: api.Isolation{Enabled: true, Cgroup: "/ph/pull-1", UID: 70001},
				Usage:     &api.Usage{CPUUsageNS: u64(11), MemoryPeakBytes: u64(22), IOReadBytes: u64(33), IOWriteBytes: u64(44)},
			}, nil
		},
	}
	c, addr, logs, stop := startServe(t, cfg)
	ctx := context.Background()

	// Two equal requests share one pull; a third, of another image,
	// waits for the only slot.
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, img := range []string{"busybox", "busybox", "alpine"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: img},
				SandboxConfig: &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Namespace: "shop", Name: "web-1", Uid: "u-1"}}},
				grpc.WaitForReady(true))
			if err == nil && res.ImageRef != "sha256:cfg" {
				err = fmt.Errorf("image ref %q", res.ImageRef)
			}
			errs[i] = err
		}()
		if i == 1 {
			waitMetric(t, addr, "pullhelper_cri_pull_requests_joined_total", 1)
		}
	}
	waitMetric(t, addr, "pullhelper_cri_pulls_waiting", 1)
	waitMetric(t, addr, "pullhelper_cri_pulls_in_flight", 1)
	close(release)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	// Failures: not found (the plan), a bad name (usage), an
	// unauthorized run.
	if _, err := c.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "missing"}}); status.Code(err) != codes.NotFound {
		t.Fatalf("missing: %v", err)
	}
	if _, err := c.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "Bad Name"}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad name: %v", err)
	}

	m := scrape(t, addr)
	for sample, want := range map[string]float64{
		`pullhelper_cri_pull_requests_total{grpc_code="OK",result="ok"}`:                 3,
		`pullhelper_cri_pull_requests_total{grpc_code="NotFound",result="not_found"}`:    1,
		`pullhelper_cri_pull_requests_total{grpc_code="InvalidArgument",result="usage"}`: 1,
		`pullhelper_cri_pulls_total{result="ok"}`:                                        2,
		`pullhelper_cri_pulls_total{result="not_found"}`:                                 1,
		`pullhelper_cri_pull_requests_joined_total`:                                      1,
		`pullhelper_cri_pull_bytes_total`:                                                2000,
		`pullhelper_cri_pull_wire_bytes_total`:                                           1000,
		`pullhelper_cri_pull_request_duration_seconds_count`:                             5,
		`pullhelper_cri_pull_request_duration_seconds_bucket{le="+Inf"}`:                 5,
		`pullhelper_cri_pulls_in_flight`:                                                 0,
		`pullhelper_cri_pulls_waiting`:                                                   0,
	} {
		if got, ok := m[sample]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", sample, got, ok, want)
		}
	}
	// A request that never reached a pull (a bad name) is no pull.
	if _, ok := m[`pullhelper_cri_pulls_total{result="usage"}`]; ok {
		t.Errorf("a refused request counted as a pull")
	}
	// The standard collectors are there; the global registry's are not
	// needed.
	for _, name := range []string{"go_goroutines", "process_open_fds"} {
		if _, ok := m[name]; !ok {
			t.Errorf("%s is missing", name)
		}
	}

	lines := logs.lines(t, "pull")
	if len(lines) != 5 {
		t.Fatalf("%d pull lines, want 5", len(lines))
	}
	var ok, bad map[string]any
	for _, l := range lines {
		switch l["result"] {
		case "ok":
			ok = l
		case "not_found":
			bad = l
		}
	}
	want := map[string]any{
		"image": "busybox", "pod_namespace": "shop", "pod_name": "web-1", "pod_uid": "u-1", "digest": "sha256:man",
		"image_id": "sha256:cfg", "bytes": 1000.0, "wire_bytes": 500.0, "pull_duration_ms": 7.0, "cgroup": "/ph/pull-1",
		"uid": 70001.0, "result": "ok", "code": "OK",
		"usage": map[string]any{"cpu_usage_ns": 11.0, "memory_peak_bytes": 22.0, "io_read_bytes": 33.0, "io_write_bytes": 44.0},
	}
	if ok != nil && ok["image"] == "alpine" {
		want["image"] = "alpine"
	}
	for k, v := range want {
		if ok == nil || fmt.Sprint(ok[k]) != fmt.Sprint(v) {
			t.Errorf("ok line: %s = %v, want %v (%v)", k, ok[k], v, ok)
		}
	}
	if _, has := ok["duration_ms"]; !has {
		t.Errorf("ok line has no duration_ms: %v", ok)
	}
	if bad == nil || bad["code"] != "NotFound" || !strings.Contains(fmt.Sprint(bad["error"]), "manifest unknown") {
		t.Errorf("not_found line: %v", bad)
	}

	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// The metrics server stopped with the service.
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		c.Close()
		t.Errorf("the metrics port %s still accepts after Serve returned", addr)
	}
}

// resultOf: the failure code of an answer, interrupted for the caller's
// own end (as statusOf words it).
func TestResultOf(t *testing.T) {
	for _, tc := range []struct {
		err, ctxErr error
		want        failure.Code
	}{
		{nil, nil, "ok"},
		{failure.New(failure.Unauthorized, "x"), nil, failure.Unauthorized},
		{failure.New(failure.Network, "x"), nil, failure.Network},
		{failure.New(failure.Network, "x"), context.DeadlineExceeded, failure.Interrupted},
		{context.Canceled, context.Canceled, failure.Interrupted},
		{errors.New("plain"), nil, failure.Internal},
	} {
		var st *status.Status
		if tc.err != nil {
			st = statusOf(tc.err, tc.ctxErr, nil)
		}
		if got := resultOf(st, tc.err); got != tc.want {
			t.Errorf("resultOf(%v, %v) = %s, want %s", tc.err, tc.ctxErr, got, tc.want)
		}
	}
}

// The metrics server's bounds: GET /metrics only, a header over the bound
// refused (431), a scraper that stalls mid-request cut off after the read
// timeout; a taken port is exit 2 naming the flag, and no socket is left.
func TestMetricsListenerBounds(t *testing.T) {
	old := metricsReadTimeout
	metricsReadTimeout = 300 * time.Millisecond
	t.Cleanup(func() { metricsReadTimeout = old })
	cfg := Config{MaxParallel: 1, Plan: func(Request) (*pipeline.Plan, error) { return &pipeline.Plan{}, nil }}
	_, addr, _, _ := startServe(t, cfg)

	resp, err := http.Post("http://"+addr+"/metrics", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %s", resp.Status)
	}
	req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 64<<10))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a 64 KiB header: %s, want 431", resp.Status)
	}
	// Half a request, then nothing: the server closes the connection
	// (the test's own deadline is 30 s, 100 times the server's).
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /metrics HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err = io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("a stalled request was not cut off: %v", err)
	}

	// The port taken: exit 2 naming the flag, no socket made.
	dir := t.TempDir()
	sock := filepath.Join(dir, "cri.sock")
	_, err = Serve(context.Background(), Config{Listen: sock, Runtime: filepath.Join(dir, "rt.sock"), MaxParallel: 1, MetricsListen: addr})
	if failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), "--metrics-listen "+addr) {
		t.Errorf("a taken port: %v", err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a socket was left: %v", err)
	}
}

func TestMetricsAddr(t *testing.T) {
	for _, v := range []string{"127.0.0.1:9471", "[::1]:9471", ":9471", "127.0.0.1:0"} {
		if _, err := MetricsAddr(v); err != nil {
			t.Errorf("%q: %v", v, err)
		}
	}
	for _, v := range []string{"", "9471", "127.0.0.1", "127.0.0.1:x", "127.0.0.1:70000", "example.com:9471", "localhost:9471", "unix:///run/m.sock"} {
		if _, err := MetricsAddr(v); failure.CodeOf(err) != failure.Usage || !strings.Contains(fmt.Sprint(err), "--metrics-listen") {
			t.Errorf("%q: %v, want a usage error naming the flag", v, err)
		}
	}
}

// --listen-group: the socket is born root:GID 0660; the thread's
// filesystem gid is restored (a file made after is root's group); a
// setgid directory of another group is refused before anything is made.
func TestListenGroupSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the socket is chowned to another group (this test runs as uid", os.Geteuid(), ")")
	}
	const gid = 4242
	dir := t.TempDir()
	path := filepath.Join(dir, "s", "cri.sock")
	l, err := listen(path, gid)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK || st.Mode&0o7777 != 0o660 || st.Uid != 0 || st.Gid != gid {
		t.Fatalf("socket mode %#o owner %d:%d, want socket 0660 0:%d", st.Mode, st.Uid, st.Gid, gid)
	}
	// Every thread's fsgid is root's again: files made now are group 0.
	for i := 0; i < 8; i++ {
		f := filepath.Join(dir, fmt.Sprintf("after-%d", i))
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := unix.Stat(f, &st); err != nil || st.Gid != 0 {
			t.Fatalf("%s: group %d after listen (%v)", f, st.Gid, err)
		}
	}
	// Without a group: root-only, as before.
	l0, err := listen(filepath.Join(dir, "s", "root.sock"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l0.Close()
	if err := unix.Lstat(filepath.Join(dir, "s", "root.sock"), &st); err != nil || st.Mode&0o7777 != 0o600 || st.Gid != 0 {
		t.Fatalf("root-only socket %#o %d (%v)", st.Mode, st.Gid, err)
	}
	// A setgid directory of another group would give its group.
	sg := setgidDir(t, filepath.Join(dir, "sgid"), 777)
	if _, err := listen(filepath.Join(sg, "cri.sock"), gid); failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), "setgid") {
		t.Fatalf("setgid directory: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(sg, "cri.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a socket was made in the setgid directory: %v", err)
	}
}

func TestListenGroup(t *testing.T) {
	if gid, err := ListenGroup("4242"); err != nil || gid != 4242 {
		t.Errorf("4242: %d %v", gid, err)
	}
	for _, v := range []string{"0", "root", "no-such-group-pullhelper", "-1", "4294967296", ""} {
		if _, err := ListenGroup(v); failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), "--listen-group") {
			t.Errorf("%q: %v, want a usage error naming the flag", v, err)
		}
	}
	// A name of /etc/group resolves to its GID (os/user's own parser).
	data, err := os.ReadFile("/etc/group")
	if err != nil {
		t.Skip("no /etc/group to resolve a name from:", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 3 || f[0] == "" || f[2] == "0" || strings.HasPrefix(f[0], "+") {
			continue
		}
		want, err := strconv.Atoi(f[2])
		if err != nil || want <= 0 || want >= 1<<31-1 {
			continue
		}
		if gid, err := ListenGroup(f[0]); err != nil || gid != want {
			t.Errorf("%q: %d %v, want %d", f[0], gid, err, want)
		}
		return
	}
	t.Skip("/etc/group has no group but root's to resolve")
}

// The log line's request fields are bounded and escaped whatever the
// request sends (a client may send up to gRPC's 4 MiB).
func TestLogLineBounds(t *testing.T) {
	huge := strings.Repeat("n", 1<<20)
	req := &runtimeapi.PullImageRequest{
		Image: &runtimeapi.ImageSpec{Image: huge},
		SandboxConfig: &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{
			Namespace: huge, Name: "web\x1b[2J\n-1" + huge, Uid: huge,
		}},
	}
	attrs := requestAttrs(req)
	limits := map[string]int{"image": maxLogImage, "pod_namespace": maxLogNamespace, "pod_name": maxLogPodName, "pod_uid": maxLogPodUID}
	for i := 0; i+1 < len(attrs); i += 2 {
		k, v := attrs[i].(string), attrs[i+1].(string)
		n, ok := limits[k]
		if !ok {
			t.Fatalf("unexpected field %s", k)
		}
		// At most 4 bytes per byte escaped, plus the cut's note.
		if len(v) > 4*n+32 || !strings.Contains(v, fmt.Sprintf("…(%d bytes)", 1<<20)) && k != "pod_name" {
			t.Errorf("%s: %d bytes: %.80q", k, len(v), v)
		}
		delete(limits, k)
	}
	if len(limits) != 0 {
		t.Errorf("fields missing: %v", limits)
	}
	if got := clip("web\x1b[2J\n-1", 64); got != `web\x1b[2J\n-1` {
		t.Errorf("clip escapes: %q", got)
	}
	if got := clip("ééé", 3); got != "é…(6 bytes)" {
		t.Errorf("clip cuts at a rune boundary: %q", got)
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("pull", attrs...)
	if buf.Len() > 8<<10 {
		t.Errorf("the log line is %d bytes", buf.Len())
	}
}

// A request cancelled while its pull runs: the request counted
// interrupted/Canceled, its pull (no caller left, so stopped) interrupted,
// and the gauge back to 0.
func TestMetricsCancelled(t *testing.T) {
	cfg := Config{
		MaxParallel: 1,
		Plan:        func(Request) (*pipeline.Plan, error) { return &pipeline.Plan{}, nil },
		Run: func(ctx context.Context, p *pipeline.Plan, o pipeline.Options) (*api.Result, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		},
	}
	c, addr, _, _ := startServe(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}}, grpc.WaitForReady(true))
		done <- err
	}()
	waitMetric(t, addr, "pullhelper_cri_pulls_in_flight", 1)
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled request: %v", err)
	}
	waitMetric(t, addr, `pullhelper_cri_pull_requests_total{grpc_code="Canceled",result="interrupted"}`, 1)
	waitMetric(t, addr, `pullhelper_cri_pulls_total{result="interrupted"}`, 1)
	waitMetric(t, addr, "pullhelper_cri_pulls_in_flight", 0)
}

// Preflight refuses, before any runtime is asked, what Serve would: a taken
// metrics port, a setgid --listen directory of another group, something at
// --listen that is not a socket, --max-parallel 0; it makes nothing (a
// missing --listen directory stays missing) and hands Serve the metrics
// listener, which Serve closes even when it fails.
func TestPreflight(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: --listen's directories must be root's (this test runs as uid", os.Geteuid(), ")")
	}
	dir := t.TempDir()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	sock := filepath.Join(dir, "new", "cri.sock")
	if _, err := Preflight(Config{Listen: sock, MaxParallel: 1, MetricsListen: taken.Addr().String()}); failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), "--metrics-listen") {
		t.Errorf("a taken port: %v", err)
	}
	if _, err := Preflight(Config{Listen: sock, MaxParallel: 0}); failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), "--max-parallel") {
		t.Errorf("--max-parallel 0: %v", err)
	}
	notSock := filepath.Join(dir, "file")
	if err := os.WriteFile(notSock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Preflight(Config{Listen: notSock, MaxParallel: 1}); failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("a file at --listen: %v", err)
	}
	sg := setgidDir(t, filepath.Join(dir, "sgid"), 777)
	if _, err := Preflight(Config{Listen: filepath.Join(sg, "cri.sock"), ListenGID: 4242, MaxParallel: 1}); failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), "setgid") {
		t.Errorf("a setgid directory: %v", err)
	}
	ml, err := Preflight(Config{Listen: sock, MaxParallel: 1, MetricsListen: "127.0.0.1:0"})
	if err != nil || ml == nil {
		t.Fatalf("good flags: %v, %v", ml, err)
	}
	if _, err := os.Lstat(filepath.Dir(sock)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Preflight made --listen's directory: %v", err)
	}
	// Serve fails (--max-parallel) and still closes the listener handed.
	if _, err := Serve(context.Background(), Config{Listen: sock, Runtime: filepath.Join(dir, "rt.sock"), MetricsListener: ml}); err == nil {
		t.Fatal("Serve with --max-parallel 0 did not fail")
	}
	if l, err := net.Listen("tcp", ml.Addr().String()); err != nil {
		t.Errorf("the metrics port is still held after Serve failed: %v", err)
	} else {
		l.Close()
	}
}

// setgidDir makes path a root:gid 0755 setgid directory.
func setgidDir(t *testing.T, path string, gid int) string {
	t.Helper()
	for _, err := range []error{os.Mkdir(path, 0o755), os.Chown(path, 0, gid), os.Chmod(path, 0o755|os.ModeSetgid)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return path
}
