package cri

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/distribution/reference"
	"github.com/pullhelper/pullhelper/auth"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Credential is a PullImage request's AuthConfig as the pull takes it: a
// pull secret (username and password) or a containers auth file (an
// identity token), kept in memory only, and the identity that tells equal
// requests apart (a hash: it is used as a map key and may be logged).
type Credential struct {
	PullSecret *auth.Inline
	Authfile   *auth.Inline
	Host       string
	Username   string
	Identity   string
	// secrets are the values to redact from any message.
	secrets []string
	// Ignored names what the request carried that is not used
	// (registry_token, as containerd ignores it); never its value.
	Ignored string
}

// dockerHubKey is the docker config key of Docker Hub, which the kubelet's
// keyring maps to docker.io images.
const dockerHubKey = "https://index.docker.io/v1/"

// credentialFor turns a request's AuthConfig for image into a Credential,
// with containerd's semantics (internal/cri/server/images ParseAuth, via
// auth.ParseContainerdAuth): username wins, then identity_token, then
// auth (base64 user:password); registry_token is not supported (ignored).
// The credential is for server_address's host when given (the kubelet
// sets it to the registry its credential matched), else the image's
// registry. A nil or empty AuthConfig gives nil: the node's sources apply.
// Errors never quote a secret.
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
	key := host
	if host == "docker.io" {
		key = dockerHubKey
	}
	entry := map[string]string{}
	switch {
	case user == "" && secret == "":
		if c.Ignored == "" {
			return nil, nil
		}
		c.Identity = "anonymous"
		return c, nil
	case user == "":
		// An identity token: kubelet pull secrets carry none, a
		// containers auth file does.
		entry["identitytoken"] = secret
	default:
		entry["username"], entry["password"] = user, secret
	}
	doc, err := json.Marshal(map[string]map[string]map[string]string{"auths": {key: entry}})
	if err != nil {
		return nil, fmt.Errorf("the request's auth config: %v", err)
	}
	in := &auth.Inline{Name: "cri:PullImageRequest.auth", Setting: "the PullImage request's auth", Data: doc}
	if user == "" {
		c.Authfile = in
	} else {
		c.PullSecret = in
	}
	sum := sha256.Sum256([]byte(strings.Join([]string{host, user, secret}, "\x00")))
	c.Identity = hex.EncodeToString(sum[:8])
	return c, nil
}

// credentialHost is server_address's host (a URL or a bare host[:port]),
// else the registry of image.
func credentialHost(server, image string) (string, error) {
	if server != "" {
		s := server
		if !strings.Contains(s, "://") {
			s = "https://" + s
		}
		u, err := url.Parse(s)
		if err != nil || u.Host == "" {
			return "", fmt.Errorf("the request's auth config: server_address %q: not a registry host", server)
		}
		if u.Host == "index.docker.io" || u.Host == "registry-1.docker.io" {
			return "docker.io", nil
		}
		return u.Host, nil
	}
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", fmt.Errorf("image %q: %v", image, err)
	}
	return reference.Domain(named), nil
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
