package policy_test

import (
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/policy"
)

// FuzzParse: any input either parses into a valid policy or fails with a
// one-line error naming the file; it never panics.
func FuzzParse(f *testing.F) {
	f.Add([]byte(example))
	f.Add([]byte("version = 1\n[cgroup]\nmemory_max = \"12 apples\"\n"))
	f.Add([]byte("version = 1\n[profiles.a.pull]\nretries = -1\n"))
	f.Add([]byte("version = 1\n[pull\n"))
	f.Add([]byte("version = 1\na = [[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]\n"))
	f.Add([]byte("version = 1\n[pull]\ntimeout = 9223372037\nretries = 101\n[cgroup]\ndriver = \"x\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		pf, err := policy.Parse("fuzz.toml", data)
		if err != nil {
			msg := err.Error()
			if !strings.HasPrefix(msg, "fuzz.toml") || strings.Contains(msg, "\n") {
				t.Fatalf("error %q is not one line naming the file", msg)
			}
			return
		}
		for _, name := range append(pf.Profiles(), "") {
			l, err := pf.Select(name)
			if err != nil {
				t.Fatalf("select %q: %v", name, err)
			}
			if err := l.Validate(); err != nil {
				t.Fatalf("profile %q parsed but does not validate: %v", name, err)
			}
		}
	})
}

// FuzzUnits: a duration, size or rate either parses to a non-negative value
// or fails; it never wraps around.
func FuzzUnits(f *testing.F) {
	for _, s := range []string{"90s", "9223372037", "2562047h", "1.5Gi", "20MB/s", "8Ei", "-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if d, err := policy.ParseDuration(s); err == nil && d < 0 {
			t.Fatalf("ParseDuration(%q) = %d", s, d)
		}
		if z, err := policy.ParseSize(s); err == nil && z < 0 {
			t.Fatalf("ParseSize(%q) = %d", s, z)
		}
		if r, err := policy.ParseRate(s); err == nil && r < 0 {
			t.Fatalf("ParseRate(%q) = %d", s, r)
		}
	})
}
