package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/internal/failure"
)

// recorder is a server that records what reached it.
type recorder struct {
	mu   sync.Mutex
	reqs []recorded
	srv  *httptest.Server
}

type recorded struct {
	method, path string
	header       http.Header
	body         string
}

func newRecorder(t *testing.T, h func(w http.ResponseWriter, r *http.Request)) *recorder {
	rec := &recorder{}
	rec.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, recorded{method: r.Method, path: r.URL.Path, header: r.Header.Clone(), body: string(b)})
		rec.mu.Unlock()
		if h != nil {
			h(w, r)
		}
	}))
	t.Cleanup(rec.srv.Close)
	return rec
}

func (r *recorder) all() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.reqs...)
}

// bearerRegistry serves "blob" to a request with the bearer token "tok",
// and sends any other to realm (service "reg").
func bearerRegistry(t *testing.T, realm string) *recorder {
	return newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+realm+`",service="reg"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, "blob")
	})
}

func hostOf(t *testing.T, s *httptest.Server) string {
	t.Helper()
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// A redirect target of another origin (a CDN) that answers 401 with a
// Bearer challenge must not make the endpoint send its credential to the
// realm the redirect target names: that challenge is not the endpoint's.
func TestRedirectTargetChallengeNotTrusted(t *testing.T) {
	t.Run("blob", func(t *testing.T) { testRedirectTargetChallenge(t, false) })
	// The 401 names no challenge, and the ping of /v2/ is redirected.
	t.Run("ping", func(t *testing.T) { testRedirectTargetChallenge(t, true) })
}

func testRedirectTargetChallenge(t *testing.T, ping bool) {
	evil := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"token":"stolen"}`)
	})
	cdn := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="`+evil.srv.URL+`/token",service="cdn"`)
		w.WriteHeader(http.StatusUnauthorized)
	})
	reg := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if ping && r.URL.Path != "/v2/" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		http.Redirect(w, r, cdn.srv.URL+"/storage/blob", http.StatusTemporaryRedirect)
	})
	var realms []string
	c := New([]Endpoint{{Scheme: "http", Host: hostOf(t, reg.srv), Path: "/v2", Repository: "app", Resolve: true,
		Credential: &Credential{Username: "reguser", Password: "regpass"}}},
		Hooks{Realm: func(_ *Endpoint, u *url.URL) error { realms = append(realms, u.String()); return nil }})
	rc, _, err := c.Blob(context.Background(), digest.FromString("blob"), -1)
	if err == nil {
		rc.Close()
		t.Fatal("a blob the redirect target refused was served")
	}
	for _, r := range evil.all() {
		if u, p, ok := (&http.Request{Header: r.header}).BasicAuth(); ok {
			t.Errorf("the redirect target's realm got the endpoint's credential %s:%s", u, p)
		}
	}
	if len(evil.all()) != 0 || len(realms) != 0 {
		t.Errorf("a realm named by the redirect target was asked (hook saw %v, realm got %d requests)", realms, len(evil.all()))
	}
	var se *StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusUnauthorized {
		t.Errorf("err = %v, want the 401 as a StatusError", err)
	}
}

// The endpoint's hosts.toml headers (which may be secrets) go to the host
// and its token realm, not to a redirect target of another origin.
func TestRedirectDropsEndpointHeaders(t *testing.T) {
	cdn := newRecorder(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "blob") })
	reg := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v2/app/blobs/") {
			http.Redirect(w, r, cdn.srv.URL+"/storage/blob", http.StatusTemporaryRedirect)
			return
		}
		http.NotFound(w, r)
	})
	c := New([]Endpoint{{Scheme: "http", Host: hostOf(t, reg.srv), Path: "/v2", Repository: "app", Resolve: true,
		Header: http.Header{"X-Mirror-Secret": {"hdr-s3cret"}}}}, Hooks{})
	rc, _, err := c.Blob(context.Background(), digest.FromString("blob"), -1)
	if err != nil {
		t.Fatal(err)
	}
	if string(readAll(t, rc)) != "blob" {
		t.Fatal("redirected body not read")
	}
	if got := reg.all(); len(got) == 0 || got[0].header.Get("X-Mirror-Secret") != "hdr-s3cret" {
		t.Fatal("the endpoint itself did not get its header")
	}
	for _, r := range cdn.all() {
		if v := r.header.Get("X-Mirror-Secret"); v != "" {
			t.Errorf("the redirect target of another origin got the endpoint's header X-Mirror-Secret: %q", v)
		}
	}
}

// An identity token goes to the realm in a POST body; a 307/308 of the
// realm to another origin must not carry that body there.
func TestTokenRedirectCarriesNoIdentityToken(t *testing.T) {
	other := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"access_token":"tok"}`)
	})
	realm := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.srv.URL+"/token", http.StatusTemporaryRedirect)
	})
	reg := bearerRegistry(t, realm.srv.URL+"/token")
	c := New([]Endpoint{{Scheme: "http", Host: hostOf(t, reg.srv), Path: "/v2", Repository: "app", Resolve: true,
		Credential: &Credential{IdentityToken: "refresh-s3cret"}}}, Hooks{Retries: 2, RetryDelay: time.Millisecond})
	rc, _, err := c.Blob(context.Background(), digest.FromString("blob"), -1)
	if err == nil {
		rc.Close()
		t.Error("served with a token the realm never granted")
	} else if failure.CodeOf(err) != failure.TLS {
		t.Errorf("err = %v (code %v), want a refused redirect (tls)", err, failure.CodeOf(err))
	}
	if n := len(realm.all()); n != 1 {
		t.Errorf("the realm was asked %d times, want once (a refused redirect is final)", n)
	}
	for _, r := range other.all() {
		if strings.Contains(r.body, "refresh-s3cret") {
			t.Errorf("the realm's redirect target of another origin got the identity token: %s %s body %q", r.method, r.path, r.body)
		}
	}
}

