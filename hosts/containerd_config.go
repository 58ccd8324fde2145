package hosts

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/pullhelper/pullhelper/internal/safefile"
)

// containerd (1.6/1.7 CRI plugin, 2.x) registry configuration -- endpoints,
// TLS, and the configs.*.auth tables package auth decodes -- read with
// containerd's own semantics (pkg/cri/config, pkg/cri/server/image_pull.go,
// remotes/docker/config/hosts.go).
//
// What is modelled:
//   - config.toml: versions 3 and 4 (containerd 2.x; 4 moves only the
//     server tables) read [plugins."io.containerd.cri.v1.images".registry];
//     version 2
//     [plugins."io.containerd.grpc.v1.cri".registry] (containerd 2.x
//     migrates it there); version 1 -- which is also what a file WITHOUT a
//     `version` key is in containerd 1.x -- [plugins.cri.registry]. The
//     other sections are ignored, as containerd ignores them. `imports` are
//     followed as containerd's LoadConfig does (loadContainerdConfig). A
//     missing config.toml means containerd's defaults (no mirrors,
//     config_path = ""); a version above 4, a missing import or a file that
//     does not parse is an error naming the file. Versions 3 and 4 are
//     containerd 2.x's alone, so they get its CRI's reading too: config_path
//     /etc/containerd/certs.d:/etc/docker/certs.d when neither it nor
//     mirrors are set, and no configs.*.tls (its RegistryConfig is Auth
//     alone). The same walk gives the daemon's socket, the CRI's snapshotter
//     and the runtime handlers' own (ReadContainerdDaemon, for a
//     containerd: DEST): one reader of config.toml.
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
//     over it; package auth orders its sources accordingly (OrElse).
//   - Legacy mode (config_path == ""): endpoints are mirrors[host] (or
//     mirrors["*"]) followed by the default endpoint, unless a mirror endpoint
//     already has the reference host itself, each with configs[HOST].tls
//     (containerd_legacy.go, endpoints.go containerdLegacyList). Every endpoint's TLS config is
//     validated, because containerd fails the whole pull when any of them is
//     invalid.
//   - config_path mode: hosts directory lookup per root, hosts.toml (or the
//     Docker certs.d layout), the default host, localhost defaults (1.6.20+
//     and 1.7); every [host."URL"] entry and the server (or default host) is
//     an endpoint with its own TLS (containerd_hostsdir.go, endpoints.go containerdEndpointList). All
//     entries' CA and client files are validated, as containerd loads them
//     all.
//
// Version differences: a hosts.toml without any [host] table (server and
// root keys only) is valid from 1.7.32 (commit 24007441d) and is what this
// implements; in all 1.6.x and 1.7.0-1.7.31 it fails with "invalid `host`
// tree" and containerd falls back to the Docker layout (*.crt, *.cert/*.key)
// of the same directory. Localhost defaults (skip_verify unless port 80) are
// absent from 1.6.0-1.6.19.

// ctrdTLS is the TLS material containerd uses for one endpoint, on top of
// the system pool.
type ctrdTLS struct {
	CAFiles     []string    `json:"ca_files,omitempty"`     // absolute paths
	ClientPairs [][2]string `json:"client_pairs,omitempty"` // [cert, key]; key == cert when the PEM has both
	SkipVerify  bool        `json:"skip_verify"`
}

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
	// v2 is set for a config of version 3 or 4, which only containerd 2.x
	// reads: its CRI has no configs.HOST.tls (RegistryConfig is Auth
	// alone) and a default config_path (ctrdDefaultConfigPath).
	v2 bool
}

// ctrdDefaultConfigPath is containerd 2.x's config_path when neither it nor
// mirrors are set (plugins/cri/images InitFn, on Linux).
const ctrdDefaultConfigPath = "/etc/containerd/certs.d:/etc/docker/certs.d"

