package dnsconf

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"github.com/pullhelper/pullhelper/internal/safefile"
	"go.yaml.in/yaml/v3"
)

// Kubelet limits (pkg/apis/core/validation, pkg/kubelet/network/dns).
const (
	MaxNameservers    = 3
	MaxSearchDomains  = 32
	MaxSearchListChar = 2048
)

// DNS policies, as a pod's dnsPolicy (pkg/kubelet/network/dns GetPodDNS).
const (
	// PolicyClusterFirst: the cluster's nameservers, the cluster search
	// domains then the host's, ndots:5. pullhelper's child asks cluster DNS
	// whether it runs on the host network or in a pod's namespace, so this
	// is the kubelet's ClusterFirst of a pod network (for a hostNetwork pod
	// the kubelet would use Default unless ClusterFirstWithHostNet).
	PolicyClusterFirst            = "ClusterFirst"
	PolicyClusterFirstWithHostNet = "ClusterFirstWithHostNet"
	// PolicyDefault: the host's resolv.conf (the kubelet's resolvConf).
	PolicyDefault = "Default"
	// PolicyNone: only the configured nameservers, search and options.
	PolicyNone = "None"
)

// Input is what the policy and flags say.
type Input struct {
	// Policy is one of the Policy* constants ("" is ClusterFirst).
	Policy string
	// Nameservers: with ClusterFirst, the cluster DNS servers (they replace
	// the kubelet config's clusterDNS); otherwise a pod's
	// dnsConfig.nameservers, appended to the base.
	Nameservers []string
	// Search and Options are a pod's dnsConfig.searches and options:
	// appended to the base (options merged by name).
	Search        []string
	Options       []string
	Hosts         []string // "IP NAME [NAME…]"
	Namespace     string
	ClusterDomain string
	KubeletConfig string
	// HostResolvConf is where the host's DNS comes from when the kubelet
	// config does not say (default /etc/resolv.conf; a missing default file
	// reads as empty).
	HostResolvConf string
}

// Config is the rendered override. It must stay JSON-representable.
type Config struct {
	Policy      string   `json:"policy"`
	Nameservers []string `json:"nameservers"`
	Search      []string `json:"search"`
	Options     []string `json:"options"`
	ResolvConf  string   `json:"resolv_conf"`
	Hosts       string   `json:"hosts"` // "" when no hosts entries are configured
	Warnings    []string `json:"warnings,omitempty"`
}

type kubeletConfig struct {
	ClusterDNS    []string `yaml:"clusterDNS"`
	ClusterDomain string   `yaml:"clusterDomain"`
	// ResolvConf nil: not set (the default, /etc/resolv.conf); "": no host
	// file at all (the kubelet's --resolv-conf="").
	ResolvConf *string `yaml:"resolvConf"`
}

// maxSearchLen is the longest search domain kept (the kubelet's
// formDNSSearchFitsLimits: utilvalidation.DNS1123SubdomainMaxLength;
// glibc aborts on longer ones).
const maxSearchLen = 253

