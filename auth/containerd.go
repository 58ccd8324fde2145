package auth

// containerd (1.6/1.7 CRI plugin) registry credentials and TLS, read with
// containerd's own semantics (pkg/cri/config, pkg/cri/server/image_pull.go,
// remotes/docker/config/hosts.go).
//
// What is modelled:
//   - config.toml: version 3 (containerd 2.x) reads
//     [plugins."io.containerd.cri.v1.images".registry]; version 2
//     [plugins."io.containerd.grpc.v1.cri".registry] (containerd 2.x
//     migrates it there); version 1 -- which is also what a file WITHOUT a
//     `version` key is in containerd 1.x -- [plugins.cri.registry]. The
//     other sections are ignored, as containerd ignores them. `imports` are
//     followed as containerd's LoadConfig does (loadContainerdConfig). A
//     missing config.toml means containerd's defaults (no mirrors,
//     config_path = ""); a version above 3, a missing import or a file that
//     does not parse is an error naming the file.
//   - ValidatePluginConfig: `mirrors` or any `configs.*.tls` together with
//     config_path are errors; `auths."https://HOST"` is mapped into
//     configs[HOST].auth (a key without a scheme is used verbatim; note that
//     url.Parse reads "reg:5000" as scheme "reg", so such a key maps to
//     configs[""] and is never used). When several auths map to the same
//     host, containerd's map order decides; here the lexically last key wins.
//   - The credential is configs[ENDPOINT].auth, an exact string match on the
//     host[:port] actually contacted: docker.io images use
//     configs."registry-1.docker.io", never configs."docker.io". The CRI
//     PullImageRequest.Auth (the kubelet's credential) would take precedence
//     over it; callers order sources accordingly.
//   - Legacy mode (config_path == ""): endpoints are mirrors[host] (or
//     mirrors["*"]) followed by the default endpoint, unless a mirror endpoint
//     already has the reference host itself, each with configs[HOST].tls
//     (endpoints.go containerdLegacyList). Every endpoint's TLS config is
//     validated, because containerd fails the whole pull when any of them is
//     invalid.
//   - config_path mode: hosts directory lookup per root, hosts.toml (or the
//     Docker certs.d layout), the default host, localhost defaults (1.6.20+
//     and 1.7); every [host."URL"] entry and the server (or default host) is
//     an endpoint with its own TLS (endpoints.go containerdEndpointList). All
//     entries' CA and client files are validated, as containerd loads them
//     all.
//
// Version differences: a hosts.toml without any [host] table (server and
// root keys only) is valid from 1.7.32 (commit 24007441d) and is what this
// implements; in all 1.6.x and 1.7.0-1.7.31 it fails with "invalid `host`
// tree" and containerd falls back to the Docker layout (*.crt, *.cert/*.key)
// of the same directory. Localhost defaults (skip_verify unless port 80) are
// absent from 1.6.0-1.6.19.

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/pullhelper/pullhelper/internal/safefile"
)

// ctrdTLS is the TLS material containerd uses for one endpoint, on top of
// the system pool.
type ctrdTLS struct {
	CAFiles     []string    `json:"ca_files,omitempty"`     // absolute paths
	ClientPairs [][2]string `json:"client_pairs,omitempty"` // [cert, key]; key == cert when the PEM has both
	SkipVerify  bool        `json:"skip_verify"`
}

const containerdSource = "containerd-config"

// config.toml structures (pkg/cri/config).
type ctrdAuthConfig struct {
	Username      string `toml:"username"`
	Password      string `toml:"password"`
	Auth          string `toml:"auth"`
	IdentityToken string `toml:"identitytoken"`
}

type ctrdTLSConfig struct {
	InsecureSkipVerify bool   `toml:"insecure_skip_verify"`
	CAFile             string `toml:"ca_file"`
	CertFile           string `toml:"cert_file"`
	KeyFile            string `toml:"key_file"`
}

