package policy_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pullhelper/pullhelper/policy"
)

// Values that do not fit time.Duration or int64 are usage errors naming the
// maximum, never a wrapped-around value ("9223372037" seconds used to become
// a negative duration, i.e. no timeout).
func TestOverflowIsRejected(t *testing.T) {
	for _, in := range []string{"9223372037", "9223372036854775808", "99999999999999999999999", "2562048h", "9223372036854775808ns", "300000000000s"} {
		d, err := policy.ParseDuration(in)
		if err == nil {
			t.Errorf("ParseDuration(%q) = %v, accepted", in, time.Duration(d))
			continue
		}
		if !strings.Contains(err.Error(), "too large; the maximum is 2562047h47m16.854775807s (9223372036 seconds)") {
			t.Errorf("ParseDuration(%q): %v does not name the maximum", in, err)
		}
	}
	// The largest values still parse.
	if d, err := policy.ParseDuration("9223372036"); err != nil || time.Duration(d) != 9223372036*time.Second {
		t.Errorf("ParseDuration(max seconds) = %v, %v", d, err)
	}
	if d, err := policy.ParseDuration("2562047h"); err != nil || time.Duration(d) != 2562047*time.Hour {
		t.Errorf("ParseDuration(2562047h) = %v, %v", d, err)
	}
	if _, err := policy.ParseDuration("soon"); err == nil || strings.Contains(err.Error(), "too large") {
		t.Errorf("ParseDuration(soon) = %v; want a syntax error", err)
	}
	for _, in := range []string{"9223372036854775808", "9000000000000000000000", "8388608Ti", "10000000T", "8Ei", "10E"} {
		if v, err := policy.ParseSize(in); err == nil || !strings.Contains(err.Error(), "the maximum is 9223372036854775807 bytes") {
			t.Errorf("ParseSize(%q) = %d, %v", in, v, err)
		}
		if v, err := policy.ParseRate(in + "/s"); err == nil || !strings.Contains(err.Error(), "the maximum is 9223372036854775807 bytes per second") {
			t.Errorf("ParseRate(%q) = %d, %v", in, v, err)
		}
	}

	// Flags and keys name themselves.
	l := policy.Defaults()
	err := l.Set("--timeout", "pull.timeout", policy.String, "9223372037")
	if err == nil || !strings.HasPrefix(err.Error(), `--timeout: invalid duration "9223372037": too large; the maximum is`) {
		t.Errorf("--timeout 9223372037: %v", err)
	}
	if err := l.Set("--retries", "pull.retries", policy.Int, "99999999999999999999"); err == nil || !strings.Contains(err.Error(), "--retries: invalid value \"99999999999999999999\": too large") {
		t.Errorf("--retries overflow: %v", err)
	}
	if err := l.Set("--pids-max", "cgroup.pids_max", policy.Int, "4294967296"); err == nil || !strings.Contains(err.Error(), "--pids-max: invalid value 4294967296: too large; the maximum is 2147483647") {
		t.Errorf("--pids-max overflow: %v", err)
	}
	for doc, want := range map[string]string{
		"version = 1\n[pull]\ntimeout = 9223372037\n":               "p.toml:3: pull.timeout: invalid duration \"9223372037\": too large",
		"version = 1\n[pull]\nstall_timeout = \"3000000h\"\n":       "p.toml:3: pull.stall_timeout: invalid duration \"3000000h\": too large",
		"version = 1\n[cgroup]\nmemory_max = \"9000000000000Mi\"\n": "p.toml:3: cgroup.memory_max: invalid size \"9000000000000Mi\": too large",
		"version = 1\n[pull]\nretry_delay = -5\n":                   "p.toml:3: pull.retry_delay: invalid duration -5: must not be negative",
	} {
		if _, err := policy.Parse("p.toml", []byte(doc)); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: err = %v, want prefix %q", doc, err, want)
		}
	}
}

func TestHostileDocumentsAreRefusedBeforeDecoding(t *testing.T) {
	deep := func(open, close string, n int) []byte {
		return []byte("version = 1\na = " + strings.Repeat(open, n) + strings.Repeat(close, n) + "\n")
	}
	for name, tc := range map[string]struct {
		doc  []byte
		want string
	}{
		// 80 KB of nesting: this took the decoder 16 GB.
		"arrays":        {deep("[", "]", 40000), "p.toml:2: arrays or inline tables nested deeper than 16 levels"},
		"inline tables": {deep("{b=", "}", 20000), "p.toml:2: arrays or inline tables nested deeper than 16 levels"},
		"mixed, later line": {[]byte("version = 1\n# [[[[[[[[[[[[[[[[[[[[\ns = \"[[[[[[[[[[[[[[[[[[[[[[\"\nm = '''\n[[[[[[[[[[[[[[[[[[[[[[[[[\n'''\nx = " + strings.Repeat("[{a=", 9) + "1" + strings.Repeat("}]", 9)),
			"p.toml:7: arrays or inline tables nested deeper than 16 levels"},
		"too big": {append([]byte("version = 1\n"), bytes.Repeat([]byte("# padding\n"), policy.MaxFileSize/10)...), "p.toml: policy file larger than 1048576 bytes (1 MiB), the limit"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := policy.Parse("p.toml", tc.doc)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("err = %v, want prefix %q", err, tc.want)
			}
		})
	}
	// Brackets in strings and comments do not count, and the schema's own
	// deepest nesting is well within the limit.
	ok := "version = 1\n# [[[[[[[[[[[[[[[[[[[[[[\n[pull]\nsignature_policy = \"/x/[[[[[[[[[[[[[[[[[[[[[[\"\nregistries_conf = '/y/{{{{{{{{{{{{{{{{{{{{{'\n" +
		"[auth]\npull_secrets = [\"\"\"/a\\\"[[[[[[[[[[[[[[[[[[[\"\"\"]\n" +
		"[profiles]\np = { trust = { ca_files = [ { registry = \"r:5000\", file = \"/ca.pem\" } ] } }\n"
	if _, err := policy.Parse("p.toml", []byte(ok)); err != nil {
		t.Fatalf("valid document refused: %v", err)
	}
}

func TestLoadFileReadsAtMostTheLimit(t *testing.T) {
	// /dev/zero never ends: LoadFile refuses it, not being a regular file.
	_, err := policy.LoadFile("/dev/zero")
	if err == nil || !strings.Contains(err.Error(), "/dev/zero: reading policy: a character device, not a regular file") {
		t.Fatalf("err = %v", err)
	}
	// A regular file over the limit is refused without decoding it.
	p := filepath.Join(t.TempDir(), "big.toml")
	if err := os.WriteFile(p, append([]byte("version = 1\n#"), make([]byte, policy.MaxFileSize)...), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = policy.LoadFile(p)
	if err == nil || !strings.Contains(err.Error(), p+": policy file larger than 1048576 bytes") {
		t.Fatalf("err = %v", err)
	}
}
