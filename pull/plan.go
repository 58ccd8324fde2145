package pull

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pullhelper/pullhelper/auth"
	"github.com/pullhelper/pullhelper/dnsconf"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/netns"
	"github.com/pullhelper/pullhelper/policy"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/pkg/sysregistriesv2"
	"go.podman.io/image/v5/types"
)

// SystemSignaturePolicy is used when no signature policy is configured and
// the file exists.
const SystemSignaturePolicy = "/etc/containers/policy.json"

// Plan is one fully resolved pull. It must stay JSON-representable.
type Plan struct {
	Image       string      `json:"image"`
	Reference   string      `json:"reference"`
	Registry    string      `json:"registry"`
	ShortName   string      `json:"short_name_resolved_by,omitempty"`
	Destination Destination `json:"destination"`
	// Credentials are the matching credentials in the order they are
	// tried (secrets never marshal); empty means anonymous.
	Credentials []auth.Credential `json:"credentials"`
	AuthFiles   []auth.AuthFile   `json:"auth_files"`
	// KubeletDockerConfig is the node docker config file the kubelet search
	// found ("" when the search is off or found none).
	KubeletDockerConfig string          `json:"kubelet_docker_config,omitempty"`
	Trust               auth.Trust      `json:"trust"`
	Signature           SignaturePolicy `json:"signature_policy"`
	// RegistriesConf is the registries.conf in effect ("" = system default).
	RegistriesConf   string        `json:"registries_conf,omitempty"`
	Retries          int           `json:"retries"`
	RetryDelay       time.Duration `json:"retry_delay_ns"`
	Timeout          time.Duration `json:"timeout_ns"`
	StallTimeout     time.Duration `json:"stall_timeout_ns"`
	ParallelLayers   int           `json:"parallel_layers"`
	AllArchitectures bool          `json:"all_architectures"`
	Network          Network       `json:"network"`
	Isolation        Isolation     `json:"isolation"`
	Policy           PolicySource  `json:"policy"`
	Warnings         []string      `json:"warnings,omitempty"`
	// Reclaimed lists stale staging directories removed by Prepare.
	Reclaimed []string `json:"-"`

	// MaxImageBytes bounds one image: its declared sizes, the bytes read
	// and the bytes written into staging (0: DefaultMaxImageBytes).
	MaxImageBytes int64 `json:"max_image_bytes,omitempty"`
}

// Destination is DEST split into its transport and path.
type Destination struct {
	Raw       string `json:"raw"`
	Transport string `json:"transport"`
	Path      string `json:"path"`
	Ref       string `json:"ref,omitempty"`
}

// String renders the destination with its absolute path.
func (d Destination) String() string {
	s := d.Transport + ":" + d.Path
	if d.Ref != "" {
		s += ":" + d.Ref
	}
	return s
}

// SignaturePolicy says which policy.json judges the image.
type SignaturePolicy struct {
	// Source is "flag", "policy-file", "system" or "builtin".
	Source string `json:"source"`
	File   string `json:"file,omitempty"`
	Note   string `json:"note,omitempty"`
}

// Isolation describes how the pull is isolated. The parent fills in the
// cgroup fields when it has created the cgroup.
type Isolation struct {
	Enabled       bool     `json:"enabled"`
	Mode          string   `json:"mode"`
	Reason        string   `json:"reason,omitempty"`
	Cgroup        string   `json:"cgroup,omitempty"`
	CgroupVersion string   `json:"cgroup_version,omitempty"`
	CgroupDriver  string   `json:"cgroup_driver,omitempty"`
	CgroupJoined  bool     `json:"cgroup_joined,omitempty"`
	Limits        any      `json:"limits,omitempty"`
	Reclaimed     []string `json:"reclaimed,omitempty"`
	ChildPID      int      `json:"child_pid,omitempty"`
	UID           int      `json:"uid,omitempty"`
	GID           int      `json:"gid,omitempty"`
	User          string   `json:"user,omitempty"`
	Seccomp       bool     `json:"seccomp,omitempty"`
	Netns         string   `json:"netns,omitempty"`
	DNS           []string `json:"dns,omitempty"`
}

