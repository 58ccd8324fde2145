package registry

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pullhelper/pullhelper/internal/failure"
)

// DefaultDialTimeout is the connect timeout of an endpoint that sets none
// (containerd's default dialer: 30 s).
const DefaultDialTimeout = 30 * time.Second

// Credential is one endpoint's secret. An IdentityToken is exchanged for a
// bearer token with an OAuth2 refresh-token grant; otherwise Username and
// Password go to the realm (or to the endpoint, for a Basic challenge).
type Credential struct {
	Username      string
	Password      string
	IdentityToken string
	// OAuthFallback: containerd's semantics (containers/image has
	// neither): a username and password are POSTed to the realm as an
	// OAuth2 password grant before any GET, and a POST the realm answers
	// 404, 401 or 400 (405 for a password) is retried as a GET with Basic
	// credentials (an identity token as password, no user).
	OAuthFallback bool
}

func (c *Credential) empty() bool {
	return c == nil || (c.Username == "" && c.Password == "" && c.IdentityToken == "")
}

// Endpoint is one host the client may ask, as it must be asked.
type Endpoint struct {
	// Scheme is "https" or "http"; Host is host[:port].
	Scheme string
	Host   string
	// Path is the API root on the host: "/v2" when empty, a path prefix
	// + "/v2", or (containerd override_path) exactly the path, possibly "".
	Path string
	// Repository is the repository's path on this host ("library/nginx").
	Repository string
	// Resolve: the endpoint may be asked for a tag. Without it only
	// digests (manifests by digest, blobs) are asked of it.
	Resolve bool
	// Namespace is the value of the "ns" query parameter sent on every
	// request to the endpoint ("" sends none).
	Namespace string
	// Header is sent on every request to the host and to its token realm.
	Header http.Header
	// TLS is the endpoint's TLS configuration (nil: the system roots,
	// verified).
	TLS *tls.Config
	// HTTPFallback: an insecure endpoint (containers/image's rule,
	// detectPropertiesHelper): before its first request the API root is
	// asked over https and, when that fails (no connection, no TLS, an
	// answer other than 200 or 401), over plain http at the same
	// host[:port] (port 80 when none is named); when http answers 200 or
	// 401 the endpoint uses http from then on.
	HTTPFallback bool
	// TLSFallback: containerd's httpFallback (docker.NewHTTPFallback, for
	// a hosts.toml host written http:// with TLS settings, on a port other
	// than 80, whose Scheme is then "https"): a request to the host that
	// fails because it answered in plain HTTP ("HTTP/" where a TLS record
	// was due) or its TLS handshake timed out, or whose connection was
	// refused or timed out on the default port (the host names none), is
	// sent again over plain http, and every later request to the host
	// goes over http. A certificate it does not trust is not such a
	// failure: it stays final.
	TLSFallback bool
	// DialTimeout bounds each connect (0: DefaultDialTimeout).
	DialTimeout time.Duration
	// HeaderTimeout bounds the wait for an answer's headers once the
	// request is sent (0: none), so that a host that accepts the
	// connection and never answers fails like one that refuses it and
	// the next endpoint is asked.
	HeaderTimeout time.Duration
	// Credential is nil for anonymous access.
	Credential *Credential
}

// Hooks are the caller's controls; all may be nil.
type Hooks struct {
	// Proxy sees every request URL before a connection is made (the
	// endpoint, its token realm, a redirect target), with the endpoint
	// the request is made for (the same pointer Realm gets): an error
	// refuses the request; a URL sends it through that proxy. nil: the
	// environment's proxy settings.
	Proxy func(ep *Endpoint, u *url.URL) (*url.URL, error)
	// Realm is asked before a token is requested from the realm an
	// endpoint's challenge names (before any credential goes there).
	Realm func(ep *Endpoint, realm *url.URL) error
	// UserAgent is sent on every request.
	UserAgent string
	// Log receives a record for each fallback and resume.
	Log *slog.Logger
	// Retries is how often a request that every endpoint failed in a
	// way that may pass (a connection error, 408, 429, 5xx) is tried
	// again, after RetryDelay doubling each time, with jitter, and never
	// sooner than a Retry-After asks. A 401, 403 or 404 from the last
	// endpoint, a refused request and a TLS failure are final.
	Retries    int
	RetryDelay time.Duration
	// OnRetry, when set, is told of each retry before the wait.
	OnRetry func(what string, attempt, of int, wait time.Duration, err error)
	// Discard, when set, is told of each chunk of bytes a server sent
	// that the client skips (a full answer to a Range request): they
	// arrived, and they are bytes read from the server. An error stops
	// the read and fails the request finally.
	Discard func(n int) error
}