type ctrdRegistryConfig struct {
	Auth *ctrdAuthConfig `toml:"auth"`
	TLS  *ctrdTLSConfig  `toml:"tls"`
}

type ctrdMirror struct {
	Endpoints []string `toml:"endpoint"`
}

type ctrdRegistry struct {
	ConfigPath string                        `toml:"config_path"`
	Mirrors    map[string]ctrdMirror         `toml:"mirrors"`
	Configs    map[string]ctrdRegistryConfig `toml:"configs"`
	Auths      map[string]ctrdAuthConfig     `toml:"auths"`
	Headers    map[string][]string           `toml:"headers"`

	// authKey names where configs[HOST].auth came from in the file.
	authKey map[string]string
	// file is the config file whose plugin table this registry is (the
	// root or an import).
	file string
}

// ParseContainerdAuth is containerd's ParseAuth for a configs.*.auth table
// (without a ServerAddress): it returns (username, secret). username wins,
// then identitytoken (as ("", token)), then auth: standard base64 with
// padding required, cut on the first ':', NUL bytes trimmed from both ends
// of the password. Otherwise anonymous. Unlike containerd, the "invalid
// decoded auth" error does not quote the decoded value.
func ParseContainerdAuth(username, password, auth, identityToken string) (string, string, error) {
	if username != "" {
		return username, password, nil
	}
	if identityToken != "" {
		return "", identityToken, nil
	}
	if auth != "" {
		// As containerd: decode into a DecodedLen buffer without slicing it,
		// so padding leaves trailing NULs, which the Trim below removes.
		decoded := make([]byte, base64.StdEncoding.DecodedLen(len(auth)))
		if _, err := base64.StdEncoding.Decode(decoded, []byte(auth)); err != nil {
			return "", "", err
		}
		user, passwd, ok := strings.Cut(string(decoded), ":")
		if !ok {
			return "", "", errors.New("invalid decoded auth")
		}
		return user, strings.Trim(passwd, "\x00"), nil
	}
	return "", "", nil
}

// ctrdRegistryPlugin is the plugin whose table holds `registry`, per
// config version: 1 (and no version) containerd 1.x's "cri"; 2 the CRI
// plugin of 1.x (and of 2.x, which migrates it); 3 containerd 2.x's image
// service (its v2→v3 migration moves registry there).
var ctrdRegistryPlugin = map[int]string{
	0: "cri",
	1: "cri",
	2: "io.containerd.grpc.v1.cri",
	3: "io.containerd.cri.v1.images",
}

// ctrdMaxVersion is containerd 2.x's CurrentConfigVersion.
const ctrdMaxVersion = 3