// What a server writes into its error answers may echo the credential, a
// token or a header value: none of them reaches an error message.
func TestErrorTextRedactsSecrets(t *testing.T) {
	const (
		pass   = "pa55-s3cret-word"
		hdrVal = "hdr-s3cret-value"
	)
	reg := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, `{"errors":[{"code":"DENIED","message":"password `+pass+` and header `+hdrVal+` refused"}]}`)
	})
	raw := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, "you sent "+r.Header.Get("Authorization")+" and "+r.Header.Get("X-Secret"))
	})
	for _, srv := range []*recorder{reg, raw} {
		c := New([]Endpoint{{Scheme: "http", Host: hostOf(t, srv.srv), Path: "/v2", Repository: "app", Resolve: true,
			Header:     http.Header{"X-Secret": {hdrVal}},
			Credential: &Credential{Username: "user", Password: pass}}}, Hooks{})
		// A Basic challenge first, so that the credential is sent.
		c.hosts[0].challenges = []challenge{{scheme: "basic", params: map[string]string{}}}
		_, _, _, err := c.Manifest(context.Background(), "latest", nil, 1<<20)
		if err == nil {
			t.Fatal("a refused manifest was served")
		}
		msg := err.Error()
		basic := (&http.Request{Header: http.Header{}})
		basic.SetBasicAuth("user", pass)
		for _, s := range []string{pass, hdrVal, strings.TrimPrefix(basic.Header.Get("Authorization"), "Basic ")} {
			if strings.Contains(msg, s) {
				t.Errorf("error text holds a secret %q: %s", s, msg)
			}
		}
	}
}

// A server's text in an error is sanitized and bounded: a realm it names
// (non-ASCII, up to the 8 KiB a challenge may have), a header line Go
// quotes in its error, a Content-Range.
func TestHostileTextInErrorsBounded(t *testing.T) {
	long := strings.Repeat("A", 7000)
	for name, h := range map[string]func(w http.ResponseWriter, r *http.Request){
		"realm": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("WWW-Authenticate", "Bearer realm=\"ftp://x/\u202e\u00e9"+long+"\"")
			w.WriteHeader(http.StatusUnauthorized)
		},
		"malformed header": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Junk", "\x1b[2J"+long)
			w.WriteHeader(http.StatusOK)
		},
		"content-range": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Range", "bytes \u202e"+long)
			w.WriteHeader(http.StatusPartialContent)
		},
	} {
		t.Run(name, func(t *testing.T) {
			srv := newRecorder(t, h)
			c := New([]Endpoint{{Scheme: "http", Host: hostOf(t, srv.srv), Path: "/v2", Repository: "app", Resolve: true}}, Hooks{})
			var err error
			if name == "content-range" {
				_, _, err = c.BlobFrom(context.Background(), digest.FromString("blob"), 1<<20, 5)
			} else {
				_, _, _, err = c.Manifest(context.Background(), "latest", nil, 1<<20)
			}
			if err == nil {
				t.Fatal("served")
			}
			msg := err.Error()
			if strings.IndexFunc(msg, func(r rune) bool { return (r < 0x20 || r > 0x7e) && r != '…' }) >= 0 || len(msg) > 1500 {
				t.Errorf("a server's text is not sanitized or bounded in the error (%d bytes): %q", len(msg), msg[:min(len(msg), 300)])
			}
		})
	}
}

