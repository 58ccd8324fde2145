package pull

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"

	"github.com/pullhelper/pullhelper/internal/failure"
	"go.podman.io/image/v5/pkg/sysregistriesv2"
	"go.podman.io/image/v5/pkg/tlsclientconfig"
	"go.podman.io/image/v5/types"
)

// Where credentials may go.
//
// containers/image sends the registry's basic credentials to whatever
// bearer realm the registry's /v2/ challenge names (docker_client.go
// getBearerToken: SetBasicAuth on a GET to the realm, any scheme, any
// host), and follows redirects with Go's net/http client, which copies the
// Authorization header to a redirect target whose host name equals (or is
// a subdomain of) the original one, ignoring port and scheme
// (net/http shouldCopyHeaderOnRedirect). containers/image has no hook on
// either; the one hook that sees every request URL before a connection is
// made is SystemContext.DockerProxy. requestGuard uses it to refuse:
//
//   - any plain-http request to a host other than the registry while the
//     registry is verified over https (a realm or redirect that would carry
//     credentials or tokens in clear text);
//   - any request to the registry's host name on another port or scheme
//     than the registry's own endpoints and the realm its /v2/ challenge
//     named before the copy (checkRealm): that is where Go would forward the
//     Authorization header of a redirect.
//
// Both are refused as failure.TLS (exit 4): the transport would lose the
// protection the operator's TLS configuration promises.

// errRefusedRequest marks a request refused by requestGuard.
var errRefusedRequest = errors.New("request refused")

type endpoints struct {
	mu      sync.Mutex
	allowed map[string]bool // scheme://host:port
}

func (e *endpoints) add(u *url.URL) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.allowed[origin(u)] = true
}

func (e *endpoints) has(u *url.URL) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.allowed[origin(u)]
}

