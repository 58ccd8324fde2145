package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseRulesRejects(t *testing.T) {
	for name, text := range map[string]string{
		"not an array":      `{"status": 500}`,
		"unknown key":       `[{"status": 500, "sttaus": 1}]`,
		"no action":         `[{"match": {"path": "x"}}]`,
		"two actions":       `[{"drop": true, "reset_after": 1}]`,
		"status with reset": `[{"reset_after": 1, "status": 500}]`,
		"bad regexp":        `[{"drop": true, "match": {"path": "("}}]`,
		"negative bytes":    `[{"stall_after": -1}]`,
		"bad status":        `[{"status": 42}]`,
		"fractional retry":  `[{"status": 503, "retry_after": 1.5}]`,
		"bad count":         `[{"drop": true, "count": -2}]`,
		"empty header name": `[{"require_header": "=x"}]`,
		"trailing data":     `[] []`,
	} {
		if _, err := ParseRules([]byte(text)); err == nil {
			t.Errorf("%s: %s parsed", name, text)
		}
	}
}

func TestParseRulesActions(t *testing.T) {
	rules, err := ParseRules([]byte(`[
		{"status": 503, "retry_after": 2},
		{"reset_after": 0}, {"stall_after": 5}, {"close_after": 5}, {"flip_byte": 0},
		{"content_length": 3}, {"trickle": 100}, {"require_header": "X-A=b", "status": 401},
		{"ignore_range": true}, {"drop": true}]`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := range rules {
		got = append(got, rules[i].Action())
	}
	want := "status reset_after stall_after close_after flip_byte content_length trickle require_header ignore_range drop"
	if strings.Join(got, " ") != want {
		t.Errorf("actions %v, want %s", got, want)
	}
	if rules[0].RetryAfterValue() != "2" || rules[1].Limit() != 0 || rules[2].Limit() != 5 || rules[6].Limit() != -1 {
		t.Errorf("retry_after %q, limits %d %d %d", rules[0].RetryAfterValue(), rules[1].Limit(), rules[2].Limit(), rules[6].Limit())
	}
}

func TestMatches(t *testing.T) {
	rules, err := ParseRules([]byte(`[{"drop": true, "match": {"method": "get", "path": "/blobs/sha256:",
		"query": ["ns", "!skip"], "header": ["Range", "!If-Range"]}}]`))
	if err != nil {
		t.Fatal(err)
	}
	req := func(method, target string, headers ...string) *http.Request {
		r := httptest.NewRequest(method, target, nil)
		for _, h := range headers {
			r.Header.Set(h, "x")
		}
		return r
	}
	for _, c := range []struct {
		r    *http.Request
		want bool
	}{
		{req("GET", "/v2/a/blobs/sha256:1?ns=r", "Range"), true},
		{req("HEAD", "/v2/a/blobs/sha256:1?ns=r", "Range"), false},
		{req("GET", "/v2/a/manifests/x?ns=r", "Range"), false},
		{req("GET", "/v2/a/blobs/sha256:1", "Range"), false},
		{req("GET", "/v2/a/blobs/sha256:1?ns=r&skip=1", "Range"), false},
		{req("GET", "/v2/a/blobs/sha256:1?ns=r"), false},
		{req("GET", "/v2/a/blobs/sha256:1?ns=r", "Range", "If-Range"), false},
	} {
		if got := rules[0].Matches(c.r); got != c.want {
			t.Errorf("%s %s %v: matches %v, want %v", c.r.Method, c.r.URL, c.r.Header, got, c.want)
		}
	}
}

// writeRules replaces path by rename, as tests/faultproxy.bash does.
func writeRules(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

func TestRuleSetCountsAndReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.json")
	s := NewRuleSet(path)
	r := httptest.NewRequest("GET", "/v2/", nil)
	pick := func() string {
		rule, idx, err := s.Pick(r)
		if err != nil {
			return "error"
		}
		if rule == nil {
			return "-"
		}
		return rule.Action() + string(rune('0'+idx))
	}
	if got := pick(); got != "-" {
		t.Fatalf("no file: %s", got)
	}
	writeRules(t, path, `[{"count": 2, "status": 500}, {"count": 1, "drop": true}]`)
	var got []string
	for range 5 {
		got = append(got, pick())
	}
	if strings.Join(got, " ") != "status0 status0 drop1 - -" {
		t.Errorf("picks %v", got)
	}
	writeRules(t, path, `[{"count": 2, "status": 500}, {"count": 1, "drop": true}]`)
	if got := pick(); got != "status0" {
		t.Errorf("after replacing the file with the same rules: %s, want the counts restarted", got)
	}
	writeRules(t, path, `[{"count": 1, "status": 5000}]`)
	if got := pick(); got != "error" {
		t.Errorf("bad file: %s", got)
	}
	writeRules(t, path, `[]`)
	if got := pick(); got != "-" {
		t.Errorf("empty rules: %s", got)
	}
}

// startProxy runs a proxy in front of a 10000-byte upstream body.
func startProxy(t *testing.T, rules string) (*httptest.Server, string) {
	t.Helper()
	body := bytes.Repeat([]byte("0123456789"), 1000)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen-Range", r.Header.Get("Range"))
		w.Header().Set("X-Seen-Auth", r.Header.Get("Authorization"))
		http.ServeContent(w, r, "blob", time.Time{}, bytes.NewReader(body))
	}))
	t.Cleanup(up.Close)
	dir := t.TempDir()
	writeRules(t, filepath.Join(dir, "rules"), rules)
	logf, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	p := &proxy{upstream: mustURL(t, up.URL), transport: &http.Transport{DisableCompression: true},
		rules: NewRuleSet(filepath.Join(dir, "rules")), maxHold: time.Second, logW: logf}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return srv, filepath.Join(dir, "log")
}

