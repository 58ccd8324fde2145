package dnsconf_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/dnsconf"
)

// kubeletSearch is the kubelet's parseResolvConf for the search list
// (pkg/kubelet/network/dns): the last "search" line wins; a bare "." is
// dropped, a trailing dot trimmed; "#" lines are comments.
func kubeletSearch(data string) []string {
	var search []string
	for _, line := range strings.Split(data, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "search" {
			continue
		}
		search = []string{}
		for _, s := range f[1:] {
			if s != "." {
				search = append(search, strings.TrimSuffix(s, "."))
			}
		}
	}
	return search
}

// checkRendered: the rendered resolv.conf has a search line (when there is
// a search list), one line per nameserver, one options line, and nothing
// else; the kubelet's limits hold.
func checkRendered(t *testing.T, c *dnsconf.Config) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(c.ResolvConf, "\n"), "\n")
	want := len(c.Nameservers) + 1
	if len(c.Search) > 0 {
		want++
		if lines[0] != "search "+strings.Join(c.Search, " ") {
			t.Fatalf("search line %q for %q", lines[0], c.Search)
		}
	}
	if len(lines) != want {
		t.Fatalf("resolv.conf has %d lines, want %d: %q", len(lines), want, c.ResolvConf)
	}
	if len(c.Nameservers) == 0 || len(c.Nameservers) > dnsconf.MaxNameservers {
		t.Fatalf("%d nameservers", len(c.Nameservers))
	}
	for _, ns := range c.Nameservers {
		if err := dnsconf.CheckNameserver(ns); err != nil {
			t.Fatalf("nameserver %q rendered: %v", ns, err)
		}
	}
	if len(c.Search) > dnsconf.MaxSearchDomains || len(strings.Join(c.Search, " ")) > dnsconf.MaxSearchListChar {
		t.Fatalf("search list beyond the kubelet's limits: %d domains, %d characters", len(c.Search), len(strings.Join(c.Search, " ")))
	}
	for _, s := range c.Search {
		if s == "" || strings.ContainsAny(s, " \t\r\n") {
			t.Fatalf("search domain %q", s)
		}
	}
	for _, w := range c.Warnings {
		if strings.Contains(w, "\n") {
			t.Fatalf("warning %q is not one line", w)
		}
	}
}

// FuzzResolvConf: the host's resolv.conf gives the kubelet's search list
// (within the kubelet's limits), and never breaks the rendered file.
func FuzzResolvConf(f *testing.F) {
	f.Add([]byte("nameserver 192.0.2.1\nsearch old.example\noptions rotate\nsearch example.com cluster.local. .\n"))
	f.Add([]byte("search a b c\n# search commented.out\n  search   x.  y\t\n"))
	f.Add([]byte("search " + strings.Repeat("d.example ", 40) + "\n"))
	f.Add([]byte("search " + strings.Repeat("x", 2100) + " y\n"))
	f.Add([]byte("search a\rb c\x00d e\u2028f\n"))
	f.Add([]byte("search\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		host := filepath.Join(t.TempDir(), "resolv.conf")
		if err := os.WriteFile(host, data, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := dnsconf.Build(dnsconf.Input{Nameservers: []string{"10.96.0.10"}, HostResolvConf: host})
		if err != nil {
			// The kubelet refuses a nameserver line without an address too
			// (parseResolvConf: "nameserver list is empty").
			if strings.Contains(err.Error(), "a nameserver line without an address") && !strings.Contains(err.Error(), "\n") {
				return
			}
			t.Fatalf("a host resolv.conf failed the build: %v", err)
		}
		checkRendered(t, c)
		// The kubelet's list, de-duplicated, cut to its limits.
		var want []string
		seen := map[string]bool{}
		for _, s := range kubeletSearch(string(data)) {
			// pullhelper drops what could not be written safely (a domain
			// that is not one word of valid syntax); the rest as the kubelet.
			if dnsconf.CheckDomain(s) != nil {
				continue
			}
			if s != "" && !seen[s] {
				seen[s] = true
				want = append(want, s)
			}
		}
		if len(want) > dnsconf.MaxSearchDomains {
			want = want[:dnsconf.MaxSearchDomains]
		}
		kept := want[:0]
		for _, s := range want {
			if len(s) <= 253 { // formDNSSearchFitsLimits drops longer ones
				kept = append(kept, s)
			}
		}
		want = kept
		for len(strings.Join(want, " ")) > dnsconf.MaxSearchListChar {
			want = want[:len(want)-1]
		}
		if strings.Join(c.Search, "\x00") != strings.Join(want, "\x00") {
			t.Fatalf("search %q, the kubelet's %q", c.Search, want)
		}
	})
}

// FuzzKubeletConfig: a kubelet config file gives valid nameservers and a
// valid cluster domain, or a one-line error naming the file.
func FuzzKubeletConfig(f *testing.F) {
	f.Add([]byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nclusterDNS:\n- 10.96.0.10\nclusterDomain: cluster.local\n"))
	f.Add([]byte("clusterDNS: [10.96.0.10, fd00::a, 10.0.0.1, 10.0.0.2]\nclusterDomain: cluster.local.\n"))
	f.Add([]byte("clusterDNS: [\"10.0.0.1\\nnameserver 6.6.6.6\"]\n"))
	f.Add([]byte("clusterDNS: [fe80::1%eth0]\nclusterDomain: \"a b\"\n"))
	f.Add([]byte("clusterDNS: 10.0.0.1\n"))
	f.Add([]byte("clusterDNS:\n- [\n"))
	f.Add([]byte("resolvConf: /nonexistent\nclusterDNS: [10.0.0.1]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		kc := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(kc, data, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := dnsconf.Build(dnsconf.Input{KubeletConfig: kc, Namespace: "ns", HostResolvConf: filepath.Join(dir, "none")})
		if err != nil {
			if msg := err.Error(); strings.Contains(msg, "\n") {
				t.Fatalf("error is not one line: %q", msg)
			}
			return
		}
		checkRendered(t, c)
	})
}
