package auth

import (
	"strings"

	"github.com/pullhelper/pullhelper/hosts"
	"github.com/pullhelper/pullhelper/internal/wire"
)

// sourceRequest names a Request's candidate in results and logs.
const sourceRequest = wire.CredentialCRIRequest

// Request is a credential the caller resolved for exactly one registry
// host: a CRI PullImageRequest's AuthConfig as containerd's ParseAuth
// returns it (a username and password, or an identity token with no
// username). It is kept in memory only; Password and IdentityToken are
// secret.
//
// Unlike a kubelet pull secret, which the keyring offers to every endpoint
// the kubelet's credentials go to (mirrors included) and matches by glob,
// a Request is offered to one registry only: the endpoint whose host equals
// Host (docker.io also answers as registry-1.docker.io and
// index.docker.io), and, when Host is the image's own registry, containerd's
// server for it (a hosts.toml server, which stands for that registry; not a
// mirror) -- never a mirror on another host, never by pattern. That is
// containerd's ParseAuth(auth, host) when server_address is set, and what
// INVARIANTS.md 5 asks of it when server_address is not (ParseAuth then
// gives every host the credential); for registries.conf it is
// containers/image's newImageSourceAttempt, which drops DockerAuthConfig
// for an endpoint whose domain is not the image's.
type Request struct {
	// Host is the registry host[:port] the credential belongs to.
	Host                              string
	Username, Password, IdentityToken string
}

// requestKeychain offers a Request to its host.
type requestKeychain struct{ r *Request }

// Resolve implements Keychain.
func (k requestKeychain) Resolve(q hosts.Query) ([]wire.Credential, error) {
	if k.r == nil {
		return nil, nil
	}
	registry, _, _ := strings.Cut(q.Logical, "/")
	if !sameRegistryHost(q.Host, k.r.Host) && !(q.Server && sameRegistryHost(registry, k.r.Host)) {
		return nil, nil
	}
	c := wire.Credential{Source: sourceRequest, Key: k.r.Host, Username: k.r.Username, Password: k.r.Password, IdentityToken: k.r.IdentityToken}
	if c.Username == "" && c.Password == "" && c.IdentityToken == "" {
		return nil, nil
	}
	return []wire.Credential{c}, nil
}

// sameRegistryHost: endpoint host h is the registry host want (an exact,
// case-insensitive match; Docker Hub's three names are one).
func sameRegistryHost(h, want string) bool {
	return h != "" && RegistryHost(h) == RegistryHost(want)
}

// RegistryHost is host as a Request names it: lower case, and Docker Hub's
// endpoint names (registry-1.docker.io, index.docker.io) as docker.io.
func RegistryHost(host string) string {
	switch host = strings.ToLower(host); host {
	case "registry-1.docker.io", "index.docker.io":
		return "docker.io"
	default:
		return host
	}
}
