package dnsconf

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// Kubelet limits (pkg/apis/core/validation, pkg/kubelet/network/dns).
const (
	MaxNameservers    = 3
	MaxSearchDomains  = 32
	MaxSearchListChar = 2048
)

// Input is what the policy and flags say.
type Input struct {
	Nameservers   []string
	Search        []string
	Options       []string
	Hosts         []string // "IP NAME [NAME…]"
	Namespace     string
	ClusterDomain string
	KubeletConfig string
	// HostResolvConf is where the host's search domains come from when the
	// kubelet config does not say (default /etc/resolv.conf).
	HostResolvConf string
}

// Config is the rendered override. It must stay JSON-representable.
type Config struct {
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
	ResolvConf    string   `yaml:"resolvConf"`
}

// Build renders the override. Errors name the setting or file to fix.
func Build(in Input) (*Config, error) {
	c := &Config{}
	hostResolv := in.HostResolvConf
	if hostResolv == "" {
		hostResolv = "/etc/resolv.conf"
	}
	nameservers, domain := in.Nameservers, in.ClusterDomain
	if in.KubeletConfig != "" {
		b, err := os.ReadFile(in.KubeletConfig)
		if err != nil {
			return nil, fmt.Errorf("kubelet config %s: %v", in.KubeletConfig, err)
		}
		var kc kubeletConfig
		if err := yaml.Unmarshal(b, &kc); err != nil {
			return nil, fmt.Errorf("kubelet config %s: %v", in.KubeletConfig, strings.ReplaceAll(err.Error(), "\n", " "))
		}
		if len(nameservers) == 0 {
			nameservers = kc.ClusterDNS
		}
		if domain == "" {
			domain = kc.ClusterDomain
		}
		if kc.ResolvConf != "" && in.HostResolvConf == "" {
			hostResolv = kc.ResolvConf
		}
		for _, ns := range kc.ClusterDNS {
			if err := CheckNameserver(ns); err != nil {
				return nil, fmt.Errorf("kubelet config %s: clusterDNS %v", in.KubeletConfig, err)
			}
		}
		if kc.ClusterDomain != "" {
			if err := CheckDomain(kc.ClusterDomain); err != nil {
				return nil, fmt.Errorf("kubelet config %s: clusterDomain: %v", in.KubeletConfig, err)
			}
		}
	}
	if len(nameservers) == 0 {
		return nil, fmt.Errorf("the cluster-DNS override needs a nameserver: --dns IP, [network.dns] nameservers, or a kubelet_config with clusterDNS")
	}
	for _, ns := range nameservers {
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
	if len(nameservers) > MaxNameservers {
		c.Warnings = append(c.Warnings, fmt.Sprintf("more than %d nameservers: kept %s, dropped %s (the kubelet's limit)",
			MaxNameservers, strings.Join(nameservers[:MaxNameservers], " "), strings.Join(nameservers[MaxNameservers:], " ")))
		nameservers = nameservers[:MaxNameservers]
	}
	c.Nameservers = append([]string{}, nameservers...)

	hostSearch, err := readSearch(hostResolv)
	if err != nil {
		return nil, err
	}
	var search []string
	domain = strings.TrimSuffix(domain, ".")
	if in.Namespace != "" && domain != "" {
		search = append(search, in.Namespace+".svc."+domain, "svc."+domain, domain)
	}
	search = dedup(append(append(search, in.Search...), hostSearch...))
	if len(search) > MaxSearchDomains {
		c.Warnings = append(c.Warnings, fmt.Sprintf("%d search domains: kept the first %d, dropped %s (the kubelet's limit)",
			len(search), MaxSearchDomains, strings.Join(search[MaxSearchDomains:], " ")))
		search = search[:MaxSearchDomains]
	}
	if n := len(strings.Join(search, " ")); n > MaxSearchListChar {
		var dropped []string
		for len(strings.Join(search, " ")) > MaxSearchListChar {
			dropped = append([]string{search[len(search)-1]}, dropped...)
			search = search[:len(search)-1]
		}
		c.Warnings = append(c.Warnings, fmt.Sprintf("search list of %d characters: dropped %s to stay within %d (the kubelet's limit)",
			n, strings.Join(dropped, " "), MaxSearchListChar))
	}
	c.Search = search
	c.Options = mergeOptions(append([]string{"ndots:5"}, in.Options...))

	var b strings.Builder
	if len(c.Search) > 0 {
		b.WriteString("search " + strings.Join(c.Search, " ") + "\n")
	}
	for _, ns := range c.Nameservers {
		b.WriteString("nameserver " + ns + "\n")
	}
	b.WriteString("options " + strings.Join(c.Options, " ") + "\n")
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

// readSearch returns the domains of the last "search" line, trailing dots
// trimmed and a bare "." dropped, as the kubelet does. A missing file has no
// search domains.
func readSearch(path string) ([]string, error) {
	b, err := readResolvConf(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading host resolv.conf %s: %v", path, err)
	}
	var search []string
	// Every line, however long (bufio.Scanner would stop at 64 KiB and
	// lose the search lines after it).
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "search" {
			search = nil
			for _, d := range f[1:] {
				d = strings.TrimSuffix(d, ".")
				if d != "" {
					search = append(search, d)
				}
			}
		}
	}
	return search, nil
}

// maxResolvConf bounds the host resolv.conf read (the kubelet's
// dns.maxResolvConfLength, 10 MiB).
const maxResolvConf = 10 << 20

func readResolvConf(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxResolvConf+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxResolvConf {
		return nil, fmt.Errorf("larger than %d bytes", maxResolvConf)
	}
	return b, nil
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
// because this package writes the files.
var (
	dnsLabel   = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	domainRE   = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?)*\.?$`)
	optionName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)
	optionVal  = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
	zoneRE     = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
)

// CheckNameserver accepts an IP address; an IPv6 zone must be an interface
// name or number (netip accepts any text after '%', a newline included).
func CheckNameserver(s string) error {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return fmt.Errorf("%q is not an IP address", s)
	}
	if z := a.Zone(); z != "" && !zoneRE.MatchString(z) {
		return fmt.Errorf("%q: the zone %q is not an interface name", s, z)
	}
	return nil
}

// CheckDomain accepts a DNS name: dot-separated labels of letters, digits,
// '-' and '_', an optional trailing dot (the kubelet's IsDNS1123Subdomain
// syntax, with upper case and '_' also allowed). Length is left to the
// kubelet's search-list limits applied in Build.
func CheckDomain(s string) error {
	if !domainRE.MatchString(s) {
		return fmt.Errorf("%q is not a domain name (letters, digits, '-', '_' and dots; no spaces or control characters)", s)
	}
	return nil
}

// CheckNamespace accepts a Kubernetes namespace: a DNS label (a-z, 0-9
// and '-', at most 63 characters), as it stands in "<ns>.svc.<domain>".
func CheckNamespace(s string) error {
	if !dnsLabel.MatchString(s) {
		return fmt.Errorf("%q is not a Kubernetes namespace (a DNS label: a-z, 0-9 and '-')", s)
	}
	return nil
}

// CheckOption accepts a resolv.conf option as the kubelet writes one: NAME
// or NAME:VALUE ("ndots:2", "rotate", "single-request-reopen").
func CheckOption(s string) error {
	name, val, hasVal := strings.Cut(s, ":")
	if !optionName.MatchString(name) || (hasVal && !optionVal.MatchString(val)) {
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
