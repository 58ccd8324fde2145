package cri

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/pullhelper/pullhelper/cgroup"
	"github.com/pullhelper/pullhelper/dnsconf"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/policy"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodPolicy is what the policy of one profile says about pods: its [cri]
// table and whether its cgroups are made through systemd (cgroup.driver),
// which decides how a pod's cgroup parent is named.
type PodPolicy struct {
	CRI     policy.CRI
	Systemd bool
}

// PodPolicyFunc returns the PodPolicy of [profiles.NAME] ("" the
// service's own policy: the file's base or its --profile, with the
// setting flags).
type PodPolicyFunc func(profile string) (PodPolicy, error)

// PodSettings is what one pull takes from its pod (the request's
// sandbox_config) as the policy chose. Pulls share a flight only when
// their PodSettings are equal, so that no pod is charged for or resolved
// by another pod's pull.
type PodSettings struct {
	// Profile is the [profiles.NAME] the pod chose by the annotation
	// cri.profile_annotation ("": the service's own).
	Profile string `json:"profile,omitempty"`
	// CgroupParent, when set, is the pod's cgroup parent (its
	// linux.cgroup_parent, checked): the pull's cgroup goes under it
	// (cri.pull_cgroup = "pod").
	CgroupParent string `json:"cgroup_parent,omitempty"`
	// DNS, when set, is the pod's dns_config, checked: the child's
	// resolv.conf (cri.pod_dns).
	DNS *PodDNS `json:"dns,omitempty"`
	// SignaturePolicy, when set, is the signature policy of the pod's
	// namespace in front of CRI-O (Runtime.namespacePolicy), which
	// replaces the node's.
	SignaturePolicy string `json:"signature_policy,omitempty"`
	// Snapshotter, when set, is the snapshotter the pod's runtime
	// handler names in front of containerd (Runtime.handlerSnapshotter),
	// which the image is unpacked for instead of the CRI's.
	Snapshotter string `json:"snapshotter,omitempty"`
}

// PodDNS is a pod's dns_config.
type PodDNS struct {
	Servers  []string `json:"servers"`
	Searches []string `json:"searches,omitempty"`
	Options  []string `json:"options,omitempty"`
}

// key is the settings as part of a flight key.
func (p PodSettings) key() string {
	b, _ := json.Marshal(p)
	return string(b)
}

// Bounds on what a sandbox_config may carry into a pull.
const (
	maxCgroupParent = 1024
	maxDNSOptions   = 32
	maxDNSOption    = 256
	maxSearchLen    = 253
	maxShown        = 64
)

// sliceRE is a systemd slice name as the kubelet's systemd cgroup driver
// names a pod's (kubepods-burstable-pod<uid>.slice); ExpandSlice checks
// the dashes.
var sliceRE = regexp.MustCompile(`^[A-Za-z0-9:_.\\-]+\.slice$`)

// podSettings is what the policy takes from the request's pod: the profile
// its annotation chose (only one of cri.pod_profiles), then by that
// profile's [cri] its cgroup parent (cri.pull_cgroup = "pod") and its DNS
// (cri.pod_dns). A request without a pod, or whose pod names no cgroup
// parent or no DNS server, keeps the policy's (as CRI-O's
// separate_pull_cgroup = "pod" runs a pull without a sandbox cgroup as
// usual: server.(*Server).pullImage). Anything else the pod says wrong is
// a usage error (InvalidArgument) on one line.
func podSettings(sb *runtimeapi.PodSandboxConfig, pol PodPolicyFunc) (PodSettings, error) {
	var out PodSettings
	if pol == nil {
		return out, nil
	}
	set, err := pol("")
	if err != nil {
		return out, err
	}
	if key := set.CRI.ProfileAnnotation; key != "" {
		if v, ok := sb.GetAnnotations()[key]; ok {
			if !slices.Contains(set.CRI.PodProfiles, v) {
				return out, failure.New(failure.Usage, "pod annotation %s: %s is not a profile pods may choose (cri.pod_profiles: %s)",
					key, shown(v), strings.Join(set.CRI.PodProfiles, ", "))
			}
			out.Profile = v
			if set, err = pol(v); err != nil {
				return out, err
			}
		}
	}
	if set.CRI.PullCgroup == policy.PullCgroupPod {
		if p := sb.GetLinux().GetCgroupParent(); p != "" {
			if err := checkCgroupParent(p, set.Systemd); err != nil {
				return out, err
			}
			out.CgroupParent = p
		}
	}
	if set.CRI.PodDNS {
		if dc := sb.GetDnsConfig(); len(dc.GetServers()) > 0 {
			d, err := checkPodDNS(dc)
			if err != nil {
				return out, err
			}
			out.DNS = d
		}
	}
	return out, nil
}

