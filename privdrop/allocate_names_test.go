package privdrop

import (
	"strings"
	"testing"
)

// Check is Allocate's refusal made early: an unknown name is told apart;
// "dynamic" and a user the pull can run as are nil; what Allocate refuses
// of a name or uid is refused the same.
func TestCheck(t *testing.T) {
	for spec, want := range map[string]string{
		"nosuchuser-pullhelper": "unknown", "1-2": "unknown",
		"nobody": "", "dynamic": "", "1000": "", "65534": "",
		"root": "the pull never runs as root", "0": "the pull never runs as root",
		"007": "plain decimal", "+7": "plain decimal", "-5": "want a uid in", "4294967295": "want a uid in",
	} {
		unknown, err := Check(spec)
		switch {
		case want == "unknown":
			if !unknown || err == nil {
				t.Errorf("Check(%q) = %v, %v; want an unknown name", spec, unknown, err)
			}
		case want == "":
			if unknown || err != nil {
				t.Errorf("Check(%q) = %v, %v; want nil", spec, unknown, err)
			}
		default:
			if unknown || err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Check(%q) = %v, %v; want %q", spec, unknown, err, want)
			}
			if _, aerr := Allocate(spec, t.TempDir()); aerr == nil || aerr.Error() != err.Error() {
				t.Errorf("Allocate(%q) = %v, Check said %v", spec, aerr, err)
			}
		}
	}
}
