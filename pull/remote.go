package pull

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/wire"
	"github.com/pullhelper/pullhelper/registry"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/manifest"
	"go.podman.io/image/v5/pkg/tlsclientconfig"
	"go.podman.io/image/v5/types"
)

// The image source of the copy.
//
// Manifests and blobs come through pullhelper's own registry client
// (package registry), which walks the endpoints as containerd does: each
// with its own credential, trust, headers, API path, ns= parameter and
// connect timeout, a fallback per request, and a Range resume of a body that
// breaks off. containers/image keeps the copy itself (conversion, layout
// writing, digest verification as the bytes stream) and, when a signature
// policy file or registries.d is in use, the signatures: those are read
// through its own docker source, opened on first use.

// remoteClient builds the registry client of one attempt in credential
// round `round`: every endpoint that is not blocked, in order, with its
// round-th candidate (its last when it has fewer).
func (p *Request) remoteClient(m *Material, sys *types.SystemContext, round int, proxy func(*registry.Endpoint, *url.URL) (*url.URL, error), realm func(*registry.Endpoint, *url.URL) error, discard func(int) error, log *slog.Logger) (*registry.Client, error) {
	var eps []registry.Endpoint
	for i, e := range p.Endpoints {
		if e.Blocked || e.Host == "" {
			continue
		}
		ep, err := p.registryEndpoint(m, sys, i, e, round)
		if err != nil {
			return nil, err
		}
		eps = append(eps, ep)
	}
	if len(eps) == 0 {
		return nil, failure.New(failure.Usage, "no endpoint of %s may be contacted (every one is blocked)", p.Registry)
	}
	// A mirror that accepts the connection and never answers would hold
	// the request until the stall watchdog ends the whole attempt (and
	// the next attempt would ask it again): it gets half the stall
	// timeout for its headers, then the next endpoint is asked. The last
	// endpoint is left to the watchdog.
	for i := range eps[:len(eps)-1] {
		eps[i].HeaderTimeout = p.StallTimeout / 2
	}
	return registry.New(eps, registry.Hooks{
		Proxy: proxy, Realm: realm, Discard: discard, UserAgent: p.UserAgent, Log: log,
		// Retries are per request (a manifest, a blob), not per image:
		// the blobs already copied stay.
		Retries: p.Retries, RetryDelay: p.RetryDelay,
		OnRetry: func(what string, attempt, of int, wait time.Duration, err error) {
			log.Warn("request failed; retrying", "what", what, "attempt", attempt, "of", of, "in", wait, "error", rootCause(err))
		},
	}), nil
}

func (p *Request) registryEndpoint(m *Material, sys *types.SystemContext, i int, e wire.Endpoint, round int) (registry.Endpoint, error) {
	ep := registry.Endpoint{Scheme: e.Scheme, Host: e.Host, Path: e.Path, Namespace: e.NamespaceProxy}
	if ep.Scheme == "" {
		ep.Scheme = "https"
	}
	containerd := strings.HasPrefix(e.Source, "containerd")
	if !containerd {
		// containers/image: the API root is /v2, and docker.io is served
		// by registry-1.docker.io.
		ep.Path = "/v2"
		if ep.Host == "docker.io" {
			ep.Host = "registry-1.docker.io"
		}
	}
	_, repo, ok := strings.Cut(e.Repository, "/")
	if !ok || repo == "" {
		return ep, failure.New(failure.Internal, "endpoint %s has no repository path in %q", e.Host, e.Repository)
	}
	ep.Repository = repo
	ep.Resolve = e.Capabilities.ResolvesTags()
	if i < len(m.Headers) && len(m.Headers[i]) > 0 {
		ep.Header = map[string][]string{}
		for k, v := range m.Headers[i] {
			ep.Header[k] = append([]string(nil), v...)
		}
	}
	if e.DialTimeout != "" {
		d, err := time.ParseDuration(e.DialTimeout)
		if err != nil || d < 0 {
			return ep, failure.New(failure.Usage, "endpoint %s: invalid dial_timeout %q", e.Host, e.DialTimeout)
		}
		ep.DialTimeout = d
	}
	// Trust: the endpoint's own certificate files (written by
	// systemContext under certs.d/HOST, as containers/image lays them
	// out), verification off when the endpoint or --tls-verify=false says
	// so; an insecure endpoint may fall back to plain http.
	// The system's roots as the parent read them (nil: Go's own, loaded
	// here); containers/image's SetupCertificates adds the host's CAs to
	// them, as it adds them to x509.SystemCertPool.
	tlsc := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: m.systemPool()}
	if sys.DockerPerHostCertDirPath != "" {
		if err := tlsclientconfig.SetupCertificates(filepath.Join(sys.DockerPerHostCertDirPath, filepath.Base(e.Host)), tlsc); err != nil {
			return ep, failure.Wrap(failure.TLS, err, "loading the certificates of %s", e.Host)
		}
	}
	insecure := !p.TLSVerify || e.Insecure || !e.Trust.Verify
	tlsc.InsecureSkipVerify = insecure
	ep.TLS = tlsc
	ep.HTTPFallback = insecure && !containerd && ep.Scheme == "https"
	ep.TLSFallback = containerd && e.TLSFallback && ep.Scheme == "https"
	if len(e.Credentials) > 0 {
		c := e.Credentials[min(round, len(e.Credentials)-1)]
		if s, ok := m.Secrets[c.ID]; ok {
			// containerd's credentials (a CRI request's, configs.auth)
			// fall back from the OAuth2 POST to a GET, as containerd's
			// authorizer does; the others are containers/image's.
			ep.Credential = &registry.Credential{Username: s.Username, Password: s.Password, IdentityToken: s.IdentityToken,
				OAuthFallback: c.Source == wire.CredentialCRIRequest || c.Source == wire.CredentialContainerdConfig}
		}
	}
	return ep, nil
}

