package pull

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/wire"
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
// protection the operator's TLS configuration promises. A signature read
// from an http(s) lookaside registries.d names passes (lookaside.go): it
// carries no credential, as containers/image makes it.

// Approvals are per endpoint. A realm an endpoint's challenge named is
// approved for that endpoint alone: the requests made for it (its token
// request, a redirect of its requests) pass the guard, another endpoint's
// do not, and an endpoint whose challenge names a realm on another
// endpoint's host name or a subdomain of it (at a port or scheme that is
// not that endpoint's) is refused before its credential goes there.
// containers/image's requests (signatures) carry no endpoint: for them an
// https realm counts as approved when any endpoint named it, a plain-http
// one only on the host of the endpoint that named it (a plain-http realm
// of an insecure mirror does not become a way to clear text for a verified
// registry), and a realm on a registry host's name or a subdomain only
// when the endpoint that named it is on that name itself (a mirror does
// not unlock a destination where Go would forward the registry's
// Authorization on a redirect).

// errRefusedRequest marks a request refused by requestGuard.
var errRefusedRequest = errors.New("request refused")

// endpoints is one attempt's guard state: the registry's own endpoint
// origins (by configuration) and the realms approved, per endpoint.
type endpoints struct {
	mu     sync.Mutex
	own    map[string]bool                        // scheme://host:port
	realms map[*registry.Endpoint]map[string]bool // endpoint → approved realm origins

	// Set by guardedSystemContext: the registry host names, whether the
	// registry is verified over https, and the proxy sys would use.
	hosts    []string
	verified bool
	next     func(*url.URL) (*url.URL, error)
	// lookaside are the registries.d http(s) lookaside bases, whose
	// signature reads (containers/image's, credential-free) pass.
	lookaside []*url.URL
}

func newEndpoints() *endpoints {
	return &endpoints{own: map[string]bool{}, realms: map[*registry.Endpoint]map[string]bool{}}
}

// addOwn allows u's origin for every request: one of the registry's own
// endpoints.
func (e *endpoints) addOwn(u *url.URL) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.own[registry.Origin(u)] = true
}

// ownOrigin: u's origin is one of the registry's own endpoints.
func (e *endpoints) ownOrigin(u *url.URL) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.own[registry.Origin(u)]
}

// approve allows u's origin for the requests made for endpoint ep.
func (e *endpoints) approve(ep *registry.Endpoint, u *url.URL) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.realms[ep] == nil {
		e.realms[ep] = map[string]bool{}
	}
	e.realms[ep][registry.Origin(u)] = true
}

