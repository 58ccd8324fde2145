package pipeline_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/pullhelper/pullhelper/"

// The layering rules (each package's doc.go states its own; the README's
// Development section lists the packages), checked on the real import
// graph (go list -deps, so indirect imports count too).
func TestDependencyRules(t *testing.T) {
	rules := []struct {
		pkg    string
		denied []string
	}{
		// The copy knows nothing of isolation or policy, nor of the
		// parent's side of DEST (dest: the containerd client and
		// containers-storage; it knows DEST as dest/target), nor of where
		// its endpoints and credentials came from (it reads internal/wire).
		{"pull", []string{"dest", "cgroup", "privdrop", "netns", "dnsconf", "policy", "auth", "hosts", "reexec", "pipeline", "cmd/pullhelper"}},
		{"dest/target", []string{"dest", "pull", "pipeline", "reexec", "cmd/pullhelper"}},
		// cgroup takes its limits as api.Limits, never from the policy.
		{"cgroup", []string{"policy", "pull", "pipeline", "reexec", "cmd/pullhelper"}},
		// The output types are importable by agents with no dependency.
		{"api", []string{"*"}},
		{"policy", []string{"pull", "pipeline", "reexec", "cgroup", "auth", "cmd/pullhelper"}},
		{"auth", []string{"policy", "pull", "pipeline", "reexec", "cgroup", "cmd/pullhelper"}},
		// Endpoints, mirrors and trust know no credential source.
		{"hosts", []string{"auth", "policy", "pull", "dest", "pipeline", "reexec", "cgroup", "privdrop", "netns", "dnsconf", "cmd/pullhelper"}},
		// What crosses to the copy has no dependency.
		{"internal/wire", []string{"*"}},
		{"reexec", []string{"pipeline", "policy", "cmd/pullhelper"}},
		{"privdrop", []string{"pull", "pipeline", "reexec", "policy", "cmd/pullhelper"}},
		{"pipeline", []string{"cmd/pullhelper"}},
		// The registry client knows no credential source, policy,
		// destination or isolation.
		{"registry", []string{"auth", "policy", "pull", "dest", "pipeline", "reexec", "cgroup", "privdrop", "netns", "dnsconf", "cmd/pullhelper"}},
	}
	for _, r := range rules {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+r.pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", r.pkg, err, out)
		}
		deps := strings.Fields(string(out))
		for _, d := range deps {
			if d == module+r.pkg || !strings.HasPrefix(d, module) {
				if r.denied[0] == "*" && d != module+r.pkg && strings.Contains(d, ".") {
					t.Errorf("%s imports %s: it must import only the standard library", r.pkg, d)
				}
				continue
			}
			for _, bad := range r.denied {
				if bad == "*" || d == module+bad {
					t.Errorf("%s imports %s (directly or not); the layering forbids it", r.pkg, d)
				}
			}
		}
		if len(deps) == 0 {
			t.Fatalf("go list %s printed nothing", r.pkg)
		}
	}
}

// The copy links neither runtime store's client: containerd's and
// containers-storage's code runs in the root parent only (dest's Commit).
func TestCopyLinksNoStore(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+"pull").CombinedOutput()
	if err != nil {
		t.Fatalf("go list pull: %v\n%s", err, out)
	}
	for _, d := range strings.Fields(string(out)) {
		if strings.HasPrefix(d, "github.com/containerd/containerd/v2/client") || d == "go.podman.io/storage" || d == "go.podman.io/image/v5/storage" {
			t.Errorf("pull imports %s (directly or not)", d)
		}
	}
}
