package regpattern_test

import (
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/internal/regpattern"
)

// oldPolicyMatch is policy.MatchRegistry before this package existed
// (trust.ca_files, trust.insecure_registries): exact string for a plain
// pattern, and a portless "*.domain" matching any port.
func oldPolicyMatch(pattern, host string) bool {
	if !strings.HasPrefix(pattern, "*.") {
		return pattern == host
	}
	ph, pp := regpattern.SplitHostPort(pattern[2:])
	hh, hp := regpattern.SplitHostPort(host)
	if pp != "" && pp != hp {
		return false
	}
	return strings.HasSuffix(hh, "."+ph)
}

// oldSATMatch is auth/satoken.go's matcher before (service_account_registries):
// equal ports always, case-insensitive hosts.
func oldSATMatch(pattern, host string) bool {
	rest, wildcard := strings.CutPrefix(pattern, "*.")
	ph, pp := regpattern.SplitHostPort(rest)
	hh, hp := regpattern.SplitHostPort(host)
	ph, hh = strings.ToLower(ph), strings.ToLower(hh)
	if pp != hp {
		return false
	}
	if wildcard {
		return strings.HasSuffix(hh, "."+ph) && len(hh) > len(ph)+1
	}
	return hh == ph
}

// TestOnePortRule shows where the two old matchers disagreed and what the one
// rule answers: ports must be equal, no port matches no port only (kubernetes
// pkg/credentialprovider/keyring.go URLsMatch; containerd configs."HOST:PORT"),
// "*." is one or more labels (containers/image pkg/sysregistriesv2
// refMatchingSubdomainPrefix).
func TestOnePortRule(t *testing.T) {
	for _, tc := range []struct {
		pattern, host            string
		oldPolicy, oldSAT, match bool
	}{
		// disagreements
		{"*.example.com", "a.example.com:8443", true, false, false},
		{"*.svc", "image-registry.openshift-image-registry.svc:5000", true, false, false},
		{"Registry.Example.com", "registry.example.com", false, true, true},
		{"reg.example.com", "REG.example.com:5000", false, false, false},
		// agreements, kept
		{"reg:5000", "reg:5000", true, true, true},
		{"reg:5000", "reg", false, false, false},
		{"reg", "reg:5000", false, false, false},
		{"*.svc:5000", "image-registry.openshift-image-registry.svc:5000", true, true, true},
		{"*.svc:5000", "image-registry.openshift-image-registry.svc:443", false, false, false},
		{"*.svc:5000", "svc:5000", false, false, false},
		{"*.example.com", "a.b.example.com", true, true, true},
		{"*.example.com", "example.com", false, false, false},
		{"*.example.com", "a.notexample.com", false, false, false},
		{"[::1]:5000", "[::1]:5000", true, true, true},
		{"[::1]", "[::1]:5000", false, false, false},
	} {
		if got := oldPolicyMatch(tc.pattern, tc.host); got != tc.oldPolicy {
			t.Errorf("old policy.MatchRegistry(%q, %q) = %v, table says %v", tc.pattern, tc.host, got, tc.oldPolicy)
		}
		if got := oldSATMatch(tc.pattern, tc.host); got != tc.oldSAT {
			t.Errorf("old satoken match(%q, %q) = %v, table says %v", tc.pattern, tc.host, got, tc.oldSAT)
		}
		if got := regpattern.Match(tc.pattern, tc.host); got != tc.match {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.pattern, tc.host, got, tc.match)
		}
	}
}

func TestMatchIgnoresRepositoryPath(t *testing.T) {
	p := regpattern.MustParse("quay.io")
	if !p.Match("quay.io/org/repo") || p.Match("quay.io:443/org") {
		t.Error("quay.io must match quay.io/org/repo and not quay.io:443/org")
	}
	var zero regpattern.Pattern
	if zero.Match("") || zero.Match("quay.io") {
		t.Error("the zero Pattern must match nothing")
	}
}

func TestParseRejects(t *testing.T) {
	for _, s := range []string{
		"", "https://reg", "reg/ns", "reg@x", "a*.b", "*b.c", "*.*.c", "reg:", "reg:0", "reg:65536", "reg:05",
		"reg:x", ".reg", "reg.", "a..b", "*.", " reg",
	} {
		if _, err := regpattern.Parse(s); err == nil {
			t.Errorf("Parse(%q) succeeded, want an error", s)
		} else if !strings.Contains(err.Error(), "registry pattern") {
			t.Errorf("Parse(%q): %v does not say what is wrong", s, err)
		}
		if regpattern.Match(s, "reg") {
			t.Errorf("Match(%q, reg) = true for a malformed pattern", s)
		}
	}
	for _, s := range []string{"reg", "reg:5000", "*.svc", "*.svc:5000", "[::1]:5000", "127.0.0.1:5000", "localhost"} {
		p, err := regpattern.Parse(s)
		if err != nil {
			t.Errorf("Parse(%q): %v", s, err)
		} else if p.String() != s {
			t.Errorf("String() = %q, want %q", p.String(), s)
		}
	}
}
