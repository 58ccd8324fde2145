package regpattern_test

import (
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/internal/regpattern"
)

// FuzzParse: a pattern parses to one that keeps its text and matches the
// host it names (for "*.d", a host under d), or fails with a one-line error.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"reg.example.com", "reg.example.com:5000", "*.example.com", "*.example.com:443",
		"[::1]:5000", "[fe80::1]", "", "https://x", "a/b", "*.", "a..b", "a:0", "a:05", "a:", "*a.com", "[*]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := regpattern.Parse(s)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
			return
		}
		if p.String() != s {
			t.Fatalf("pattern %q kept as %q", s, p.String())
		}
		host := s
		if rest, ok := strings.CutPrefix(s, "*."); ok {
			host = "x." + rest
		}
		// Upper case matches too, for the ASCII names registries have ("ϖ"
		// upper-cases to "Π", which lower-cases to "π").
		upper := strings.ToUpper(host)
		if !p.Match(host) || (upper == strings.Map(asciiUpper, host) && !p.Match(upper)) {
			t.Fatalf("pattern %q does not match %q", s, host)
		}
		if _, err := regpattern.Parse(p.String()); err != nil {
			t.Fatalf("pattern %q does not parse again: %v", s, err)
		}
	})
}

func asciiUpper(r rune) rune {
	if r >= 'a' && r <= 'z' {
		return r - 'a' + 'A'
	}
	return r
}
