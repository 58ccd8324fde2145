package dnsconf_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/dnsconf"
)

func write(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestClusterFirstFormat(t *testing.T) {
	host := write(t, "resolv.conf", "nameserver 192.0.2.1\nsearch old.example\noptions rotate\nsearch example.com cluster.local. .\n")
	kc := write(t, "config.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nclusterDNS:\n- 10.96.0.10\nclusterDomain: cluster.local\nresolvConf: "+host+"\n")
	c, err := dnsconf.Build(dnsconf.Input{KubeletConfig: kc, Namespace: "openshift-image-registry"})
	if err != nil {
		t.Fatal(err)
	}
	want := "search openshift-image-registry.svc.cluster.local svc.cluster.local cluster.local example.com\n" +
		"nameserver 10.96.0.10\n" +
		"options ndots:5\n"
	if c.ResolvConf != want {
		t.Fatalf("resolv.conf:\n%q\nwant\n%q", c.ResolvConf, want)
	}
	// Flags win over the kubelet config; options merge by name.
	c, err = dnsconf.Build(dnsconf.Input{KubeletConfig: kc, Nameservers: []string{"10.0.0.53"}, Options: []string{"ndots:2", "timeout:1"}, HostResolvConf: filepath.Join(t.TempDir(), "none")})
	if err != nil {
		t.Fatal(err)
	}
	if c.ResolvConf != "nameserver 10.0.0.53\noptions ndots:2 timeout:1\n" {
		t.Fatalf("resolv.conf = %q", c.ResolvConf)
	}
}

func TestLimits(t *testing.T) {
	none := filepath.Join(t.TempDir(), "none")
	c, err := dnsconf.Build(dnsconf.Input{Nameservers: []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"}, HostResolvConf: none})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Nameservers) != 3 || len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "dropped 10.0.0.4") {
		t.Fatalf("nameservers %v warnings %v", c.Nameservers, c.Warnings)
	}
	var many []string
	for i := 0; i < 40; i++ {
		many = append(many, "d"+strings.Repeat("x", 3)+string(rune('a'+i%26))+string(rune('a'+i/26))+".example")
	}
	c, _ = dnsconf.Build(dnsconf.Input{Nameservers: []string{"10.0.0.1"}, Search: many, HostResolvConf: none})
	if len(c.Search) != 32 || c.Search[31] != many[31] || len(c.Warnings) != 1 {
		t.Fatalf("search kept %d, warnings %v", len(c.Search), c.Warnings)
	}
	long := []string{strings.Repeat("a", 249) + ".com"} // 253: the longest kept
	for i := 0; i < 9; i++ {
		long = append(long, strings.Repeat(string(rune('b'+i)), 249)+".com")
	}
	c, _ = dnsconf.Build(dnsconf.Input{Nameservers: []string{"10.0.0.1"}, Search: long, HostResolvConf: none})
	if n := len(strings.Join(c.Search, " ")); n > 2048 || len(c.Search) != 8 || len(c.Warnings) != 1 {
		t.Fatalf("search %d chars, %d domains, warnings %v", n, len(c.Search), c.Warnings)
	}
}

func TestErrors(t *testing.T) {
	none := filepath.Join(t.TempDir(), "none")
	for _, tc := range []struct {
		in   dnsconf.Input
		want string
	}{
		{dnsconf.Input{HostResolvConf: none}, "has no nameserver"},
		{dnsconf.Input{Policy: dnsconf.PolicyNone, HostResolvConf: none}, "policy None needs a nameserver"},
		{dnsconf.Input{Policy: "ClusterLast", Nameservers: []string{"10.0.0.1"}}, "want ClusterFirst, ClusterFirstWithHostNet, Default or None"},
		{dnsconf.Input{Nameservers: []string{"10.0.0.1"}, HostResolvConf: write(t, "ns.conf", "nameserver\n")}, "a nameserver line without an address"},
		{dnsconf.Input{Nameservers: []string{"10.0.0.300"}, HostResolvConf: none}, "not an IP address"},
		{dnsconf.Input{KubeletConfig: write(t, "bad.yaml", "clusterDNS: [\n"), HostResolvConf: none}, "kubelet config"},
		{dnsconf.Input{Nameservers: []string{"10.0.0.1"}, Hosts: []string{"10.0.0.2"}, HostResolvConf: none}, "hosts entry"},
	} {
		if _, err := dnsconf.Build(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.in, err, tc.want)
		}
	}
	c, err := dnsconf.Build(dnsconf.Input{Nameservers: []string{"10.0.0.1"}, Hosts: []string{"10.0.0.2 registry.local reg"}, HostResolvConf: none})
	if err != nil || !strings.Contains(c.Hosts, "10.0.0.2\tregistry.local reg\n") || !strings.HasPrefix(c.Hosts, "127.0.0.1\tlocalhost\n") {
		t.Fatalf("hosts = %q, %v", c.Hosts, err)
	}
}

// Every value is one word of a resolv.conf or hosts line: a newline, NUL,
// other control characters or whitespace would inject a directive.
func TestInjectionIsRefused(t *testing.T) {
	none := filepath.Join(t.TempDir(), "none")
	ns := []string{"10.0.0.1"}
	for _, tc := range []struct {
		in   dnsconf.Input
		want string
	}{
		{dnsconf.Input{Nameservers: ns, Options: []string{"ndots:1\nnameserver 6.6.6.6"}}, `option "ndots:1\nnameserver 6.6.6.6": want NAME or NAME:VALUE`},
		{dnsconf.Input{Nameservers: ns, Options: []string{"ndots:1 rotate"}}, "want NAME or NAME:VALUE"},
		{dnsconf.Input{Nameservers: ns, Options: []string{"ndots\x00"}}, "want NAME or NAME:VALUE"},
		{dnsconf.Input{Nameservers: ns, Options: []string{"ndots:"}}, "want NAME or NAME:VALUE"},
		{dnsconf.Input{Nameservers: ns, Options: []string{""}}, "want NAME or NAME:VALUE"},
		{dnsconf.Input{Nameservers: []string{"fe80::1%eth0\nnameserver 6.6.6.6"}}, `the zone "eth0\nnameserver 6.6.6.6" is not an interface name`},
		{dnsconf.Input{Nameservers: ns, Search: []string{"a.example\nnameserver 6.6.6.6"}}, "search domain: \"a.example\\nnameserver 6.6.6.6\" is not a domain name"},
		{dnsconf.Input{Nameservers: ns, Search: []string{"a\tb"}}, "is not a domain name"},
		{dnsconf.Input{Nameservers: ns, Search: []string{"#x"}}, "is not a domain name"},
		{dnsconf.Input{Nameservers: ns, ClusterDomain: "cluster.local\noptions debug", Namespace: "ns"}, "cluster domain:"},
		{dnsconf.Input{Nameservers: ns, ClusterDomain: "cluster.local", Namespace: "ns\nnameserver 6.6.6.6"}, "is not a Kubernetes namespace"},
		{dnsconf.Input{Nameservers: ns, Hosts: []string{"10.0.0.2 reg\n6.6.6.6 other"}}, "no newlines, control characters or '#'"},
		{dnsconf.Input{Nameservers: ns, Hosts: []string{"10.0.0.2 reg\x00"}}, "no newlines"},
		{dnsconf.Input{Nameservers: ns, Hosts: []string{"10.0.0.2 reg #comment"}}, "no newlines"},
		{dnsconf.Input{Nameservers: ns, Hosts: []string{"10.0.0.2 re/g"}}, "is not a domain name"},
		{dnsconf.Input{KubeletConfig: write(t, "k.yaml", "clusterDNS: [10.0.0.1]\nclusterDomain: \"x\\nnameserver 6.6.6.6\"\n")}, "clusterDomain:"},
	} {
		tc.in.HostResolvConf = none
		c, err := dnsconf.Build(tc.in)
		if err == nil {
			t.Errorf("%+v accepted:\n%s%s", tc.in, c.ResolvConf, c.Hosts)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.in, err, tc.want)
		}
	}
	// What the kubelet writes still passes.
	c, err := dnsconf.Build(dnsconf.Input{Nameservers: []string{"10.0.0.1", "fe80::1%eth0"}, Search: []string{"Corp.Example.", "_svc.local"},
		Options: []string{"ndots:2", "rotate", "single-request-reopen", "timeout:1", "edns0", "trust-ad"},
		Hosts:   []string{"10.0.0.2\tregistry.local  reg"}, HostResolvConf: none})
	if err != nil {
		t.Fatal(err)
	}
	if want := "options ndots:2 rotate single-request-reopen timeout:1 edns0 trust-ad\n"; !strings.HasSuffix(c.ResolvConf, want) {
		t.Fatalf("resolv.conf = %q", c.ResolvConf)
	}
}