// Network is where the child's network traffic goes.
type Network struct {
	Mode  string          `json:"mode"`            // host, netns, cluster-dns
	Netns string          `json:"netns,omitempty"` // resolved namespace path
	DNS   *dnsconf.Config `json:"dns,omitempty"`   // the override, rendered
}

// PolicySource names the policy file and profile in effect.
type PolicySource struct {
	File    string `json:"file,omitempty"`
	Profile string `json:"profile,omitempty"`
}

// Transports lists the destinations pullhelper writes.
var Transports = []string{"oci", "dir", "oci-archive", "docker-archive"}

// Inputs are the words of the command line that are not policy settings.
type Inputs struct {
	Image       string
	Dest        string // may be empty for explain
	NoIsolation bool
	Env         auth.Env
	// Explain builds the plan for explain: nothing runs (no credential
	// provider plugin) and nothing is written.
	Explain bool
}

// NewPlan resolves everything a pull needs without touching the network.
// Errors are failure.Usage unless stated.
func NewPlan(l *policy.Loaded, in Inputs) (*Plan, error) {
	p := &Plan{
		Image:            in.Image,
		Retries:          int(l.Pull.Retries),
		RetryDelay:       time.Duration(l.Pull.RetryDelay),
		Timeout:          time.Duration(l.Pull.Timeout),
		StallTimeout:     time.Duration(l.Pull.StallTimeout),
		ParallelLayers:   int(l.Pull.ParallelLayers),
		AllArchitectures: l.Pull.AllArchitectures,
		Policy:           PolicySource{File: l.File, Profile: l.Profile},
		Isolation:        Isolation{Enabled: true, Mode: "unprivileged child in cgroup", User: l.Privileges.User, Seccomp: l.Privileges.Seccomp},
	}
	if in.NoIsolation {
		p.Isolation = Isolation{Enabled: false, Mode: "in-process", Reason: "--no-isolation"}
	}
	if l.Pull.RegistriesConf != "" {
		if err := mustExist(l.Pull.RegistriesConf, "registries.conf", "--registries-conf"); err != nil {
			return nil, err
		}
		p.RegistriesConf = l.Pull.RegistriesConf
	} else if f := sysregistriesv2.ConfigPath(nil); fileExists(f) {
		// Pin the file this (root) process would read, so that the child,
		// whose HOME is not root's, reads the same one.
		p.RegistriesConf = f
	}
	named, how, err := resolveImage(in.Image, &types.SystemContext{SystemRegistriesConfPath: p.RegistriesConf})
	if err != nil {
		return nil, err
	}
	p.Reference, p.ShortName = named.String(), how
	p.Registry = reference.Domain(named)
	if in.Dest != "" {
		if p.Destination, err = ParseDestination(in.Dest); err != nil {
			return nil, err
		}
	}
	p.Trust = auth.ResolveTrust(p.Registry, l.Trust.CertDir, l.Trust.CertsD)
	if err := p.kubeletCredentials(l, named, in.Explain); err != nil {
		return nil, err
	}
	if err := p.resolveCredential(l, in.Env, named); err != nil {
		return nil, err
	}
	if !l.Trust.TLSVerify {
		p.Trust.Verify, p.Trust.InsecureBy = false, "tls_verify=false"
		if src, ok := l.Defined("trust.tls_verify"); ok && strings.HasPrefix(src, "-") {
			p.Trust.InsecureBy = src + "=false"
		}
	}
	for _, cf := range l.Trust.CAFiles {
		if policy.MatchRegistry(cf.Registry, p.Registry) {
			p.Trust.CAFiles = append(p.Trust.CAFiles, cf.File)
		}
	}
	for _, pat := range l.Trust.InsecureRegistries {
		if p.Trust.Verify && policy.MatchRegistry(pat, p.Registry) {
			p.Trust.Verify, p.Trust.InsecureBy = false, "trust.insecure_registries "+pat
		}
	}
	if p.Signature, err = resolveSignaturePolicy(l); err != nil {
		return nil, err
	}
	if err := p.resolveNetwork(l, in.NoIsolation); err != nil {
		return nil, err
	}
	return p, nil
}