// has: a request to u made for endpoint ep (nil: containers/image's, which
// names none) is allowed without the guard's checks.
func (e *endpoints) has(ep *registry.Endpoint, u *url.URL, hosts []string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	o := registry.Origin(u)
	if e.own[o] {
		return true
	}
	if ep != nil {
		return e.realms[ep][o]
	}
	// containers/image's: an https realm any endpoint named (its token
	// request carries the credential of the endpoint whose challenge named
	// it, which the realm hook judged); a plain-http one only on the host
	// of the endpoint that named it, never another's on its way to clear
	// text. And a realm on a registry host's name (the host or a
	// subdomain: where Go forwards that host's Authorization on a
	// redirect) only if the endpoint that named it talks to that host
	// name itself (its host is the same or a subdomain, so a redirect
	// already forwards it that Authorization), never on another
	// endpoint's approval.
	for other, approved := range e.realms {
		oh := (&url.URL{Host: other.Host}).Hostname()
		if !approved[o] || !(strings.EqualFold(u.Scheme, "https") || sameHostName(u.Hostname(), oh)) {
			continue
		}
		ok := true
		for _, h := range hosts {
			if hn := (&url.URL{Host: h}).Hostname(); sameHostName(u.Hostname(), hn) && !sameHostName(oh, hn) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
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
// then defers to the proxy sys would have used; it records in ep what the
// registry client's guard (endpointProxy) needs.
func (p *Request) guardedSystemContext(sys *types.SystemContext, ep *endpoints) *types.SystemContext {
	s := *sys
	verified := sys.DockerInsecureSkipTLSVerify != types.OptionalBoolTrue
	hosts := p.registryHosts(sys)
	for _, h := range hosts {
		ep.addOwn(&url.URL{Scheme: "https", Host: h})
		if !verified {
			ep.addOwn(&url.URL{Scheme: "http", Host: h})
		}
	}
	// An endpoint the parent marked insecure may be reached over http, and
	// so may a containerd http:// host tried over https first
	// (TLSFallback: the registry client goes to http only on containerd's
	// conditions, as containerd's httpFallback does).
	for _, e := range p.Endpoints {
		if e.Insecure || !e.Trust.Verify || e.Scheme == "http" || e.TLSFallback {
			ep.addOwn(&url.URL{Scheme: "http", Host: e.Host})
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
	ep.hosts, ep.verified, ep.next = hosts, verified, next
	s.DockerProxy = func(u *url.URL) (*url.URL, error) {
		if err := p.checkRequest(nil, u, hosts, verified, ep); err != nil {
			return nil, err
		}
		return next(u)
	}
	return &s
}

// endpointProxy is the registry client's Proxy hook: the request guard for
// a request made for endpoint e (its own approvals count, no other
// endpoint's), then the proxy sys would use; what passes is recorded in
// log (which host served what).
func (p *Request) endpointProxy(ep *endpoints, log *hostLog) func(*registry.Endpoint, *url.URL) (*url.URL, error) {
	return func(e *registry.Endpoint, u *url.URL) (*url.URL, error) {
		if err := p.checkRequest(e, u, ep.hosts, ep.verified, ep); err != nil {
			return nil, err
		}
		proxy, err := ep.next(u)
		if err != nil {
			return nil, err
		}
		log.record(u)
		return proxy, nil
	}
}

// checkRequest is the request guard for u, made for endpoint e (nil:
// containers/image's).
func (p *Request) checkRequest(e *registry.Endpoint, u *url.URL, hosts []string, verified bool, ep *endpoints) error {
	if ep.has(e, u, hosts) {
		return nil
	}
	if e == nil && isLookasideSignature(u, ep.lookaside) {
		// containers/image reads a lookaside signature with no
		// credential, as skopeo does over plain http too.
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

// endpointHost is the host name the registry client asks for endpoint e
// (docker.io is served by registry-1.docker.io, as registryEndpoint says).
func endpointHost(e wire.Endpoint) string {
	h := e.Host
	if h == "docker.io" && !strings.HasPrefix(e.Source, "containerd") {
		h = "registry-1.docker.io"
	}
	return strings.ToLower((&url.URL{Host: h}).Hostname())
}

// realmHook is the registry client's Realm hook: before a token is
// requested from the realm an endpoint's challenge names (and so before
// any credential goes there), it refuses a plain-http realm of an endpoint
// verified over https and a realm on another endpoint's host name or a
// subdomain of it (sameHostName, Go's rule; at a port or scheme that is
// not one of the registry's endpoints: where that endpoint's Authorization
// would be forwarded on a redirect, and not this endpoint's to name unless
// this endpoint's own host is under that name too), and otherwise approves
// the realm for this endpoint alone (the request guard lets this
// endpoint's requests through to it).
func (p *Request) realmHook(ep *endpoints) func(*registry.Endpoint, *url.URL) error {
	return func(e *registry.Endpoint, u *url.URL) error {
		verified := strings.EqualFold(e.Scheme, "https") && (e.TLS == nil || !e.TLS.InsecureSkipVerify)
		if verified && !strings.EqualFold(u.Scheme, "https") {
			return &failure.Error{Code: failure.TLS, Err: errRefusedRequest, Message: fmt.Sprintf(
				"registry %s (endpoint %s) is verified over https but names a plain-http token realm %s; refusing to send credentials there (serve the realm over https)",
				p.Registry, e.Host, u.Redacted())}
		}
		if !ep.ownOrigin(u) {
			own := strings.ToLower((&url.URL{Host: e.Host}).Hostname())
			realm := strings.ToLower(u.Hostname())
			for _, other := range p.Endpoints {
				if other.Blocked || other.Host == "" {
					continue
				}
				if h := endpointHost(other); sameHostName(realm, h) && !sameHostName(own, h) {
					return &failure.Error{Code: failure.TLS, Err: errRefusedRequest, Message: fmt.Sprintf(
						"endpoint %s of registry %s names the token realm %s, on endpoint %s's host name (or a subdomain) at another port or scheme; refusing to send %s's credential there (a realm is approved for the endpoint whose challenge names it, on a host of its own or of nobody's)",
						e.Host, p.Registry, registry.Origin(u), other.Host, e.Host)}
				}
			}
		}
		ep.approve(e, u)
		return nil
	}
}