// loadContainerdConfig is containerd's LoadConfig (2.x
// cmd/containerd/server/config/config.go; 1.x services/server/config) as
// far as the registry goes: the file, then its `imports` breadth-first
// (resolveImports: relative to the importing file's directory, globbed
// when they contain '*'; a file already loaded is skipped), a drop-in's
// version must not be higher than the root's, and the merge replaces a
// plugin's table as a whole (mergeConfig: "Maps merged by keys, but values
// are replaced entirely") -- so the last file that has the registry's
// plugin table decides the registry. A missing root file means
// containerd's defaults; a missing import, an unparsable file or a version
// this does not know is an error naming the file.
func loadContainerdConfig(configPath string) (*ctrdRegistry, error) {
	reg := &ctrdRegistry{authKey: map[string]string{}, file: configPath}
	if _, err := os.Stat(configPath); os.IsNotExist(err) {
		return reg, nil // containerd runs with its defaults
	}
	loaded := map[string]bool{}
	pending := []ctrdImport{{path: configPath}}
	rootVersion := -1
	for len(pending) > 0 {
		imp := pending[0]
		path := imp.path
		pending = pending[1:]
		if loaded[path] {
			continue
		}
		loaded[path] = true
		if len(loaded) > ctrdMaxImports+1 {
			return nil, fmt.Errorf("containerd config %s: imports name more than %d files, the bound here", configPath, ctrdMaxImports)
		}
		data, err := readFile(path)
		if err != nil {
			if path == configPath {
				return nil, fmt.Errorf("reading containerd config %s: %w", path, pathErr(err))
			}
			// The imported path is the importing file's content: named by
			// its entry, with the reason (no such file, not regular).
			return nil, fmt.Errorf("containerd config %s: imports: a file its entry %d names: %w", imp.parent, imp.n, pathErr(err))
		}
		var top struct {
			Version int                       `toml:"version"`
			Imports []string                  `toml:"imports"`
			Plugins map[string]toml.Primitive `toml:"plugins"`
		}
		md, err := toml.Decode(string(data), &top)
		if err != nil {
			return nil, fmt.Errorf("parsing containerd config %s: %s", path, ctrdTOMLErrorNoData(err))
		}
		id, ok := ctrdRegistryPlugin[top.Version]
		if !ok {
			return nil, fmt.Errorf("containerd config %s: unsupported version %d (containerd reads versions 1 to %d)", path, top.Version, ctrdMaxVersion)
		}
		if rootVersion < 0 {
			rootVersion = top.Version
		} else if top.Version > rootVersion {
			return nil, fmt.Errorf("containerd config %s: drop-in config version %d higher than root config version %d", path, top.Version, rootVersion)
		}
		if prim, ok := top.Plugins[id]; ok {
			var cri struct {
				Registry ctrdRegistry `toml:"registry"`
			}
			if err := md.PrimitiveDecode(prim, &cri); err != nil {
				return nil, fmt.Errorf("parsing containerd config %s: %s", path, ctrdTOMLErrorNoData(err))
			}
			cri.Registry.authKey = map[string]string{}
			cri.Registry.file = path
			reg = &cri.Registry
		}
		imports, err := ctrdResolveImports(path, top.Imports)
		if err != nil {
			return nil, fmt.Errorf("containerd config %s: imports: %w", path, err)
		}
		pending = append(pending, imports...)
	}
	if err := validateContainerdRegistry(reg); err != nil {
		return nil, fmt.Errorf("containerd config %s: invalid plugin config: %w", reg.file, err)
	}
	return reg, nil
}

// ctrdResolveImports is containerd 2.x resolveImports: each path cleaned and
// made absolute against the parent's directory, then globbed if it has a
// '*' (no match: nothing), otherwise used as is. (1.x globbed a relative
// pattern against the working directory; 2.x fixed that.)
func ctrdResolveImports(parent string, imports []string) ([]ctrdImport, error) {
	var out []ctrdImport
	for i, p := range imports {
		p = filepath.Clean(p)
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(parent), p)
		}
		if strings.Contains(p, "*") {
			matches, err := filepath.Glob(p)
			if err != nil {
				return nil, fmt.Errorf("entry %d: an invalid pattern (%s)", i+1, safefile.Redact(err.Error()))
			}
			if len(out)+len(matches) > ctrdMaxImports {
				return nil, fmt.Errorf("entry %d: the patterns match more than %d files, the bound here", i+1, ctrdMaxImports)
			}
			for _, m := range matches {
				out = append(out, ctrdImport{path: m, parent: parent, n: i + 1})
			}
			continue
		}
		out = append(out, ctrdImport{path: p, parent: parent, n: i + 1})
	}
	return out, nil
}

// ctrdImport is a file to read: the importing file and the number (from
// 1) of the imports entry that named it ("" and 0 for the config itself).
type ctrdImport struct {
	path, parent string
	n            int
}

// ctrdMaxImports bounds the files a containerd config's imports name, in
// all (a glob may match any number).
const ctrdMaxImports = 256