// Client asks its endpoints, in order. It is safe for concurrent use.
type Client struct {
	hosts []*host
	hooks Hooks
}

// New returns a client for eps (in the order they are tried).
func New(eps []Endpoint, hooks Hooks) *Client {
	if hooks.Log == nil {
		hooks.Log = slog.New(slog.DiscardHandler)
	}
	c := &Client{hooks: hooks}
	for _, ep := range eps {
		if ep.Scheme == "" {
			ep.Scheme = "https"
		}
		c.hosts = append(c.hosts, newHost(c, ep))
	}
	return c
}

// Close drops idle connections.
func (c *Client) Close() {
	for _, h := range c.hosts {
		h.client.CloseIdleConnections()
	}
}

// Endpoints returns the endpoints in order.
func (c *Client) Endpoints() []Endpoint {
	out := make([]Endpoint, len(c.hosts))
	for i, h := range c.hosts {
		out[i] = h.ep
	}
	return out
}

// host is one endpoint's connection state: its HTTP client, the scheme in
// use, the challenges it sent and the tokens it granted.
type host struct {
	c      *Client
	ep     Endpoint
	client *http.Client

	// detectMu serialises detect; detected is set once it decided.
	detectMu sync.Mutex
	detected bool

	mu         sync.Mutex
	scheme     string
	challenges []challenge
	tokens     map[string]*token // by realm, service and scope
	granted    []string          // the last maxGranted tokens, for secrets
}

type token struct {
	mu      sync.Mutex
	value   string
	expires time.Time
}

func newHost(c *Client, ep Endpoint) *host {
	timeout := ep.DialTimeout
	if timeout <= 0 {
		timeout = DefaultDialTimeout
	}
	tlsc := ep.TLS
	if tlsc == nil {
		tlsc = &tls.Config{}
	}
	h := &host{c: c, ep: ep, scheme: ep.Scheme, tokens: map[string]*token{}}
	tr := &http.Transport{
		Proxy: func(r *http.Request) (*url.URL, error) {
			if c.hooks.Proxy != nil {
				return c.hooks.Proxy(&h.ep, r.URL)
			}
			return http.ProxyFromEnvironment(r)
		},
		DialContext:            (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:        tlsc,
		TLSHandshakeTimeout:    10 * time.Second,
		IdleConnTimeout:        90 * time.Second,
		MaxIdleConns:           100,
		MaxIdleConnsPerHost:    16,
		ExpectContinueTimeout:  time.Second,
		ResponseHeaderTimeout:  ep.HeaderTimeout,
		MaxResponseHeaderBytes: maxHeaderBytes,
	}
	h.client = &http.Client{Transport: tr, CheckRedirect: h.checkRedirect}
	return h
}

// maxHeaderBytes bounds an answer's headers (Go's default is 10 MiB; a
// registry's are a few KiB).
const maxHeaderBytes = 1 << 20

// errRefusedRedirect marks a redirect the client refuses to follow.
var errRefusedRedirect = errors.New("redirect refused")

// maxRedirects bounds one request's redirect chain (Go's own limit).
const maxRedirects = 10

// ErrTooManyRedirects: a redirect chain longer than maxRedirects (a loop).
// It is final: never retried.
var ErrTooManyRedirects = errors.New("stopped after 10 redirects (a redirect loop?)")

// checkRedirect follows at most 10 redirects and, on a redirect to another
// origin, drops the credential (Go keeps it for a subdomain, or the same
// name on another port or scheme) and the endpoint's own headers (Go
// copies every other header; hosts.toml headers may be secrets, and they
// are the endpoint's and its realm's only).
func (h *host) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return ErrTooManyRedirects
	}
	if Origin(req.URL) != Origin(via[0].URL) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			// A 307/308 of the token POST would carry its body (the
			// identity token) to the other origin: refused, finally (exit
			// 4, as the caller's refused redirects).
			return &failure.Error{Code: failure.TLS, Err: errRefusedRedirect, Message: fmt.Sprintf(
				"refusing to follow a redirect of a token request from %s to %s: its body holds the identity token",
				Origin(via[0].URL), Origin(req.URL))}
		}
		req.Header.Del("Authorization")
		req.Header.Del("Cookie")
		for k := range h.ep.Header {
			req.Header.Del(k)
		}
	}
	return nil
}