// resolveNetwork checks the namespace and renders the DNS override.
func (p *Plan) resolveNetwork(l *policy.Loaded, noIsolation bool) error {
	n := l.Network
	p.Network.Mode = n.Mode
	if n.Mode == "host" {
		return nil
	}
	if noIsolation {
		return failure.New(failure.Usage, "network.mode %q needs the isolated child; drop --no-isolation", n.Mode)
	}
	if n.Netns != "" {
		path, err := netns.Resolve(n.Netns)
		if err != nil {
			return failure.New(failure.Isolation, "%s: %v", settingName(l, "network.netns"), err)
		}
		p.Network.Netns = path
	}
	if n.Mode == "cluster-dns" {
		c, err := dnsconf.Build(dnsconf.Input{
			Nameservers: n.DNS.Nameservers, Search: n.DNS.Search, Options: n.DNS.Options, Hosts: n.DNS.Hosts,
			Namespace: n.DNS.Namespace, ClusterDomain: n.DNS.ClusterDomain, KubeletConfig: n.DNS.KubeletConfig,
		})
		if err != nil {
			return failure.New(failure.Usage, "cluster DNS: %v", err)
		}
		p.Network.DNS = c
		p.Warnings = append(p.Warnings, c.Warnings...)
	}
	return nil
}

// settingName is the flag that set key, or the policy key.
func settingName(l *policy.Loaded, key string) string {
	if src, ok := l.Defined(key); ok && strings.HasPrefix(src, "-") {
		return src
	}
	return key
}

