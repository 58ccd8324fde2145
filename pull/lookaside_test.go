package pull

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The copy's registries.d points the file:// lookaside the parent read at
// its own copy of the signatures: a configured one wherever registries.d
// names it (other settings kept), the built-in default through
// default-docker (in the file that defines it, never a second one).
func TestWriteLookaside(t *testing.T) {
	hex := strings.Repeat("cd", 32)
	rel := "ns/app@sha256=" + hex + "/signature-1"
	files := map[string][]byte{rel: []byte("sig")}
	for _, tc := range []struct {
		name, base string
		regD       map[string]string
		wantIn     string // the file that must name the copy's directory
	}{
		{"a configured lookaside", "file:///var/lib/sigs", map[string]string{
			"a.yaml": "default-docker:\n  lookaside: http://other.example\ndocker:\n  reg.example/ns:\n    lookaside: file:///var/lib/sigs\n    use-sigstore-attachments: true\n"}, "a.yaml"},
		{"the older key", "file:///var/lib/sigs", map[string]string{"a.yaml": "docker:\n  reg.example:\n    sigstore: file:///var/lib/sigs\n"}, "a.yaml"},
		{"the built-in default, no default-docker", "", map[string]string{"a.yaml": "docker:\n  other.example:\n    lookaside: http://x\n"}, "zz-pullhelper-lookaside.yaml"},
		{"the built-in default, default-docker without one", "", map[string]string{"b.yaml": "default-docker:\n  use-sigstore-attachments: true\n"}, "b.yaml"},
		{"the built-in default, an empty one", "", map[string]string{"b.yaml": "default-docker:\n  lookaside: \"\"\n"}, "b.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			regD := map[string][]byte{}
			for n, b := range tc.regD {
				regD[n] = []byte(b)
			}
			out, err := writeLookaside(&Lookaside{Base: tc.base, Files: files}, dir, regD)
			if err != nil {
				t.Fatal(err)
			}
			local := "file://" + filepath.Join(dir, "lookaside")
			if b, err := os.ReadFile(filepath.Join(dir, "lookaside", filepath.FromSlash(rel))); err != nil || string(b) != "sig" {
				t.Fatalf("the signature in the copy's lookaside: %q, %v", b, err)
			}
			defaults := 0
			for n, b := range out {
				var conf struct {
					DefaultDocker map[string]any            `yaml:"default-docker"`
					Docker        map[string]map[string]any `yaml:"docker"`
				}
				if err := yaml.Unmarshal(b, &conf); err != nil {
					t.Fatalf("%s does not parse: %v\n%s", n, err, b)
				}
				if conf.DefaultDocker != nil {
					defaults++
				}
				if n == tc.wantIn && !strings.Contains(string(b), local) {
					t.Errorf("%s does not name %s:\n%s", n, local, b)
				}
				if tc.base != "" && strings.Contains(string(b), tc.base) {
					t.Errorf("%s still names %s:\n%s", n, tc.base, b)
				}
			}
			if defaults > 1 {
				t.Errorf("default-docker in %d files", defaults)
			}
			if strings.Contains(tc.regD["a.yaml"], "use-sigstore-attachments") && !strings.Contains(string(out["a.yaml"]), "use-sigstore-attachments: true") {
				t.Errorf("another setting was lost:\n%s", out["a.yaml"])
			}
		})
	}
	// A path that is not a signature's is refused.
	for _, bad := range []string{"../x@sha256=" + hex + "/signature-1", "/abs@sha256=" + hex + "/signature-1", "ns/app@sha256=" + hex + "/other"} {
		if _, err := writeLookaside(&Lookaside{Files: map[string][]byte{bad: nil}}, t.TempDir(), nil); err == nil {
			t.Errorf("%s written", bad)
		}
	}
}