// A redirect target's query (a presigned storage URL: a bearer secret of
// the registry's for its blob) never reaches an error message, which Go
// would fill with the URL of the request that failed.
func TestRedirectQueryNotInErrors(t *testing.T) {
	cdn := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		hj, ok := w.(http.Hijacker)
		if !ok {
			t.Error("no hijacker")
			return
		}
		c, _, _ := hj.Hijack()
		_ = c.Close() // the connection is cut before any answer
	})
	reg := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, cdn.srv.URL+"/bucket/blob?X-Amz-Credential=AKIDSECRET&X-Amz-Signature=SIGSECRET", http.StatusTemporaryRedirect)
	})
	c := New([]Endpoint{{Scheme: "http", Host: hostOf(t, reg.srv), Path: "/v2", Repository: "app", Resolve: true}}, Hooks{})
	_, _, err := c.Blob(context.Background(), digest.FromString("blob"), -1)
	if err == nil {
		t.Fatal("served")
	}
	if len(cdn.all()) == 0 {
		t.Fatal("the redirect was not followed")
	}
	if msg := err.Error(); strings.Contains(msg, "SIGSECRET") || strings.Contains(msg, "AKIDSECRET") {
		t.Errorf("the redirect target's query is in the error: %s", msg)
	}
}

// containerd's authorizer (core/remotes/docker/authorizer.go fetchToken)
// asks a realm that answers the refresh-token POST (FetchTokenWithOAuth)
// with 404, 401 or 400 again as a GET with the identity token as Basic
// password and no user (FetchToken); containers/image does not. The
// fallback is OAuthFallback's, and the token goes only to that realm.
func TestIdentityTokenOAuthFallback(t *testing.T) {
	for _, status := range []int{http.StatusNotFound, http.StatusUnauthorized, http.StatusBadRequest, http.StatusMethodNotAllowed} {
		for _, fallback := range []bool{true, false} {
			realm := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost {
					w.WriteHeader(status)
					return
				}
				if u, p, ok := r.BasicAuth(); !ok || u != "" || p != "refresh-s3cret" {
					w.WriteHeader(http.StatusUnauthorized)
					return
				}
				_, _ = io.WriteString(w, `{"token":"tok"}`)
			})
			reg := bearerRegistry(t, realm.srv.URL+"/token")
			c := New([]Endpoint{{Scheme: "http", Host: hostOf(t, reg.srv), Path: "/v2", Repository: "app", Resolve: true,
				Credential: &Credential{IdentityToken: "refresh-s3cret", OAuthFallback: fallback}}}, Hooks{Retries: 1, RetryDelay: time.Millisecond})
			rc, _, err := c.Blob(context.Background(), digest.FromString("blob"), -1)
			// 405 falls back only with a username (there is none here).
			want := fallback && status != http.StatusMethodNotAllowed
			if (err == nil) != want {
				t.Errorf("status %d, fallback %v: err = %v, want served %v", status, fallback, err, want)
			}
			if err == nil {
				rc.Close()
			} else if strings.Contains(err.Error(), "refresh-s3cret") {
				t.Errorf("the token is in the error: %v", err)
			}
			var methods []string
			for _, r := range realm.all() {
				methods = append(methods, r.method)
			}
			if want && (len(methods) < 2 || methods[0] != http.MethodPost || methods[1] != http.MethodGet) {
				t.Errorf("status %d: realm requests %v, want POST then GET", status, methods)
			}
			for i, m := range methods {
				if m == http.MethodGet && !want {
					t.Errorf("status %d, fallback %v: request %d to the realm is a GET", status, fallback, i)
				}
			}
		}
	}
}

