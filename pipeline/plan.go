package pipeline

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/auth"
	"github.com/pullhelper/pullhelper/cgroup"
	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/dest/target"
	"github.com/pullhelper/pullhelper/dnsconf"
	"github.com/pullhelper/pullhelper/hosts"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/state"
	"github.com/pullhelper/pullhelper/internal/wire"
	"github.com/pullhelper/pullhelper/netns"
	"github.com/pullhelper/pullhelper/policy"
	"github.com/pullhelper/pullhelper/pull"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/pkg/sysregistriesv2"
	"go.podman.io/image/v5/types"
)

// SystemSignaturePolicy is used when no signature policy is configured and
// the file exists.
const SystemSignaturePolicy = "/etc/containers/policy.json"

// Plan is one fully resolved pull: what explain prints (secrets never
// marshal) and what Run carries out. It must stay JSON-representable. The
// embedded pull.Request is the part the copy needs; the rest is the
// pipeline's (network, isolation, where the settings came from).
type Plan struct {
	pull.Request
	ShortName string `json:"short_name_resolved_by,omitempty"`
	// KubeletDockerConfig is the node docker config file the kubelet search
	// found ("" when the search is off or found none).
	KubeletDockerConfig string `json:"kubelet_docker_config,omitempty"`
	// RegistriesConf is the registries.conf in effect ("" = system default).
	RegistriesConf string `json:"registries_conf,omitempty"`
	// Isolation is how the copy is isolated: the one spec (isolation.go).
	Isolation Isolation    `json:"isolation"`
	Policy    PolicySource `json:"policy"`
	Warnings  []string     `json:"warnings,omitempty"`
	// Sources says whose rules chose the endpoints and credentials:
	// "containerd" (auth.containerd_config is set) or "registries.conf".
	Sources string `json:"endpoint_rules"`
	// AllowOtherOwner accepts a DEST owned by another user (dest).
	AllowOtherOwner bool `json:"allow_other_owner,omitempty"`
	// LockTimeout bounds the waits for another pull of the image into
	// DEST and for the commit lock (dest.lock_timeout).
	LockTimeout time.Duration `json:"lock_timeout_ns"`
	// NodeBandwidth is the node-wide cap shared by every pull that sets it
	// (pull.node_bandwidth), split evenly among the live ones (0: none).
	NodeBandwidth int64 `json:"node_bandwidth,omitempty"`
	// NodeParallelLayers is the node-wide limit on concurrent blob
	// downloads, split the same way (pull.node_parallel_layers; 0: none).
	NodeParallelLayers int `json:"node_parallel_layers,omitempty"`

	// Containerd are the settings of a containerd:REF DEST.
	Containerd *dest.ContainerdSettings `json:"containerd,omitempty"`

	dst dest.Destination // the parsed DEST (nil for explain without one)
	// regSnap is the registries.conf that was checked, which every
	// containers/image call of the parent reads (snapshot.go).
	regSnap *regSnapshot
}

// Close drops what the plan holds (the registries.conf snapshot) once the
// pull or explain is done; a nil plan or a second Close does nothing.
func (p *Plan) Close() {
	if p != nil {
		p.regSnap.Close()
		p.regSnap = nil
	}
}

// PolicySource names the policy file and profile in effect.
type PolicySource struct {
	File    string `json:"file,omitempty"`
	Profile string `json:"profile,omitempty"`
}