// Build renders the override the way the kubelet's GetPodDNS builds a pod's
// DNS config. Errors name the setting or file to fix.
func Build(in Input) (*Config, error) {
	c := &Config{Policy: in.Policy}
	if c.Policy == "" {
		c.Policy = PolicyClusterFirst
	}
	switch c.Policy {
	case PolicyClusterFirst, PolicyClusterFirstWithHostNet, PolicyDefault, PolicyNone:
	default:
		return nil, fmt.Errorf("DNS policy %q: want ClusterFirst, ClusterFirstWithHostNet, Default or None", in.Policy)
	}
	hostResolv, hostOptional := in.HostResolvConf, true
	if hostResolv == "" {
		hostResolv = "/etc/resolv.conf"
	}
	clusterDNS, domain := in.Nameservers, in.ClusterDomain
	if in.KubeletConfig != "" {
		// Through safefile, as every file root reads for the caller: a
		// regular file, bounded; a symlink is followed, as the kubelet's
		// os.ReadFile does.
		b, err := safefile.ReadFile(in.KubeletConfig, safefile.MaxConfig)
		if err != nil {
			return nil, fmt.Errorf("kubelet config %s: %s", in.KubeletConfig, safefile.Reason(err))
		}
		var kc kubeletConfig
		if err := yaml.Unmarshal(b, &kc); err != nil {
			// The decoder's message may quote the file (which may not be a
			// kubelet config at all): where and what kind only.
			return nil, fmt.Errorf("kubelet config %s: %s", in.KubeletConfig, safefile.Redact(err.Error()))
		}
		if len(clusterDNS) == 0 {
			// NewMainKubelet: each entry through netutils.ParseIPSloppy
			// (an IPv4 octet's leading zeros are decimal), one that does
			// not parse skipped with a log line ("Invalid clusterDNS IP");
			// the key and the entry's number, never the value.
			for i, ns := range kc.ClusterDNS {
				ip := parseIPSloppy(ns)
				if ip == nil {
					c.Warnings = append(c.Warnings, fmt.Sprintf("kubelet config %s: clusterDNS entry %d is not an IP address; skipped, as the kubelet skips it", in.KubeletConfig, i+1))
					continue
				}
				clusterDNS = append(clusterDNS, ip.String())
			}
		}
		if domain == "" {
			domain = kc.ClusterDomain
		}
		if kc.ResolvConf != nil && in.HostResolvConf == "" {
			// The kubelet reads exactly this file, and fails when it cannot.
			hostResolv, hostOptional = *kc.ResolvConf, false
		}
		if kc.ClusterDomain != "" {
			if err := CheckDomain(kc.ClusterDomain); err != nil {
				return nil, fmt.Errorf("kubelet config %s: clusterDomain: not a domain name (letters, digits, '-', '_' and dots)", in.KubeletConfig)
			}
		}
	}
	for _, ns := range in.Nameservers {
		if err := CheckNameserver(ns); err != nil {
			return nil, fmt.Errorf("nameserver: %v", err)
		}
	}
	// Every string below ends up in a generated file: one that could break
	// its line syntax (a newline injects a nameserver) is refused.
	for _, d := range in.Search {
		if err := CheckDomain(d); err != nil {
			return nil, fmt.Errorf("search domain: %v", err)
		}
	}
	if in.ClusterDomain != "" {
		if err := CheckDomain(in.ClusterDomain); err != nil {
			return nil, fmt.Errorf("cluster domain: %v", err)
		}
	}
	if in.Namespace != "" {
		if err := CheckNamespace(in.Namespace); err != nil {
			return nil, err
		}
	}
	for _, o := range in.Options {
		if err := CheckOption(o); err != nil {
			return nil, fmt.Errorf("option %w", err)
		}
	}
	for _, h := range in.Hosts {
		if err := CheckHostsEntry(h); err != nil {
			return nil, fmt.Errorf("hosts entry %w", err)
		}
	}

	// The base: the host's file (getHostDNSConfig), unless resolvConf is "".
	var host resolvConf
	if hostResolv != "" {
		// A path the kubelet config names is that file's content: the
		// errors name the key instead.
		shown := hostResolv
		if in.KubeletConfig != "" && in.HostResolvConf == "" && !hostOptional {
			shown = "(the kubelet config " + in.KubeletConfig + "'s resolvConf)"
		}
		var err error
		if host, err = readHost(hostResolv, shown, hostOptional); err != nil {
			return nil, err
		}
	}
	var servers, search, options []string
	extraServers := in.Nameservers
	switch c.Policy {
	case PolicyNone:
		// An empty base: only what is configured.
		if len(in.Nameservers) == 0 {
			return nil, fmt.Errorf("DNS policy None needs a nameserver: --dns IP or [network.dns] nameservers")
		}
	case PolicyClusterFirst, PolicyClusterFirstWithHostNet:
		if len(clusterDNS) > 0 {
			// The cluster DNS servers are the only nameservers; the search
			// list is the cluster's, then the host's; options ndots:5.
			servers = append([]string{}, clusterDNS...)
			extraServers = nil // they were the cluster DNS servers
			search = host.search
			// (generateSearchesForDNSClusterFirst; pullhelper has no pod,
			// so the cluster search domains need the namespace named.)
			domain = strings.TrimSuffix(domain, ".")
			if domain != "" && in.Namespace != "" {
				search = dedup(append([]string{in.Namespace + ".svc." + domain, "svc." + domain, domain}, host.search...))
			}
			options = []string{"ndots:5"}
			break
		}
		c.Warnings = append(c.Warnings, fmt.Sprintf("no cluster DNS server is configured (--dns, [network.dns] nameservers or the kubelet config's clusterDNS): using the %q policy (the host's resolv.conf), as the kubelet does", PolicyDefault))
		c.Policy = PolicyDefault
		fallthrough
	case PolicyDefault:
		servers, search, options = host.nameservers, host.search, host.options
		if hostResolv == "" {
			// The kubelet's --resolv-conf="": DNS lookups effectively off.
			servers, search = []string{"127.0.0.1"}, []string{"."}
		}
	}
	// A pod's dnsConfig is appended to the base (appendDNSConfig).
	servers = dedup(append(servers, extraServers...))
	search = dedup(append(search, in.Search...))
	options = mergeOptions(append(options, in.Options...))
	if len(servers) == 0 {
		return nil, fmt.Errorf("the DNS override has no nameserver: %s lists none; pass --dns IP or [network.dns] nameservers", hostResolv)
	}

	// The kubelet's limits (formDNSConfigFitsLimits), warning like its
	// DNSConfigForming events.
	if len(servers) > MaxNameservers {
		c.Warnings = append(c.Warnings, fmt.Sprintf("more than %d nameservers: kept %s, dropped %s (the kubelet's limit)",
			MaxNameservers, strings.Join(servers[:MaxNameservers], " "), strings.Join(servers[MaxNameservers:], " ")))
		servers = servers[:MaxNameservers]
	}
	if len(search) > MaxSearchDomains {
		c.Warnings = append(c.Warnings, fmt.Sprintf("%d search domains: kept the first %d, dropped %s (the kubelet's limit)",
			len(search), MaxSearchDomains, strings.Join(search[MaxSearchDomains:], " ")))
		search = search[:MaxSearchDomains]
	}
	kept := search[:0]
	for _, d := range search {
		if len(d) > maxSearchLen {
			c.Warnings = append(c.Warnings, fmt.Sprintf("dropped a search domain of %d characters (more than %d, the kubelet's limit): %.40s…", len(d), maxSearchLen, d))
			continue
		}
		kept = append(kept, d)
	}
	search = kept
	if n := len(strings.Join(search, " ")); n > MaxSearchListChar {
		var dropped []string
		for len(strings.Join(search, " ")) > MaxSearchListChar {
			dropped = append([]string{search[len(search)-1]}, dropped...)
			search = search[:len(search)-1]
		}
		c.Warnings = append(c.Warnings, fmt.Sprintf("search list of %d characters: dropped %s to stay within %d (the kubelet's limit)",
			n, strings.Join(dropped, " "), MaxSearchListChar))
	}
	c.Nameservers, c.Search, c.Options = servers, search, options
	if c.Search == nil {
		c.Search = []string{}
	}
	if c.Options == nil {
		c.Options = []string{}
	}

	var b strings.Builder
	if len(c.Search) > 0 {
		b.WriteString("search " + strings.Join(c.Search, " ") + "\n")
	}
	for _, ns := range c.Nameservers {
		b.WriteString("nameserver " + ns + "\n")
	}
	if len(c.Options) > 0 {
		b.WriteString("options " + strings.Join(c.Options, " ") + "\n")
	}
	c.ResolvConf = b.String()

	if len(in.Hosts) > 0 {
		var h strings.Builder
		h.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
		for _, line := range in.Hosts {
			f := strings.Fields(line) // checked above
			h.WriteString(f[0] + "\t" + strings.Join(f[1:], " ") + "\n")
		}
		c.Hosts = h.String()
	}
	return c, nil
}