// NeedsSignatures reports whether the signature policy (JSON; nil: the
// built-in accept-anything) has any requirement that reads signatures —
// anything but insecureAcceptAnything and reject, in any scope. Only then
// are signatures fetched (through containers/image, which asks the
// endpoints its own way). An unparsable policy counts as needing them.
func NeedsSignatures(policy []byte) bool {
	if policy == nil {
		return false
	}
	var pol struct {
		Default    []struct{ Type string }                       `json:"default"`
		Transports map[string]map[string][]struct{ Type string } `json:"transports"`
	}
	if err := json.Unmarshal(policy, &pol); err != nil {
		return true
	}
	reqs := pol.Default
	for _, scopes := range pol.Transports {
		for _, r := range scopes {
			reqs = append(reqs, r...)
		}
	}
	for _, r := range reqs {
		if r.Type != "insecureAcceptAnything" && r.Type != "reject" {
			return true
		}
	}
	return false
}

// manifestCache keeps the manifests of one attempt by digest, so that the
// manifest the tag resolved to is not fetched again for the copy.
type manifestCache struct {
	mu sync.Mutex
	m  map[digest.Digest]cachedManifest
}

type cachedManifest struct {
	raw  []byte
	mime string
}

func (c *manifestCache) get(d digest.Digest) (cachedManifest, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.m[d]
	return m, ok
}

func (c *manifestCache) put(d digest.Digest, raw []byte, mime string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[digest.Digest]cachedManifest{}
	}
	c.m[d] = cachedManifest{raw: raw, mime: mime}
}

// remoteSource is a types.ImageSource over the registry client. Its
// reference is the docker:// reference (tagged while the tag is resolved,
// pinned for the copy).
type remoteSource struct {
	ref       types.ImageReference
	named     reference.Named
	sys       *types.SystemContext
	rc        *registry.Client
	cache     *manifestCache
	signature bool          // signatures may exist: read them through containers/image
	partial   *partialCache // nil: no resume across restarts
	slots     *slots        // the node's download slots (nil: no node limit)
	// known are the bytes of small blobs DEST already has (configs),
	// served without a request; containers/image checks their digest.
	known map[digest.Digest][]byte

	mu  sync.Mutex
	sig types.ImageSource
}

func (s *remoteSource) Reference() types.ImageReference { return s.ref }

func (s *remoteSource) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sig != nil {
		return s.sig.Close()
	}
	return nil
}

func (s *remoteSource) GetManifest(ctx context.Context, instance *digest.Digest) ([]byte, string, error) {
	ref := "latest"
	var want digest.Digest
	switch {
	case instance != nil:
		want = *instance
	case s.digested() != "":
		want = s.digested()
	default:
		if t, ok := s.named.(reference.Tagged); ok {
			ref = t.Tag()
		}
	}
	if want != "" {
		if m, ok := s.cache.get(want); ok {
			return m.raw, m.mime, nil
		}
		ref = want.String()
	}
	raw, mime, host, err := s.rc.Manifest(ctx, ref, manifest.DefaultRequestedManifestMIMETypes, MaxManifestBytes)
	if err != nil {
		var tl *registry.TooLargeError
		if errors.As(err, &tl) {
			return nil, "", verification(errImageTooLarge, "%v", tl)
		}
		return nil, "", err
	}
	if mime == "" || mime == "text/plain" || mime == "application/json" {
		mime = manifest.GuessMIMEType(raw)
	}
	if want != "" {
		ok, err := manifest.MatchesDigest(raw, want)
		if err != nil || !ok {
			got, _ := manifest.Digest(raw)
			return nil, "", failure.New(failure.Verification, "manifest digest mismatch: %s serves %s for %s", host, got, want)
		}
		s.cache.put(want, raw, mime)
	}
	return raw, mime, nil
}

func (s *remoteSource) digested() digest.Digest {
	if d, ok := s.named.(reference.Digested); ok {
		return d.Digest()
	}
	return ""
}

func (s *remoteSource) HasThreadSafeGetBlob() bool { return true }

func (s *remoteSource) GetBlob(ctx context.Context, info types.BlobInfo, _ types.BlobInfoCache) (io.ReadCloser, int64, error) {
	if b, ok := s.known[info.Digest]; ok && (info.Size < 0 || info.Size == int64(len(b))) {
		return io.NopCloser(bytes.NewReader(b)), int64(len(b)), nil
	}
	if s.slots == nil {
		return s.getBlob(ctx, info)
	}
	// The node's limit on concurrent downloads: wait for a slot, held
	// until the blob is read.
	if err := s.slots.acquire(ctx); err != nil {
		return nil, 0, err
	}
	rc, n, err := s.getBlob(ctx, info)
	if err != nil {
		s.slots.release()
		return nil, 0, err
	}
	return &slotReader{ReadCloser: rc, s: s.slots}, n, nil
}

func (s *remoteSource) getBlob(ctx context.Context, info types.BlobInfo) (io.ReadCloser, int64, error) {
	if s.partial != nil {
		return s.partial.blob(ctx, s.rc, info)
	}
	return s.rc.Blob(ctx, info.Digest, info.Size)
}

func (s *remoteSource) GetSignatures(ctx context.Context, instance *digest.Digest) ([][]byte, error) {
	if !s.signature {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sig == nil {
		src, err := s.ref.NewImageSource(ctx, s.sys)
		if err != nil {
			return nil, fmt.Errorf("reading the signatures: %w", err)
		}
		s.sig = src
	}
	return s.sig.GetSignatures(ctx, instance)
}

func (s *remoteSource) LayerInfosForCopy(context.Context, *digest.Digest) ([]types.BlobInfo, error) {
	return nil, nil
}