// ctrdRegistryPlugin is the plugin whose table holds `registry`, per
// config version: 1 (and no version) containerd 1.x's "cri"; 2 the CRI
// plugin of 1.x (and of 2.x, which migrates it); 3 containerd 2.x's image
// service (its v2→v3 migration moves registry there).
var ctrdRegistryPlugin = map[int]string{
	0: "cri",
	1: "cri",
	2: "io.containerd.grpc.v1.cri",
	3: "io.containerd.cri.v1.images",
	// Version 4 (containerd 2.4's serviceMigrate) moves only the server
	// tables ([grpc], [ttrpc], [debug], [metrics]) into plugins; the
	// image service's table stays.
	4: "io.containerd.cri.v1.images",
}

// ctrdMaxVersion is containerd 2.4's version.ConfigVersion.
const ctrdMaxVersion = 4

// ctrdCRISnapshotter is where each config version keeps the CRI's
// snapshotter: version 1 (and no version) plugins.cri.containerd, 2
// plugins."io.containerd.grpc.v1.cri".containerd (containerd 2.x's
// migration moves it to the image service's table: plugins/cri/images
// migrateConfig), 3 and 4 plugins."io.containerd.cri.v1.images".
var ctrdCRISnapshotter = map[int][]string{
	0: {"cri", "containerd"},
	1: {"cri", "containerd"},
	2: {"io.containerd.grpc.v1.cri", "containerd"},
	3: {"io.containerd.cri.v1.images"},
	4: {"io.containerd.cri.v1.images"},
}

// ctrdGRPCPlugin holds the socket address in version 4 (containerd 2.4's
// serviceMigrate moves [grpc] there).
const ctrdGRPCPlugin = "io.containerd.server.v1.grpc"

// ContainerdDaemon is what a containerd config.toml says about where a
// containerd: DEST goes: the daemon's socket and the CRI's snapshotter,
// each with the file and key that set it ("" and "": containerd's
// default).
type ContainerdDaemon struct {
	Address, AddressKey         string
	Snapshotter, SnapshotterKey string
	// platformSnapshotters and runtimeSnapshotters are the runtime
	// handlers' snapshotters as the image service's runtime_platforms and
	// the runtimes' tables name them ("" too), merged by
	// RuntimeSnapshotters.
	platformSnapshotters, runtimeSnapshotters map[string]string
}

// ctrdRuntimePlugin holds the runtimes of containerd 2.x's CRI (config
// versions 3 and 4); earlier versions keep them in the CRI's own table
// (ctrdCRISnapshotter's), under containerd.runtimes.
const ctrdRuntimePlugin = "io.containerd.cri.v1.runtime"

// RuntimeSnapshotters maps a runtime handler to the snapshotter containerd's
// CRI unpacks its images for when the handler names one
// (snapshotterFromPodSandboxConfig): the image service's
// runtime_platforms.NAME.snapshotter (config versions 3 and 4), else the
// runtime's own containerd.runtimes.NAME.snapshotter (plugins/cri/cri.go
// UpdateRuntimeSnapshotter, which does not override the former). A handler
// not listed uses the CRI's snapshotter.
func (d ContainerdDaemon) RuntimeSnapshotters() map[string]string {
	out := map[string]string{}
	for name, s := range d.platformSnapshotters {
		if s != "" {
			out[name] = s
		}
	}
	for name, s := range d.runtimeSnapshotters {
		if _, ok := out[name]; !ok && s != "" {
			out[name] = s
		}
	}
	return out
}