// Origin is scheme://host:port, the port explicit: what a credential and
// a redirect are judged by (pull's request guard uses it too).
func Origin(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "443"
		if strings.EqualFold(u.Scheme, "http") {
			port = "80"
		}
	}
	return strings.ToLower(u.Scheme) + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// Name is how errors and logs name the endpoint.
func (h *host) name() string { return h.ep.Host }

func (h *host) currentScheme() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.scheme
}

// url is the request URL for the API path p ("/<repo>/blobs/<digest>").
func (h *host) url(scheme, p string) *url.URL {
	u := &url.URL{Scheme: scheme, Host: h.ep.Host, Path: h.ep.Path + p}
	if h.ep.Namespace != "" {
		u.RawQuery = url.Values{"ns": {h.ep.Namespace}}.Encode()
	}
	return u
}

func (h *host) newRequest(ctx context.Context, method string, u *url.URL, hdr http.Header) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return nil, err
	}
	for k, v := range h.ep.Header {
		req.Header[http.CanonicalHeaderKey(k)] = append([]string(nil), v...)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Docker-Distribution-API-Version", "registry/2.0")
	if h.c.hooks.UserAgent != "" {
		req.Header.Set("User-Agent", h.c.hooks.UserAgent)
	}
	return req, nil
}

// do sends one API request with the endpoint's authorization. A 401
// teaches the challenge (from /v2/ when the 401 names none: gcr.io) and the
// request is asked again with the credential or a token; a credential or a
// token obtained for this request that is refused is final, a cached token
// that is refused is dropped and fetched again once.
func (h *host) do(ctx context.Context, method, p string, hdr http.Header) (*http.Response, error) {
	if err := h.detect(ctx); err != nil {
		return nil, err
	}
	for try := 0; ; try++ {
		scheme := h.currentScheme()
		req, err := h.newRequest(ctx, method, h.url(scheme, p), hdr)
		if err != nil {
			return nil, err
		}
		sent, fresh, err := h.authorize(ctx, req)
		if err != nil {
			return nil, err
		}
		res, err := h.client.Do(req)
		if err != nil && scheme == "https" && h.tlsFallback(err) {
			// The same request over plain http, as containerd's
			// httpFallback sends it (its headers as they are).
			h.mu.Lock()
			h.scheme = "http"
			h.mu.Unlock()
			h.c.hooks.Log.Info("host answered over https in a way that means plain http; using http from now on, as containerd does for a http:// host with TLS settings", "host", h.name(), "https_error", withoutQuery(err).Error())
			plain := req.Clone(ctx)
			plain.URL.Scheme = "http"
			req = plain
			res, err = h.client.Do(req)
		}
		if err != nil {
			return nil, err
		}
		if res.StatusCode != http.StatusUnauthorized || try >= 2 {
			return res, nil
		}
		if res.Request != nil && Origin(res.Request.URL) != Origin(req.URL) {
			// The 401 is a redirect target's (a CDN of another origin):
			// its challenge is not the endpoint's, and the endpoint's
			// credential must not go to a realm it names.
			return res, nil
		}
		chs := parseChallenges(res.Header)
		if len(chs) == 0 {
			if chs, err = h.ping(ctx); err != nil {
				return res, nil
			}
		}
		ch, ok := supported(chs)
		switch {
		case !ok, sent && fresh, sent && ch.scheme == "basic", !sent && ch.scheme == "basic" && h.ep.Credential.empty():
			return res, nil
		}
		h.mu.Lock()
		h.challenges, h.tokens = chs, map[string]*token{}
		h.mu.Unlock()
		drain(res)
	}
}