// The realm's GET of the OAuth fallback sends the identity token as Basic
// ":"+token; a realm that echoes it in its refusal must not put that
// encoding (or the token) in the error text.
func TestIdentityTokenBasicEncodingRedacted(t *testing.T) {
	const tok = "refresh-s3cret-identity-token"
	realm := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"bad `+r.Header.Get("Authorization")+`"}]}`)
	})
	reg := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="`+realm.srv.URL+`/token",service="reg"`)
		w.WriteHeader(http.StatusUnauthorized)
	})
	c := New([]Endpoint{{Scheme: "http", Host: hostOf(t, reg.srv), Path: "/v2", Repository: "app", Resolve: true,
		Credential: &Credential{IdentityToken: tok, OAuthFallback: true}}}, Hooks{Retries: 1, RetryDelay: time.Millisecond})
	rc, _, err := c.Blob(context.Background(), digest.FromString("blob"), -1)
	if err == nil {
		rc.Close()
		t.Fatal("a blob was served although the realm refused the token")
	}
	gets := 0
	for _, r := range realm.all() {
		if r.method == http.MethodGet {
			gets++
		}
	}
	if gets == 0 {
		t.Fatal("the realm saw no GET: the fallback under test did not run")
	}
	basic := (&http.Request{Header: http.Header{}})
	basic.SetBasicAuth("", tok)
	for _, s := range []string{tok, strings.TrimPrefix(basic.Header.Get("Authorization"), "Basic ")} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error text holds a secret %q: %v", s, err)
		}
	}
	if !strings.Contains(err.Error(), "[redacted]") {
		t.Errorf("error text = %v; want the echoed credential shown as [redacted]", err)
	}
}