// validateContainerdRegistry is the registry part of ValidatePluginConfig.
func validateContainerdRegistry(reg *ctrdRegistry) error {
	useConfigPath := reg.ConfigPath != ""
	if len(reg.Mirrors) > 0 && useConfigPath {
		return errors.New("`mirrors` cannot be set when `config_path` is provided")
	}
	for _, r := range reg.Configs {
		if r.TLS != nil && useConfigPath {
			return errors.New("`configs.tls` cannot be set when `config_path` is provided")
		}
	}
	for host, c := range reg.Configs {
		if c.Auth != nil {
			reg.authKey[host] = `configs."` + host + `".auth`
		}
	}
	if len(reg.Auths) == 0 {
		return nil
	}
	if reg.Configs == nil {
		reg.Configs = map[string]ctrdRegistryConfig{}
	}
	keys := make([]string, 0, len(reg.Auths))
	for k := range reg.Auths {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, endpoint := range keys {
		a := reg.Auths[endpoint]
		u, err := url.Parse(endpoint)
		if err != nil {
			return fmt.Errorf("failed to parse registry url %q from `registry.auths`: %w", endpoint, err)
		}
		host := endpoint
		if u.Scheme != "" {
			host = u.Host
		}
		c := reg.Configs[host]
		c.Auth = &a
		reg.Configs[host] = c
		reg.authKey[host] = `auths."` + endpoint + `"`
	}
	return nil
}

// ctrdLegacyEndpoints is registryEndpoints: mirrors[host] or mirrors["*"], then
// the default endpoint unless an endpoint's host equals host.
func ctrdLegacyEndpoints(reg *ctrdRegistry, host string) ([]string, error) {
	var endpoints []string
	if m, ok := reg.Mirrors[host]; ok {
		endpoints = append(endpoints, m.Endpoints...)
	} else {
		endpoints = append(endpoints, reg.Mirrors["*"].Endpoints...)
	}
	defaultHost := host
	if host == "docker.io" {
		defaultHost = "registry-1.docker.io"
	}
	for i := range endpoints {
		en, err := ctrdAddDefaultScheme(endpoints[i])
		if err != nil {
			return nil, fmt.Errorf("get registry endpoints: parse endpoint url: %w", err)
		}
		endpoints[i] = en
	}
	for _, e := range endpoints {
		u, err := url.Parse(e)
		if err != nil {
			return nil, fmt.Errorf("get registry endpoints: parse endpoint url: %w", err)
		}
		if u.Host == host {
			return endpoints, nil
		}
	}
	return append(endpoints, containerdDefaultScheme(defaultHost)+"://"+defaultHost), nil
}

func ctrdAddDefaultScheme(endpoint string) (string, error) {
	if strings.Contains(endpoint, "://") {
		return endpoint, nil
	}
	u, err := url.Parse("dummy://" + endpoint)
	if err != nil {
		return "", err
	}
	return containerdDefaultScheme(u.Host) + "://" + endpoint, nil
}

func containerdDefaultScheme(host string) string {
	if containerdIsLocalhost(host) {
		return "http"
	}
	return "https"
}

// containerdIsLocalhost is docker.IsLocalhost / the CRI isLocalHost.
func containerdIsLocalhost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	return net.ParseIP(host).IsLoopback()
}

// ctrdLegacyTLS is getTLSConfig for configs[u.Host].tls, or the localhost
// default when there is none.
func ctrdLegacyTLS(c *ctrdTLSConfig, host string, u *url.URL) (ctrdTLS, error) {
	var t ctrdTLS
	if c == nil {
		t.SkipVerify = containerdIsLocalhost(host) && u.Scheme == "http"
		return t, nil
	}
	if c.CertFile != "" && c.KeyFile == "" {
		return t, fmt.Errorf("cert file %q was specified, but no corresponding key file was specified", c.CertFile)
	}
	if c.CertFile == "" && c.KeyFile != "" {
		return t, fmt.Errorf("key file %q was specified, but no corresponding cert file was specified", c.KeyFile)
	}
	if c.CertFile != "" {
		cert, err := loadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return t, fmt.Errorf("failed to load cert file: %w", err)
		}
		if len(cert.Certificate) != 0 {
			t.ClientPairs = [][2]string{{ctrdAbsPath(c.CertFile), ctrdAbsPath(c.KeyFile)}}
		}
	}
	if c.CAFile != "" {
		data, err := readFile(c.CAFile)
		if err != nil {
			return t, fmt.Errorf("failed to load CA file: %s: %w", c.CAFile, pathErr(err))
		}
		// containerd ignores AppendCertsFromPEM's result here: a file
		// without a certificate adds nothing and is not an error.
		if x509.NewCertPool().AppendCertsFromPEM(data) {
			t.CAFiles = []string{ctrdAbsPath(c.CAFile)}
		}
	}
	t.SkipVerify = c.InsecureSkipVerify
	return t, nil
}

func ctrdAbsPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// hostConfig is one entry of a hosts directory.
type ctrdHostConfig struct {
	scheme       string
	host         string
	path         string   // "/v2" unless override_path or a path prefix
	capabilities []string // nil: pull, resolve, push
	headers      []string // header names, sorted
	header       map[string][]string
	dialTimeout  string // as written; validated
	caCerts      []string
	clientPairs  [][2]string
	skipVerify   *bool
}

func checkctrdTLSFiles(h ctrdHostConfig) error {
	for _, f := range h.caCerts {
		data, err := readFile(f)
		if err != nil {
			return fmt.Errorf("unable to read CA cert %q: %w", f, pathErr(err))
		}
		if !x509.NewCertPool().AppendCertsFromPEM(data) {
			return fmt.Errorf("unable to load CA cert %q", f)
		}
	}
	for _, pair := range h.clientPairs {
		certPEM, err := readFile(pair[0])
		if err != nil {
			return fmt.Errorf("unable to read CERT file %q: %w", pair[0], pathErr(err))
		}
		keyPEM := certPEM
		if pair[1] != "" {
			if keyPEM, err = readFile(pair[1]); err != nil {
				return fmt.Errorf("unable to read CERT file %q: %w", pair[1], pathErr(err))
			}
		}
		if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
			return fmt.Errorf("failed to load X509 key pair (%s): %w", pair[0], err)
		}
	}
	return nil
}

// containerdHostDir is hostDirFromRoots: for each root in order, the first
// existing of ROOT/host_PORT_ (only with a port), ROOT/host, ROOT/_default.
func containerdHostDir(roots []string, host string) (string, error) {
	for _, root := range roots {
		for _, p := range containerdHostPaths(root, host) {
			_, err := os.Stat(p)
			if err == nil {
				return p, nil
			}
			if !os.IsNotExist(err) {
				return "", err
			}
		}
	}
	return "", nil
}

func containerdHostPaths(root, host string) []string {
	var paths []string
	if ch := containerdHostDirectory(host); ch != host {
		paths = append(paths, filepath.Join(root, ch))
	}
	return append(paths, filepath.Join(root, host), filepath.Join(root, "_default"))
}

// containerdHostDirectory turns the last ":PORT" into "_PORT_".
func containerdHostDirectory(host string) string {
	if idx := strings.LastIndex(host, ":"); idx > 0 {
		return host[:idx] + "_" + host[idx+1:] + "_"
	}
	return host
}

func loadContainerdHostDir(dir string, warn func(string)) ([]ctrdHostConfig, error) {
	b, err := readFile(filepath.Join(dir, "hosts.toml"))
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("reading %s: %w", filepath.Join(dir, "hosts.toml"), pathErr(err))
	}
	if len(b) == 0 {
		return loadContainerdCertFiles(dir)
	}
	hosts, err := parseContainerdHostsFile(dir, b)
	if err != nil {
		// containerd logs "failed to decode hosts.toml" and falls back to
		// the directory's certificate files; so does pullhelper, saying so.
		if warn != nil {
			warn(fmt.Sprintf("containerd would not use %s: %s; like containerd, its directory is read as Docker certificate files only", filepath.Join(dir, "hosts.toml"), ctrdTOMLErrorNoData(err)))
		}
		return loadContainerdCertFiles(dir)
	}
	return hosts, nil
}