// tlsFallback reports whether err, the failure of a request to this
// endpoint over https, sends it over http instead (Endpoint.TLSFallback):
// containerd's isTLSError (the host answered "HTTP/", or the TLS handshake
// timed out) or isPortError (the connection was refused or timed out on a
// host named without a port). A failure at a redirect target is not the
// endpoint's.
func (h *host) tlsFallback(err error) bool {
	if !h.ep.TLSFallback {
		return false
	}
	var ue *url.Error
	if !errors.As(err, &ue) {
		return false
	}
	if u, perr := url.Parse(ue.URL); perr != nil || u.Host != h.ep.Host {
		return false
	}
	// http.Client turns the transport's tls.RecordHeaderError "HTTP/",
	// which containerd's round tripper sees, into ErrSchemeMismatch.
	var rh tls.RecordHeaderError
	if errors.Is(err, http.ErrSchemeMismatch) || errors.As(err, &rh) && string(rh.RecordHeader[:]) == "HTTP/" ||
		strings.Contains(err.Error(), "TLS handshake timeout") {
		return true
	}
	if errors.Is(err, syscall.ECONNREFUSED) || os.IsTimeout(err) {
		_, port, _ := net.SplitHostPort(h.ep.Host)
		return port == ""
	}
	return false
}

// detect is containers/image's detectPropertiesHelper for an endpoint
// that may fall back to plain http (HTTPFallback): the API root is asked
// over https, and when that fails, over http; http is used from then on
// when it answers 200 or 401. When neither answers the error names both
// (the https one wrapped) and the next request detects again; when https
// answered (another status) and http does not, https stays and the
// request's own answer counts. An endpoint without HTTPFallback, or
// already decided, returns at once.
func (h *host) detect(ctx context.Context) error {
	if !h.ep.HTTPFallback || h.ep.Scheme != "https" {
		return nil
	}
	h.detectMu.Lock()
	defer h.detectMu.Unlock()
	if h.detected {
		return nil
	}
	answered, errS := h.probe(ctx, "https")
	if errS == nil || ctx.Err() != nil {
		h.detected = errS == nil
		return errS
	}
	_, errH := h.probe(ctx, "http")
	switch {
	case errH == nil:
		h.mu.Lock()
		h.scheme = "http"
		h.mu.Unlock()
		h.detected = true
		h.c.hooks.Log.Info("insecure endpoint does not answer over https; using plain http", "host", h.name(), "https_error", errS.Error())
		return nil
	case answered:
		h.detected = true
		return nil
	}
	return &probeError{https: errS, http: errH}
}

// probeError: an insecure endpoint answered neither over https nor over
// http. It unwraps to the https failure.
type probeError struct{ https, http error }

func (e *probeError) Error() string {
	return fmt.Sprintf("%v (and over plain http: %v)", e.https, e.http)
}
func (e *probeError) Unwrap() error { return e.https }

// probe asks the API root over scheme without any credential: nil when it
// answers 200 or 401 (containers/image's ping); answered when it gave
// another answer.
func (h *host) probe(ctx context.Context, scheme string) (answered bool, err error) {
	u := h.url(scheme, "/")
	req, err := h.newRequest(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false, err
	}
	res, err := h.client.Do(req)
	if err != nil {
		return false, err
	}
	drain(res)
	if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusUnauthorized {
		return true, fmt.Errorf("%s://%s%s/ answered %d %s", scheme, h.ep.Host, h.ep.Path, res.StatusCode, http.StatusText(res.StatusCode))
	}
	return false, nil
}

