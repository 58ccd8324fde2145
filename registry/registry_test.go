package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
)

// fakeRegistry serves one repository's manifests and blobs, optionally
// behind Basic or Bearer auth, and records every request.
type fakeRegistry struct {
	t         *testing.T
	repo      string
	manifests map[string][]byte // tag or digest → body
	blobs     map[digest.Digest][]byte
	user      string // Basic/Bearer credential expected ("" = anonymous)
	pass      string
	bearer    bool   // challenge Bearer (realm on the same server) instead of Basic
	status    int    // answer every API request with this status (0: serve)
	breakAt   int    // break the first blob body after this many bytes (0: never)
	noRange   bool   // ignore Range requests
	needHdr   string // "Name: value" every request must carry

	mu     sync.Mutex
	log    []*http.Request
	broken bool
	srv    *httptest.Server
}

func (f *fakeRegistry) requests() []*http.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*http.Request(nil), f.log...)
}

func (f *fakeRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.log = append(f.log, r.Clone(context.Background()))
	f.mu.Unlock()
	if f.needHdr != "" {
		k, v, _ := strings.Cut(f.needHdr, ": ")
		if r.Header.Get(k) != v {
			http.Error(w, "missing header", http.StatusForbidden)
			return
		}
	}
	if r.URL.Path == "/token" {
		u, p, ok := r.BasicAuth()
		if f.user != "" && (!ok || u != f.user || p != f.pass) {
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"bad credential"}]}`, http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"token": "tok-" + r.URL.Query().Get("scope"), "expires_in": 300})
		return
	}
	if f.user != "" || f.bearer {
		authz := r.Header.Get("Authorization")
		okAuth := false
		if f.bearer {
			okAuth = authz == "Bearer tok-repository:"+f.repo+":pull"
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="%s/token",service="fake"`, f.srv.URL))
		} else {
			u, p, ok := r.BasicAuth()
			okAuth = ok && u == f.user && p == f.pass
			w.Header().Set("WWW-Authenticate", `Basic realm="fake"`)
		}
		if !okAuth {
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
			return
		}
		w.Header().Del("WWW-Authenticate")
	}
	if f.status != 0 {
		http.Error(w, "failing", f.status)
		return
	}
	if r.URL.Path == "/v2/" {
		return // the API root: 200
	}
	prefix := "/v2/" + f.repo + "/"
	rest, ok := strings.CutPrefix(r.URL.Path, prefix)
	if !ok {
		http.Error(w, `{"errors":[{"code":"NAME_UNKNOWN"}]}`, http.StatusNotFound)
		return
	}
	switch {
	case strings.HasPrefix(rest, "manifests/"):
		b, ok := f.manifests[strings.TrimPrefix(rest, "manifests/")]
		if !ok {
			http.Error(w, `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json; charset=utf-8")
		_, _ = w.Write(b)
	case strings.HasPrefix(rest, "blobs/"):
		b, ok := f.blobs[digest.Digest(strings.TrimPrefix(rest, "blobs/"))]
		if !ok {
			http.Error(w, `{"errors":[{"code":"BLOB_UNKNOWN"}]}`, http.StatusNotFound)
			return
		}
		start := 0
		if rg := r.Header.Get("Range"); rg != "" && !f.noRange {
			s, _ := strings.CutPrefix(rg, "bytes=")
			start, _ = strconv.Atoi(strings.TrimSuffix(s, "-"))
			w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, len(b)-1, len(b)))
			w.Header().Set("Content-Length", strconv.Itoa(len(b)-start))
			w.WriteHeader(http.StatusPartialContent)
			_, _ = w.Write(b[start:])
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		f.mu.Lock()
		breakNow := f.breakAt > 0 && !f.broken
		f.broken = f.broken || breakNow
		f.mu.Unlock()
		if breakNow {
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(b[:f.breakAt])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the connection is cut mid-body
		}
		_, _ = w.Write(b)
	default:
		http.NotFound(w, r)
	}
}

func newFake(t *testing.T, repo string) (*fakeRegistry, digest.Digest, []byte) {
	blob := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	d := digest.FromBytes(blob)
	man := []byte(`{"schemaVersion":2}`)
	f := &fakeRegistry{t: t, repo: repo,
		manifests: map[string][]byte{"latest": man, digest.FromBytes(man).String(): man},
		blobs:     map[digest.Digest][]byte{d: blob}}
	f.srv = httptest.NewServer(f)
	t.Cleanup(f.srv.Close)
	return f, d, blob
}

func endpointOf(t *testing.T, f *fakeRegistry) Endpoint {
	u, err := url.Parse(f.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return Endpoint{Scheme: "http", Host: u.Host, Path: "/v2", Repository: f.repo, Resolve: true}
}

// closedPort is a loopback address where nothing listens.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

func readAll(t *testing.T, rc io.ReadCloser) []byte {
	t.Helper()
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading: %v", err)
	}
	return b
}

func TestFallbackPerRequest(t *testing.T) {
	failing, _, _ := newFake(t, "ns/app")
	failing.status = http.StatusInternalServerError
	lacking, _, _ := newFake(t, "ns/app")
	lacking.blobs = nil // a mirror without the blob: 404
	good, d, blob := newFake(t, "ns/app")
	eps := []Endpoint{
		{Scheme: "http", Host: closedPort(t), Path: "/v2", Repository: "ns/app", Resolve: true},
		endpointOf(t, failing), endpointOf(t, lacking), endpointOf(t, good),
	}
	c := New(eps, Hooks{})
	defer c.Close()
	raw, mt, host, err := c.Manifest(context.Background(), "latest", []string{"application/vnd.oci.image.manifest.v1+json"}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	// the lacking mirror has the manifest: it serves it
	if host != eps[2].Host || string(raw) != `{"schemaVersion":2}` || mt != "application/vnd.oci.image.manifest.v1+json" {
		t.Errorf("manifest from %s (%q, %q), want %s", host, raw, mt, eps[2].Host)
	}
	rc, _, err := c.Blob(context.Background(), d, int64(len(blob)))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, rc); !bytes.Equal(got, blob) {
		t.Errorf("blob: %d bytes, want %d", len(got), len(blob))
	}
	if h := rc.(*blobReader).Host(); h != eps[3].Host {
		t.Errorf("blob from %s, want %s", h, eps[3].Host)
	}
	if n := len(failing.requests()); n != 2 {
		t.Errorf("the failing mirror got %d requests, want 2 (manifest, blob: no retry there)", n)
	}
}

func TestEveryEndpointFailsReportsTheLast(t *testing.T) {
	a, _, _ := newFake(t, "app")
	a.status = http.StatusBadGateway
	b, _, _ := newFake(t, "app")
	c := New([]Endpoint{endpointOf(t, a), endpointOf(t, b)}, Hooks{})
	_, _, _, err := c.Manifest(context.Background(), "missing", nil, 1<<20)
	var se *StatusError
	if !errors.As(err, &se) || se.StatusCode != 404 || se.Code != "MANIFEST_UNKNOWN" || se.Host != endpointOf(t, b).Host {
		t.Fatalf("err = %v, want the last endpoint's 404 MANIFEST_UNKNOWN", err)
	}
	if !strings.Contains(err.Error(), "502") {
		t.Errorf("the earlier endpoint's failure is not named: %v", err)
	}
}

func TestTagOnlyFromResolvingEndpoints(t *testing.T) {
	mirror, _, _ := newFake(t, "app")
	up, _, _ := newFake(t, "app")
	m := endpointOf(t, mirror)
	m.Resolve = false
	c := New([]Endpoint{m, endpointOf(t, up)}, Hooks{})
	if _, _, host, err := c.Manifest(context.Background(), "latest", nil, 1<<20); err != nil || host != endpointOf(t, up).Host {
		t.Fatalf("tag served by %s (%v), want the upstream", host, err)
	}
	d := digest.FromBytes([]byte(`{"schemaVersion":2}`))
	if _, _, host, err := c.Manifest(context.Background(), d.String(), nil, 1<<20); err != nil || host != m.Host {
		t.Fatalf("digest served by %s (%v), want the mirror", host, err)
	}
	for _, r := range mirror.requests() {
		if strings.HasSuffix(r.URL.Path, "/latest") {
			t.Errorf("the mirror without resolve was asked for the tag: %s", r.URL)
		}
	}
	c = New([]Endpoint{m}, Hooks{})
	if _, _, _, err := c.Manifest(context.Background(), "latest", nil, 1<<20); !errors.Is(err, ErrNoEndpoint) {
		t.Errorf("no resolving endpoint: err = %v, want ErrNoEndpoint", err)
	}
}

func TestHeaderNamespaceAndPath(t *testing.T) {
	f, d, _ := newFake(t, "app")
	f.bearer = true
	f.needHdr = "X-Mirror-Token: s3cret"
	// override_path: the API root is exactly /v2 here too, but given as a
	// path of the endpoint's own.
	ep := endpointOf(t, f)
	ep.Namespace = "registry.example.com"
	ep.Header = http.Header{"x-mirror-token": {"s3cret"}}
	c := New([]Endpoint{ep}, Hooks{})
	rc, _, err := c.Blob(context.Background(), d, -1)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, rc)
	sawToken := false
	for _, r := range f.requests() {
		if r.Header.Get("X-Mirror-Token") != "s3cret" {
			t.Errorf("%s %s without the header", r.Method, r.URL)
		}
		if r.URL.Path == "/token" {
			sawToken = true
			continue
		}
		if r.URL.Query().Get("ns") != "registry.example.com" {
			t.Errorf("%s without ?ns=: %s", r.URL.Path, r.URL.RawQuery)
		}
	}
	if !sawToken {
		t.Error("no token was requested")
	}
}

func TestOverridePath(t *testing.T) {
	f, d, blob := newFake(t, "app")
	// A server whose API lives under /api/docker/: with override_path the
	// endpoint's Path is used as it is.
	mux := http.NewServeMux()
	mux.Handle("/api/docker/", http.StripPrefix("/api/docker", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.URL.Path = "/v2" + r.URL.Path
		f.ServeHTTP(w, r)
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	c := New([]Endpoint{{Scheme: "http", Host: u.Host, Path: "/api/docker", Repository: "app", Resolve: true}}, Hooks{})
	rc, _, err := c.Blob(context.Background(), d, int64(len(blob)))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readAll(t, rc), blob) {
		t.Error("wrong blob through override_path")
	}
}

func TestBasicAndBearerCredentials(t *testing.T) {
	for _, bearer := range []bool{false, true} {
		t.Run(fmt.Sprintf("bearer=%v", bearer), func(t *testing.T) {
			f, d, _ := newFake(t, "app")
			f.user, f.pass, f.bearer = "u", "p", bearer
			ep := endpointOf(t, f)
			ep.Credential = &Credential{Username: "u", Password: "p"}
			c := New([]Endpoint{ep}, Hooks{})
			for i := 0; i < 3; i++ {
				rc, _, err := c.Blob(context.Background(), d, -1)
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, rc)
			}
			tokens := 0
			for _, r := range f.requests() {
				if r.URL.Path == "/token" {
					tokens++
				}
			}
			if bearer && tokens != 1 {
				t.Errorf("%d token requests for 3 blobs, want 1 (cached)", tokens)
			}
			// a wrong credential is refused: a 401, no endless loop
			ep.Credential = &Credential{Username: "u", Password: "wrong"}
			c = New([]Endpoint{ep}, Hooks{})
			_, _, err := c.Blob(context.Background(), d, -1)
			var se *StatusError
			if !errors.As(err, &se) || se.StatusCode != 401 {
				t.Fatalf("wrong credential: err = %v, want a 401", err)
			}
		})
	}
}

func TestRealmHookRefuses(t *testing.T) {
	f, d, _ := newFake(t, "app")
	f.user, f.pass, f.bearer = "u", "p", true
	ep := endpointOf(t, f)
	ep.Credential = &Credential{Username: "u", Password: "p"}
	refused := errors.New("refused realm")
	c := New([]Endpoint{ep}, Hooks{Realm: func(_ *Endpoint, u *url.URL) error {
		if u.Path != "/token" {
			t.Errorf("realm %s", u)
		}
		return refused
	}})
	if _, _, err := c.Blob(context.Background(), d, -1); !errors.Is(err, refused) {
		t.Fatalf("err = %v, want the hook's refusal", err)
	}
	for _, r := range f.requests() {
		if r.URL.Path == "/token" {
			t.Error("the realm was contacted after the hook refused it")
		}
	}
}

func TestResumeWithRange(t *testing.T) {
	for _, noRange := range []bool{false, true} {
		t.Run(fmt.Sprintf("noRange=%v", noRange), func(t *testing.T) {
			f, d, blob := newFake(t, "app")
			f.breakAt, f.noRange = 10000, noRange
			c := New([]Endpoint{endpointOf(t, f)}, Hooks{})
			rc, _, err := c.Blob(context.Background(), d, int64(len(blob)))
			if err != nil {
				t.Fatal(err)
			}
			got := readAll(t, rc)
			if sha256.Sum256(got) != sha256.Sum256(blob) {
				t.Fatalf("resumed blob differs: %d bytes, want %d", len(got), len(blob))
			}
			var ranges []string
			for _, r := range f.requests() {
				if rg := r.Header.Get("Range"); rg != "" {
					ranges = append(ranges, rg)
				}
			}
			if len(ranges) != 1 || ranges[0] != "bytes=10000-" {
				t.Errorf("Range requests %q, want one bytes=10000-", ranges)
			}
		})
	}
}

func TestRedirectDropsCredential(t *testing.T) {
	var gotAuth string
	var mu sync.Mutex
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		gotAuth = r.Header.Get("Authorization")
		mu.Unlock()
		_, _ = w.Write([]byte("blob"))
	}))
	defer other.Close()
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := r.BasicAuth(); !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="x"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		http.Redirect(w, r, other.URL+"/storage/blob", http.StatusTemporaryRedirect)
	}))
	defer reg.Close()
	u, _ := url.Parse(reg.URL)
	c := New([]Endpoint{{Scheme: "http", Host: u.Host, Path: "/v2", Repository: "app", Resolve: true,
		Credential: &Credential{Username: "u", Password: "p"}}}, Hooks{})
	rc, _, err := c.Blob(context.Background(), digest.FromString("blob"), -1)
	if err != nil {
		t.Fatal(err)
	}
	if string(readAll(t, rc)) != "blob" {
		t.Error("redirected body not read")
	}
	mu.Lock()
	defer mu.Unlock()
	if gotAuth != "" {
		t.Errorf("the redirect target (another port) got Authorization %q", gotAuth)
	}
}

func TestParseChallenges(t *testing.T) {
	h := http.Header{}
	h.Add("WWW-Authenticate", `Bearer realm="https://auth.example.com/token",service="registry.example.com",scope="repository:a\"b:pull"`)
	h.Add("WWW-Authenticate", `Basic realm=plain`)
	chs := parseChallenges(h)
	if len(chs) != 2 {
		t.Fatalf("%d challenges", len(chs))
	}
	if chs[0].scheme != "bearer" || chs[0].params["realm"] != "https://auth.example.com/token" ||
		chs[0].params["service"] != "registry.example.com" || chs[0].params["scope"] != `repository:a"b:pull` {
		t.Errorf("bearer: %+v", chs[0])
	}
	if chs[1].scheme != "basic" || chs[1].params["realm"] != "plain" {
		t.Errorf("basic: %+v", chs[1])
	}
}

func TestRetryAfter(t *testing.T) {
	for in, want := range map[string]int64{"": 0, "7": 7, "-3": 0, "junk": 0, "99999": 3600} {
		if got := retryAfter(in); int64(got.Seconds()) != want {
			t.Errorf("retryAfter(%q) = %v, want %ds", in, got, want)
		}
	}
}

func TestErrorBodyBoundedAndSanitized(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write([]byte("\x1b[31mred\x1b[0m " + strings.Repeat("x", 1<<20)))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	c := New([]Endpoint{{Scheme: "http", Host: u.Host, Path: "/v2", Repository: "app", Resolve: true}}, Hooks{})
	_, _, _, err := c.Manifest(context.Background(), "latest", nil, 1<<20)
	var se *StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusTeapot {
		t.Fatalf("err = %v", err)
	}
	if strings.ContainsRune(se.Message, 0x1b) || len(se.Message) > 210 {
		t.Errorf("message not sanitized or bounded: %q", se.Message)
	}
}

func TestManifestLimit(t *testing.T) {
	f, _, _ := newFake(t, "app")
	f.manifests["latest"] = bytes.Repeat([]byte("x"), 2048)
	c := New([]Endpoint{endpointOf(t, f)}, Hooks{})
	_, _, _, err := c.Manifest(context.Background(), "latest", nil, 1024)
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Limit != 1024 {
		t.Fatalf("err = %v, want TooLargeError", err)
	}
}

// flaky answers the first n requests with status (and Retry-After), then
// hands over to next.
type flaky struct {
	mu         sync.Mutex
	n, seen    int
	status     int
	retryAfter string
	next       http.Handler
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.seen++
	fail := f.seen <= f.n
	f.mu.Unlock()
	if fail {
		if f.retryAfter != "" {
			w.Header().Set("Retry-After", f.retryAfter)
		}
		http.Error(w, "busy", f.status)
		return
	}
	f.next.ServeHTTP(w, r)
}

func TestRetryPerRequest(t *testing.T) {
	for _, tc := range []struct {
		status, failures, retries int
		retryAfter                string
		wantOK                    bool
		wantSeen                  int
		wantWait                  time.Duration // the least wait OnRetry is told of
	}{
		{status: 503, failures: 2, retries: 3, wantOK: true, wantSeen: 3},
		{status: 429, failures: 1, retries: 1, retryAfter: "1", wantOK: true, wantSeen: 2, wantWait: time.Second},
		{status: 502, failures: 5, retries: 2, wantOK: false, wantSeen: 3},
		{status: 404, failures: 5, retries: 3, wantOK: false, wantSeen: 1}, // final: never retried
		{status: 403, failures: 5, retries: 3, wantOK: false, wantSeen: 1},
	} {
		t.Run(fmt.Sprintf("%d×%d", tc.status, tc.failures), func(t *testing.T) {
			reg, d, blob := newFake(t, "app")
			fl := &flaky{n: tc.failures, status: tc.status, retryAfter: tc.retryAfter, next: reg}
			srv := httptest.NewServer(fl)
			defer srv.Close()
			u, _ := url.Parse(srv.URL)
			var waits []time.Duration
			c := New([]Endpoint{{Scheme: "http", Host: u.Host, Path: "/v2", Repository: "app", Resolve: true}}, Hooks{
				Retries: tc.retries, RetryDelay: time.Millisecond,
				OnRetry: func(_ string, _, _ int, wait time.Duration, _ error) { waits = append(waits, wait) },
			})
			rc, _, err := c.Blob(context.Background(), d, int64(len(blob)))
			if (err == nil) != tc.wantOK {
				t.Fatalf("err = %v, want ok=%v", err, tc.wantOK)
			}
			if err == nil && !bytes.Equal(readAll(t, rc), blob) {
				t.Error("wrong blob after retries")
			}
			if fl.seen != tc.wantSeen {
				t.Errorf("%d requests, want %d", fl.seen, tc.wantSeen)
			}
			if len(waits) != tc.wantSeen-1 {
				t.Errorf("OnRetry told %d times, want %d", len(waits), tc.wantSeen-1)
			}
			for _, w := range waits {
				if w < tc.wantWait {
					t.Errorf("waited %v, less than Retry-After %v", w, tc.wantWait)
				}
			}
		})
	}
}

func TestBlobFromOffset(t *testing.T) {
	for _, noRange := range []bool{false, true} {
		f, d, blob := newFake(t, "app")
		f.noRange = noRange
		c := New([]Endpoint{endpointOf(t, f)}, Hooks{})
		rc, n, err := c.BlobFrom(context.Background(), d, int64(len(blob)), 40000)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, rc); !bytes.Equal(got, blob[40000:]) || n != int64(len(blob)) {
			t.Errorf("noRange=%v: %d bytes (size %d), want %d (size %d)", noRange, len(got), n, len(blob)-40000, len(blob))
		}
	}
	c := New(nil, Hooks{})
	if _, _, err := c.BlobFrom(context.Background(), digest.FromString("x"), 10, 11); err == nil {
		t.Error("an offset past the size was accepted")
	}
}