func (p *Plan) resolveCredential(l *policy.Loaded, env auth.Env, named reference.Named) error {
	files, userSpecified, warnings := auth.ContainersAuthFiles(l.Auth.Authfile, env)
	p.Warnings = append(p.Warnings, warnings...)
	p.AuthFiles = files
	if userSpecified {
		what := "--authfile"
		if l.Auth.Authfile == "" {
			what = "REGISTRY_AUTH_FILE"
		} else if src, _ := l.Defined("auth.authfile"); src == "file" {
			what = "auth.authfile"
		}
		if err := mustExist(files[0].Path, "auth file", what); err != nil {
			return err
		}
	}
	cred, err := auth.LookupContainers(files, named.Name())
	if err != nil {
		return failure.Wrap(failure.Usage, err, "")
	}
	if cred != nil {
		p.Credentials = append(p.Credentials, *cred)
	}
	return nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

func mustExist(path, what, setting string) error {
	st, err := os.Stat(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return failure.New(failure.Usage, "%s: %s %s: %v", setting, what, path, err)
	}
	if st.IsDir() {
		return failure.New(failure.Usage, "%s: %s %s is a directory, not a file", setting, what, path)
	}
	return nil
}

func resolveSignaturePolicy(l *policy.Loaded) (SignaturePolicy, error) {
	if f := l.Pull.SignaturePolicy; f != "" {
		src, _ := l.Defined("pull.signature_policy")
		sp := SignaturePolicy{Source: "policy-file", File: f}
		if strings.HasPrefix(src, "-") {
			sp.Source = "flag"
		} else {
			src = "pull.signature_policy"
		}
		return sp, mustExist(f, "signature policy", src)
	}
	if _, err := os.Stat(SystemSignaturePolicy); err == nil {
		return SignaturePolicy{Source: "system", File: SystemSignaturePolicy}, nil
	}
	return SignaturePolicy{Source: "builtin", Note: "no --signature-policy and no " + SystemSignaturePolicy +
		": built-in policy accepts any image without signature checks (insecureAcceptAnything)"}, nil
}

// resolveImage parses IMAGE into a fully qualified reference. A short name
// (no registry host) is resolved only through registries.conf: an alias, or
// exactly one unqualified-search registry; anything else is an error.
func resolveImage(image string, sys *types.SystemContext) (reference.Named, string, error) {
	if image == "" {
		return nil, "", failure.New(failure.Usage, "IMAGE is empty: give a reference such as registry.example.com/repo:tag")
	}
	if strings.Contains(image, "://") {
		return nil, "", failure.New(failure.Usage, "image %q: give a reference without a scheme, such as registry.example.com/repo:tag", image)
	}
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return nil, "", failure.New(failure.Usage, "parsing image reference %q: %v", image, err)
	}
	first, _, hasSlash := strings.Cut(image, "/")
	qualified := hasSlash && (strings.ContainsAny(first, ".:") || first == "localhost")
	how := ""
	if !qualified {
		name := strings.SplitN(strings.SplitN(image, "@", 2)[0], ":", 2)[0]
		alias, file, aerr := sysregistriesv2.ResolveShortNameAlias(sys, name)
		if aerr != nil {
			return nil, "", failure.New(failure.Usage, "resolving short name %q in registries.conf: %v", image, aerr)
		}
		var base reference.Named
		if alias != nil {
			base, how = alias, "alias in "+file
		} else {
			regs, rerr := sysregistriesv2.UnqualifiedSearchRegistries(sys)
			if rerr != nil {
				return nil, "", failure.New(failure.Usage, "reading registries.conf: %v", rerr)
			}
			if len(regs) != 1 {
				return nil, "", failure.New(failure.Usage, "image %q is a short name and registries.conf does not resolve it unambiguously (%d unqualified-search registries, no alias): use a fully qualified reference such as %s", image, len(regs), named.String())
			}
			b, perr := reference.ParseNormalizedNamed(regs[0] + "/" + name)
			if perr != nil {
				return nil, "", failure.New(failure.Usage, "short name %q with registry %s: %v", image, regs[0], perr)
			}
			base, how = b, "unqualified-search-registries"
		}
		named = base
		if t, ok := mustParse(image).(reference.Tagged); ok {
			named, _ = reference.WithTag(named, t.Tag())
		}
		if d, ok := mustParse(image).(reference.Digested); ok {
			named, _ = reference.WithDigest(named, d.Digest())
		}
	}
	return reference.TagNameOnly(named), how, nil
}

func mustParse(s string) reference.Named {
	n, _ := reference.ParseNormalizedNamed(s)
	return n
}

// ParseDestination splits DEST ("oci:PATH[:TAG]", "dir:PATH",
// "oci-archive:PATH[:TAG]", "docker-archive:PATH[:REF]") and makes PATH
// absolute.
func ParseDestination(dest string) (Destination, error) {
	tr, rest, ok := strings.Cut(dest, ":")
	known := false
	for _, t := range Transports {
		known = known || tr == t
	}
	if !ok || !known {
		return Destination{}, failure.New(failure.Usage, "destination %q: unknown transport %q; use one of oci:PATH[:TAG], dir:PATH, oci-archive:PATH[:TAG], docker-archive:PATH[:REF]", dest, tr)
	}
	d := Destination{Raw: dest, Transport: tr, Path: rest}
	if tr != "dir" {
		d.Path, d.Ref, _ = strings.Cut(rest, ":")
	}
	if d.Path == "" {
		return Destination{}, failure.New(failure.Usage, "destination %q: the path is empty", dest)
	}
	abs, err := filepath.Abs(d.Path)
	if err != nil {
		return Destination{}, failure.New(failure.Usage, "destination %q: %v", dest, err)
	}
	d.Path = abs
	if d.Ref != "" {
		// Validate the tag/reference alone ("/" always exists; DEST's own
		// parent is checked, as a destination error, when the pull starts).
		if _, err := d.reference("/"); err != nil {
			return Destination{}, failure.New(failure.Usage, "destination %q: %v", dest, err)
		}
	}
	return d, nil
}
