package privdrop

import "testing"

// UnknownName is Allocate's name lookup made early: only a name (not
// "dynamic", not a uid in any spelling Allocate takes as one) that the
// user database does not know.
func TestUnknownName(t *testing.T) {
	for spec, want := range map[string]bool{
		"nosuchuser-pullhelper": true, "1-2": true,
		"nobody": false, "root": false, "dynamic": false, "": false, "1000": false, "+7": false, "-5": false, "007": false,
	} {
		if got := UnknownName(spec); got != want {
			t.Errorf("UnknownName(%q) = %v, want %v", spec, got, want)
		}
	}
}
