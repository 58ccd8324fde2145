package hosts

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/pullhelper/pullhelper/internal/wire"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/pkg/sysregistriesv2"
)

// Endpoint is one host a pull contacts with what its credential sources
// are asked about it (Query); auth fills Credentials from Query.
type Endpoint struct {
	wire.Endpoint
	Query Query
}

// Query is one contacted host's credential question.
type Query struct {
	// Host is the endpoint host[:port].
	Host string
	// Logical is the image's repository ("reg.example.com/ns/repo"), what
	// the kubelet matches; Physical the repository on Host, what the
	// containers auth files match.
	Logical, Physical string
	// Kubelet: the kubelet's credentials go to this host.
	Kubelet bool
	// ContainerdKey: the containerd configs."KEY".auth consulted ("" =
	// none).
	ContainerdKey string
	// Server: the host is containerd's server for the image's registry
	// (hosts.toml server, or the default host), not a mirror.
	Server bool
}

// Endpoints returns, in order, the hosts a pull of image contacts, each with
// its trust and its credential question (Query; package auth answers it). image is a normalized reference
// ("registry.example.com/ns/repo", with :tag or @digest when known: a
// digest selects registries.conf digest-only mirrors). With a containerd
// config the endpoints are containerd's, otherwise registries.conf's. An
// image whose every endpoint is blocked is an error wrapping ErrBlocked.
func (r *Resolver) Endpoints(image string) ([]Endpoint, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return nil, fmt.Errorf("parsing image reference %q: %w", image, err)
	}
	var eps []Endpoint
	if r.ctrd != nil {
		eps, err = r.containerdEndpoints(named)
	} else {
		eps, err = r.registriesConfEndpoints(named)
	}
	if err != nil {
		return nil, err
	}
	for _, e := range eps {
		if !e.Blocked {
			return eps, nil
		}
	}
	return nil, fmt.Errorf("registry %s is %w %s", reference.Domain(named), ErrBlocked, r.RegistriesConfName())
}

// registriesConfEndpoints is containers/image's newImageSource:
// FindRegistry(ref.Name()) and PullSourcesFromReference (mirrors, honouring
// mirror-by-digest-only and pull-from-mirror, then the primary location);
// per endpoint, insecure from the endpoint and blocked from
// FindRegistry(the endpoint's physical repository), as newDockerClient
// checks it (newDockerClientFromRef passes ref.Name(), not the host).
func (r *Resolver) registriesConfEndpoints(named reference.Named) ([]Endpoint, error) {
	logical := named.Name()
	domain := reference.Domain(named)
	reg, err := sysregistriesv2.FindRegistry(r.sys, logical)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %s", r.RegistriesConfName(), RegistriesConfError(err))
	}
	if reg == nil {
		ep := r.endpoint(Query{Host: domain, Logical: logical, Physical: logical, Kubelet: true})
		ep.Source = wire.EndpointRegistry
		return []Endpoint{ep}, nil
	}
	sources, err := reg.PullSourcesFromReference(named)
	if err != nil {
		return nil, fmt.Errorf("registries.conf entry %q in %s: %w", reg.Prefix, r.RegistriesConfName(), err)
	}
	var eps []Endpoint
	for i, ps := range sources {
		host := reference.Domain(ps.Reference)
		physical := ps.Reference.Name()
		ep := r.endpoint(Query{Host: host, Logical: logical, Physical: physical, Kubelet: host == domain})
		ep.Mirror = i < len(sources)-1
		ep.File = r.RegistriesConfName()
		ep.NamespaceProxy = ps.Endpoint.NamespaceProxy
		switch {
		case ep.Mirror:
			ep.Source = wire.EndpointRegistriesMirror
		case physical != logical:
			ep.Source = wire.EndpointRegistriesConf
		default:
			ep.Source = wire.EndpointRegistry
		}
		// newPullClient: client.tlsClientConfig.InsecureSkipVerify =
		// pullSource.Endpoint.Insecure (overriding the host's own entry).
		ep.Insecure = ps.Endpoint.Insecure
		if ps.Endpoint.Insecure && ep.Trust.Verify {
			ep.Trust.Verify, ep.Trust.InsecureBy = false, fmt.Sprintf("registries.conf insecure (%q in %s)", endpointLocation(ps.Endpoint, reg.Prefix), r.RegistriesConfName())
		} else if !ps.Endpoint.Insecure && strings.HasPrefix(ep.Trust.InsecureBy, "registries.conf insecure") {
			ep.Trust.Verify, ep.Trust.InsecureBy = true, ""
		}
		if hr, err := sysregistriesv2.FindRegistry(r.sys, physical); err == nil && hr != nil && hr.Blocked {
			ep.Blocked = true
		}
		eps = append(eps, ep)
	}
	return eps, nil
}

