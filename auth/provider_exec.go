package auth

// Running the credential-provider plugins: kubernetes
// pkg/credentialprovider/plugin/plugin.go (pluginProvider.provide,
// execPlugin.ExecPlugin) and plugins.go.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/pullhelper/pullhelper/internal/safefile"
	"github.com/pullhelper/pullhelper/internal/wire"
	"go.podman.io/image/v5/docker/reference"
)

// ---- running the providers ----

// cpProviders runs, in config order, every provider whose matchImages match
// image, and returns the credentials of their responses in the order the
// kubelet tries them (see the file comment), and why each skipped provider
// was skipped ("NAME: reason"). image may be any reference (with tag or
// digest, or short like "nginx"); the kubelet's repository form of it is
// what the plugins see and what is matched. binDir holds the plugin
// executables, named as the providers. cacheDir keeps one cache file per
// provider ("" = no cache).
//
// A provider that fails contributes nothing while the others still do:
// the credentials are returned together with an error naming each failed
// provider (the kubelet logs such failures and pulls with the rest). Errors
// before any provider ran (invalid config or image, missing binaries) come
// with no credentials.
func cpProviders(cfg *ProviderConfig, binDir, image, cacheDir string, opts ProviderOptions) ([]wire.Credential, []string, error) {
	if cfg == nil {
		return nil, nil, nil
	}
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	repo, err := cpRepository(image)
	if err != nil {
		return nil, nil, err
	}
	if err := cpCheckBinaries(cfg, binDir); err != nil {
		return nil, nil, err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultProviderTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	byName := map[string]*CredentialProvider{}
	for i := range cfg.Providers {
		byName[cfg.Providers[i].Name] = &cfg.Providers[i]
	}
	kr := &KubeletKeyring{}
	var errs []error
	var skipped []string
	for _, d := range cpPlan(cfg, repo, opts.ServiceAccount) {
		if d.Skipped != "" {
			skipped = append(skipped, fmt.Sprintf("%q: %s", d.Name, d.Skipped))
			continue
		}
		p := byName[d.Name]
		auth, err := cpProvide(p, &d, binDir, repo, cacheDir, opts)
		if err != nil {
			errs = append(errs, err)
		}
		if auth != nil {
			cpAddToKeyring(kr, p.Name, auth)
		}
	}
	return kr.Lookup(repo), skipped, errors.Join(errs...)
}

// cpRepository is the kubelet's parsers.ParseImageName(image) name.
func cpRepository(image string) (string, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", fmt.Errorf("credential providers: couldn't parse image name %q: %w", image, err)
	}
	return named.Name(), nil
}

// cpCheckBinaries is RegisterCredentialProviderPlugins' check.
func cpCheckBinaries(cfg *ProviderConfig, binDir string) error {
	if _, err := os.Stat(binDir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("credential providers: plugin binary directory %s did not exist", binDir)
		}
		return fmt.Errorf("credential providers: error inspecting binary directory %s: %w", binDir, cpPathErr(err))
	}
	for _, p := range cfg.Providers {
		bin := filepath.Join(binDir, p.Name)
		if _, err := exec.LookPath(bin); err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, exec.ErrNotFound) {
				return fmt.Errorf("credential provider %q: plugin binary executable %s did not exist", p.Name, bin)
			}
			return fmt.Errorf("credential provider %q: error inspecting binary executable %s: %v", p.Name, bin, cpPathErr(err))
		}
	}
	return nil
}

func cpPathErr(err error) error { return safefile.Cause(err) }

type cpAuthConfig struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

type cpResponse struct {
	APIVersion    string                  `json:"apiVersion"`
	Kind          string                  `json:"kind"`
	CacheKeyType  string                  `json:"cacheKeyType"`
	CacheDuration *cpDuration             `json:"cacheDuration"`
	Auth          map[string]cpAuthConfig `json:"auth"`
	// serviceAccountTokenCacheType is accepted and unused, as by the kubelet
	// (the config's tokenAttributes.cacheType decides).
	ServiceAccountTokenCacheType string `json:"serviceAccountTokenCacheType"`
}

// cpProvide is pluginProvider.provide: the cache, else the plugin.
func cpProvide(p *CredentialProvider, d *ProviderDecision, binDir, image, cacheDir string, opts ProviderOptions) (map[string]cpAuthConfig, error) {
	var cache *cpCache
	var cacheErr error
	if cacheDir != "" {
		cache, cacheErr = cpLoadCache(cacheDir, p, binDir)
		if auth, ok := cache.get(image, d.saKey, opts.Now()); ok {
			return auth, cacheErr
		}
	}
	resp, err := cpExec(p, d, binDir, image, opts.Timeout)
	if err != nil {
		return nil, errors.Join(err, cacheErr)
	}
	if d.token != "" && d.cacheType != cpCacheToken {
		for _, a := range resp.Auth {
			if a.Password == d.token {
				return nil, errors.Join(fmt.Errorf("credential provider %q (image %s): plugin returned the service account token as the password, which is not allowed when tokenAttributes.cacheType is not Token", p.Name, image), cacheErr)
			}
		}
	}
	var key string
	switch resp.CacheKeyType {
	case "Image":
		key = image
	case "Registry":
		key = strings.Split(image, "/")[0]
	case "Global":
		key = cpGlobalKey
	default:
		return nil, errors.Join(fmt.Errorf("credential provider %q (image %s): plugin did not return a valid cacheKeyType: %q (want Image, Registry or Global)",
			p.Name, image, cpTruncate(cpRedact(resp.CacheKeyType, cpPasswords(resp.Auth)), 64)), cacheErr)
	}
	auth := resp.Auth
	if auth == nil {
		auth = map[string]cpAuthConfig{}
	}
	dur := *p.DefaultCacheDuration
	if resp.CacheDuration != nil {
		dur = resp.CacheDuration.Duration
	}
	if cache != nil && dur > 0 {
		now := opts.Now()
		cache.purge(now)
		cache.Entries[cpCacheKey(key, d.saKey)] = cpCacheEntry{ExpiresAt: now.Add(dur), Auth: auth}
		if err := cache.save(); err != nil {
			cacheErr = errors.Join(cacheErr, err)
		}
	}
	return auth, cacheErr
}