type ctrdHostFileConfig struct {
	Capabilities []string       `toml:"capabilities"`
	CACert       any            `toml:"ca"`
	Client       any            `toml:"client"`
	SkipVerify   *bool          `toml:"skip_verify"`
	Header       map[string]any `toml:"header"`
	OverridePath bool           `toml:"override_path"`
	DialTimeout  string         `toml:"dial_timeout"`
}

func parseContainerdHostsFile(baseDir string, b []byte) ([]ctrdHostConfig, error) {
	var c struct {
		Server       string                        `toml:"server"`
		HostConfigs  map[string]ctrdHostFileConfig `toml:"host"`
		Capabilities []string                      `toml:"capabilities"`
		CACert       any                           `toml:"ca"`
		Client       any                           `toml:"client"`
		SkipVerify   *bool                         `toml:"skip_verify"`
		Header       map[string]any                `toml:"header"`
		OverridePath bool                          `toml:"override_path"`
		DialTimeout  string                        `toml:"dial_timeout"`
	}
	md, err := toml.Decode(string(b), &c)
	if err != nil {
		return nil, err
	}
	// [host."URL"] tables in file order. A file without `host` is valid
	// (1.7.32+); a `host` that is not a table fails to decode above.
	var ordered []string
	seen := map[string]bool{}
	for _, k := range md.Keys() {
		if len(k) >= 2 && k[0] == "host" && !seen[k[1]] {
			seen[k[1]] = true
			ordered = append(ordered, k[1])
		}
	}
	var hosts []ctrdHostConfig
	for _, h := range ordered {
		parsed, err := parseContainerdHostConfig(h, baseDir, c.HostConfigs[h])
		if err != nil {
			return nil, err
		}
		hosts = append(hosts, parsed)
	}
	root := ctrdHostFileConfig{
		Capabilities: c.Capabilities, CACert: c.CACert, Client: c.Client,
		SkipVerify: c.SkipVerify, Header: c.Header, OverridePath: c.OverridePath,
		DialTimeout: c.DialTimeout,
	}
	parsed, err := parseContainerdHostConfig(c.Server, baseDir, root)
	if err != nil {
		return nil, err
	}
	return append(hosts, parsed), nil
}

func parseContainerdHostConfig(server, baseDir string, config ctrdHostFileConfig) (ctrdHostConfig, error) {
	var result ctrdHostConfig
	if server != "" {
		if !strings.HasPrefix(server, "http") {
			server = "https://" + server
		}
		u, err := url.Parse(server)
		if err != nil {
			return result, fmt.Errorf("unable to parse server %q: %w", server, err)
		}
		result.scheme, result.host = u.Scheme, u.Host
		// hosts.go parseHostConfig: clean the path, append /v2 unless it
		// already ends so or override_path is set.
		if len(u.Path) > 0 {
			u.Path = path.Clean(u.Path)
			if !strings.HasSuffix(u.Path, "/v2") && !config.OverridePath {
				u.Path += "/v2"
			}
		} else if !config.OverridePath {
			u.Path = "/v2"
		}
		result.path = u.Path
	}
	result.skipVerify = config.SkipVerify
	for _, c := range config.Capabilities {
		switch strings.ToLower(c) {
		case "pull", "resolve", "push":
			result.capabilities = append(result.capabilities, strings.ToLower(c))
		default:
			return result, fmt.Errorf("unknown capability %q", c)
		}
	}
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(baseDir, p)
	}
	switch ca := config.CACert.(type) {
	case nil:
	case string:
		result.caCerts = []string{abs(ca)}
	case []any:
		s, err := containerdStringSlice(ca, abs)
		if err != nil {
			return result, err
		}
		result.caCerts = s
	default:
		return result, fmt.Errorf("invalid type %T for \"ca\"", ca)
	}
	switch client := config.Client.(type) {
	case nil:
	case string:
		result.clientPairs = [][2]string{{abs(client), ""}}
	case []any:
		for _, pairs := range client {
			switch p := pairs.(type) {
			case string:
				result.clientPairs = append(result.clientPairs, [2]string{abs(p), ""})
			case []any:
				s, err := containerdStringSlice(p, abs)
				if err != nil {
					return result, err
				}
				if len(s) != 2 {
					return result, fmt.Errorf("invalid pair %q for \"client\"", p)
				}
				result.clientPairs = append(result.clientPairs, [2]string{s[0], s[1]})
			default:
				return result, fmt.Errorf("invalid type %T for \"client\"", p)
			}
		}
	default:
		return result, fmt.Errorf("invalid type %T for \"client\"", client)
	}
	for key, ty := range config.Header {
		switch v := ty.(type) {
		case string:
			result.addHeader(key, v)
		case []any:
			vs, err := containerdStringSlice(v, nil)
			if err != nil {
				return result, err
			}
			result.addHeader(key, vs...)
		default:
			return result, fmt.Errorf("invalid type %T for header %q", ty, key)
		}
		result.headers = append(result.headers, key)
	}
	sort.Strings(result.headers)
	// hosts.go parseHostConfig (containerd 2.x): time.ParseDuration.
	if config.DialTimeout != "" {
		d, err := time.ParseDuration(config.DialTimeout)
		if err != nil {
			return result, fmt.Errorf("dial_timeout: %w", err)
		}
		if d < 0 {
			return result, fmt.Errorf("negative dial_timeout %q", config.DialTimeout)
		}
		result.dialTimeout = config.DialTimeout
	}
	return result, nil
}

