package wire

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Endpoint sources.
const (
	EndpointRegistry          = "registry"                     // the image's own registry, no configuration
	EndpointRegistriesConf    = "registries.conf location"     // the primary location of a registries.conf entry
	EndpointRegistriesMirror  = "registries.conf mirror"       // a [[registry.mirror]]
	EndpointContainerdHost    = "containerd hosts.toml host"   // a [host."URL"] entry
	EndpointContainerdServer  = "containerd hosts.toml server" // the top-level server
	EndpointContainerdDefault = "containerd default"           // no server: the default host
	EndpointContainerdMirror  = "containerd legacy mirror"     // registry.mirrors."H".endpoint
)

// Endpoint is one host a pull of the image contacts, in the order tried.
type Endpoint struct {
	// Host is the host[:port] contacted; Scheme "https" or "http".
	Host   string `json:"host"`
	Scheme string `json:"scheme"`
	// TLSFallback: Scheme is "https" for a containerd host written
	// http:// with TLS settings of its own (ca, client, skip_verify: the
	// localhost default's too) on a port other than 80, which
	// containerd's ConfigureHosts tries over https first and over plain
	// http when the host answers in plain HTTP (docker.NewHTTPFallback:
	// registry.Endpoint.TLSFallback says exactly when).
	TLSFallback bool `json:"tls_fallback,omitempty"`
	// Path is containerd's API root on the host ("/v2", a hosts.toml path
	// prefix + "/v2", or exactly the path with override_path, possibly
	// ""); "" for registries.conf endpoints, where containers/image always
	// uses /v2.
	Path string `json:"path,omitempty"`
	// Repository is the repository name on this host (a registries.conf
	// location or mirror may rewrite it), as the auth files are matched.
	Repository string `json:"repository"`
	// Mirror is true for every endpoint but the image's primary one.
	Mirror bool `json:"mirror"`
	// Capabilities are containerd's (pull, resolve, push, referrers); a host without
	// resolve is never asked for a tag. Zero: all.
	Capabilities Capabilities `json:"capabilities,omitempty"`
	// Headers are the header names hosts.toml sends to this host;
	// HeaderValues the headers themselves, which may hold secrets: they
	// never appear in JSON (explain), and travel to the copy in its
	// Material.
	Headers      []string            `json:"headers,omitempty"`
	HeaderValues map[string][]string `json:"-"`
	// DialTimeout is hosts.toml dial_timeout as written ("" for the
	// default, 30 s).
	DialTimeout string `json:"dial_timeout,omitempty"`
	// Source says where the endpoint came from (Endpoint* constants); File
	// names the file (hosts directory, registries.conf).
	Source string `json:"source"`
	File   string `json:"file,omitempty"`
	// Credentials are this host's candidates in order (no secrets in JSON).
	Credentials []Credential `json:"credentials"`
	Trust       Trust        `json:"trust"`
	// Insecure: registries.conf insecure = true for this endpoint (TLS not
	// verified and plain HTTP allowed).
	Insecure bool `json:"insecure,omitempty"`
	// Blocked: registries.conf blocks this host; it is never contacted.
	Blocked bool `json:"blocked,omitempty"`
	// NamespaceProxy is registries.conf namespace-proxy, or containerd's
	// rule (every host but the image's registry): the "ns" query
	// parameter sent to this mirror.
	NamespaceProxy string `json:"namespace_proxy,omitempty"`
}

// Capabilities is what a host may be asked, as containerd's
// docker.HostCapabilities: a bitmask. The zero value is "not restricted"
// (every capability), as an endpoint without a capabilities setting is.
type Capabilities uint8

// The capabilities, in the order they marshal.
const (
	CapabilityPull Capabilities = 1 << iota
	CapabilityResolve
	CapabilityPush
	// CapabilityReferrers is containerd 2.x's (HostCapabilityReferrers);
	// a pull does not use it, but a hosts.toml may name it.
	CapabilityReferrers
)

var capabilityNames = []struct {
	c    Capabilities
	name string
}{{CapabilityPull, "pull"}, {CapabilityResolve, "resolve"}, {CapabilityPush, "push"}, {CapabilityReferrers, "referrers"}}

