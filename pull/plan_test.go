package pull_test

import (
	"path/filepath"
	"testing"

	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/pull"
)

func TestParseDestination(t *testing.T) {
	for _, tc := range []struct {
		in, transport, path, ref string
	}{
		{"oci:/x/layout:v1", "oci", "/x/layout", "v1"},
		{"oci:/x/layout", "oci", "/x/layout", ""},
		{"dir:/x/d:with:colons", "dir", "/x/d:with:colons", ""},
		{"oci-archive:/x/a.tar:latest", "oci-archive", "/x/a.tar", "latest"},
		{"docker-archive:/x/a.tar:quay.io/o/r:t", "docker-archive", "/x/a.tar", "quay.io/o/r:t"},
	} {
		d, err := pull.ParseDestination(tc.in)
		if err != nil || d.Transport != tc.transport || d.Path != tc.path || d.Ref != tc.ref {
			t.Errorf("%s: %+v %v", tc.in, d, err)
		}
	}
	rel, err := pull.ParseDestination("oci:rel/layout")
	if err != nil || !filepath.IsAbs(rel.Path) {
		t.Errorf("relative path not made absolute: %+v %v", rel, err)
	}
	for _, bad := range []string{"docker://x/y", "/x/y", "oci:", "tarball:/x", "docker-archive:/x.tar:Bad Ref"} {
		if _, err := pull.ParseDestination(bad); err == nil || failure.CodeOf(err) != failure.Usage {
			t.Errorf("%s: err = %v, want a usage error", bad, err)
		}
	}
}