// Inputs are the words of the command line that are not policy settings.
type Inputs struct {
	Image       string
	Dest        string // may be empty for explain
	NoIsolation bool
	// Version is the binary's version, sent in the User-Agent of every
	// registry request ("dev" when empty).
	Version string
	// StateRoot is the node's state root (state.Default when empty).
	StateRoot state.Root
	Env       auth.Env
	// Explain builds the plan for explain: nothing runs (no credential
	// provider plugin) and nothing is written.
	Explain bool
	// PullSecrets are pull secrets the caller read from descriptors
	// (--pull-secret-fd), used after auth.pull_secrets' files; Authfile,
	// when not nil, is the --authfile-fd content, the only auth file.
	// ServiceAccountToken, when not nil, is the --service-account-token-fd
	// token, offered as auth.service_account_token's would be.
	PullSecrets         []auth.Inline
	Authfile            *auth.Inline
	ServiceAccountToken *auth.Inline
	// ProviderServiceAccountToken: --provider-service-account-token-fd's
	// token for credential providers (replaces the policy's file).
	ProviderServiceAccountToken *auth.Inline
	// Request, when not nil, is a CRI PullImage request's credential
	// (pullhelper cri), offered to its one registry host only.
	Request *auth.Request
	// AtStart: the settings of a service checked as it starts
	// (CheckSettings), before the kubelet has made the cgroups it joins.
	AtStart bool
}

// NewPlan resolves everything a pull needs without touching the network.
// Errors are failure.Usage unless stated.
func NewPlan(l *policy.Loaded, in Inputs) (plan *Plan, err error) {
	version := in.Version
	if version == "" {
		version = "dev"
	}
	iso, err := newIsolation(l, in)
	if err != nil {
		return nil, err
	}
	p := &Plan{
		Request: pull.Request{
			Image:            in.Image,
			Retries:          int(l.Pull.Retries),
			RetryDelay:       time.Duration(l.Pull.RetryDelay),
			Timeout:          time.Duration(l.Pull.Timeout),
			StallTimeout:     time.Duration(l.Pull.StallTimeout),
			MinRate:          int64(l.Pull.MinRate),
			StallWindow:      time.Duration(l.Pull.StallWindow),
			MaxBandwidth:     int64(l.Pull.MaxBandwidth),
			ParallelLayers:   int(l.Pull.ParallelLayers),
			AllArchitectures: l.Pull.AllArchitectures,
			UserAgent:        "pullhelper/" + version,
			TLSVerify:        l.Trust.TLSVerify,
			MaxImageBytes:    pull.DefaultMaxImageBytes,
		},
		Policy:    PolicySource{File: l.File, Profile: l.Profile},
		Isolation: iso,
	}
	if l.Pull.MaxImageSize > 0 {
		p.MaxImageBytes = int64(l.Pull.MaxImageSize)
	}
	if l.Pull.Platform != "" {
		pl, err := wire.ParsePlatform(l.Pull.Platform)
		if err != nil {
			return nil, failure.New(failure.Usage, "%s: %v", settingName(l, "pull.platform"), err)
		}
		p.Platform = &pl
	}
	p.AllowOtherOwner = l.Dest.AllowOtherOwner
	p.LockTimeout = time.Duration(l.Dest.LockTimeout)
	p.NodeBandwidth = int64(l.Pull.NodeBandwidth)
	p.NodeParallelLayers = int(l.Pull.NodeParallelLayers)
	if p.RegistriesConf, p.regSnap, err = openRegistriesConf(l); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	var (
		named reference.Named
		how   string
	)
	if err := checkOrder(in.Image, in.Dest); err != nil {
		return nil, err
	}
	if l.Auth.ContainerdConfig != "" {
		// containerd semantics: a short name is docker.io's (the CRI's
		// reference normalisation, the kubelet keyring's too); registries.conf
		// short-name rules are CRI-O's and podman's, not containerd's.
		named, how, err = normalizeContainerd(in.Image)
	} else {
		named, how, err = resolveImage(in.Image, p.regSnap, p.regSnap.sys(p.RegistriesConf))
	}
	if err != nil {
		return nil, err
	}
	p.Reference, p.ShortName = named.String(), how
	p.Registry = reference.Domain(named)
	if in.Dest != "" {
		if p.dst, err = dest.ParseWith(in.Dest, dest.ParseOptions{StorageConf: l.Dest.StorageConf}); err != nil {
			return nil, err
		}
		// A store DEST named by digest names the image pulled: refused
		// before any network when IMAGE's digest is another (Verify
		// checks the digest the pull fetched in every case).
		if want := dest.RefDigest(p.dst.Spec()); want != "" {
			if d, ok := named.(reference.Digested); ok && d.Digest().String() != want {
				return nil, failure.New(failure.Usage, "destination %q names digest %s, but IMAGE %s names %s; name the same digest", in.Dest, want, p.Reference, d.Digest())
			}
		}
		if err := p.configureStore(l); err != nil {
			return nil, err
		}
		p.Destination = p.dst.Spec()
	}
	if err := p.resolveEndpoints(l, in, named); err != nil {
		return nil, err
	}
	if p.Signature, err = resolveSignaturePolicy(l); err != nil {
		return nil, err
	}
	if err := p.resolveNetwork(l, in.NoIsolation); err != nil {
		return nil, err
	}
	return p, nil
}

