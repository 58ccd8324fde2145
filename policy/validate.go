package policy

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/pullhelper/pullhelper/dnsconf"
	"github.com/pullhelper/pullhelper/internal/regpattern"
	"github.com/pullhelper/pullhelper/internal/wire"
)

// Validate checks values and combinations that the decoder cannot check on
// its own. It reports every problem: one *Error, or Errors when there are
// several.
func (l *Loaded) Validate() error {
	p := &l.Policy
	var errs Errors
	bad := func(key, format string, args ...any) {
		errs = errs.add(l.keyError(key, fmt.Sprintf(format, args...)))
	}
	if p.Pull.ParallelLayers < 1 || p.Pull.ParallelLayers > 64 {
		bad("pull.parallel_layers", "must be between 1 and 64, not %d", p.Pull.ParallelLayers)
	}
	if st := time.Duration(p.Pull.StallTimeout); st != 0 && st < time.Second {
		bad("pull.stall_timeout", "must be 0 (no stall timeout) or at least 1s, not %s", st)
	}
	if p.Pull.MaxBandwidth > 0 && p.Pull.MinRate > 0 && p.Pull.MaxBandwidth < p.Pull.MinRate {
		bad("pull.max_bandwidth", "%d B/s is below pull.min_rate (%d B/s): every blob would be failed as too slow; raise it or lower pull.min_rate (0 disables it)", p.Pull.MaxBandwidth, p.Pull.MinRate)
	}
	if p.Pull.MinRate > 0 && time.Duration(p.Pull.StallWindow) < time.Second {
		bad("pull.stall_window", "must be at least 1s while pull.min_rate is set, not %s", time.Duration(p.Pull.StallWindow))
	}
	if p.Dest.LockTimeout <= 0 {
		bad("dest.lock_timeout", "must be positive, not %s", time.Duration(p.Dest.LockTimeout))
	}
	if p.Pull.Platform != "" {
		if _, err := wire.ParsePlatform(p.Pull.Platform); err != nil {
			bad("pull.platform", "%v", err)
		}
	}
	if p.Pull.Retries > 100 {
		bad("pull.retries", "must be between 0 and 100, not %d", p.Pull.Retries)
	}
	for _, k := range []struct {
		key, val string
	}{{"pull.signature_policy", p.Pull.SignaturePolicy}, {"pull.registries_conf", p.Pull.RegistriesConf},
		{"auth.authfile", p.Auth.Authfile}, {"trust.cert_dir", p.Trust.CertDir},
		{"auth.containerd_config", p.Auth.ContainerdConfig}, {"auth.credential_provider_config", p.Auth.CredentialProviderConfig},
		{"auth.credential_provider_bin_dir", p.Auth.CredentialProviderBinDir}, {"auth.service_account_token", p.Auth.ServiceAccountToken},
		{"auth.provider_service_account_token", p.Auth.ProviderServiceAccountToken},
		{"dest.containerd_address", p.Dest.ContainerdAddress}, {"dest.containerd_staging", p.Dest.ContainerdStaging},
		{"dest.storage_conf", p.Dest.StorageConf}} {
		if k.val != "" && !filepath.IsAbs(k.val) && l.source(k.key) == "file" {
			bad(k.key, "must be an absolute path, not %q", k.val)
		}
	}
	if k := p.Auth.KubeletDockerConfig; k != "" && k != "auto" && !filepath.IsAbs(k) && l.source("auth.kubelet_docker_config") == "file" {
		bad("auth.kubelet_docker_config", "must be \"auto\" or the kubelet's root directory (absolute), not %q", k)
	}
	for i, f := range p.Auth.PullSecrets {
		if !filepath.IsAbs(f) && l.source("auth.pull_secrets") == "file" {
			bad("auth.pull_secrets", "entry %d: must be an absolute path, not %q", i+1, f)
		}
	}
	if p.Auth.ServiceAccountToken != "" && len(p.Auth.ServiceAccountRegistries) == 0 {
		bad("auth.service_account_token", "needs auth.service_account_registries (the registries to offer the token to)")
	}
	for i, r := range p.Auth.ServiceAccountRegistries {
		if err := checkRegistryPattern(r); err != nil {
			bad("auth.service_account_registries", "entry %d: %v", i+1, err)
		}
	}
	if len(p.Auth.ProviderServiceAccountAnnotations) > 0 && p.Auth.ProviderServiceAccountToken == "" {
		bad("auth.provider_service_account_annotations", "needs auth.provider_service_account_token (annotations belong to a service account, which the token names)")
	}
	if _, err := ParseAnnotations(p.Auth.ProviderServiceAccountAnnotations); err != nil {
		bad("auth.provider_service_account_annotations", "%v", err)
	}
	for i, d := range p.Trust.CertsD {
		if !filepath.IsAbs(d) && l.source("trust.certs_d") == "file" {
			bad("trust.certs_d", "entry %d: must be an absolute path, not %q", i+1, d)
		}
	}
	for i, cf := range p.Trust.CAFiles {
		if err := checkRegistryPattern(cf.Registry); err != nil {
			bad("trust.ca_files", "entry %d: registry: %v", i+1, err)
		}
		if !filepath.IsAbs(cf.File) {
			bad("trust.ca_files", "entry %d: file must be an absolute path, not %q", i+1, cf.File)
		}
	}
	for i, r := range p.Trust.InsecureRegistries {
		if err := checkRegistryPattern(r); err != nil {
			bad("trust.insecure_registries", "entry %d: %v", i+1, err)
		}
	}
	switch p.Cgroup.Driver {
	case "auto", "cgroupfs", "systemd":
	default:
		bad("cgroup.driver", "must be \"auto\", \"cgroupfs\" or \"systemd\", not %q", p.Cgroup.Driver)
	}
	if p.Cgroup.MemoryHigh > 0 && p.Cgroup.MemoryMax > 0 && p.Cgroup.MemoryHigh > p.Cgroup.MemoryMax {
		bad("cgroup.memory_high", "(%d bytes) must not exceed memory_max (%d bytes)", p.Cgroup.MemoryHigh, p.Cgroup.MemoryMax)
	}
	// The pull child's Go runtime alone peaks at 8-11 MiB (measured on a
	// tiny image, cgroup v1, 2 CPUs): below 10 MiB every pull was
	// OOM-killed, exit 7 after the setup. 16Mi leaves room; below it is
	// refused at once, the same every time.
	if p.Cgroup.MemoryMax > 0 && p.Cgroup.MemoryMax < minMemoryMax {
		bad("cgroup.memory_max", "%d bytes is too small for the pull child (its runtime alone takes about 10 MiB); use at least 16Mi", p.Cgroup.MemoryMax)
	}
	if p.Cgroup.CPUWeight > 10000 {
		bad("cgroup.cpu_weight", "must be between 1 and 10000, not %d", p.Cgroup.CPUWeight)
	}
	if p.Cgroup.IOWeight > 10000 {
		bad("cgroup.io_weight", "must be between 1 and 10000, not %d", p.Cgroup.IOWeight)
	}
	for _, io := range []struct {
		key  string
		vals []string
		iops bool
	}{{"cgroup.io_read_bps", p.Cgroup.IOReadBPS, false}, {"cgroup.io_write_bps", p.Cgroup.IOWriteBPS, false},
		{"cgroup.io_read_iops", p.Cgroup.IOReadIOPS, true}, {"cgroup.io_write_iops", p.Cgroup.IOWriteIOPS, true}} {
		for _, v := range io.vals {
			if _, _, err := ParseIOLimit(v, io.iops); err != nil {
				bad(io.key, "%v", err)
			}
		}
	}
	if p.Cgroup.Path != "" && !strings.HasPrefix(p.Cgroup.Path, "/") {
		bad("cgroup.path", "must be an absolute cgroup path such as /kubepods/pod1234, not %q", p.Cgroup.Path)
	}
	for _, k := range []struct{ key, val string }{{"cgroup.parent", p.Cgroup.Parent}, {"cgroup.path", p.Cgroup.Path}} {
		for _, name := range strings.Split(k.val, "/") {
			if len(name) > maxCgroupName {
				bad(k.key, "%q has a name of %d bytes: a cgroup's name is at most %d", k.val, len(name), maxCgroupName)
				break
			}
			if controlFileName(name) {
				bad(k.key, "%q names %q, a cgroup's control file, not a cgroup", k.val, name)
				break
			}
		}
	}
	// memory_swap_max without memory_max is CgroupConfig's to refuse: a
	// file may leave memory_max to a flag (--memory-max per pull).
	_, swap := l.Defined("cgroup.memory_swap_max")
	if p.Cgroup.Path != "" && (p.Cgroup.CPUQuota > 0 || p.Cgroup.CPUWeight > 0 || p.Cgroup.MemoryMax > 0 || p.Cgroup.MemoryHigh > 0 || swap ||
		p.Cgroup.PidsMax > 0 || p.Cgroup.IOWeight > 0 || len(p.Cgroup.IOReadBPS)+len(p.Cgroup.IOWriteBPS)+len(p.Cgroup.IOReadIOPS)+len(p.Cgroup.IOWriteIOPS) > 0) {
		bad("cgroup.path", "joins an existing cgroup as it is; remove the limits (cpu, memory, pids, io) or use cgroup.parent")
	}
	for i, ns := range p.Network.DNS.Nameservers {
		if err := dnsconf.CheckNameserver(ns); err != nil {
			bad("network.dns.nameservers", "entry %d: %v", i+1, err)
		}
	}
	for i, o := range p.Network.DNS.Options {
		if err := dnsconf.CheckOption(o); err != nil {
			bad("network.dns.options", "entry %d: %v", i+1, err)
		}
	}
	for i, h := range p.Network.DNS.Hosts {
		if err := dnsconf.CheckHostsEntry(h); err != nil {
			bad("network.dns.hosts", "entry %d: %v", i+1, err)
		}
	}
	if d := p.Network.DNS.ClusterDomain; d != "" {
		if err := dnsconf.CheckDomain(d); err != nil {
			bad("network.dns.cluster_domain", "%v", err)
		}
	}
	if ns := p.Network.DNS.Namespace; ns != "" {
		if err := dnsconf.CheckNamespace(ns); err != nil {
			bad("network.dns.namespace", "%v", err)
		}
	}
	if f := p.Network.DNS.KubeletConfig; f != "" && !filepath.IsAbs(f) && l.source("network.dns.kubelet_config") == "file" {
		bad("network.dns.kubelet_config", "must be an absolute path, not %q", f)
	}
	dnsKeys := l.DefinedUnder("network.dns.")
	switch p.Network.Mode {
	case "host":
		if p.Network.Netns != "" {
			bad("network.netns", "needs network.mode = \"netns\" or \"cluster-dns\" (mode is \"host\")")
		}
		if len(dnsKeys) > 0 {
			bad(dnsKeys[0], "needs network.mode = \"cluster-dns\" (mode is \"host\")")
		}
	case "netns":
		if p.Network.Netns == "" {
			bad("network.mode", "\"netns\" needs network.netns (a path, an ip-netns name or pid:PID)")
		}
		if len(dnsKeys) > 0 {
			bad(dnsKeys[0], "needs network.mode = \"cluster-dns\" (mode is \"netns\")")
		}
	case "cluster-dns":
		switch pol := p.Network.DNS.Policy; pol {
		case "", dnsconf.PolicyClusterFirst, dnsconf.PolicyClusterFirstWithHostNet:
			if len(p.Network.DNS.Nameservers) == 0 && p.Network.DNS.KubeletConfig == "" {
				bad("network.mode", "\"cluster-dns\" needs network.dns.nameservers or network.dns.kubelet_config")
			}
		case dnsconf.PolicyDefault:
		case dnsconf.PolicyNone:
			if len(p.Network.DNS.Nameservers) == 0 {
				bad("network.dns.policy", "\"None\" needs network.dns.nameservers (only what is configured is used)")
			}
		default:
			bad("network.dns.policy", "must be \"ClusterFirst\", \"ClusterFirstWithHostNet\", \"Default\" or \"None\", not %q", pol)
		}
	default:
		bad("network.mode", "must be \"host\", \"netns\" or \"cluster-dns\", not %q", p.Network.Mode)
	}
	for i, d := range p.Network.DNS.Search {
		if err := dnsconf.CheckDomain(d); err != nil {
			bad("network.dns.search", "entry %d: %v", i+1, err)
		}
	}
	l.validateCRI(bad)
	if u := p.Privileges.User; u == "" || u == "0" || u == "root" {
		bad("privileges.user", "must be \"dynamic\", a user name or a uid other than 0, not %q", u)
	} else if msg := CheckUser(u); msg != "" {
		bad("privileges.user", "%s", msg)
	}
	return errs.result()
}

