package hosts

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/pullhelper/pullhelper/internal/safefile"
	"github.com/pullhelper/pullhelper/internal/wire"
)

// containerd config_path mode: the hosts directory of a registry, its
// hosts.toml (remotes/docker/config/hosts.go) or the Docker certs.d layout.

// hostConfig is one entry of a hosts directory.
type ctrdHostConfig struct {
	scheme       string
	host         string
	path         string            // "/v2" unless override_path or a path prefix
	capabilities wire.Capabilities // zero: pull, resolve, push, referrers
	headers      []string          // header names, sorted
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
			return fmt.Errorf("unable to read CA cert %q: %w", f, safefile.Cause(err))
		}
		if !x509.NewCertPool().AppendCertsFromPEM(data) {
			return fmt.Errorf("unable to load CA cert %q", f)
		}
	}
	for _, pair := range h.clientPairs {
		certPEM, err := readFile(pair[0])
		if err != nil {
			return fmt.Errorf("unable to read CERT file %q: %w", pair[0], safefile.Cause(err))
		}
		keyPEM := certPEM
		if pair[1] != "" {
			if keyPEM, err = readFile(pair[1]); err != nil {
				return fmt.Errorf("unable to read CERT file %q: %w", pair[1], safefile.Cause(err))
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
		return nil, fmt.Errorf("reading %s: %w", filepath.Join(dir, "hosts.toml"), safefile.Cause(err))
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
		v, err := wire.ParseCapability(c)
		if err != nil {
			return result, err
		}
		result.capabilities |= v
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

// loadX509KeyPair is tls.LoadX509KeyPair reading both files through
// readFile (regular files, bounded); its parse errors name no content.
func loadX509KeyPair(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := readFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("open %s: %w", certFile, safefile.Cause(err))
	}
	keyPEM, err := readFile(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("open %s: %w", keyFile, safefile.Cause(err))
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}