func endpointLocation(e sysregistriesv2.Endpoint, prefix string) string {
	if e.Location != "" {
		return e.Location
	}
	return prefix
}

// endpoint is one host's endpoint, its trust and its credential question.
func (r *Resolver) endpoint(q Query) Endpoint {
	return Endpoint{Endpoint: wire.Endpoint{Host: q.Host, Scheme: "https", Repository: q.Physical, Trust: r.TrustFor(q.Host)}, Query: q}
}

// containerdEndpoints is registryHosts: config_path mode through
// ConfigureHosts (remotes/docker/config/hosts.go: [host] entries in file
// order, then server or the default host), legacy mode through
// registryEndpoints (mirrors then the default). The kubelet's credentials
// go to every host (ParseAuth with an empty ServerAddress).
func (r *Resolver) containerdEndpoints(named reference.Named) ([]Endpoint, error) {
	refHost := reference.Domain(named)
	if refHost == "index.docker.io" {
		refHost = "docker.io"
	}
	_, path := splitRepo(named.Name())
	list, err := containerdEndpointList(r.ctrd, refHost, r.warn)
	if err != nil {
		return nil, fmt.Errorf("containerd config %s: %w", r.c.ContainerdConfig, err)
	}
	var eps []Endpoint
	for _, ce := range list {
		// Each host's own configs."HOST".auth, in both modes: the legacy
		// loop of registryHosts copies the captured credentials before it
		// fills them from Configs[u.Host] (containerd 1.5 on, PR 5446: no
		// endpoint's auth is offered to another host).
		q := Query{Host: ce.host, Logical: named.Name(), Physical: ce.host + path, Kubelet: true, ContainerdKey: ce.host}
		ep := r.endpoint(q)
		ep.Scheme, ep.Path, ep.Source, ep.File, ep.TLSFallback = ce.scheme, ce.path, ce.source, ce.file, ce.tlsFallback
		ep.Capabilities, ep.Headers, ep.HeaderValues, ep.DialTimeout = ce.capabilities, ce.headers, ce.header, ce.dialTimeout
		// A [host] entry or a legacy mirror, wherever it stands (a
		// server without the pull capability is not in the list); only
		// the server or the default host is the registry's.
		ep.Mirror = ce.source == wire.EndpointContainerdHost || ce.source == wire.EndpointContainerdMirror
		ep.Query.Server = !ep.Mirror
		// resolver.go addNamespace / registry.go isProxy: every host but
		// the image's registry (registry-1.docker.io counts as docker.io)
		// is asked with ?ns=<registry>.
		if ce.host != refHost && (refHost != "docker.io" || ce.host != "registry-1.docker.io") {
			ep.NamespaceProxy = refHost
		}
		ep.Trust.CAFiles = appendNew(ep.Trust.CAFiles, ce.tls.CAFiles...)
		ep.Trust.ClientPairs = append(ep.Trust.ClientPairs, ce.tls.ClientPairs...)
		if ce.tls.SkipVerify && ep.Trust.Verify {
			ep.Trust.Verify, ep.Trust.InsecureBy = false, "containerd skip_verify ("+ce.file+")"
		}
		eps = append(eps, ep)
	}
	return eps, nil
}

func appendNew(list []string, add ...string) []string {
	for _, a := range add {
		found := false
		for _, l := range list {
			found = found || l == a
		}
		if !found {
			list = append(list, a)
		}
	}
	return list
}

// ctrdEndpoint is one registry host containerd would try.
type ctrdEndpoint struct {
	scheme, host, path, source, file string
	capabilities                     wire.Capabilities
	headers                          []string
	header                           map[string][]string
	dialTimeout                      string
	tls                              ctrdTLS
	tlsFallback                      bool // https first, then plain http (wire.Endpoint.TLSFallback)
}