// addHeader records a header's values as containerd sends them
// (http.Header: the name canonicalised on the wire).
func (h *ctrdHostConfig) addHeader(key string, values ...string) {
	if h.header == nil {
		h.header = map[string][]string{}
	}
	h.header[key] = append(h.header[key], values...)
}

func containerdStringSlice(slice []any, cb func(string) string) ([]string, error) {
	out := make([]string, len(slice))
	for i, v := range slice {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("unable to cast %T to string", v)
		}
		if cb != nil {
			s = cb(s)
		}
		out[i] = s
	}
	return out, nil
}

// loadContainerdCertFiles is the Docker layout: *.crt are CAs, X.cert is a
// client certificate paired with X.key when it exists (else the key is in
// the .cert). Directories are skipped.
func loadContainerdCertFiles(dir string) ([]ctrdHostConfig, error) {
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	hosts := make([]ctrdHostConfig, 1)
	for _, f := range entries {
		if f.IsDir() {
			continue
		}
		name := f.Name()
		if strings.HasSuffix(name, ".crt") {
			hosts[0].caCerts = append(hosts[0].caCerts, filepath.Join(dir, name))
		}
		if strings.HasSuffix(name, ".cert") {
			pair := [2]string{filepath.Join(dir, name), ""}
			keyFile := filepath.Join(dir, name[:len(name)-5]+".key")
			if _, err := os.Stat(keyFile); err == nil {
				pair[1] = keyFile
			} else if !os.IsNotExist(err) {
				return nil, err
			}
			hosts[0].clientPairs = append(hosts[0].clientPairs, pair)
		}
	}
	return hosts, nil
}

// ctrdTOMLErrorNoData describes a TOML syntax error by position only: its
// message may quote file content, which may be a secret.
func ctrdTOMLErrorNoData(err error) string {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		// Not the last key either: the file may be no containerd config
		// at all (a symlink to a root-only file), its keys its content.
		return fmt.Sprintf("invalid TOML at line %d", pe.Position.Line)
	}
	// Type mismatches name the key and types; anything quoted goes.
	return safefile.Redact(err.Error())
}

// loadX509KeyPair is tls.LoadX509KeyPair reading both files through
// readFile (regular files, bounded); its parse errors name no content.
func loadX509KeyPair(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := readFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("open %s: %w", certFile, pathErr(err))
	}
	keyPEM, err := readFile(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("open %s: %w", keyFile, pathErr(err))
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}