// A server that echoes the password inside a JSON error (encoding/json
// escapes & < > as \u0026 \u003c \u003e and " as \"; a hostile one may
// escape any character), inside a Content-Range the client quotes with %q,
// or percent-encoded as a form carries it: none of these forms, nor the
// decoded one, reaches the error text.
func TestEscapedEchoIsRedacted(t *testing.T) {
	const pass = `Tr0ub4dor&3<"x>`
	jsonError := func(w http.ResponseWriter, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, `{"errors":[{"code":"DENIED","message":"bad password `+msg+`"}]}`)
	}
	cases := map[string]func(w http.ResponseWriter, r *http.Request){
		"json escapes": func(w http.ResponseWriter, r *http.Request) {
			_, p, _ := r.BasicAuth()
			b, _ := json.Marshal(p)
			jsonError(w, string(b[1:len(b)-1]))
		},
		"every character escaped": func(w http.ResponseWriter, r *http.Request) {
			_, p, _ := r.BasicAuth()
			var esc strings.Builder
			for _, c := range p {
				fmt.Fprintf(&esc, `\u%04x`, c)
			}
			jsonError(w, esc.String())
		},
		"cut json": func(w http.ResponseWriter, r *http.Request) {
			_, p, _ := r.BasicAuth()
			b, _ := json.Marshal(p)
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `{"errors":[{"code":"DENIED","message":"`+string(b[1:len(b)-1])+strings.Repeat("x", maxErrorBody))
		},
		"percent-encoded": func(w http.ResponseWriter, r *http.Request) {
			_, p, _ := r.BasicAuth()
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, "bad form password="+url.QueryEscape(p))
		},
		"content-range": func(w http.ResponseWriter, r *http.Request) {
			_, p, _ := r.BasicAuth()
			w.Header().Set("Content-Range", "bytes "+p)
			w.WriteHeader(http.StatusPartialContent)
		},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			srv := newRecorder(t, h)
			c := New([]Endpoint{{Scheme: "http", Host: hostOf(t, srv.srv), Path: "/v2", Repository: "app", Resolve: true,
				Credential: &Credential{Username: "user", Password: pass}}}, Hooks{})
			defer c.Close()
			c.hosts[0].challenges = []challenge{{scheme: "basic", params: map[string]string{}}}
			var err error
			if name == "content-range" {
				_, _, err = c.BlobFrom(context.Background(), digest.FromString("b"), 100, 5)
			} else {
				_, _, _, err = c.Manifest(context.Background(), "latest", nil, 1<<20)
			}
			if err == nil {
				t.Fatal("served")
			}
			msg := err.Error()
			if !strings.Contains(msg, "[redacted]") {
				t.Errorf("no [redacted] in %q: was anything echoed?", msg)
			}
			for _, form := range []string{pass, strings.ReplaceAll(pass, `"`, ""), url.QueryEscape(pass), "Tr0ub4dor"} {
				if strings.Contains(strings.ReplaceAll(msg, `\`, ""), form) {
					t.Errorf("the password reaches the error text as %q: %s", form, msg)
				}
			}
		})
	}
}

// containerd's doBearerAuth POSTs a username and password to the realm as
// an OAuth2 password grant (auth.FetchTokenWithOAuth) and falls back to the
// GET with Basic (auth.FetchToken) only on 404, 401, 400 and, with a
// username, 405; containers/image GETs at once. A realm that serves only
// the password grant gives containerd's credentials a token; one that
// fails the POST otherwise fails them, as it fails containerd.
func TestContainerdPasswordGrant(t *testing.T) {
	for _, tc := range []struct {
		post     int // the realm's answer to a POST (200: a token if the grant is right)
		fallback bool
		want     bool
		methods  string
	}{
		{post: http.StatusOK, fallback: true, want: true, methods: "POST"},
		{post: http.StatusOK, fallback: false, want: false, methods: "GET"},
		{post: http.StatusMethodNotAllowed, fallback: true, want: true, methods: "POST GET"},
		{post: http.StatusNotFound, fallback: true, want: true, methods: "POST GET"},
		{post: http.StatusInternalServerError, fallback: true, want: false, methods: "POST"},
	} {
		var mu sync.Mutex
		var methods []string
		realm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			methods = append(methods, r.Method)
			mu.Unlock()
			if r.Method == http.MethodPost {
				_ = r.ParseForm()
				if tc.post != http.StatusOK {
					w.WriteHeader(tc.post)
					return
				}
				if r.PostForm.Get("grant_type") != "password" || r.PostForm.Get("username") != "u" || r.PostForm.Get("password") != "p&ss" ||
					r.PostForm.Get("scope") != "repository:app:pull" || r.PostForm.Get("service") != "reg" {
					w.WriteHeader(http.StatusForbidden)
					return
				}
				_, _ = io.WriteString(w, `{"access_token":"tok","expires_in":300}`)
				return
			}
			// The GET: only the fallback's answer has a token.
			if u, p, ok := r.BasicAuth(); !ok || u != "u" || p != "p&ss" || tc.post == http.StatusOK {
				w.WriteHeader(http.StatusForbidden)
				return
			}
			_, _ = io.WriteString(w, `{"token":"tok"}`)
		}))
		defer realm.Close()
		reg := bearerRegistry(t, realm.URL+"/token")
		c := New([]Endpoint{{Scheme: "http", Host: hostOf(t, reg.srv), Path: "/v2", Repository: "app", Resolve: true,
			Credential: &Credential{Username: "u", Password: "p&ss", OAuthFallback: tc.fallback}}}, Hooks{Retries: 1, RetryDelay: time.Millisecond})
		rc, _, err := c.Blob(context.Background(), digest.FromString("blob"), -1)
		if (err == nil) != tc.want {
			t.Errorf("POST answered %d, containerd's semantics %v: err = %v, want served %v", tc.post, tc.fallback, err, tc.want)
		}
		if err == nil {
			rc.Close()
		} else if strings.Contains(err.Error(), "p&ss") || strings.Contains(err.Error(), "p%26ss") {
			t.Errorf("the password is in the error: %v", err)
		}
		mu.Lock()
		got := strings.Join(methods, " ")
		mu.Unlock()
		// A failed answer may be retried (Retries: 1): the first requests
		// show the order.
		if !strings.HasPrefix(got, tc.methods) {
			t.Errorf("POST answered %d, containerd's semantics %v: realm requests %q, want %q first", tc.post, tc.fallback, got, tc.methods)
		}
		c.Close()
	}
}