// resolvConf is what the kubelet's parseResolvConf reads of a file.
type resolvConf struct {
	nameservers, search, options []string
}

// readHost reads the host's resolv.conf as the kubelet's parseResolvConf
// does: "#" comment lines skipped, nameserver lines accumulate, the last
// search and options lines win, trailing dots trimmed (a bare "." dropped);
// a nameserver line without an address is an error. A missing file is an
// error unless optional (the built-in default path).
func readHost(path, shown string, optional bool) (resolvConf, error) {
	var r resolvConf
	b, err := readResolvConf(path)
	if os.IsNotExist(err) && optional {
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("reading host resolv.conf %s: %s", shown, safefile.Reason(err))
	}
	// Every line, however long (bufio.Scanner would stop at 64 KiB and
	// lose the lines after it).
	for i, line := range strings.Split(string(b), "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "#") {
			continue
		}
		f := strings.Fields(t)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "nameserver":
			if len(f) < 2 {
				return r, fmt.Errorf("host resolv.conf %s line %d: a nameserver line without an address (the kubelet refuses it too)", shown, i+1)
			}
			if CheckNameserver(f[1]) == nil {
				r.nameservers = append(r.nameservers, f[1])
			}
		case "search":
			r.search = nil
			for _, d := range f[1:] {
				d = strings.TrimSuffix(d, ".")
				if d != "" && CheckDomain(d) == nil {
					r.search = append(r.search, d)
				}
			}
		case "options":
			r.options = nil
			for _, o := range f[1:] {
				if CheckOption(o) == nil {
					r.options = append(r.options, o)
				}
			}
		}
	}
	return r, nil
}

// maxResolvConf bounds the host resolv.conf read (the kubelet's
// dns.maxResolvConfLength, 10 MiB).
const maxResolvConf = 10 << 20

func readResolvConf(path string) ([]byte, error) {
	b, err := safefile.ReadFile(path, maxResolvConf)
	if safefile.TooBig(err) {
		return nil, fmt.Errorf("larger than %d bytes", maxResolvConf)
	}
	return b, err
}