// minMemoryMax is the least cgroup.memory_max a pull accepts.
const minMemoryMax = 16 << 20

// maxCgroupName is NAME_MAX: the longest name of a cgroup directory.
const maxCgroupName = 255

// controlFileName reports whether name is one of the files the kernel
// puts in every cgroup, v1 and v2: tasks, notify_on_release,
// release_agent and cgroup.*. No cgroup can be made under such a name
// (mkdir -p fails after making the levels above it). A controller's files
// (cpu.*, memory.*) are not refused: the kernel refuses only the names
// that exist, which depend on the host.
func controlFileName(name string) bool {
	switch name {
	case "tasks", "notify_on_release", "release_agent":
		return true
	}
	return strings.HasPrefix(name, "cgroup.")
}

// validateCRI checks [cri]. Whether each entry of pod_profiles names a
// profile is checked where the profiles are known (Parse).
func (l *Loaded) validateCRI(bad func(key, format string, args ...any)) {
	c := &l.Policy.CRI
	switch c.PullCgroup {
	case PullCgroupOwn:
	case PullCgroupPod:
		if l.Policy.Cgroup.Path != "" {
			bad("cri.pull_cgroup", "\"pod\" puts the pull's cgroup under the pod's cgroup parent; it cannot also join cgroup.path %q", l.Policy.Cgroup.Path)
		}
	default:
		bad("cri.pull_cgroup", "must be \"own\" (under cgroup.parent) or \"pod\" (under the pod's cgroup parent), not %q", c.PullCgroup)
	}
	if k := c.ProfileAnnotation; k != "" {
		if msg := annotationKeyError(strings.ToLower(k)); msg != "" {
			bad("cri.profile_annotation", "%q is not an annotation key: %s", k, msg)
		}
		if len(c.PodProfiles) == 0 {
			bad("cri.profile_annotation", "needs cri.pod_profiles (the profiles a pod may choose)")
		}
	} else if len(c.PodProfiles) > 0 {
		bad("cri.pod_profiles", "needs cri.profile_annotation (the pod annotation that chooses one)")
	}
	seen := map[string]bool{}
	for i, n := range c.PodProfiles {
		if seen[n] {
			bad("cri.pod_profiles", "entry %d: %q is listed twice", i+1, n)
		}
		seen[n] = true
	}
}