// FuzzBuild: whatever the settings, the rendered resolv.conf has exactly the
// directives pullhelper chose, one a line, and hosts one entry a line.
func FuzzBuild(f *testing.F) {
	f.Add("10.0.0.1", "a.example", "ndots:2", "10.0.0.2 reg")
	f.Add("fe80::1%eth0\nnameserver 6.6.6.6", "a\nb", "ndots:1\nnameserver 6.6.6.6", "10.0.0.2 a\n6.6.6.6 b")
	none := filepath.Join(f.TempDir(), "none")
	f.Fuzz(func(t *testing.T, ns, search, opt, host string) {
		c, err := dnsconf.Build(dnsconf.Input{Nameservers: []string{ns}, Search: []string{search}, Options: []string{opt}, Hosts: []string{host}, HostResolvConf: none})
		if err != nil {
			return
		}
		lines := strings.Split(strings.TrimSuffix(c.ResolvConf, "\n"), "\n")
		if want := 1 + len(c.Nameservers) + 1; len(lines) != want {
			t.Fatalf("resolv.conf has %d lines, want %d: %q", len(lines), want, c.ResolvConf)
		}
		if h := strings.Split(strings.TrimSuffix(c.Hosts, "\n"), "\n"); len(h) != 3 {
			t.Fatalf("hosts has %d lines, want 3: %q", len(h), c.Hosts)
		}
		for _, s := range []string{c.ResolvConf, c.Hosts} {
			for _, r := range s {
				if r != '\n' && r != '\t' && (r < 0x20 || r == 0x7f) {
					t.Fatalf("control character %q in %q", r, s)
				}
			}
		}
	})
}

