package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The client is for agents to import: the standard library and package api
// only, directly or not (go list -deps), so that it brings neither
// containers/image nor a cgroups library nor any other pullhelper package.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "github.com/pullhelper/pullhelper/client").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	allowed := map[string]bool{
		"github.com/pullhelper/pullhelper/client": true,
		"github.com/pullhelper/pullhelper/api":    true,
	}
	if !allowed[strings.Join(deps, "")] && len(deps) < 2 {
		t.Fatalf("go list printed %q; want at least client and api", deps)
	}
	for _, d := range deps {
		if !allowed[d] {
			t.Errorf("client imports %s (directly or not); it may import only the standard library and api", d)
		}
	}
}