// source says who set key: "file", a flag name, or "" for the default.
func (l *Loaded) source(key string) string { return l.defined[key] }

func (l *Loaded) keyError(key, msg string) error {
	if src := l.defined[key]; strings.HasPrefix(src, "-") {
		return &Error{Key: src, Msg: msg}
	}
	return &Error{Key: key, Msg: msg}
}

// ParseIOLimit parses "PATH=RATE" or "MAJ:MIN=RATE" (RATE in bytes per
// second, or a plain count when iops is true).
func ParseIOLimit(s string, iops bool) (target string, value int64, err error) {
	i := strings.LastIndex(s, "=")
	if i <= 0 || i == len(s)-1 {
		return "", 0, fmt.Errorf("%q: want PATH=RATE or MAJOR:MINOR=RATE", s)
	}
	target, val := s[:i], s[i+1:]
	if !strings.HasPrefix(target, "/") {
		var maj, min uint32
		if n, _ := fmt.Sscanf(target, "%d:%d", &maj, &min); n != 2 || fmt.Sprintf("%d:%d", maj, min) != target {
			return "", 0, fmt.Errorf("%q: the target must be an absolute path or MAJOR:MINOR", s)
		}
	}
	if iops {
		var n int64
		if _, err := fmt.Sscanf(val, "%d", &n); err != nil || n <= 0 || fmt.Sprint(n) != val {
			return "", 0, fmt.Errorf("%q: want a positive number of operations per second", s)
		}
		return target, n, nil
	}
	r, err := ParseRate(val)
	if err != nil || r <= 0 {
		return "", 0, fmt.Errorf("%q: want a positive rate such as 20MB/s", s)
	}
	return target, int64(r), nil
}