// cpExec is execPlugin.ExecPlugin.
func cpExec(p *CredentialProvider, d *ProviderDecision, binDir, image string, timeout time.Duration) (*cpResponse, error) {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("credential provider %q (image %s): "+format, append([]any{p.Name, image}, a...)...)
	}
	var annotations map[string]string
	if len(d.annotations) > 0 {
		annotations = d.annotations
	}
	// credentialprovider/v1 CredentialProviderRequest: both service-account
	// fields are omitempty.
	req, err := json.Marshal(struct {
		Kind                      string            `json:"kind"`
		APIVersion                string            `json:"apiVersion"`
		Image                     string            `json:"image"`
		ServiceAccountToken       string            `json:"serviceAccountToken,omitempty"`
		ServiceAccountAnnotations map[string]string `json:"serviceAccountAnnotations,omitempty"`
	}{cpRequestKind, p.APIVersion, image, d.token, annotations})
	if err != nil {
		return nil, fail("encoding the request: %v", err)
	}
	req = append(req, '\n')

	env := os.Environ()
	for _, e := range p.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	// exec keeps the last of duplicate names in env: the config wins.
	res, runErr := runBounded(filepath.Join(binDir, p.Name), p.Args, bytes.NewReader(req), env,
		runBounds{Timeout: timeout, MaxStdout: cpMaxStdout, MaxStderr: cpMaxStderr})
	if res.TimedOut {
		return nil, fail("plugin timed out after %s and was killed: %w", timeout, context.DeadlineExceeded)
	}
	if runErr != nil {
		if res.Overflow {
			return nil, fail("plugin wrote more than %d bytes to stdout", cpMaxStdout)
		}
		msg := cpRedact(string(res.Stderr), append(cpPasswordsFromOutput(res.Stdout), d.token))
		msg = strings.TrimSpace(cpTruncate(msg, cpStderrInError))
		if msg == "" {
			return nil, fail("error execing credential provider plugin: %v", runErr)
		}
		return nil, fail("error execing credential provider plugin: %v: stderr: %s", runErr, msg)
	}

	return cpDecodeResponse(p, res.Stdout, d.token, fail)
}

// cpDecodeResponse decodes the plugin's stdout as a CredentialProviderResponse
// of p's apiVersion, strictly (unknown fields are errors). Errors come from
// fail and never hold a password of out or token.
func cpDecodeResponse(p *CredentialProvider, out []byte, token string, fail func(format string, a ...any) error) (*cpResponse, error) {
	secrets := append(cpPasswordsFromOutput(out), token)
	var gvk struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(out, &gvk); err != nil {
		return nil, fail("error reading GVK from response: %v", cpJSONError(err))
	}
	if gvk.APIVersion != p.APIVersion {
		return nil, fail("apiVersion from credential plugin response did not match expected apiVersion:%s, actual apiVersion:%s",
			p.APIVersion, cpOneLine(cpTruncate(cpRedact(gvk.APIVersion, secrets), 128)))
	}
	if err := cpStrictCheck(out, cpResponseSchema); err != nil {
		return nil, fail("error decoding credential provider plugin response from stdout: %s", cpRedact(err.Error(), secrets))
	}
	var resp cpResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		return nil, fail("error decoding credential provider plugin response from stdout: %s", cpRedact(cpJSONError(err).Error(), secrets))
	}
	if resp.Kind != cpResponseKind {
		return nil, fail("failed to decode CredentialProviderResponse, unexpected Kind: %q", cpTruncate(cpRedact(resp.Kind, secrets), 128))
	}
	return &resp, nil
}

// cpCappedBuffer keeps at most max bytes. With fail set, a write past max is
// an error (which stops the copy and the plugin's output); otherwise the
// rest is dropped.
type cpCappedBuffer struct {
	bytes.Buffer
	max      int
	fail     bool
	overflow bool
}

func (b *cpCappedBuffer) Write(p []byte) (int, error) {
	room := b.max - b.Len()
	if len(p) > room {
		b.overflow = true
		if b.fail {
			return 0, errors.New("output too large")
		}
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

// cpPasswordsFromOutput collects the password values of whatever response
// the plugin printed, however malformed the rest of it is.
func cpPasswordsFromOutput(out []byte) []string {
	var r struct {
		Auth map[string]struct {
			Password any `json:"password"`
		} `json:"auth"`
	}
	if json.Unmarshal(out, &r) != nil {
		return nil
	}
	var pw []string
	for _, a := range r.Auth {
		if s, ok := a.Password.(string); ok && s != "" {
			pw = append(pw, s)
		}
	}
	return pw
}

func cpPasswords(auth map[string]cpAuthConfig) []string {
	var pw []string
	for _, a := range auth {
		if a.Password != "" {
			pw = append(pw, a.Password)
		}
	}
	return pw
}

// cpRedact replaces every secret in s, longest first.
func cpRedact(s string, secrets []string) string {
	sort.Slice(secrets, func(i, j int) bool { return len(secrets[i]) > len(secrets[j]) })
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "[redacted]")
		}
	}
	return s
}

// cpOneLine is s for an error message: as is (the kubelet's text), or
// quoted when it holds a control character (a newline would split it).
func cpOneLine(s string) string {
	if strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

func cpTruncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "...(truncated)"
}
