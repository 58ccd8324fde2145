package auth

// Kubelet credential-provider plugins: the CredentialProviderConfig
// (kubelet.config.k8s.io/v1, v1beta1, v1alpha1) and the exec protocol
// (credentialprovider.kubelet.k8s.io/v1, v1beta1, v1alpha1).
//
// This mirrors kubernetes pkg/credentialprovider/plugin: config.go
// (readCredentialProviderConfig, decode, validateCredentialProviderConfig),
// plugin.go (RegisterCredentialProviderPlugins, pluginProvider.provide,
// isImageAllowed, getCachedCredentials, execPlugin.ExecPlugin), plugins.go
// (externalCredentialProviderKeyring.Lookup) and the keyring's Add, Lookup
// and URLsMatch (keyring.go).
//
// What the kubelet does, and so what this file does:
//   - The image given to the plugins is the repository the kubelet pulls,
//     parsers.ParseImageName(image) = ParseNormalizedNamed(image).Name():
//     "nginx:1" becomes "docker.io/library/nginx"; tags and digests are
//     dropped. That string is matched against matchImages, sent as
//     request.image, used as the Image cache key, and looked up in the
//     returned auth map.
//   - A provider runs only if one of its matchImages matches the image:
//     both are parsed as "https://"+s; the ports must be equal (no port
//     only matches no port), the hosts must have the same number of
//     "."-labels, each label matches as a filepath.Match glob, and the
//     image path must string-start-with the pattern path. A matchImages
//     entry that carries a scheme is accepted by the kubelet's validation
//     but never matches (its "host" becomes "https:"); the same here.
//   - The plugin is binDir/name with args, and the environment is the
//     caller's followed by the provider's env (so env wins). The request
//     is {"kind","apiVersion","image"} on stdin; the response is read from
//     stdout. Its apiVersion must equal the provider's apiVersion, its
//     kind must be CredentialProviderResponse, and unknown or duplicate
//     fields are errors (the kubelet's decoder is strict).
//   - cacheKeyType Image caches under the image, Registry under the part
//     before the first "/", Global under one key; anything else is an error
//     and the response is not used. Lookups try image, registry, global in
//     that order. cacheDuration absent means defaultCacheDuration; a zero
//     duration (either one) means "do not cache".
//   - The auth maps of all providers go into one keyring: keys normalized as
//     in BasicDockerKeyring.Add (scheme dropped, /v1/ or /v2/ path prefix
//     dropped), de-duplicated and sorted in reverse lexical order; every key
//     that matches the image contributes, in that order, the credentials of
//     each provider that returned it, in config order. If none matches and
//     the image is on Docker Hub, the "index.docker.io" credentials are used.
//   - A provider that fails (exec error, timeout, bad response) contributes
//     nothing and the others still do: the kubelet logs the failure and
//     pulls with the rest. Providers returns the rest together with an
//     error naming each failed provider.
//
// Where this file differs, and why:
//   - The cache is a JSON file per provider (cacheDir/NAME.json, mode 0600)
//     instead of the kubelet's memory, because pullhelper is one process per
//     pull. The file records a fingerprint of the provider's configuration
//     (binary path, apiVersion, args, env, matchImages, cache duration); a
//     different fingerprint discards it, as a kubelet restart would.
//     Concurrent writers do not lock: the last atomic rename wins, and a
//     lost entry only costs one more plugin run.
//   - The plugin runs in its own process group, and the whole group is
//     killed on timeout, so a helper it forked cannot keep the pull waiting;
//     the kubelet kills only the plugin process.
//   - The kubelet passes a pod's service-account token to providers with
//     tokenAttributes. pullhelper pulls for no pod, so it behaves as the
//     kubelet does for a pod without a service account: a provider with
//     requireServiceAccount: true is skipped, one with false runs without a
//     token.
//   - The kubelet refuses to start when a configured plugin binary is
//     missing; Providers fails the same way (no credentials, an error).
//   - An empty provider name is rejected explicitly; the kubelet rejects it
//     later, when it looks up binDir/"" as the plugin.
//   - Plugin stderr is quoted in errors truncated, with every password of the
//     plugin's stdout response replaced by "[redacted]"; stdout is never
//     quoted.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.podman.io/image/v5/docker/reference"
	"go.yaml.in/yaml/v3"
)