func checkRegistryPattern(r string) error {
	// The same parser the keyring matches with, so that a pattern the
	// policy accepts is one that can match.
	_, err := regpattern.Parse(r)
	return err
}

// ParseAnnotations parses service-account annotations given as "KEY=VALUE"
// (auth.provider_service_account_annotations). KEY is an annotation key:
// an optional DNS-subdomain prefix and "/", then a name of at most 63
// alphanumerics, '-', '_' or '.' (apimachinery IsQualifiedName of the
// lower-cased key, as ValidateAnnotations checks it). A key may appear once.
func ParseAnnotations(entries []string) (map[string]string, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(entries))
	for i, e := range entries {
		k, v, ok := strings.Cut(e, "=")
		if !ok {
			return nil, fmt.Errorf("entry %d: %q must be KEY=VALUE", i+1, e)
		}
		if msg := annotationKeyError(strings.ToLower(k)); msg != "" {
			return nil, fmt.Errorf("entry %d: invalid annotation key %q: %s", i+1, k, msg)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("entry %d: annotation key %q given twice", i+1, k)
		}
		out[k] = v
	}
	return out, nil
}

var (
	annotationNameRE   = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
	annotationPrefixRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

func annotationKeyError(k string) string {
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		name, prefix = prefix, ""
	} else if strings.Contains(name, "/") {
		return "an optional DNS subdomain prefix and '/' and a name"
	}
	if hasPrefix && (prefix == "" || len(prefix) > 253 || !annotationPrefixRE.MatchString(prefix)) {
		return "the prefix must be a lowercase RFC 1123 subdomain"
	}
	if name == "" || len(name) > 63 || !annotationNameRE.MatchString(name) {
		return "the name must be at most 63 alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character"
	}
	return ""
}