// containerdEndpointList lists containerd's hosts for refHost in order.
func containerdEndpointList(reg *ctrdRegistry, refHost string, warn func(string)) ([]ctrdEndpoint, error) {
	if reg.ConfigPath == "" {
		return containerdLegacyList(reg, refHost)
	}
	dir, err := containerdHostDir(filepath.SplitList(reg.ConfigPath), refHost)
	if err != nil {
		return nil, fmt.Errorf("containerd hosts directory for %s: %w", refHost, err)
	}
	var hosts []ctrdHostConfig
	fromFile := false
	if dir != "" {
		if hosts, err = loadContainerdHostDir(dir, warn); err != nil {
			return nil, fmt.Errorf("containerd hosts directory %s: %w", dir, err)
		}
		fromFile = len(hosts) > 1 || (len(hosts) == 1 && hosts[0].host != "")
	}
	if hosts == nil {
		hosts = make([]ctrdHostConfig, 1)
	}
	last := &hosts[len(hosts)-1]
	lastSource := wire.EndpointContainerdServer
	if last.host == "" {
		lastSource = wire.EndpointContainerdDefault
		applyContainerdDefaultHost(last, refHost)
	}
	var out []ctrdEndpoint
	for i, h := range hosts {
		if err := checkctrdTLSFiles(h); err != nil {
			return nil, err
		}
		// A pull asks only the hosts with pull: a tag those with pull and
		// resolve, a manifest by digest and every blob those with pull
		// (docker.dockerBase.filterHosts in Resolve and Fetch). A host
		// without it (push or resolve alone) is never contacted.
		if !h.capabilities.Has(wire.CapabilityPull) {
			continue
		}
		e := ctrdEndpoint{scheme: h.scheme, host: h.host, path: h.path, file: dir,
			capabilities: h.capabilities, headers: h.headers, header: h.header, dialTimeout: h.dialTimeout,
			source: wire.EndpointContainerdHost}
		if i == len(hosts)-1 {
			e.source = lastSource
		}
		if fromFile {
			e.file = filepath.Join(dir, "hosts.toml")
		}
		e.tls.CAFiles = h.caCerts
		for _, p := range h.clientPairs {
			if p[1] == "" {
				p[1] = p[0]
			}
			e.tls.ClientPairs = append(e.tls.ClientPairs, p)
		}
		e.tls.SkipVerify = h.skipVerify != nil && *h.skipVerify
		// ConfigureHosts: a http host with TLS settings of its own (ca,
		// client or skip_verify, the localhost default's included) on a
		// port other than 80 is tried over https first, with
		// docker.NewHTTPFallback.
		if h.scheme == "http" && (h.caCerts != nil || h.clientPairs != nil || h.skipVerify != nil) {
			if _, port, _ := net.SplitHostPort(h.host); port != "80" {
				e.scheme, e.tlsFallback = "https", true
			}
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("containerd hosts directory %s: no host for %s has the pull capability (containerd would ask none)", dir, refHost)
	}
	return out, nil
}

// applyContainerdDefaultHost is ConfigureHosts' default for the last entry
// when no server is set: registry-1.docker.io for docker.io, the localhost
// rules (http unless port ""/443, skip_verify unless port 80), else https.
func applyContainerdDefaultHost(last *ctrdHostConfig, host string) {
	// ConfigureHosts gives the default host every capability, whatever
	// the file's top level says.
	last.path, last.capabilities = "/v2", 0
	switch {
	case host == "docker.io":
		last.scheme, last.host = "https", "registry-1.docker.io"
	case containerdIsLocalhost(host):
		last.host = host
		_, port, _ := net.SplitHostPort(host)
		if port == "" || port == "443" {
			last.scheme = "https"
		} else {
			last.scheme = "http"
		}
		if port != "80" {
			skip := true
			last.skipVerify = &skip
		}
	default:
		last.scheme, last.host = "https", host
	}
}

// containerdLegacyList is registryHosts without config_path: every endpoint
// of registryEndpoints with configs[u.Host].tls (or the localhost default).
func containerdLegacyList(reg *ctrdRegistry, host string) ([]ctrdEndpoint, error) {
	endpoints, err := ctrdLegacyEndpoints(reg, host)
	if err != nil {
		return nil, err
	}
	var out []ctrdEndpoint
	for i, e := range endpoints {
		u, err := url.Parse(e)
		if err != nil {
			return nil, fmt.Errorf("parse registry endpoint %q from mirrors: %w", e, err)
		}
		tc := reg.Configs[u.Host].TLS
		if reg.v2 {
			tc = nil // containerd 2.x has no configs.HOST.tls: the localhost default only
		}
		t, err := ctrdLegacyTLS(tc, host, u)
		if err != nil {
			return nil, fmt.Errorf("get TLSConfig for registry %q: %w", e, err)
		}
		p := u.Path
		if p == "" {
			p = "/v2"
		}
		src := wire.EndpointContainerdMirror
		if i == len(endpoints)-1 && (u.Host == host || u.Host == "registry-1.docker.io" && host == "docker.io") {
			src = wire.EndpointContainerdDefault
		}
		out = append(out, ctrdEndpoint{scheme: u.Scheme, host: u.Host, path: p, source: src,
			capabilities: wire.CapabilityPull | wire.CapabilityResolve, tls: t})
	}
	return out, nil
}