// A line longer than bufio.Scanner's 64 KiB does not hide the search line
// after it.
func TestHostSearchAfterALongLine(t *testing.T) {
	host := write(t, "resolv.conf", "# "+strings.Repeat("x", 70000)+"\nsearch after.example\n")
	c, err := dnsconf.Build(dnsconf.Input{Nameservers: []string{"10.0.0.53"}, Namespace: "ns", ClusterDomain: "cluster.local", HostResolvConf: host})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c.ResolvConf, "after.example") {
		t.Errorf("the host's search domain after a long line is lost:\n%s", c.ResolvConf)
	}
}

// The kubelet's clusterDNS (NewMainKubelet): each entry through
// ParseIPSloppy, so leading zeros are decimal, and one that does not parse
// skipped with a warning (never its value); none left is no cluster DNS.
func TestKubeletClusterDNSSloppyAndSkipped(t *testing.T) {
	none := write(t, "empty.conf", "")
	c, err := dnsconf.Build(dnsconf.Input{KubeletConfig: write(t, "k1.yaml", "clusterDNS: [\"010.096.000.010\"]\n"), HostResolvConf: none})
	if err != nil || len(c.Nameservers) != 1 || c.Nameservers[0] != "10.96.0.10" {
		t.Fatalf("leading zeros: %+v %v; want nameserver 10.96.0.10", c, err)
	}
	c, err = dnsconf.Build(dnsconf.Input{KubeletConfig: write(t, "k2.yaml", "clusterDNS: [bogus-s3cret, 10.96.0.10]\n"), HostResolvConf: none})
	if err != nil || len(c.Nameservers) != 1 || c.Nameservers[0] != "10.96.0.10" {
		t.Fatalf("an invalid entry: %+v %v; want it skipped and 10.96.0.10 kept", c, err)
	}
	w := strings.Join(c.Warnings, "\n")
	if !strings.Contains(w, "clusterDNS entry 1 is not an IP address; skipped") || strings.Contains(w, "bogus-s3cret") {
		t.Fatalf("warnings %q; want entry 1 named, not its value", w)
	}
}