// origin is scheme://host:port with the port made explicit.
func origin(u *url.URL) string {
	port := u.Port()
	if port == "" {
		switch u.Scheme {
		case "http":
			port = "80"
		default:
			port = "443"
		}
	}
	return strings.ToLower(u.Scheme) + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// sameHostName is Go's rule for copying Authorization on a redirect.
func sameHostName(sub, parent string) bool {
	sub, parent = strings.ToLower(sub), strings.ToLower(parent)
	if sub == parent {
		return true
	}
	if strings.ContainsAny(sub, ":%") {
		return false
	}
	return strings.HasSuffix(sub, "."+parent)
}

// registryHosts are the host[:port] values the pull talks to as the
// registry: the registry itself and, from registries.conf, its location
// and mirrors.
func (p *Request) registryHosts(sys *types.SystemContext) []string {
	hosts := []string{p.Registry}
	if p.Registry == "docker.io" {
		hosts = append(hosts, "registry-1.docker.io")
	}
	// The endpoints the parent resolved (mirrors, a containerd server)…
	for _, e := range p.Endpoints {
		if e.Host != "" && !e.Blocked {
			hosts = append(hosts, e.Host)
		}
	}
	// …and the locations of the registries.conf the copy was handed.
	if reg, err := sysregistriesv2.FindRegistry(sys, p.Reference); err == nil && reg != nil {
		for _, e := range append([]sysregistriesv2.Endpoint{reg.Endpoint}, reg.Mirrors...) {
			if e.Location != "" {
				// A location is host[:port][/path]: its first element
				// is the host (never parse it as an image reference:
				// "127.0.0.1:5000" would read as a tag of docker.io).
				hosts = append(hosts, strings.SplitN(e.Location, "/", 2)[0])
			}
		}
	}
	return hosts
}

// guardedSystemContext returns a copy of sys whose DockerProxy refuses requests
// that would send credentials where they must not go (see above), and
// then defers to the proxy sys would have used.
func (p *Request) guardedSystemContext(sys *types.SystemContext, ep *endpoints) *types.SystemContext {
	s := *sys
	verified := sys.DockerInsecureSkipTLSVerify != types.OptionalBoolTrue
	hosts := p.registryHosts(sys)
	for _, h := range hosts {
		ep.add(&url.URL{Scheme: "https", Host: h})
		if !verified {
			ep.add(&url.URL{Scheme: "http", Host: h})
		}
	}
	// An endpoint the parent marked insecure may be reached over http.
	for _, e := range p.Endpoints {
		if e.Insecure || !e.Trust.Verify || e.Scheme == "http" {
			ep.add(&url.URL{Scheme: "http", Host: e.Host})
		}
	}
	next := func(u *url.URL) (*url.URL, error) {
		return http.ProxyFromEnvironment(&http.Request{URL: u})
	}
	switch {
	case sys.DockerProxy != nil:
		next = sys.DockerProxy
	case sys.DockerProxyURL != nil:
		next = func(*url.URL) (*url.URL, error) { return sys.DockerProxyURL, nil }
	}
	s.DockerProxy = func(u *url.URL) (*url.URL, error) {
		if err := p.checkRequest(u, hosts, verified, ep); err != nil {
			return nil, err
		}
		return next(u)
	}
	return &s
}

func (p *Request) checkRequest(u *url.URL, hosts []string, verified bool, ep *endpoints) error {
	if ep.has(u) {
		return nil
	}
	if verified && strings.EqualFold(u.Scheme, "http") {
		return &failure.Error{Code: failure.TLS, Err: errRefusedRequest, Message: fmt.Sprintf(
			"refusing a plain-http request to %s: registry %s is verified over https, and its token realm or a redirect must not move credentials or tokens to clear text (serve the realm over https)",
			u.Host, p.Registry)}
	}
	for _, h := range hosts {
		hn := (&url.URL{Host: h}).Hostname()
		if sameHostName(u.Hostname(), hn) {
			return &failure.Error{Code: failure.TLS, Err: errRefusedRequest, Message: fmt.Sprintf(
				"refusing a request to %s: it is registry %s's host on another port or scheme (not its token realm), where the registry's Authorization header would be forwarded on a redirect",
				origin(u), p.Registry)}
		}
	}
	return nil
}

// checkRealm asks the registry's /v2/ for its challenge, with the same
// certificates, verification setting and request guard as the copy, and
// allows the bearer realm it names (when the guard accepts it). It never
// sends a credential. Failures other than a refused realm are left to
// the copy, which reports them as before.
func (p *Request) checkRealm(ctx context.Context, sys *types.SystemContext, ep *endpoints, g *guard) error {
	defer g.begin("the registry's /v2/ challenge")()
	tr := tlsclientconfig.NewTransport()
	tlsc := &tls.Config{}
	// The primary endpoint: the registry, or the host that serves it (a
	// containerd hosts.toml server), with exactly its own trust.
	host, insecure := p.Registry, false
	if n := len(p.Endpoints); n > 0 {
		host, insecure = p.Endpoints[n-1].Host, p.Endpoints[n-1].Insecure || !p.Endpoints[n-1].Trust.Verify || p.Endpoints[n-1].Scheme == "http"
	}
	certDir := sys.DockerCertPath
	if certDir == "" && sys.DockerPerHostCertDirPath != "" {
		certDir = filepath.Join(sys.DockerPerHostCertDirPath, host)
	}
	if certDir != "" {
		if err := tlsclientconfig.SetupCertificates(certDir, tlsc); err != nil {
			return nil
		}
	}
	tlsc.InsecureSkipVerify = sys.DockerInsecureSkipTLSVerify == types.OptionalBoolTrue || insecure
	tr.TLSClientConfig = tlsc
	tr.Proxy = func(r *http.Request) (*url.URL, error) { return sys.DockerProxy(r.URL) }
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	schemes := []string{"https"}
	if tlsc.InsecureSkipVerify {
		schemes = append(schemes, "http")
	}
	for _, scheme := range schemes {
		if host == "docker.io" {
			host = "registry-1.docker.io" // as containers/image does
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+host+"/v2/", nil)
		if err != nil {
			return nil
		}
		req.Header.Set("User-Agent", sys.DockerRegistryUserAgent)
		res, err := c.Do(req)
		if err != nil {
			continue
		}
		_ = res.Body.Close()
		g.touch()
		for _, h := range res.Header.Values("WWW-Authenticate") {
			realm, ok := bearerRealm(h)
			if !ok {
				continue
			}
			u, err := url.Parse(realm)
			if err != nil || u.Host == "" {
				continue
			}
			if err := p.checkRequest(u, p.registryHosts(sys), sys.DockerInsecureSkipTLSVerify != types.OptionalBoolTrue, &endpoints{allowed: map[string]bool{}}); err != nil {
				var fe *failure.Error
				// A plain-http realm while verified is refused now, with the
				// realm named, before any credential goes anywhere.
				if errors.As(err, &fe) && strings.HasPrefix(fe.Message, "refusing a plain-http") {
					return &failure.Error{Code: failure.TLS, Err: errRefusedRequest, Message: fmt.Sprintf(
						"registry %s is verified over https but names a plain-http token realm %s; refusing to send credentials there (serve the realm over https)",
						p.Registry, u.Redacted())}
				}
			}
			ep.add(u)
		}
		return nil
	}
	return nil
}

// bearerRealm extracts realm="..." from a Bearer challenge.
func bearerRealm(h string) (string, bool) {
	scheme, params, _ := strings.Cut(strings.TrimSpace(h), " ")
	if !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	for {
		params = strings.TrimLeft(params, " ,")
		key, rest, ok := strings.Cut(params, "=")
		if !ok {
			return "", false
		}
		var val string
		if strings.HasPrefix(rest, `"`) {
			end := strings.Index(rest[1:], `"`)
			if end < 0 {
				return "", false
			}
			val, params = rest[1:1+end], rest[2+end:]
		} else {
			val, params, _ = strings.Cut(rest, ",")
		}
		if strings.EqualFold(strings.TrimSpace(key), "realm") {
			return val, true
		}
	}
}