const (
	sourceCredentialProvider = "credential-provider"

	// DefaultProviderTimeout is the kubelet's catch-all timeout for one
	// plugin run (execPlugin.ExecPlugin).
	DefaultProviderTimeout = time.Minute

	cpConfigGroup  = "kubelet.config.k8s.io"
	cpConfigKind   = "CredentialProviderConfig"
	cpRequestKind  = "CredentialProviderRequest"
	cpResponseKind = "CredentialProviderResponse"
	cpGlobalKey    = "global"

	cpMaxStdout     = 4 << 20
	cpMaxStderr     = 64 << 10
	cpStderrInError = 512
	cpWaitDelay     = 2 * time.Second
	cpCacheVersion  = 1
)

// The versions the kubelet registers (plugin.go apiVersions and the
// kubelet.config.k8s.io scheme).
var (
	cpPluginAPIVersions = []string{
		"credentialprovider.kubelet.k8s.io/v1",
		"credentialprovider.kubelet.k8s.io/v1alpha1",
		"credentialprovider.kubelet.k8s.io/v1beta1",
	}
	cpConfigVersions = []string{"v1", "v1alpha1", "v1beta1"}
)

// ProviderConfig is a parsed kubelet.config.k8s.io CredentialProviderConfig.
type ProviderConfig struct {
	// Path is the file or directory it was loaded from.
	Path      string
	Providers []CredentialProvider
}

// CredentialProvider is one exec plugin of a CredentialProviderConfig.
type CredentialProvider struct {
	Name        string
	MatchImages []string
	// DefaultCacheDuration is required; nil means it was absent.
	DefaultCacheDuration *time.Duration
	// APIVersion is the credentialprovider.kubelet.k8s.io version spoken.
	APIVersion      string
	Args            []string
	Env             []ProviderEnvVar
	TokenAttributes *ProviderTokenAttributes
	// File is the configuration file that declared the provider.
	File string
}

// ProviderEnvVar is an ExecEnvVar.
type ProviderEnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// ProviderTokenAttributes is a provider's tokenAttributes (service-account
// token mode). It is validated as the kubelet does; see the file comment for
// how pullhelper runs such providers.
type ProviderTokenAttributes struct {
	ServiceAccountTokenAudience          string
	CacheType                            string
	RequireServiceAccount                *bool
	RequiredServiceAccountAnnotationKeys []string
	OptionalServiceAccountAnnotationKeys []string
}

// ProviderOptions tunes Providers. The zero value is the kubelet's behaviour.
type ProviderOptions struct {
	// Timeout bounds one plugin run; 0 means DefaultProviderTimeout.
	Timeout time.Duration
	// Now is the clock used for the cache; nil means time.Now.
	Now func() time.Time
}

// ---- configuration ----

// cpDuration is a metav1.Duration: a string parsed by time.ParseDuration.
type cpDuration struct{ time.Duration }

type cpDurationError string

func (e cpDurationError) Error() string { return string(e) }

func (d *cpDuration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return cpDurationError("a duration must be a string such as \"12h\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return cpDurationError(fmt.Sprintf("invalid duration %q", cpTruncate(s, 64)))
	}
	d.Duration = v
	return nil
}

type cpConfigJSON struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Providers  []cpProviderJSON `json:"providers"`
}

type cpProviderJSON struct {
	Name                 string           `json:"name"`
	MatchImages          []string         `json:"matchImages"`
	DefaultCacheDuration *cpDuration      `json:"defaultCacheDuration"`
	APIVersion           string           `json:"apiVersion"`
	Args                 []string         `json:"args"`
	Env                  []ProviderEnvVar `json:"env"`
	TokenAttributes      *struct {
		ServiceAccountTokenAudience          string   `json:"serviceAccountTokenAudience"`
		CacheType                            string   `json:"cacheType"`
		RequireServiceAccount                *bool    `json:"requireServiceAccount"`
		RequiredServiceAccountAnnotationKeys []string `json:"requiredServiceAccountAnnotationKeys"`
		OptionalServiceAccountAnnotationKeys []string `json:"optionalServiceAccountAnnotationKeys"`
	} `json:"tokenAttributes"`
}