// A 400 whose error body is a megabyte long (read only in part) with the
// code UNAVAILABLE: the code is still read, and the request is retried like
// a 5xx (containers/common retries on the code whatever the status).
func TestHugeErrorBodyKeepsItsCode(t *testing.T) {
	var mu sync.Mutex
	asked := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"errors":[{"code":"UNAVAILABLE","message":"` + strings.Repeat("busy ", 1<<18) + `"}]}`))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	c := New([]Endpoint{{Scheme: "http", Host: u.Host, Path: "/v2", Repository: "app", Resolve: true}}, Hooks{Retries: 2})
	_, _, _, err := c.Manifest(context.Background(), "latest", nil, 1<<20)
	var se *StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusBadRequest || se.Code != "UNAVAILABLE" {
		t.Fatalf("err = %v, want a 400 with the code UNAVAILABLE", err)
	}
	if !strings.HasPrefix(se.Message, "busy busy") || len(se.Message) > 210 {
		t.Errorf("message %q: want the start of the registry's, bounded", se.Message)
	}
	mu.Lock()
	defer mu.Unlock()
	if asked != 3 {
		t.Errorf("asked %d times, want 3 (two retries)", asked)
	}
}

func TestFirstErrorOfACutBody(t *testing.T) {
	for _, tc := range []struct {
		body, code, msg string
		ok              bool
	}{
		{`{"errors":[{"code":"UNAVAILABLE","message":"bus`, "UNAVAILABLE", "bus", true},
		{`{"other":{"a":[1,2]},"errors":[{"message":"m","code":"DENIED"},{"code":"X"`, "DENIED", "m", true},
		{`{"errors":[{"message":"cut before the co`, "", "", false},
		{`{"errors":[{"code":"not a code!"}]}`, "", "", false},
		{`["errors"]`, "", "", false},
	} {
		code, msg, ok := firstError([]byte(tc.body))
		if code != tc.code || msg != tc.msg || ok != tc.ok {
			t.Errorf("%s: %q %q %v, want %q %q %v", tc.body, code, msg, ok, tc.code, tc.msg, tc.ok)
		}
	}
}

// WithReceived: the manifest's body is told chunk by chunk, every byte.
func TestManifestBytesAreTold(t *testing.T) {
	f, _, _ := newFake(t, "app")
	c := New([]Endpoint{endpointOf(t, f)}, Hooks{})
	var told int
	raw, _, _, err := c.Manifest(WithReceived(context.Background(), func(n int) { told += n }), "latest", nil, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if told != len(raw) || told == 0 {
		t.Errorf("told %d bytes of a %d-byte manifest", told, len(raw))
	}
}

// An insecure endpoint (HTTPFallback) named https on a server that speaks
// plain http: containers/image's detectPropertiesHelper asks /v2/ over
// https, then over http, and uses http from then on. Without HTTPFallback
// the plain-http answer is final (http.ErrSchemeMismatch, never retried).
func TestHTTPFallbackAfterPing(t *testing.T) {
	f, _, _ := newFake(t, "ns/app")
	ep := endpointOf(t, f)
	ep.Scheme, ep.HTTPFallback = "https", true
	c := New([]Endpoint{ep}, Hooks{})
	defer c.Close()
	if _, _, _, err := c.Manifest(context.Background(), "latest", nil, 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := c.Manifest(context.Background(), "latest", nil, 1<<20); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, r := range f.requests() {
		paths = append(paths, r.URL.Path)
	}
	if want := "/v2/ /v2/ns/app/manifests/latest /v2/ns/app/manifests/latest"; strings.Join(paths, " ") != want {
		t.Errorf("requests %q, want %q (one ping over http, then the manifests)", strings.Join(paths, " "), want)
	}

	ep.HTTPFallback = false
	retried := 0
	c = New([]Endpoint{ep}, Hooks{Retries: 2, RetryDelay: time.Millisecond,
		OnRetry: func(string, int, int, time.Duration, error) { retried++ }})
	defer c.Close()
	_, _, _, err := c.Manifest(context.Background(), "latest", nil, 1<<20)
	if !errors.Is(err, http.ErrSchemeMismatch) {
		t.Fatalf("err = %v, want http.ErrSchemeMismatch", err)
	}
	if retried != 0 {
		t.Errorf("retried %d times, want 0 (final)", retried)
	}
}

// An insecure endpoint that answers neither over https nor over http: the
// error names both and unwraps to the https failure.
func TestHTTPFallbackNeitherAnswers(t *testing.T) {
	ep := Endpoint{Scheme: "https", Host: closedPort(t), Path: "/v2", Repository: "app", Resolve: true, HTTPFallback: true}
	c := New([]Endpoint{ep}, Hooks{})
	defer c.Close()
	_, _, _, err := c.Manifest(context.Background(), "latest", nil, 1<<20)
	var pe *probeError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "over plain http") {
		t.Fatalf("err = %v, want both failures named", err)
	}
}

// containerd's httpFallback (TLSFallback): a host configured http:// with TLS
// settings is asked over https; when it answers in plain HTTP the same
// request goes over http, and so does every later one (no ping, no second
// https try). An https host whose certificate is not trusted is not such a
// failure: the error stays, and nothing goes over plain http.
func TestTLSFallbackOnPlainHTTPAnswer(t *testing.T) {
	f, _, _ := newFake(t, "ns/app")
	ep := endpointOf(t, f)
	ep.Scheme, ep.TLSFallback = "https", true
	var logs strings.Builder
	c := New([]Endpoint{ep}, Hooks{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	defer c.Close()
	for i := 0; i < 2; i++ {
		if _, _, _, err := c.Manifest(context.Background(), "latest", nil, 1<<20); err != nil {
			t.Fatalf("manifest %d: %v", i, err)
		}
	}
	var paths []string
	for _, r := range f.requests() {
		paths = append(paths, r.URL.Path)
	}
	if want := "/v2/ns/app/manifests/latest /v2/ns/app/manifests/latest"; strings.Join(paths, " ") != want {
		t.Errorf("requests %q, want %q (the manifests over http, no ping)", strings.Join(paths, " "), want)
	}
	if n := strings.Count(logs.String(), "using http from now on"); n != 1 {
		t.Errorf("the fallback was logged %d times, want once: %s", n, logs.String())
	}

	// A TLS server whose certificate the endpoint does not trust.
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	ep2 := Endpoint{Scheme: "https", Host: hostOf(t, srv), Path: "/v2", Repository: "app", Resolve: true, TLSFallback: true}
	c2 := New([]Endpoint{ep2}, Hooks{})
	defer c2.Close()
	_, _, _, err := c2.Manifest(context.Background(), "latest", nil, 1<<20)
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("err = %v, want the untrusted certificate's error", err)
	}
	if c2.hosts[0].currentScheme() != "https" {
		t.Errorf("an untrusted certificate made the endpoint use %s", c2.hosts[0].currentScheme())
	}
}

// containerd's isPortError: a refused or timed-out connection falls back to
// http only when the host names no port (443 refused: try 80).
func TestTLSFallbackPortRule(t *testing.T) {
	refused := &url.Error{Op: "Get", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	for _, tc := range []struct {
		host, url string
		fallback  bool
		want      bool
	}{
		{"reg.example", "https://reg.example/v2/", true, true},
		{"reg.example:5000", "https://reg.example:5000/v2/", true, false},
		{"reg.example", "https://cdn.example/blob", true, false}, // a redirect target's failure
		{"reg.example", "https://reg.example/v2/", false, false},
	} {
		refused.URL = tc.url
		h := &host{ep: Endpoint{Host: tc.host, TLSFallback: tc.fallback}}
		if got := h.tlsFallback(refused); got != tc.want {
			t.Errorf("host %s, %s refused, TLSFallback %v: fallback %v, want %v", tc.host, tc.url, tc.fallback, got, tc.want)
		}
	}
}
