package cri

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"net/url"
	"strings"

	"github.com/distribution/reference"
	"github.com/pullhelper/pullhelper/auth"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Credential is a PullImage request's AuthConfig as the pull takes it: an
// auth.Request (username and password, or an identity token) for exactly
// one registry host, kept in memory only, and the identity that tells
// equal requests apart (a hash: it is used as a map key and may be logged).
type Credential struct {
	Request  *auth.Request
	Host     string
	Username string
	Identity string
	// secrets are the values to redact from any message.
	secrets []string
	// Ignored names what the request carried that is not used
	// (registry_token, as containerd ignores it); never its value.
	Ignored string
}

// credentialFor turns a request's AuthConfig for image into a Credential,
// with containerd's semantics (internal/cri/server/images ParseAuth, via
// auth.ParseContainerdAuth): username wins, then identity_token (the
// child's registry client exchanges it at the realm as an OAuth2 refresh
// token, as containerd's FetchTokenWithOAuth does), then auth (base64
// user:password); registry_token is not supported (ignored: containerd
// 2.4's ParseAuth still says "TODO: Support RegistryToken").
//
// The credential goes to one registry host only: server_address's host
// when given (a plain host[:port], or an http(s) URL of one; anything else,
// a pattern included, is an error), else the image's registry. ParseAuth
// compares server_address's host with each host it is asked for, and with
// no server_address hands the credential to every host, mirrors included;
// here it never goes to a mirror on another host (INVARIANTS.md 5; the
// keyring's auth.Request says where it goes: that host, and containerd's
// hosts.toml server of the image's own registry). A nil
// or empty AuthConfig gives nil: the node's sources apply. Errors never
// quote a secret.
func credentialFor(a *runtimeapi.AuthConfig, image string) (*Credential, error) {
	if a == nil || (a.GetUsername() == "" && a.GetPassword() == "" && a.GetAuth() == "" && a.GetIdentityToken() == "" && a.GetRegistryToken() == "") {
		return nil, nil
	}
	c := &Credential{}
	if a.GetRegistryToken() != "" {
		c.Ignored = "registry_token (not supported, as containerd's CRI ignores it)"
		c.secrets = append(c.secrets, a.GetRegistryToken())
	}
	user, secret, err := auth.ParseContainerdAuth(a.GetUsername(), a.GetPassword(), a.GetAuth(), a.GetIdentityToken())
	if err != nil {
		return nil, fmt.Errorf("the request's auth config: auth: %v", err)
	}
	c.secrets = append(c.secrets, a.GetPassword(), a.GetAuth(), a.GetIdentityToken(), secret)
	host, err := credentialHost(a.GetServerAddress(), image)
	if err != nil {
		return nil, err
	}
	c.Host, c.Username = host, user
	switch {
	case user == "" && secret == "":
		if c.Ignored == "" {
			return nil, nil
		}
		c.Identity = "anonymous"
		return c, nil
	case user == "":
		c.Request = &auth.Request{Host: host, IdentityToken: secret}
	default:
		c.Request = &auth.Request{Host: host, Username: user, Password: secret}
	}
	sum := sha256.Sum256([]byte(strings.Join([]string{host, user, secret}, "\x00")))
	c.Identity = hex.EncodeToString(sum[:8])
	return c, nil
}

// credentialHost is server_address's host (a plain host[:port], or an
// http or https URL of one, with at most a path), else the registry of
// image. A pattern, user info, a query or anything else that is not one
// registry host is an error (InvalidArgument): the credential would
// otherwise go to a host the kubelet did not name.
func credentialHost(server, image string) (string, error) {
	if server != "" {
		bad := func(why string) (string, error) {
			return "", fmt.Errorf("the request's auth config: server_address %q: %s; give a registry host[:port] or https://HOST[:PORT]", clip(server, 256), why)
		}
		s := server
		if !strings.Contains(s, "://") {
			if strings.ContainsAny(s, "/?#@") {
				return bad("not a registry host")
			}
			s = "https://" + s
		}
		u, err := url.Parse(s)
		if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
			return bad("not a registry host")
		}
		if !plainHost(u.Host) {
			return bad("not a plain host[:port] (a pattern or a character no host name has)")
		}
		return auth.RegistryHost(u.Host), nil
	}
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", fmt.Errorf("image %q: %v", image, err)
	}
	return reference.Domain(named), nil
}

// plainHost: h is a host name, an IPv4 address or a bracketed IPv6
// address, with an optional numeric port -- no glob, no other character.
func plainHost(h string) bool {
	name, port := h, ""
	if strings.HasPrefix(h, "[") {
		i := strings.Index(h, "]")
		if i < 0 {
			return false
		}
		name, port = h[:i+1], h[i+1:]
		if _, err := netip.ParseAddr(name[1 : len(name)-1]); err != nil {
			return false
		}
	} else if i := strings.LastIndex(h, ":"); i >= 0 {
		name, port = h[:i], h[i:]
	}
	if port != "" {
		p := strings.TrimPrefix(port, ":")
		if p == port || p == "" || len(p) > 5 {
			return false
		}
		for _, r := range p {
			if r < '0' || r > '9' {
				return false
			}
		}
	}
	if strings.HasPrefix(name, "[") {
		return true
	}
	if name == "" || len(name) > 253 || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, "..") {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// redact replaces every secret of c in msg.
func (c *Credential) redact(msg string) string {
	if c == nil {
		return msg
	}
	for _, s := range c.secrets {
		if len(s) >= 3 {
			msg = strings.ReplaceAll(msg, s, "[redacted]")
		}
	}
	return msg
}