// cpSchema lists the object keys a strict decode accepts, case-sensitively
// as the kubelet's decoder does (encoding/json alone would fold case and
// ignore unknown or duplicate keys). A nil schema accepts any value; the key
// "*" stands for any key.
type cpSchema map[string]cpSchema

var cpConfigSchema = cpSchema{
	"apiVersion": nil,
	"kind":       nil,
	"providers": {
		"name":                 nil,
		"matchImages":          nil,
		"defaultCacheDuration": nil,
		"apiVersion":           nil,
		"args":                 nil,
		"env":                  {"name": nil, "value": nil},
		"tokenAttributes": {
			"serviceAccountTokenAudience":          nil,
			"cacheType":                            nil,
			"requireServiceAccount":                nil,
			"requiredServiceAccountAnnotationKeys": nil,
			"optionalServiceAccountAnnotationKeys": nil,
		},
	},
}

var cpResponseSchema = cpSchema{
	"apiVersion":                   nil,
	"kind":                         nil,
	"cacheKeyType":                 nil,
	"cacheDuration":                nil,
	"serviceAccountTokenCacheType": nil,
	"auth":                         {"*": {"username": nil, "password": nil}},
}

// cpStrictCheck reports unknown, case-mismatched or duplicate keys and
// trailing data. Its errors name keys, never values.
func cpStrictCheck(data []byte, schema cpSchema) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := cpWalk(dec, schema, ""); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("unexpected data after the top-level object")
	}
	return nil
}

func cpWalk(dec *json.Decoder, schema cpSchema, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return cpJSONError(err)
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return cpJSONError(err)
			}
			key, _ := kt.(string)
			field := strings.TrimPrefix(path+"."+key, ".")
			if seen[key] {
				return fmt.Errorf("duplicate field %q", field)
			}
			seen[key] = true
			var sub cpSchema
			if schema != nil {
				var ok bool
				if sub, ok = schema[key]; !ok {
					if sub, ok = schema["*"]; !ok {
						return fmt.Errorf("unknown field %q", field)
					}
				}
			}
			if err := cpWalk(dec, sub, field); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil {
			return cpJSONError(err)
		}
	case json.Delim('['):
		for dec.More() {
			if err := cpWalk(dec, schema, path); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil {
			return cpJSONError(err)
		}
	}
	return nil
}

// cpJSONError describes a JSON error without quoting the document.
func cpJSONError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("JSON syntax error at byte %d", se.Offset)
	case errors.As(err, &te):
		if te.Field != "" {
			return fmt.Errorf("field %q must not be a JSON %s", te.Field, te.Value)
		}
		return fmt.Errorf("a value must not be a JSON %s", te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return errors.New("unexpected end of JSON")
	}
	var de cpDurationError
	if errors.As(err, &de) {
		return de
	}
	return errors.New("malformed JSON")
}

var cpYAMLLineRE = regexp.MustCompile(`line (\d+)`)

// cpYAMLToJSON converts a YAML document to JSON as the kubelet's decoder
// does before decoding. Errors give at most a line number.
func cpYAMLToJSON(data []byte) ([]byte, error) {
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		if m := cpYAMLLineRE.FindStringSubmatch(err.Error()); m != nil {
			return nil, fmt.Errorf("YAML syntax error at line %s", m[1])
		}
		return nil, errors.New("YAML syntax error")
	}
	v, err := cpJSONable(v)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func cpJSONable(v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			c, err := cpJSONable(e)
			if err != nil {
				return nil, err
			}
			x[k] = c
		}
		return x, nil
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			ks, ok := k.(string)
			if !ok {
				return nil, errors.New("a YAML mapping key is not a string")
			}
			c, err := cpJSONable(e)
			if err != nil {
				return nil, err
			}
			m[ks] = c
		}
		return m, nil
	case []any:
		for i, e := range x {
			c, err := cpJSONable(e)
			if err != nil {
				return nil, err
			}
			x[i] = c
		}
		return x, nil
	case time.Time:
		return x.Format(time.RFC3339), nil
	}
	return v, nil
}