// CheckSettings refuses what every plan of these settings would refuse,
// whatever the image: the isolation on this host (the user, the cgroup),
// registries.conf, the signature policy and its key files, the network
// namespace and DNS. pullhelper cri checks its settings so at start,
// instead of failing each PullImage with them. A joined cgroup that does
// not exist yet is a warning: the kubelet makes its cgroups after the
// service starts.
func CheckSettings(l *policy.Loaded, in Inputs) (warnings []string, err error) {
	in.AtStart = true
	p := &Plan{}
	if p.Isolation, err = newIsolation(l, in); err != nil {
		return nil, err
	}
	if c := p.Isolation.Cgroup; c != nil {
		if err := cgroup.CheckJoined(*c); errors.Is(err, cgroup.ErrNoJoined) {
			warnings = append(warnings, err.Error()+"; each pull until it does fails (exit 7)")
		} else if err != nil {
			return nil, failure.Wrap(failure.Isolation, err, "")
		}
	}
	_, snap, err := openRegistriesConf(l)
	if err != nil {
		return nil, err
	}
	snap.Close()
	if p.Signature, err = resolveSignaturePolicy(l); err != nil {
		return nil, err
	}
	if f := p.Signature.File; f != "" {
		if _, _, err := loadSignaturePolicy(f); err != nil {
			return nil, err
		}
	}
	return warnings, p.resolveNetwork(l, in.NoIsolation)
}

// resolveNetwork checks the namespace and renders the DNS override.
func (p *Plan) resolveNetwork(l *policy.Loaded, noIsolation bool) error {
	n := l.Network
	p.Isolation.Network.Mode = n.Mode
	if n.Mode == "host" {
		return nil
	}
	if noIsolation {
		return failure.New(failure.Usage, "network.mode %q needs the isolated child; drop --no-isolation", n.Mode)
	}
	if n.Netns != "" {
		path, id, err := netns.Resolve(n.Netns)
		if err != nil {
			return failure.New(failure.Isolation, "%s: %w", settingName(l, "network.netns"), err)
		}
		p.Isolation.Network.Netns, p.Isolation.Network.NetnsID = path, id
	}
	if n.Mode == "cluster-dns" {
		c, err := dnsconf.Build(dnsconf.Input{
			Policy:      n.DNS.Policy,
			Nameservers: n.DNS.Nameservers, Search: n.DNS.Search, Options: n.DNS.Options, Hosts: n.DNS.Hosts,
			Namespace: n.DNS.Namespace, ClusterDomain: n.DNS.ClusterDomain, KubeletConfig: n.DNS.KubeletConfig,
		})
		if err != nil {
			return failure.New(failure.Usage, "cluster DNS: %w", err)
		}
		p.Isolation.Network.DNS = c
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
		return failure.New(failure.Usage, "%s: %s %s: %w", setting, what, path, err)
	}
	if st.IsDir() {
		return failure.New(failure.Usage, "%s: %s %s is a directory, not a file", setting, what, path)
	}
	return nil
}

