package dest_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// dest imports none of pullhelper's policy, isolation or pipeline packages.
func TestDepcheck(t *testing.T) {
	files, err := filepath.Glob("*.go")
	must(t, err)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		must(t, err)
		for _, im := range af.Imports {
			p := strings.Trim(im.Path.Value, `"`)
			for _, bad := range []string{"policy", "cgroup", "privdrop", "reexec", "pull", "netns", "dnsconf", "auth", "cmd"} {
				if p == "github.com/pullhelper/pullhelper/"+bad || strings.HasPrefix(p, "github.com/pullhelper/pullhelper/"+bad+"/") {
					t.Errorf("%s imports %s", f, p)
				}
			}
		}
	}
}