// LoadProviderConfig reads a CredentialProviderConfig (YAML or JSON) as the
// kubelet's --image-credential-provider-config: a file, or a directory whose
// *.json, *.yaml and *.yml files are read in lexical order and merged
// (a provider name may appear only once across them). The result is
// validated.
func LoadProviderConfig(path string) (*ProviderConfig, error) {
	if path == "" {
		return nil, errors.New("credential provider config path is empty")
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("credential provider config: %w", err)
	}
	files := []string{path}
	if st.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("credential provider config: %w", err)
		}
		files = nil
		for _, e := range entries {
			switch filepath.Ext(e.Name()) {
			case ".json", ".yaml", ".yml":
				if !e.IsDir() {
					files = append(files, filepath.Join(path, e.Name()))
				}
			}
		}
		sort.Strings(files)
		if len(files) == 0 {
			return nil, fmt.Errorf("credential provider config: no configuration files found in directory %s", path)
		}
	}
	cfg := &ProviderConfig{Path: path}
	seen := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("credential provider config: %w", err)
		}
		providers, err := cpDecodeConfig(data, f)
		if err != nil {
			return nil, fmt.Errorf("credential provider config %s: %w", f, err)
		}
		for _, p := range providers {
			if prev, dup := seen[p.Name]; dup && st.IsDir() {
				return nil, fmt.Errorf("credential provider config %s: duplicate provider name %q (also in %s)", f, p.Name, prev)
			}
			seen[p.Name] = f
			cfg.Providers = append(cfg.Providers, p)
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

func cpDecodeConfig(data []byte, file string) ([]CredentialProvider, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, errors.New("the file is empty")
	}
	if trimmed[0] != '{' {
		j, err := cpYAMLToJSON(data)
		if err != nil {
			return nil, err
		}
		data = j
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return nil, errors.New("the file holds no object")
	}
	if err := cpStrictCheck(data, cpConfigSchema); err != nil {
		return nil, err
	}
	var raw cpConfigJSON
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, cpJSONError(err)
	}
	if raw.Kind == "" || raw.APIVersion == "" {
		return nil, errors.New("apiVersion and kind must be set")
	}
	if raw.Kind != cpConfigKind {
		return nil, fmt.Errorf("failed to decode %q (wrong Kind)", raw.Kind)
	}
	group, version, _ := strings.Cut(raw.APIVersion, "/")
	if group != cpConfigGroup {
		return nil, fmt.Errorf("failed to decode CredentialProviderConfig, unexpected Group: %s", group)
	}
	if !cpContains(cpConfigVersions, version) {
		return nil, fmt.Errorf("unsupported apiVersion %q (supported: %s/v1, v1beta1, v1alpha1)", raw.APIVersion, cpConfigGroup)
	}
	out := make([]CredentialProvider, 0, len(raw.Providers))
	for _, r := range raw.Providers {
		p := CredentialProvider{
			Name: r.Name, MatchImages: r.MatchImages, APIVersion: r.APIVersion,
			Args: r.Args, Env: r.Env, File: file,
		}
		if r.DefaultCacheDuration != nil {
			d := r.DefaultCacheDuration.Duration
			p.DefaultCacheDuration = &d
		}
		if ta := r.TokenAttributes; ta != nil {
			p.TokenAttributes = &ProviderTokenAttributes{
				ServiceAccountTokenAudience:          ta.ServiceAccountTokenAudience,
				CacheType:                            ta.CacheType,
				RequireServiceAccount:                ta.RequireServiceAccount,
				RequiredServiceAccountAnnotationKeys: ta.RequiredServiceAccountAnnotationKeys,
				OptionalServiceAccountAnnotationKeys: ta.OptionalServiceAccountAnnotationKeys,
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// Validate applies the kubelet's validateCredentialProviderConfig (with the
// KubeletServiceAccountTokenForCredentialProviders gate on) plus an explicit
// check for an empty name. Field paths are the kubelet's; the provider's
// index and name are added.
func (c *ProviderConfig) Validate() error {
	var errs []string
	add := func(i int, p *CredentialProvider, format string, a ...any) {
		where := fmt.Sprintf("providers[%d]", i)
		if p.Name != "" {
			where += fmt.Sprintf(" (%q)", p.Name)
		}
		errs = append(errs, where+": "+fmt.Sprintf(format, a...))
	}
	if len(c.Providers) == 0 {
		errs = append(errs, "providers: Required value: at least 1 item in plugins is required")
	}
	seen := map[string]bool{}
	for i := range c.Providers {
		p := &c.Providers[i]
		switch {
		case p.Name == "":
			add(i, p, "providers.name: Required value")
		case p.Name == ".":
			add(i, p, "providers.name: Invalid value: provider name cannot be '.'")
		case p.Name == "..":
			add(i, p, "providers.name: Invalid value: provider name cannot be '..'")
		}
		if strings.Contains(p.Name, "/") {
			add(i, p, "providers.name: Invalid value: provider name cannot contain '/'")
		}
		if strings.Contains(p.Name, " ") {
			add(i, p, "providers.name: Invalid value: provider name cannot contain spaces")
		}
		if p.Name != "" && seen[p.Name] {
			add(i, p, "providers.name: Duplicate value: %q", p.Name)
		}
		seen[p.Name] = true

		if p.APIVersion == "" {
			add(i, p, "providers.apiVersion: Required value")
		} else if !cpContains(cpPluginAPIVersions, p.APIVersion) {
			add(i, p, "providers.apiVersion: Unsupported value: %q: supported values: %s", p.APIVersion, cpQuoteList(cpPluginAPIVersions))
		}

		if len(p.MatchImages) == 0 {
			add(i, p, "providers.matchImages: Required value: at least 1 item in matchImages is required")
		}
		for _, m := range p.MatchImages {
			if _, err := parseSchemelessURL(m); err != nil {
				add(i, p, "providers.matchImages: Invalid value: %q: match image is invalid: %v", m, cpURLError(err))
			}
		}

		if p.DefaultCacheDuration == nil {
			add(i, p, "providers.defaultCacheDuration: Required value")
		} else if *p.DefaultCacheDuration < 0 {
			add(i, p, "providers.defaultCacheDuration: Invalid value: %s: defaultCacheDuration must be greater than or equal to 0", *p.DefaultCacheDuration)
		}

		if ta := p.TokenAttributes; ta != nil {
			if ta.ServiceAccountTokenAudience == "" {
				add(i, p, "providers.tokenAttributes.serviceAccountTokenAudience: Required value")
			}
			if ta.RequireServiceAccount == nil {
				add(i, p, "providers.tokenAttributes.requireServiceAccount: Required value")
			}
			if p.APIVersion != cpPluginAPIVersions[0] {
				add(i, p, "providers.tokenAttributes: Forbidden: tokenAttributes is only supported for %s API version", cpPluginAPIVersions[0])
			}
			if ta.RequireServiceAccount != nil && !*ta.RequireServiceAccount && len(ta.RequiredServiceAccountAnnotationKeys) > 0 {
				add(i, p, "providers.tokenAttributes.requiredServiceAccountAnnotationKeys: Forbidden: requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set")
			}
			required := map[string]bool{}
			for _, list := range []struct {
				field string
				keys  []string
			}{
				{"requiredServiceAccountAnnotationKeys", ta.RequiredServiceAccountAnnotationKeys},
				{"optionalServiceAccountAnnotationKeys", ta.OptionalServiceAccountAnnotationKeys},
			} {
				dup := map[string]bool{}
				for _, k := range list.keys {
					if msg := cpQualifiedNameError(strings.ToLower(k)); msg != "" {
						add(i, p, "providers.tokenAttributes.%s: Invalid value: %q: %s", list.field, k, msg)
					}
					if dup[k] {
						add(i, p, "providers.tokenAttributes.%s: Duplicate value: %q", list.field, k)
					}
					dup[k] = true
					if list.field == "requiredServiceAccountAnnotationKeys" {
						required[k] = true
					} else if required[k] {
						add(i, p, "providers.tokenAttributes: Invalid value: %q: annotation keys cannot be both required and optional", k)
					}
				}
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	where := c.Path
	if where == "" {
		where = "(in memory)"
	}
	return fmt.Errorf("credential provider config %s: failed to validate: %s", where, strings.Join(errs, "; "))
}

var (
	cpQualifiedNameRE = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
	cpDNS1123SubRE    = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// cpQualifiedNameError is apimachinery's IsQualifiedName, condensed.
func cpQualifiedNameError(v string) string {
	prefix, name, hasPrefix := strings.Cut(v, "/")
	if !hasPrefix {
		name, prefix = prefix, ""
	} else if strings.Contains(name, "/") {
		return "a qualified name must consist of an optional DNS subdomain prefix and '/' and a name"
	}
	if hasPrefix && (prefix == "" || len(prefix) > 253 || !cpDNS1123SubRE.MatchString(prefix)) {
		return "prefix part must be a lowercase RFC 1123 subdomain"
	}
	if name == "" || len(name) > 63 || !cpQualifiedNameRE.MatchString(name) {
		return "name part must consist of at most 63 alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character"
	}
	return ""
}

func cpContains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

func cpQuoteList(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// cpURLError drops the quoted input from a url.Error.
func cpURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// ---- matching and the keyring ----

// cpImageAllowed is pluginProvider.isImageAllowed, with the kubelet
// keyring's URLsMatch (kubelet.go).
func cpImageAllowed(matchImages []string, image string) bool {
	for _, m := range matchImages {
		if kubeletURLsMatch(m, image) {
			return true
		}
	}
	return false
}

// cpAddToKeyring adds one provider's auth map to the BasicDockerKeyring that
// externalCredentialProviderKeyring fills (the kubelet keyring of
// kubelet.go, not a copy). The kubelet walks the map in Go's random order;
// sort so that two keys of one response that normalize alike keep a stable
// order.
func cpAddToKeyring(k *KubeletKeyring, provider string, auth map[string]cpAuthConfig) {
	locs := make([]string, 0, len(auth))
	for loc := range auth {
		locs = append(locs, loc)
	}
	sort.Strings(locs)
	var cfg kubeletConfig
	for _, loc := range locs {
		a := auth[loc]
		cfg.entries = append(cfg.entries, kubeletConfigItem{key: loc, entry: kubeletEntry{Username: a.Username, Password: a.Password}})
	}
	k.add(cfg, sourceCredentialProvider, provider)
}

// ---- running the providers ----

// Providers runs, in config order, every provider whose matchImages match
// image, and returns the credentials of their responses in the order the
// kubelet tries them (see the file comment). image may be any reference
// (with tag or digest, or short like "nginx"); the kubelet's repository form
// of it is what the plugins see and what is matched. binDir holds the plugin
// executables, named as the providers. cacheDir keeps one cache file per
// provider ("" = no cache).
//
// A provider that fails contributes nothing while the others still do:
// the credentials are returned together with an error naming each failed
// provider (the kubelet logs such failures and pulls with the rest). Errors
// before any provider ran (invalid config or image, missing binaries) come
// with no credentials.
func Providers(cfg *ProviderConfig, binDir, image, cacheDir string, opts ProviderOptions) ([]Credential, error) {
	if cfg == nil {
		return nil, nil
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return nil, fmt.Errorf("credential providers: couldn't parse image name %q: %v", image, err)
	}
	repo := named.Name()
	if err := cpCheckBinaries(cfg, binDir); err != nil {
		return nil, err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultProviderTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	kr := &KubeletKeyring{}
	var errs []error
	for i := range cfg.Providers {
		p := &cfg.Providers[i]
		if !cpImageAllowed(p.MatchImages, repo) {
			continue
		}
		if ta := p.TokenAttributes; ta != nil && ta.RequireServiceAccount != nil && *ta.RequireServiceAccount {
			continue // no pod, so no service account: the kubelet skips it
		}
		auth, err := cpProvide(p, binDir, repo, cacheDir, opts)
		if err != nil {
			errs = append(errs, err)
		}
		if auth != nil {
			cpAddToKeyring(kr, p.Name, auth)
		}
	}
	return kr.Lookup(repo), errors.Join(errs...)
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

func cpPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

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
	// serviceAccountTokenCacheType is accepted and unused (no token is sent).
	ServiceAccountTokenCacheType string `json:"serviceAccountTokenCacheType"`
}

// cpProvide is pluginProvider.provide: the cache, else the plugin.
func cpProvide(p *CredentialProvider, binDir, image, cacheDir string, opts ProviderOptions) (map[string]cpAuthConfig, error) {
	var cache *cpCache
	var cacheErr error
	if cacheDir != "" {
		cache, cacheErr = cpLoadCache(cacheDir, p, binDir)
		if auth, ok := cache.get(image, opts.Now()); ok {
			return auth, cacheErr
		}
	}
	resp, err := cpExec(p, binDir, image, opts.Timeout)
	if err != nil {
		return nil, errors.Join(err, cacheErr)
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
			p.Name, image, cpRedact(cpTruncate(resp.CacheKeyType, 64), cpPasswords(resp.Auth))), cacheErr)
	}
	auth := resp.Auth
	if auth == nil {
		auth = map[string]cpAuthConfig{}
	}
	d := *p.DefaultCacheDuration
	if resp.CacheDuration != nil {
		d = resp.CacheDuration.Duration
	}
	if cache != nil && d > 0 {
		now := opts.Now()
		cache.purge(now)
		cache.Entries[key] = cpCacheEntry{ExpiresAt: now.Add(d), Auth: auth}
		if err := cache.save(); err != nil {
			cacheErr = errors.Join(cacheErr, err)
		}
	}
	return auth, cacheErr
}

// cpExec is execPlugin.ExecPlugin.
func cpExec(p *CredentialProvider, binDir, image string, timeout time.Duration) (*cpResponse, error) {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("credential provider %q (image %s): "+format, append([]any{p.Name, image}, a...)...)
	}
	req, err := json.Marshal(struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
		Image      string `json:"image"`
	}{cpRequestKind, p.APIVersion, image})
	if err != nil {
		return nil, fail("encoding the request: %v", err)
	}
	req = append(req, '\n')

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, p.Name), p.Args...)
	stdout := &cpCappedBuffer{max: cpMaxStdout, fail: true}
	stderr := &cpCappedBuffer{max: cpMaxStderr}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(req), stdout, stderr
	env := os.Environ()
	for _, e := range p.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	cmd.Env = env // exec keeps the last of duplicate names: the config wins
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = cpWaitDelay

	runErr := cmd.Run()
	if ctx.Err() != nil {
		return nil, fail("plugin timed out after %s and was killed: %w", timeout, ctx.Err())
	}
	if runErr != nil {
		if stdout.overflow {
			return nil, fail("plugin wrote more than %d bytes to stdout", cpMaxStdout)
		}
		msg := cpRedact(stderr.String(), cpPasswordsFromOutput(stdout.Bytes()))
		msg = strings.TrimSpace(cpTruncate(msg, cpStderrInError))
		if msg == "" {
			return nil, fail("error execing credential provider plugin: %v", runErr)
		}
		return nil, fail("error execing credential provider plugin: %v: stderr: %s", runErr, msg)
	}

	out := stdout.Bytes()
	secrets := cpPasswordsFromOutput(out)
	var gvk struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(out, &gvk); err != nil {
		return nil, fail("error reading GVK from response: %v", cpJSONError(err))
	}
	if gvk.APIVersion != p.APIVersion {
		return nil, fail("apiVersion from credential plugin response did not match expected apiVersion:%s, actual apiVersion:%s",
			p.APIVersion, cpRedact(cpTruncate(gvk.APIVersion, 128), secrets))
	}
	if err := cpStrictCheck(out, cpResponseSchema); err != nil {
		return nil, fail("error decoding credential provider plugin response from stdout: %s", cpRedact(err.Error(), secrets))
	}
	var resp cpResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		return nil, fail("error decoding credential provider plugin response from stdout: %s", cpRedact(cpJSONError(err).Error(), secrets))
	}
	if resp.Kind != cpResponseKind {
		return nil, fail("failed to decode CredentialProviderResponse, unexpected Kind: %q", cpRedact(cpTruncate(resp.Kind, 128), secrets))
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

func cpTruncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "...(truncated)"
}

// ---- the per-node cache ----

type cpCacheEntry struct {
	ExpiresAt time.Time               `json:"expiresAt"`
	Auth      map[string]cpAuthConfig `json:"auth"`
}

type cpCache struct {
	Version     int                     `json:"version"`
	Provider    string                  `json:"provider"`
	Fingerprint string                  `json:"fingerprint"`
	Entries     map[string]cpCacheEntry `json:"entries"`
	path        string
}

// cpFingerprint hashes what the kubelet would have to restart to change.
// Env values may be secret, so only the hash is stored.
func cpFingerprint(p *CredentialProvider, binDir string) string {
	data, _ := json.Marshal(struct {
		Bin                  string
		APIVersion           string
		Args                 []string
		Env                  []ProviderEnvVar
		MatchImages          []string
		DefaultCacheDuration *time.Duration
	}{filepath.Join(binDir, p.Name), p.APIVersion, p.Args, p.Env, p.MatchImages, p.DefaultCacheDuration})
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// cpLoadCache returns the provider's cache, empty if the file is missing,
// malformed or from another configuration. A read error other than
// "missing" is returned alongside an empty cache.
func cpLoadCache(dir string, p *CredentialProvider, binDir string) (*cpCache, error) {
	c := &cpCache{
		Version: cpCacheVersion, Provider: p.Name, Fingerprint: cpFingerprint(p, binDir),
		Entries: map[string]cpCacheEntry{}, path: filepath.Join(dir, p.Name+".json"),
	}
	data, err := os.ReadFile(c.path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("credential provider %q: reading cache %s: %v", p.Name, c.path, cpPathErr(err))
	}
	var onDisk cpCache
	if json.Unmarshal(data, &onDisk) != nil || onDisk.Version != cpCacheVersion ||
		onDisk.Provider != c.Provider || onDisk.Fingerprint != c.Fingerprint {
		return c, nil
	}
	for k, e := range onDisk.Entries {
		c.Entries[k] = e
	}
	return c, nil
}

// get is getCachedCredentials: image, then registry, then global.
func (c *cpCache) get(image string, now time.Time) (map[string]cpAuthConfig, bool) {
	for _, key := range []string{image, strings.Split(image, "/")[0], cpGlobalKey} {
		if e, ok := c.Entries[key]; ok && !now.After(e.ExpiresAt) {
			if e.Auth == nil {
				e.Auth = map[string]cpAuthConfig{}
			}
			return e.Auth, true
		}
	}
	return nil, false
}

func (c *cpCache) purge(now time.Time) {
	for k, e := range c.Entries {
		if now.After(e.ExpiresAt) {
			delete(c.Entries, k)
		}
	}
}

// save writes the cache atomically with mode 0600 (it holds passwords).
func (c *cpCache) save() error {
	fail := func(err error) error {
		return fmt.Errorf("credential provider %q: writing cache %s: %v", c.Provider, c.path, cpPathErr(err))
	}
	data, err := json.Marshal(c)
	if err != nil {
		return fail(err)
	}
	dir := filepath.Dir(c.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail(err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(c.path)+".tmp-*")
	if err != nil {
		return fail(err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, c.path)
	}
	if err != nil {
		os.Remove(tmp)
		return fail(err)
	}
	return nil
}
