package policy_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/policy"
)

// Every bad value of a file is reported at once, one problem per line, in
// file order, whether the decoder or the validation refuses it.
func TestValidationReportsEveryError(t *testing.T) {
	for name, tc := range map[string]struct {
		doc  string
		want []string
	}{
		"three validation errors": {
			"version = 1\n[pull]\nparallel_layers = 100\nretries = 101\n[cgroup]\ndriver = \"lxc\"\n",
			[]string{
				"p.toml:3: pull.parallel_layers: must be between 1 and 64, not 100",
				"p.toml:4: pull.retries: must be between 0 and 100, not 101",
				`p.toml:6: cgroup.driver: must be "auto", "cgroupfs" or "systemd", not "lxc"`,
			}},
		"decoder and validation errors together": {
			"version = 1\n[pull]\ntimeout = \"soon\"\nparallel_layers = 0\n[cgroup]\nmemory_max = \"12 apples\"\n[privileges]\nuser = \"root\"\n",
			[]string{
				`p.toml:3: pull.timeout: invalid duration "soon"`,
				"p.toml:4: pull.parallel_layers: must be between 1 and 64, not 0",
				`p.toml:6: cgroup.memory_max: invalid size "12 apples"`,
				`p.toml:8: privileges.user: must be`,
			}},
		"types, unknown keys and a profile": {
			"version = 1\n[pull]\nall_architectures = \"yes\"\nretires = 2\n[profiles.p.pull]\nretries = -1\nparallel_layers = 99\n",
			[]string{
				"p.toml:3: pull.all_architectures: incompatible types",
				"p.toml:4: pull.retires: unknown key",
				"p.toml:6: profiles.p.pull.retries: invalid value -1",
				"p.toml:7: profiles.p.pull.parallel_layers: must be between 1 and 64, not 99",
			}},
		"a base error is reported once, not again for every profile": {
			"version = 1\n[pull]\nretries = 200\n[profiles.a.pull]\ntimeout = \"1m\"\n[profiles.b.pull]\ntimeout = \"2m\"\n",
			[]string{"p.toml:3: pull.retries: must be between 0 and 100, not 200"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := policy.Parse("p.toml", []byte(tc.doc))
			if err == nil {
				t.Fatal("accepted")
			}
			got := policy.Problems(err)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tc.want[i]) {
					t.Errorf("problem %d = %q, want prefix %q", i+1, got[i], tc.want[i])
				}
			}
			if msg := err.Error(); strings.Contains(msg, "\n") || msg != strings.Join(got, "; ") {
				t.Errorf("Error() = %q; want the problems joined with \"; \"", msg)
			}
		})
	}
}

// A syntax error still stops at the first one (the decoder cannot go on).
func TestSyntaxErrorIsOne(t *testing.T) {
	_, err := policy.Parse("p.toml", []byte("version = 1\n[pull]\nretries = = 2\ntimeout = \"soon\"\n"))
	if err == nil || len(policy.Problems(err)) != 1 || !strings.HasPrefix(err.Error(), "p.toml:3: pull.retries") {
		t.Fatalf("err = %v", err)
	}
}

// Keys a flag sets name the flag once the CLI's table registered it.
func TestErrorNamesTheFlag(t *testing.T) {
	policy.NameFlag("pull.retry_delay", "--retry-delay")
	_, err := policy.Parse("p.toml", []byte("version = 1\n[pull]\nretry_delay = \"later\"\n[profiles.x.pull]\nretry_delay = \"never\"\n"))
	got := policy.Problems(err)
	want := []string{`p.toml:3: pull.retry_delay (--retry-delay): invalid duration "later"`, `p.toml:5: profiles.x.pull.retry_delay (--retry-delay): invalid duration "never"`}
	if len(got) != 2 || !strings.HasPrefix(got[0], want[0]) || !strings.HasPrefix(got[1], want[1]) {
		t.Fatalf("got %q, want prefixes %q", got, want)
	}
}