func resolveSignaturePolicy(l *policy.Loaded) (api.SignaturePolicy, error) {
	if f := l.Pull.SignaturePolicy; f != "" {
		src, _ := l.Defined("pull.signature_policy")
		sp := api.SignaturePolicy{Source: "policy-file", File: f}
		if strings.HasPrefix(src, "-") {
			sp.Source = "flag"
		} else {
			src = "pull.signature_policy"
		}
		return sp, mustExist(f, "signature policy", src)
	}
	if _, err := os.Stat(SystemSignaturePolicy); err == nil {
		return api.SignaturePolicy{Source: "system", File: SystemSignaturePolicy}, nil
	}
	return api.SignaturePolicy{Source: "builtin", Note: "no --signature-policy and no " + SystemSignaturePolicy +
		": built-in policy accepts any image without signature checks (insecureAcceptAnything)"}, nil
}

// parseImage parses IMAGE (normalized: docker.io for a name without a
// registry host), refusing an empty one or one with a scheme.
func parseImage(image string) (reference.Named, error) {
	if image == "" {
		return nil, failure.New(failure.Usage, "IMAGE is empty: give a reference such as registry.example.com/repo:tag")
	}
	if strings.Contains(image, "://") {
		return nil, failure.New(failure.Usage, "image %q: give a reference without a scheme, such as registry.example.com/repo:tag", image)
	}
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return nil, failure.New(failure.Usage, "parsing image reference %q: %w", image, err)
	}
	// containers/image takes "reg_x.io/repo" for a reference with no
	// registry at all (the first component is a host by its '.', and not
	// one by its '_'): neither a registry nor a short name to resolve.
	if reference.Domain(named) == "" {
		host, _, _ := strings.Cut(image, "/")
		return nil, failure.New(failure.Usage, "image %q: %q is not a registry host name (letters, digits, '-' and '.', an optional :port): give a reference such as registry.example.com/repo:tag", image, host)
	}
	// The copy pins sha256 digests only (pull's checkDigest): another
	// algorithm is the reference's fault, refused before anything is set up.
	if d, ok := named.(reference.Digested); ok && d.Digest().Algorithm() != digest.SHA256 {
		return nil, failure.New(failure.Usage, "image %q: digest algorithm %s is not supported; pin the image by its sha256 digest", image, d.Digest().Algorithm())
	}
	return named, nil
}

// checkOrder refuses IMAGE and DEST given the wrong way round: IMAGE has
// a DEST form (one of target.Kinds' transports, "oci:/x") and either does
// not parse as a reference or DEST is no DEST ("registry/app:1"). (A
// short name such as "oci:v1", docker.io/library/oci:v1, before a DEST
// is an image.) parseImage alone would say only "invalid reference
// format", for both the registries.conf and the containerd rules.
func checkOrder(image, dst string) error {
	tr, _, ok := strings.Cut(image, ":")
	if !ok {
		return nil
	}
	if _, isDest := target.Lookup(tr); !isDest {
		return nil
	}
	_, perr := reference.ParseNormalizedNamed(image)
	dtr, _, _ := strings.Cut(dst, ":")
	if _, destOK := target.Lookup(dtr); perr == nil && (dst == "" || destOK) {
		return nil
	}
	swapped := ""
	if _, err := reference.ParseNormalizedNamed(dst); dst != "" && err == nil {
		swapped = fmt.Sprintf(", and DEST %q is an image reference", dst)
	}
	return failure.New(failure.Usage, "IMAGE %q is a destination (%s:), not an image reference%s: IMAGE comes first, then DEST (registry.example.com/repo:tag oci:/path)", image, tr, swapped)
}

// openRegistriesConf is the registries.conf in effect ("" : none) and the
// snapshot of its bytes.
func openRegistriesConf(l *policy.Loaded) (string, *regSnapshot, error) {
	conf := ""
	if l.Pull.RegistriesConf != "" {
		if err := mustExist(l.Pull.RegistriesConf, "registries.conf", "--registries-conf"); err != nil {
			return "", nil, err
		}
		conf = l.Pull.RegistriesConf
	} else if f := systemRegistriesConf(); fileExists(f) {
		// Pin the file this (root) process would read, so that the child,
		// whose HOME is not root's, reads the same one.
		conf = f
	}
	// Every registries.conf file is read here, once, through safefile
	// (regular files, bounded, errors without content); containers/image
	// reads the snapshot of those bytes, never the caller's paths again.
	snap, err := snapshotRegistriesConf(&types.SystemContext{SystemRegistriesConfPath: conf})
	if err != nil {
		var fe *failure.Error
		if errors.As(err, &fe) {
			return "", nil, err // the snapshot's own (no private filesystem, too big)
		}
		if l.Pull.RegistriesConf != "" {
			return "", nil, failure.New(failure.Usage, "%s: %w", settingName(l, "pull.registries_conf"), err)
		}
		return "", nil, failure.Wrap(failure.Usage, err, "")
	}
	return conf, snap, nil
}

