package auth

// CredentialProviderConfig decoding (strict, as the kubelet decodes it) and
// validation: kubernetes pkg/credentialprovider/plugin/config.go.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pullhelper/pullhelper/internal/safefile"
	"go.yaml.in/yaml/v3"
)

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
		// Not the value: the file may be a symlink to a root-only one.
		return cpDurationError("invalid duration (want a value such as \"12h\")")
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
		data, err := readFile(f)
		if err != nil {
			return nil, fmt.Errorf("credential provider config %s: %w", f, safefile.Cause(err))
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
	// The kind first, as the kubelet's codec does: a file that is not a
	// CredentialProviderConfig (it may be a symlink to a root-only file)
	// is refused without repeating its fields or values; only a
	// CredentialProviderConfig's field names appear in errors.
	var tm struct {
		APIVersion any `json:"apiVersion"`
		Kind       any `json:"kind"`
	}
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&tm); err != nil {
		return nil, cpJSONError(err)
	}
	if tm.Kind == nil || tm.Kind == "" || tm.APIVersion == nil || tm.APIVersion == "" {
		return nil, errors.New("apiVersion and kind must be set")
	}
	if tm.Kind != cpConfigKind {
		return nil, errors.New("failed to decode: kind is not " + cpConfigKind + " (wrong Kind)")
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
	group, version, _ := strings.Cut(raw.APIVersion, "/")
	if group != cpConfigGroup {
		return nil, fmt.Errorf("failed to decode CredentialProviderConfig, unexpected Group (want %s)", cpConfigGroup)
	}
	if !cpContains(cpConfigVersions, version) {
		return nil, fmt.Errorf("unsupported apiVersion (supported: %s/v1, v1beta1, v1alpha1)", cpConfigGroup)
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
			add(i, p, "providers.apiVersion: Unsupported value: supported values: %s", cpQuoteList(cpPluginAPIVersions))
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
			required, optional := map[string]bool{}, map[string]bool{}
			for _, list := range []struct {
				field string
				keys  []string
				set   map[string]bool
			}{
				{"requiredServiceAccountAnnotationKeys", ta.RequiredServiceAccountAnnotationKeys, required},
				{"optionalServiceAccountAnnotationKeys", ta.OptionalServiceAccountAnnotationKeys, optional},
			} {
				// validateServiceAccountAnnotationKeys: IsQualifiedName of the
				// lower-cased key (annotation keys are case-insensitive there).
				for _, k := range list.keys {
					if msg := cpQualifiedNameError(strings.ToLower(k)); msg != "" {
						add(i, p, "providers.tokenAttributes.%s: Invalid value: %q: %s", list.field, k, msg)
					}
					if list.set[k] {
						add(i, p, "providers.tokenAttributes.%s: Duplicate value: %q", list.field, k)
					}
					list.set[k] = true
				}
			}
			var both []string
			for k := range required {
				if optional[k] {
					both = append(both, k)
				}
			}
			if len(both) > 0 {
				sort.Strings(both)
				add(i, p, "providers.tokenAttributes: Invalid value: %s: annotation keys cannot be both required and optional", cpQuoteList(both))
			}
			switch ta.CacheType {
			case "":
				add(i, p, "providers.tokenAttributes.cacheType: Required value: cacheType is required to be set when tokenAttributes is specified. Supported values are: %s", strings.Join(cpCacheTypes, ", "))
			case cpCacheTypes[0], cpCacheTypes[1]:
			default:
				add(i, p, "providers.tokenAttributes.cacheType: Unsupported value: %q: supported values: %s", ta.CacheType, cpQuoteList(cpCacheTypes))
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