func dedup(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if v != "" && !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// mergeOptions keeps one option per name ("ndots:2" replaces "ndots:5"), in
// first-seen order.
func mergeOptions(opts []string) []string {
	idx := map[string]int{}
	var out []string
	for _, o := range opts {
		name := strings.SplitN(o, ":", 2)[0]
		if i, ok := idx[name]; ok {
			out[i] = o
			continue
		}
		idx[name] = len(out)
		out = append(out, o)
	}
	return out
}

// The syntax of what goes into resolv.conf and hosts. Each value is one
// whitespace-separated word of a line there, so whitespace, control
// characters (a newline starts a new directive) and comment characters are
// refused. Checked again here (the policy checks them first, naming the key)
// because this package writes the files. Compiled when first needed, not at
// every process's start (most pulls set no DNS).
var (
	dnsLabel   = lazyRE(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	domainRE   = lazyRE(`^[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?)*\.?$`)
	optionName = lazyRE(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)
	optionVal  = lazyRE(`^[A-Za-z0-9._-]+$`)
	zoneRE     = lazyRE(`^[A-Za-z0-9_.-]+$`)
)

// lazyRE is what containers/storage's regexp.Delayed does, written here:
// package policy, which imports this one, links no containers package
// (policy's TestDepcheck).
func lazyRE(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// CheckNameserver accepts an IP address; an IPv6 zone must be an interface
// name or number (netip accepts any text after '%', a newline included).
func CheckNameserver(s string) error {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return fmt.Errorf("%q is not an IP address", s)
	}
	if z := a.Zone(); z != "" && !zoneRE().MatchString(z) {
		return fmt.Errorf("%q: the zone %q is not an interface name", s, z)
	}
	return nil
}

// CheckDomain accepts a DNS name: dot-separated labels of letters, digits,
// '-' and '_', an optional trailing dot (the kubelet's IsDNS1123Subdomain
// syntax, with upper case and '_' also allowed). Length is left to the
// kubelet's search-list limits applied in Build.
func CheckDomain(s string) error {
	if !domainRE().MatchString(s) {
		return fmt.Errorf("%q is not a domain name (letters, digits, '-', '_' and dots; no spaces or control characters)", s)
	}
	return nil
}

// CheckNamespace accepts a Kubernetes namespace: a DNS label (a-z, 0-9
// and '-', at most 63 characters), as it stands in "<ns>.svc.<domain>".
func CheckNamespace(s string) error {
	if !dnsLabel().MatchString(s) {
		return fmt.Errorf("%q is not a Kubernetes namespace (a DNS label: a-z, 0-9 and '-')", s)
	}
	return nil
}

// CheckOption accepts a resolv.conf option as the kubelet writes one: NAME
// or NAME:VALUE ("ndots:2", "rotate", "single-request-reopen").
func CheckOption(s string) error {
	name, val, hasVal := strings.Cut(s, ":")
	if !optionName().MatchString(name) || (hasVal && !optionVal().MatchString(val)) {
		return fmt.Errorf("%q: want NAME or NAME:VALUE such as ndots:2 (letters, digits, '-', '_'; no spaces or control characters)", s)
	}
	return nil
}

// CheckHostsEntry accepts "IP NAME [NAME…]" separated by spaces or tabs.
func CheckHostsEntry(s string) error {
	for _, r := range s {
		if r != ' ' && r != '\t' && (r < 0x20 || r == 0x7f || unicode.IsSpace(r) || r == '#') {
			return fmt.Errorf("%q: only spaces or tabs may separate \"IP NAME [NAME…]\" (no newlines, control characters or '#')", s)
		}
	}
	f := strings.Fields(s)
	if len(f) < 2 {
		return fmt.Errorf("%q: want \"IP NAME [NAME…]\"", s)
	}
	if err := CheckNameserver(f[0]); err != nil {
		return fmt.Errorf("%q: %v", s, err)
	}
	for _, n := range f[1:] {
		if err := CheckDomain(n); err != nil {
			return fmt.Errorf("%q: %v", s, err)
		}
	}
	return nil
}

// parseIPSloppy is k8s.io/utils/net.ParseIPSloppy as far as the kubelet's
// clusterDNS needs it: net.ParseIP, and an IPv4 address whose octets have
// leading zeros read as decimal ("010.096.000.010" is 10.96.0.10).
func parseIPSloppy(s string) net.IP {
	if ip := net.ParseIP(s); ip != nil {
		return ip
	}
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return nil
	}
	var b [4]byte
	for i, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return nil
		}
		n, err := strconv.Atoi(p)
		if err != nil || n > 255 {
			return nil
		}
		b[i] = byte(n)
	}
	return net.IPv4(b[0], b[1], b[2], b[3])
}