// ResolveImage is IMAGE fully qualified, as NewPlan resolves it without a
// containerd configuration (a short name through registries.conf: an
// alias, or the one unqualified-search registry), with its tag (latest
// when it has none), without planning a pull: `pullhelper cri` in front
// of CRI-O names the containers-storage: DEST after it.
func ResolveImage(l *policy.Loaded, image string) (string, error) {
	conf, snap, err := openRegistriesConf(l)
	if err != nil {
		return "", err
	}
	defer snap.Close()
	named, _, err := resolveImage(image, snap, snap.sys(conf))
	if err != nil {
		return "", err
	}
	return named.String(), nil
}

// resolveImage parses IMAGE into a fully qualified reference. A short name
// (no registry host) is resolved only through registries.conf: an alias, or
// exactly one unqualified-search registry; anything else is an error.
func resolveImage(image string, snap *regSnapshot, sys *types.SystemContext) (reference.Named, string, error) {
	named, err := parseImage(image)
	if err != nil {
		return nil, "", err
	}
	first, _, hasSlash := strings.Cut(image, "/")
	qualified := hasSlash && (strings.ContainsAny(first, ".:") || first == "localhost")
	how := ""
	if !qualified {
		name := strings.SplitN(strings.SplitN(image, "@", 2)[0], ":", 2)[0]
		alias, file, aerr := sysregistriesv2.ResolveShortNameAlias(sys, name)
		if aerr != nil {
			return nil, "", failure.New(failure.Usage, "resolving short name %q in registries.conf: %s", image, snap.describe(hosts.RegistriesConfError(aerr)))
		}
		var base reference.Named
		if alias != nil {
			base, how = alias, "alias in "+snap.name(file)
		} else {
			regs, rerr := sysregistriesv2.UnqualifiedSearchRegistries(sys)
			if rerr != nil {
				return nil, "", failure.New(failure.Usage, "reading registries.conf: %s", snap.describe(hosts.RegistriesConfError(rerr)))
			}
			if len(regs) != 1 {
				return nil, "", failure.New(failure.Usage, "image %q is a short name and registries.conf does not resolve it unambiguously (%d unqualified-search registries, no alias): use a fully qualified reference such as %s", image, len(regs), named.String())
			}
			b, perr := reference.ParseNormalizedNamed(regs[0] + "/" + name)
			if perr != nil {
				return nil, "", failure.New(failure.Usage, "short name %q with registry %s: %w", image, regs[0], perr)
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

// normalizeContainerd parses IMAGE as containerd's CRI does
// (reference.ParseDockerRef: a name without a registry host is
// docker.io's, "library/" for a single element; no tag means latest).
func normalizeContainerd(image string) (reference.Named, string, error) {
	named, err := parseImage(image)
	if err != nil {
		return nil, "", err
	}
	how := ""
	if first, _, hasSlash := strings.Cut(image, "/"); !hasSlash || !(strings.ContainsAny(first, ".:") || first == "localhost") {
		how = "containerd (docker.io)"
	}
	return reference.TagNameOnly(named), how, nil
}

func mustParse(s string) reference.Named {
	n, _ := reference.ParseNormalizedNamed(s)
	return n
}

// systemRegistriesConf is the registries.conf containers/image reads for
// this (root) process when none is named.
func systemRegistriesConf() string {
	//lint:ignore SA1019 the path itself is what is needed: the child, whose HOME is not root's, is told to read this very file
	return sysregistriesv2.ConfigPath(nil)
}