// ReadContainerdDaemon reads the socket and the CRI's snapshotter from a
// containerd config.toml, through the one reader of config.toml
// (readContainerdConfig: imports, versions 1 to 4, as containerd's
// LoadConfig). mergeConfig replaces a plugin's table as a whole, so the
// last file with the CRI's table decides the snapshotter (containerd's
// default when that table does not set it); the address is the last one a
// file sets ([grpc] address; version 4: the grpc server plugin's table,
// which decides as a whole). A missing file means containerd's defaults.
func ReadContainerdDaemon(path string) (ContainerdDaemon, error) {
	_, d, err := readContainerdConfig(path)
	return d, err
}

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
	reg, _, err := readContainerdConfig(configPath)
	if err != nil {
		return nil, err
	}
	if err := validateContainerdRegistry(reg); err != nil {
		return nil, fmt.Errorf("containerd config %s: invalid plugin config: %w", reg.file, err)
	}
	return reg, nil
}

// readContainerdConfig is the one reader of a containerd config.toml
// (loadContainerdConfig's walk), for the registry and the daemon's socket
// and snapshotter (ReadContainerdDaemon).
func readContainerdConfig(configPath string) (*ctrdRegistry, ContainerdDaemon, error) {
	reg := &ctrdRegistry{authKey: map[string]string{}, file: configPath}
	var d ContainerdDaemon
	if _, err := os.Stat(configPath); os.IsNotExist(err) {
		return reg, d, nil // containerd runs with its defaults
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
			return nil, d, fmt.Errorf("containerd config %s: imports name more than %d files, the bound here", configPath, ctrdMaxImports)
		}
		data, err := readFile(path)
		if err != nil {
			if path == configPath {
				return nil, d, fmt.Errorf("reading containerd config %s: %w", path, safefile.Cause(err))
			}
			// The imported path is the importing file's content: named by
			// its entry, with the reason (no such file, not regular).
			return nil, d, fmt.Errorf("containerd config %s: imports: a file its entry %d names: %w", imp.parent, imp.n, safefile.Cause(err))
		}
		var top struct {
			Version int      `toml:"version"`
			Imports []string `toml:"imports"`
			GRPC    struct {
				Address string `toml:"address"`
			} `toml:"grpc"`
			Plugins map[string]toml.Primitive `toml:"plugins"`
		}
		md, err := toml.Decode(string(data), &top)
		if err != nil {
			return nil, d, fmt.Errorf("parsing containerd config %s: %s", path, ctrdTOMLErrorNoData(err))
		}
		id, ok := ctrdRegistryPlugin[top.Version]
		if !ok {
			return nil, d, fmt.Errorf("containerd config %s: unsupported version %d (containerd reads versions 1 to %d)", path, top.Version, ctrdMaxVersion)
		}
		if rootVersion < 0 {
			rootVersion = top.Version
		} else if top.Version > rootVersion {
			return nil, d, fmt.Errorf("containerd config %s: drop-in config version %d higher than root config version %d", path, top.Version, rootVersion)
		}
		if prim, ok := top.Plugins[id]; ok {
			var cri struct {
				Registry ctrdRegistry `toml:"registry"`
			}
			if err := md.PrimitiveDecode(prim, &cri); err != nil {
				return nil, d, fmt.Errorf("parsing containerd config %s: %s", path, ctrdTOMLErrorNoData(err))
			}
			cri.Registry.authKey = map[string]string{}
			cri.Registry.file = path
			reg = &cri.Registry
		}
		if err := ctrdDaemonOf(&d, path, top.Version, top.GRPC.Address, top.Plugins, md); err != nil {
			return nil, d, err
		}
		imports, err := ctrdResolveImports(path, top.Imports)
		if err != nil {
			return nil, d, fmt.Errorf("containerd config %s: imports: %w", path, err)
		}
		pending = append(pending, imports...)
	}
	if rootVersion >= 3 {
		reg.v2 = true
		if reg.ConfigPath == "" && len(reg.Mirrors) == 0 {
			reg.ConfigPath = ctrdDefaultConfigPath
		}
	}
	return reg, d, nil
}