// ping asks the API root for its challenges (the Docker way of learning
// them) without any credential.
func (h *host) ping(ctx context.Context) ([]challenge, error) {
	req, err := h.newRequest(ctx, http.MethodGet, h.url(h.currentScheme(), "/"), nil)
	if err != nil {
		return nil, err
	}
	res, err := h.client.Do(req)
	if err != nil {
		return nil, err
	}
	drain(res)
	if res.Request != nil && Origin(res.Request.URL) != Origin(req.URL) {
		return nil, nil // another origin's challenge, not the endpoint's
	}
	return parseChallenges(res.Header), nil
}

// authorize sets req's Authorization from the challenge learned so far:
// sent says whether it did, fresh whether the token was obtained now.
func (h *host) authorize(ctx context.Context, req *http.Request) (sent, fresh bool, err error) {
	h.mu.Lock()
	chs := h.challenges
	h.mu.Unlock()
	ch, ok := supported(chs)
	if !ok {
		return false, false, nil
	}
	switch ch.scheme {
	case "basic":
		if cr := h.ep.Credential; !cr.empty() {
			req.SetBasicAuth(cr.Username, cr.Password)
			return true, false, nil
		}
	case "bearer":
		t, fresh, err := h.token(ctx, ch)
		if err != nil {
			return false, false, err
		}
		if t != "" {
			req.Header.Set("Authorization", "Bearer "+t)
			return true, fresh, nil
		}
	}
	return false, false, nil
}

// drain reads a little of a body that is not used and closes it, so the
// connection can be reused.
func drain(res *http.Response) {
	_, _ = io.CopyN(io.Discard, res.Body, 64<<10)
	_ = res.Body.Close()
}

func (h *host) String() string { return fmt.Sprintf("%s://%s%s", h.ep.Scheme, h.ep.Host, h.ep.Path) }

// maxGranted bounds how many granted tokens a host remembers for redaction.
const maxGranted = 16

// secrets are what the client sends to this endpoint and its realm that
// must never appear in an error message or a log, whatever a server
// echoes: the credential (and its Basic encoding), the identity token
// (and the Basic encoding the realm's GET sends it in, ":"+token: auth.go),
// the hosts.toml header values and the tokens granted.
func (h *host) secrets() []string {
	var out []string
	if cr := h.ep.Credential; !cr.empty() {
		out = append(out, cr.Password, cr.IdentityToken)
		if cr.Username != "" || cr.Password != "" {
			out = append(out, base64.StdEncoding.EncodeToString([]byte(cr.Username+":"+cr.Password)))
		}
		if cr.IdentityToken != "" {
			out = append(out, base64.StdEncoding.EncodeToString([]byte(":"+cr.IdentityToken)))
		}
	}
	for _, vs := range h.ep.Header {
		out = append(out, vs...)
	}
	h.mu.Lock()
	out = append(out, h.granted...)
	h.mu.Unlock()
	return out
}

// grant remembers a token the realm granted, for secrets.
func (h *host) grant(v string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.granted = append(h.granted, v)
	if len(h.granted) > maxGranted {
		h.granted = h.granted[len(h.granted)-maxGranted:]
	}
}

func (h *host) hostError(op string, err error) *HostError {
	return &HostError{Host: h.name(), Op: op, Err: withoutQuery(err), secrets: h.secrets()}
}

func (h *host) tokenError(realm string, err error) *TokenError {
	return &TokenError{Host: h.name(), Realm: realm, Err: withoutQuery(err), secrets: h.secrets()}
}

// withoutQuery drops the query of the URL net/http puts into its errors:
// the request that failed may be a redirect target, a presigned storage
// URL whose query is a bearer secret of the registry's.
func withoutQuery(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil && (u.RawQuery != "" || u.ForceQuery) {
			u.RawQuery, u.ForceQuery = "", false
			ue.URL = u.String()
		}
	}
	return err
}
