package target

import (
	"regexp"
	"strings"
	"testing"
)

// The regular expressions IsHex and IsPartialEntry replaced are their
// oracle: each must say what its expression said, for every string.
var (
	hexOracle = map[string]*regexp.Regexp{
		"sha256": regexp.MustCompile(`^[0-9a-f]{64}$`),
		"sha512": regexp.MustCompile(`^[0-9a-f]{128}$`),
	}
	partialOracle = regexp.MustCompile(`^(sha256-[0-9a-f]{64}|sha512-[0-9a-f]{128})\.partial$`)
)

func checkHexOracle(t *testing.T, alg, s string) {
	t.Helper()
	re := hexOracle[alg]
	if want := re != nil && re.MatchString(s); IsHex(alg, s) != want {
		t.Errorf("IsHex(%q, %q) = %v, the expression says %v", alg, s, !want, want)
	}
	name := alg + "-" + s + ".partial"
	if want := partialOracle.MatchString(name); IsPartialEntry(name) != want {
		t.Errorf("IsPartialEntry(%q) = %v, the expression says %v", name, !want, want)
	}
	if want := partialOracle.MatchString(s); IsPartialEntry(s) != want {
		t.Errorf("IsPartialEntry(%q) = %v, the expression says %v", s, !want, want)
	}
}

func TestIsHexAsTheExpressions(t *testing.T) {
	h64, h128 := strings.Repeat("0123456789abcdef", 4), strings.Repeat("fedcba9876543210", 8)
	for _, c := range []struct {
		alg, s string
		want   bool
	}{
		{"sha256", h64, true}, {"sha512", h128, true},
		{"sha256", h128, false}, {"sha512", h64, false}, {"sha384", h64, false}, {"", h64, false},
		{"sha256", h64[:63], false}, {"sha256", h64 + "0", false}, {"sha256", "", false},
		{"sha256", strings.ToUpper(h64), false}, {"sha256", h64[:63] + "g", false},
		{"sha256", h64[:63] + "\n", false}, {"sha256", h64[:62] + "é", false},
		{"sha256", "-" + h64[1:], false}, {"sha512", h128[:127] + "/", false},
	} {
		if got := IsHex(c.alg, c.s); got != c.want {
			t.Errorf("IsHex(%q, %q) = %v, want %v", c.alg, c.s, got, c.want)
		}
		checkHexOracle(t, c.alg, c.s)
	}
	for _, name := range []string{
		"sha256-" + h64 + ".partial", "sha512-" + h128 + ".partial",
		"sha256-" + h64 + ".partial\n", "sha256-" + h64, "sha256-" + h64 + ".partia", "x" + "sha256-" + h64 + ".partial",
		"sha256--" + h64[1:] + ".partial", "sha256" + h64 + ".partial", "sha512-" + h64 + ".partial", ".partial", "",
	} {
		if want := partialOracle.MatchString(name); IsPartialEntry(name) != want {
			t.Errorf("IsPartialEntry(%q) = %v, the expression says %v", name, !want, want)
		}
	}
}

func FuzzIsHex(f *testing.F) {
	f.Add("sha256", strings.Repeat("a", 64))
	f.Add("sha512", strings.Repeat("0", 128))
	f.Add("sha256", strings.Repeat("A", 64))
	f.Add("sha256-", "x.partial")
	f.Fuzz(func(t *testing.T, alg, s string) {
		checkHexOracle(t, alg, s)
		if want := partialOracle.MatchString(alg + s); IsPartialEntry(alg+s) != want {
			t.Errorf("IsPartialEntry(%q) = %v, the expression says %v", alg+s, !want, want)
		}
	})
}