func lastEntry(t *testing.T, log string) entry {
	t.Helper()
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	var e entry
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &e); err != nil {
		t.Fatalf("log line %q: %v", lines[len(lines)-1], err)
	}
	return e
}

func get(t *testing.T, url string, headers ...string) (*http.Response, []byte, error) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

func TestProxyFaults(t *testing.T) {
	for _, c := range []struct {
		name, rules  string
		headers      []string
		status       int
		bytes        int
		wantErr      bool
		errHas       string
		check        func(*http.Response, []byte) string
		logBytes     int64
		logAction    string
		logUpstreamS int
	}{
		{name: "clean, headers kept", rules: `[]`, headers: []string{"Authorization", "Basic eDp5", "Range", "bytes=10-19"},
			status: 206, bytes: 10, logBytes: 10, logUpstreamS: 206,
			check: func(r *http.Response, b []byte) string {
				if r.Header.Get("X-Seen-Auth") != "Basic eDp5" || string(b) != "0123456789" {
					return "auth or range not forwarded: " + r.Header.Get("X-Seen-Auth") + " " + string(b)
				}
				return ""
			}},
		{name: "status", rules: `[{"status": 429, "retry_after": 3, "headers": {"X-A": "b"}, "body": "slow down"}]`,
			status: 429, bytes: 9, logBytes: 9, logAction: "status",
			check: func(r *http.Response, b []byte) string {
				if r.Header.Get("Retry-After") != "3" || r.Header.Get("X-A") != "b" {
					return "headers: " + r.Header.Get("Retry-After") + r.Header.Get("X-A")
				}
				return ""
			}},
		{name: "reset", rules: `[{"reset_after": 1000}]`, status: 200, bytes: 1000, wantErr: true, errHas: "connection reset by peer", logBytes: 1000, logAction: "reset_after", logUpstreamS: 200},
		{name: "close", rules: `[{"close_after": 1234}]`, status: 200, bytes: 1234, wantErr: true, errHas: "unexpected EOF", logBytes: 1234, logAction: "close_after", logUpstreamS: 200},
		{name: "stall ends at max-hold", rules: `[{"stall_after": 10}]`, status: 200, bytes: 10, wantErr: true, logBytes: 10, logAction: "stall_after", logUpstreamS: 200},
		{name: "flip", rules: `[{"flip_byte": 5000}]`, status: 200, bytes: 10000, logBytes: 10000, logAction: "flip_byte", logUpstreamS: 200,
			check: func(_ *http.Response, b []byte) string {
				if b[5000] != '0'^0xff || b[4999] != '9' || b[5001] != '1' {
					return "byte 5000 not flipped alone"
				}
				return ""
			}},
		{name: "content length", rules: `[{"content_length": 100}]`, status: 200, bytes: 100, logBytes: 100, logAction: "content_length", logUpstreamS: 200},
		{name: "ignore range", rules: `[{"ignore_range": true}]`, headers: []string{"Range", "bytes=10-19"},
			status: 200, bytes: 10000, logBytes: 10000, logAction: "ignore_range", logUpstreamS: 200},
		{name: "trickle", rules: `[{"trickle": 200000}]`, status: 200, bytes: 10000, logBytes: 10000, logAction: "trickle", logUpstreamS: 200},
		{name: "require header missing", rules: `[{"require_header": "X-Reg=a"}]`, headers: []string{"X-Reg", "b"},
			status: 403, logAction: "require_header"},
		{name: "require header present", rules: `[{"require_header": "X-Reg=a"}]`, headers: []string{"X-Reg", "a"},
			status: 200, bytes: 10000, logBytes: 10000, logAction: "require_header", logUpstreamS: 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, log := startProxy(t, c.rules)
			resp, b, err := get(t, srv.URL+"/v2/x/blobs/sha256:1", c.headers...)
			if resp == nil {
				t.Fatalf("no response: %v", err)
			}
			if (err != nil) != c.wantErr || resp.StatusCode != c.status || len(b) != c.bytes {
				t.Errorf("status %d, %d bytes, error %v; want %d, %d bytes, error %v", resp.StatusCode, len(b), err, c.status, c.bytes, c.wantErr)
			}
			if c.errHas != "" && (err == nil || !strings.Contains(err.Error(), c.errHas)) {
				t.Errorf("error %v, want one with %q", err, c.errHas)
			}
			if c.check != nil {
				if msg := c.check(resp, b); msg != "" {
					t.Error(msg)
				}
			}
			e := lastEntry(t, log)
			if e.Bytes != c.logBytes || e.Action != c.logAction || e.Upstream != c.logUpstreamS || e.Status != c.status {
				t.Errorf("log %+v; want bytes %d action %q upstream %d status %d", e, c.logBytes, c.logAction, c.logUpstreamS, c.status)
			}
			start, err1 := time.Parse(time.RFC3339Nano, e.Time)
			end, err2 := time.Parse(time.RFC3339Nano, e.End)
			if err1 != nil || err2 != nil || end.Before(start) {
				t.Errorf("log times %q .. %q: want end at or after time (%v, %v)", e.Time, e.End, err1, err2)
			}
			if c.logAction == "trickle" && e.Writes < 10000/(200000/20) {
				t.Errorf("trickle: %d writes for 10000 bytes in pieces of %d", e.Writes, 200000/20)
			}
			for _, h := range e.Headers {
				if h == "Authorization" && strings.Contains(mustJSON(t, e), "eDp5") {
					t.Errorf("the Authorization value is logged: %+v", e)
				}
			}
		})
	}
}