// ParseCapability is the capability named s (case-insensitive, as
// containerd's hosts.toml reads it).
func ParseCapability(s string) (Capabilities, error) {
	for _, n := range capabilityNames {
		if strings.EqualFold(s, n.name) {
			return n.c, nil
		}
	}
	return 0, fmt.Errorf("unknown capability %q", s)
}

// Has reports whether c allows want (always, when c is zero).
func (c Capabilities) Has(want Capabilities) bool { return c == 0 || c&want == want }

// ResolvesTags reports whether a host with c may be asked for a tag:
// containerd's Resolve asks only the hosts with both pull and resolve
// (filterHosts(HostCapabilityPull|HostCapabilityResolve),
// core/remotes/docker/resolver.go), so a host with resolve alone is not.
func (c Capabilities) ResolvesTags() bool { return c.Has(CapabilityPull | CapabilityResolve) }

// Names are c's capabilities in the order pull, resolve, push, referrers (nil for
// zero).
func (c Capabilities) Names() []string {
	var out []string
	for _, n := range capabilityNames {
		if c&n.c != 0 {
			out = append(out, n.name)
		}
	}
	return out
}

// MarshalJSON writes c as the list of its names.
func (c Capabilities) MarshalJSON() ([]byte, error) {
	n := c.Names()
	if n == nil {
		n = []string{}
	}
	return json.Marshal(n)
}

// UnmarshalJSON reads a list of names.
func (c *Capabilities) UnmarshalJSON(b []byte) error {
	var names []string
	if err := json.Unmarshal(b, &names); err != nil {
		return err
	}
	*c = 0
	for _, s := range names {
		v, err := ParseCapability(s)
		if err != nil {
			return err
		}
		*c |= v
	}
	return nil
}

// Credential sources the pull child treats as containerd's: an identity
// token of theirs falls back from the OAuth2 POST to a GET, as containerd's
// authorizer does (registry.Credential.OAuthFallback).
const (
	CredentialCRIRequest       = "cri-request"       // a CRI PullImage request's AuthConfig (containerd's ParseAuth)
	CredentialContainerdConfig = "containerd-config" // containerd's configs."HOST".auth
)

// Credential is one candidate credential and where it came from. Username is
// not secret; Password and IdentityToken are, and never marshal.
type Credential struct {
	// ID is the same for equal credentials of one keyring (the secret is
	// carried once; endpoints name it by ID).
	ID            string `json:"id,omitempty"`
	Source        string `json:"source"`
	File          string `json:"file,omitempty"`
	Key           string `json:"key,omitempty"`
	Username      string `json:"username,omitempty"`
	Password      string `json:"-"`
	IdentityToken string `json:"-"`
}

// AuthFile is one file of the containers search path.
type AuthFile struct {
	Path   string `json:"path"`
	Legacy bool   `json:"legacy,omitempty"` // .dockercfg format
	// Data, when not nil, is the file's content, read once by the
	// caller (an --authfile-fd pipe); Path then only names it ("fd:N").
	// It never marshals.
	Data []byte `json:"-"`
}

// Trust is the TLS material chosen for one registry.
type Trust struct {
	// CertDir is the one directory whose *.crt, *.cert and *.key files are
	// used ("" when none exists: the system pool alone).
	CertDir string `json:"cert_dir,omitempty"`
	// Searched lists every directory considered, in order.
	Searched []string `json:"searched"`
	// Verify is false when certificates are not checked (--tls-verify=false
	// or the registry is listed as insecure).
	Verify bool `json:"verify"`
	// InsecureBy says what turned verification off.
	InsecureBy string `json:"insecure_by,omitempty"`
	// CAFiles are extra CA bundles for this registry (policy trust.ca_files
	// matching it, containerd's hosts configuration), added to the pool.
	CAFiles []string `json:"ca_files,omitempty"`
	// ClientPairs are extra client certificate/key files ([cert, key]).
	ClientPairs [][2]string `json:"client_pairs,omitempty"`
}