// MaxID is the largest uid or gid a pull may run as: 4294967295
// ((uid_t)-1) means "unchanged" to setresuid, and a larger number would be
// truncated (2^32 to 0, root).
const MaxID = 1<<32 - 2

// CheckUser checks the form of privileges.user and returns what is wrong
// ("" when nothing): a uid (digits, or a sign and digits) must be in
// 1..MaxID; a name is looked up when the pull runs.
func CheckUser(u string) string {
	if u == "dynamic" || u == "" {
		return ""
	}
	num := u
	if u[0] == '+' || u[0] == '-' {
		num = u[1:]
	}
	if num == "" || strings.Trim(num, "0123456789") != "" {
		if u[0] == '+' || u[0] == '-' {
			return fmt.Sprintf("%q is neither a uid nor a user name", u)
		}
		return "" // a name
	}
	n, err := strconv.ParseUint(num, 10, 64)
	switch {
	case u[0] == '-':
		return fmt.Sprintf("uid %s is negative; want a uid in 1-%d", u, MaxID)
	case u[0] == '+' || len(num) > 1 && num[0] == '0':
		// One spelling per uid: the user database is looked up by it
		// (its primary group), and "007" or "+7" would miss uid 7's.
		return fmt.Sprintf("uid %s has a sign or leading zeros; write a uid in 1-%d in plain decimal", u, MaxID)
	case err != nil || n > MaxID:
		return fmt.Sprintf("uid %s is out of range; want a uid in 1-%d (4294967295 means \"unchanged\" to setresuid, larger ones are truncated)", u, MaxID)
	case n == 0:
		return fmt.Sprintf("uid %s is root; the pull never runs as root", u)
	}
	return ""
}