func TestProxyDrop(t *testing.T) {
	srv, log := startProxy(t, `[{"drop": true}]`)
	if resp, _, err := get(t, srv.URL+"/v2/"); err == nil {
		t.Fatalf("dropped request answered %d", resp.StatusCode)
	}
	if e := lastEntry(t, log); e.Action != "drop" || e.Status != 0 {
		t.Errorf("log %+v", e)
	}
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustURL(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Over TLS a reset must be a TCP reset, not a TLS close_notify followed by
// one (which a client reads as a clean end of the stream).
func TestProxyResetOverTLS(t *testing.T) {
	dir := t.TempDir()
	writeRules(t, filepath.Join(dir, "rules"), `[{"reset_after": 1000}]`)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(bytes.Repeat([]byte("x"), 100000))
	}))
	defer up.Close()
	p := &proxy{upstream: mustURL(t, up.URL), transport: &http.Transport{DisableCompression: true},
		rules: NewRuleSet(filepath.Join(dir, "rules")), maxHold: time.Second}
	srv := httptest.NewTLSServer(p)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/blob")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if len(b) != 1000 || err == nil || !strings.Contains(err.Error(), "connection reset by peer") {
		t.Errorf("got %d bytes and error %v, want 1000 and a connection reset", len(b), err)
	}
}

// A stall ends when its client goes, well before -max-hold (20s here).
func TestStallEndsWithClient(t *testing.T) {
	dir := t.TempDir()
	writeRules(t, filepath.Join(dir, "rules"), `[{"stall_after": 10}]`)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(bytes.Repeat([]byte("x"), 1000))
	}))
	defer up.Close()
	p := &proxy{upstream: mustURL(t, up.URL), transport: &http.Transport{DisableCompression: true},
		rules: NewRuleSet(filepath.Join(dir, "rules")), maxHold: 20 * time.Second}
	var active atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		active.Add(1)
		defer active.Add(-1)
		p.ServeHTTP(w, r)
	}))
	defer srv.Close()
	tr := &http.Transport{}
	req, err := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/blob", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	if active.Load() != 1 {
		t.Fatalf("%d handlers active while the stall holds, want 1", active.Load())
	}
	resp.Body.Close() // the client goes
	tr.CloseIdleConnections()
	for deadline := time.Now().Add(10 * time.Second); active.Load() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stall still holds 10s after its client went")
		}
	}
}

// The files the proxy writes must be named absolutely: a relative -log or
// -port-file would land in the caller's working directory (the repository
// root, when a test or a person starts it from there). Nothing is created.
func TestRelativeOutputPathsRefused(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, c := range []struct{ port, log, flag string }{
		{"port", filepath.Join(dir, "log.abs"), "-port-file"},
		{filepath.Join(dir, "port.abs"), "log", "-log"},
	} {
		err := run("https://127.0.0.1:1", "", c.port, "", "", true, "", c.log, "", time.Second, time.Second)
		if err == nil || !strings.Contains(err.Error(), c.flag+" ") || !strings.Contains(err.Error(), "absolute path") {
			t.Errorf("%s relative: %v, want an error naming %s", c.flag, err, c.flag)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the refused runs created %v", ents)
	}
}