// Strings that end up in resolv.conf or hosts cannot carry a newline or
// other syntax, from the file or from a flag.
func TestDNSInjectionIsRefused(t *testing.T) {
	doc := "version = 1\n[network]\nmode = \"cluster-dns\"\n[network.dns]\nnameservers = [\"10.0.0.1\", \"fe80::1%eth0\\nnameserver 6.6.6.6\"]\n" +
		"search = [\"a.example\\nnameserver 6.6.6.6\"]\noptions = [\"ndots:2\", \"ndots:1\\nnameserver 6.6.6.6\", \"rotate x\"]\nhosts = [\"10.0.0.2 reg\\n6.6.6.6 evil\"]\n" +
		"namespace = \"ns\\nx\"\ncluster_domain = \"c.local\\x00\"\n"
	_, err := policy.Parse("p.toml", []byte(doc))
	got := strings.Join(policy.Problems(err), "\n")
	for _, want := range []string{
		`network.dns.nameservers: entry 2: "fe80::1%eth0\nnameserver 6.6.6.6": the zone`,
		`network.dns.search: entry 1: "a.example\nnameserver 6.6.6.6" is not a domain name`,
		`network.dns.options: entry 2: "ndots:1\nnameserver 6.6.6.6": want NAME or NAME:VALUE`,
		`network.dns.options: entry 3: "rotate x": want NAME or NAME:VALUE`,
		`network.dns.hosts: entry 1: "10.0.0.2 reg\n6.6.6.6 evil": only spaces or tabs`,
		`network.dns.namespace: "ns\nx" is not a Kubernetes namespace`,
		`network.dns.cluster_domain: "c.local\x00" is not a domain name`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	l := policy.Defaults()
	if err := l.Set("--dns", "network.dns.nameservers", policy.Strings, "10.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if err := l.Set("--dns", "network.mode", policy.String, "cluster-dns"); err != nil {
		t.Fatal(err)
	}
	if err := l.Set("--dns-option", "network.dns.options", policy.Strings, "ndots:1\nnameserver 6.6.6.6"); err != nil {
		t.Fatal(err)
	}
	if err := l.Validate(); err == nil || !strings.HasPrefix(err.Error(), `--dns-option: entry 1: "ndots:1\nnameserver 6.6.6.6": want NAME or NAME:VALUE`) {
		t.Fatalf("--dns-option with a newline: %v", err)
	}
	// What the kubelet accepts still passes.
	ok := "version = 1\n[network]\nmode = \"cluster-dns\"\n[network.dns]\nnameservers = [\"10.0.0.1\", \"fe80::1%eth0\"]\nsearch = [\"Corp.Example.\", \"svc.cluster.local\"]\n" +
		"options = [\"ndots:2\", \"single-request-reopen\", \"timeout:1\", \"edns0\"]\nhosts = [\"10.0.0.2\\treg.local  reg\"]\nnamespace = \"openshift-image-registry\"\ncluster_domain = \"cluster.local\"\n"
	if _, err := policy.Parse("p.toml", []byte(ok)); err != nil {
		t.Fatalf("valid DNS settings refused: %v", err)
	}
}

// A file with thousands of problems reports the first MaxErrors and stops
// checking (each problem costs a scan for its line).
func TestProblemsAreCapped(t *testing.T) {
	var b strings.Builder
	b.WriteString("version = 1\n")
	for i := 0; i < 5000; i++ {
		fmt.Fprintf(&b, "[profiles.p%d.pull]\nretries = -1\nparallel_layers = 99\nbogus%d = 1\n", i, i)
	}
	_, err := policy.Parse("p.toml", []byte(b.String()))
	got := policy.Problems(err)
	if len(got) != policy.MaxErrors+1 || got[len(got)-1] != "p.toml: stopped after 20 problems; fix these first" {
		t.Fatalf("%d problems, last %q", len(got), got[len(got)-1])
	}
}
