package pull

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/registry"
	"go.podman.io/image/v5/pkg/sysregistriesv2"
	"go.podman.io/image/v5/types"
)

// Where credentials may go.
//
// Manifests and blobs come through the registry client (package registry),
// which sends a credential only to its endpoint and to the token realm that
// endpoint's challenge names, and drops Authorization on a redirect to
// another origin. Signatures, when a policy file needs them, come through
// containers/image, which sends the registry's basic credentials to
// whatever realm the /v2/ challenge names and follows redirects with Go's
// rule (Authorization kept for the same host name on any port or scheme).
// Every request of both goes through one hook before a connection is made
// (SystemContext.DockerProxy, and the client's Proxy hook is the same
// function): requestGuard refuses
//
//   - any plain-http request to a host other than the registry while the
//     registry is verified over https (a realm or redirect that would carry
//     credentials or tokens in clear text);
//   - any request to the registry's host name on another port or scheme
//     than the registry's own endpoints and the realms their challenges
//     named (realmHook, asked before any token request): that is where Go
//     would forward the Authorization header of a redirect.
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
	e.allowed[registry.Origin(u)] = true
}

func (e *endpoints) has(u *url.URL) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.allowed[registry.Origin(u)]
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
				registry.Origin(u), p.Registry)}
		}
	}
	return nil
}

// realmHook is the registry client's Realm hook: before a token is
// requested from the realm an endpoint's challenge names (and so before
// any credential goes there), it refuses a plain-http realm of an endpoint
// verified over https, and otherwise allows the realm through the request
// guard (which would refuse the registry's host name on another port).
func (p *Request) realmHook(ep *endpoints) func(*registry.Endpoint, *url.URL) error {
	return func(e *registry.Endpoint, u *url.URL) error {
		verified := strings.EqualFold(e.Scheme, "https") && (e.TLS == nil || !e.TLS.InsecureSkipVerify)
		if verified && !strings.EqualFold(u.Scheme, "https") {
			return &failure.Error{Code: failure.TLS, Err: errRefusedRequest, Message: fmt.Sprintf(
				"registry %s (endpoint %s) is verified over https but names a plain-http token realm %s; refusing to send credentials there (serve the realm over https)",
				p.Registry, e.Host, u.Redacted())}
		}
		ep.add(u)
		return nil
	}
}