// ctrdDaemonOf applies one file's socket and CRI snapshotter to d.
func ctrdDaemonOf(d *ContainerdDaemon, path string, version int, grpcAddress string, plugins map[string]toml.Primitive, md toml.MetaData) error {
	type runtimes map[string]struct {
		Snapshotter string `toml:"snapshotter"`
	}
	snapshotters := func(r runtimes) map[string]string {
		out := map[string]string{}
		for name, rt := range r {
			out[name] = rt.Snapshotter
		}
		return out
	}
	where := ctrdCRISnapshotter[version]
	if prim, ok := plugins[where[0]]; ok {
		var t struct {
			Snapshotter string `toml:"snapshotter"`
			Containerd  struct {
				Snapshotter string   `toml:"snapshotter"`
				Runtimes    runtimes `toml:"runtimes"`
			} `toml:"containerd"`
			RuntimePlatforms runtimes `toml:"runtime_platforms"`
		}
		if err := md.PrimitiveDecode(prim, &t); err != nil {
			return fmt.Errorf("parsing containerd config %s: %s", path, ctrdTOMLErrorNoData(err))
		}
		// The table decides as a whole (mergeConfig): its runtime
		// platforms (versions 3 and 4), or its runtimes (1 and 2, whose
		// CRI table holds them).
		if len(where) > 1 {
			d.runtimeSnapshotters = snapshotters(t.Containerd.Runtimes)
		} else {
			d.platformSnapshotters = snapshotters(t.RuntimePlatforms)
		}
		s, key := t.Snapshotter, "plugins."+strconv.Quote(where[0])+".snapshotter"
		if len(where) > 1 {
			s, key = t.Containerd.Snapshotter, "plugins."+strconv.Quote(where[0])+".containerd.snapshotter"
		}
		d.Snapshotter, d.SnapshotterKey = "", ""
		if s != "" {
			d.Snapshotter, d.SnapshotterKey = s, path+": "+key
		}
	}
	if version >= 3 {
		if prim, ok := plugins[ctrdRuntimePlugin]; ok {
			var t struct {
				Containerd struct {
					Runtimes runtimes `toml:"runtimes"`
				} `toml:"containerd"`
			}
			if err := md.PrimitiveDecode(prim, &t); err != nil {
				return fmt.Errorf("parsing containerd config %s: %s", path, ctrdTOMLErrorNoData(err))
			}
			d.runtimeSnapshotters = snapshotters(t.Containerd.Runtimes)
		}
	}
	if version >= 4 {
		if prim, ok := plugins[ctrdGRPCPlugin]; ok {
			var g struct {
				Address string `toml:"address"`
			}
			if err := md.PrimitiveDecode(prim, &g); err != nil {
				return fmt.Errorf("parsing containerd config %s: %s", path, ctrdTOMLErrorNoData(err))
			}
			d.Address, d.AddressKey = "", ""
			if g.Address != "" {
				d.Address, d.AddressKey = g.Address, path+": plugins."+strconv.Quote(ctrdGRPCPlugin)+".address"
			}
		}
	} else if grpcAddress != "" {
		d.Address, d.AddressKey = grpcAddress, path+": [grpc] address"
	}
	return nil
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
			// A pattern is globbed by containerd as written; here one
			// with a wildcard in more than its last two path elements
			// (which could walk most of the filesystem as root) is
			// refused.
			if wild := wildElems(p); wild > 2 || (wild > 0 && !strings.ContainsAny(filepath.Base(p), "*?[") && !strings.ContainsAny(filepath.Base(filepath.Dir(p)), "*?[")) {
				return nil, fmt.Errorf("entry %d: a wildcard above the last two path elements is not followed", i+1)
			}
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

// wildElems counts the path elements of p that hold a wildcard.
func wildElems(p string) int {
	n := 0
	for _, e := range strings.Split(p, "/") {
		if strings.ContainsAny(e, "*?[") {
			n++
		}
	}
	return n
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
		// containerd 2.x (reg.v2) has no configs.*.tls to refuse.
		if r.TLS != nil && useConfigPath && !reg.v2 {
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