// checkCgroupParent checks a pod's linux.cgroup_parent: with the systemd
// driver a slice name (kubepods-…-pod….slice), otherwise an absolute,
// clean cgroupfs path other than the root (no "..", no "."); either must
// name an existing cgroup, so that the pull never creates the pod's.
func checkCgroupParent(p string, sd bool) error {
	const what = "sandbox_config linux.cgroup_parent"
	if len(p) > maxCgroupParent {
		return failure.New(failure.Usage, "%s: longer than %d bytes", what, maxCgroupParent)
	}
	if strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return failure.New(failure.Usage, "%s %s: control characters are not allowed", what, shown(p))
	}
	if sd {
		if !sliceRE.MatchString(p) || strings.Contains(p, "--") || strings.HasPrefix(p, "-") || strings.HasSuffix(p, "-.slice") {
			return failure.New(failure.Usage, "%s %s: with the systemd cgroup driver, want a slice name such as kubepods-burstable-pod1234.slice", what, shown(p))
		}
	} else if !strings.HasPrefix(p, "/") || filepath.Clean(p) != p || p == "/" {
		return failure.New(failure.Usage, "%s %s: want an absolute, clean cgroup path other than / (no \"..\" or \".\"), such as /kubepods/burstable/pod1234", what, shown(p))
	}
	if !cgroup.ExistingParent(p, sd) {
		return failure.New(failure.Usage, "%s %s: no such cgroup (the pod's cgroup must exist before its pulls)", what, shown(p))
	}
	return nil
}

// checkPodDNS checks a pod's dns_config within resolv.conf's limits as the
// kubelet keeps them (pkg/kubelet/network/dns: at most 3 servers, 32
// search domains of at most 253 characters, 2048 characters in all) and
// returns a copy.
func checkPodDNS(dc *runtimeapi.DNSConfig) (*PodDNS, error) {
	const what = "sandbox_config dns_config"
	d := &PodDNS{}
	if n := len(dc.GetServers()); n > dnsconf.MaxNameservers {
		return nil, failure.New(failure.Usage, "%s.servers: %d servers, resolv.conf uses at most %d", what, n, dnsconf.MaxNameservers)
	}
	for i, s := range dc.GetServers() {
		if len(s) > maxShown || dnsconf.CheckNameserver(s) != nil {
			return nil, failure.New(failure.Usage, "%s.servers entry %d: %s is not an IP address", what, i+1, shown(s))
		}
		d.Servers = append(d.Servers, s)
	}
	if n := len(dc.GetSearches()); n > dnsconf.MaxSearchDomains {
		return nil, failure.New(failure.Usage, "%s.searches: %d domains, at most %d", what, n, dnsconf.MaxSearchDomains)
	}
	if n := len(strings.Join(dc.GetSearches(), " ")); n > dnsconf.MaxSearchListChar {
		return nil, failure.New(failure.Usage, "%s.searches: %d characters, at most %d", what, n, dnsconf.MaxSearchListChar)
	}
	for i, s := range dc.GetSearches() {
		if len(s) > maxSearchLen || dnsconf.CheckDomain(s) != nil {
			return nil, failure.New(failure.Usage, "%s.searches entry %d: %s is not a domain name of at most %d characters", what, i+1, shown(s), maxSearchLen)
		}
		d.Searches = append(d.Searches, s)
	}
	if n := len(dc.GetOptions()); n > maxDNSOptions {
		return nil, failure.New(failure.Usage, "%s.options: %d options, at most %d", what, n, maxDNSOptions)
	}
	for i, o := range dc.GetOptions() {
		if len(o) > maxDNSOption || dnsconf.CheckOption(o) != nil {
			return nil, failure.New(failure.Usage, "%s.options entry %d: %s: want NAME or NAME:VALUE such as ndots:2", what, i+1, shown(o))
		}
		d.Options = append(d.Options, o)
	}
	return d, nil
}

// shown is an untrusted value as an error repeats it: cut at maxShown
// bytes, quoted (control characters escaped).
func shown(s string) string {
	if len(s) > maxShown {
		return strconv.Quote(s[:maxShown]) + "…"
	}
	return strconv.Quote(s)
}
