package pipeline_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/auth"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/pipeline"
	"github.com/pullhelper/pullhelper/policy"
)

func plan(t *testing.T, image string, set ...[2]string) (*pipeline.Plan, error) {
	t.Helper()
	l := policy.Defaults()
	for _, kv := range set {
		if err := l.Set("--x", kv[0], policy.String, kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	empty := filepath.Join(t.TempDir(), "registries.conf")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := l.Set("--registries-conf", "pull.registries_conf", policy.String, empty); err != nil {
		t.Fatal(err)
	}
	return pipeline.NewPlan(l, pipeline.Inputs{Image: image, Dest: "oci:" + filepath.Join(t.TempDir(), "d"), Env: auth.Env{Home: t.TempDir()}})
}

func TestNewPlanReferences(t *testing.T) {
	for image, want := range map[string]string{
		"quay.io/org/repo":              "quay.io/org/repo:latest",
		"reg:5000/a/b:v1":               "reg:5000/a/b:v1",
		"localhost/x":                   "localhost/x:latest",
		"reg.io/a@sha256:" + hex64('a'): "reg.io/a@sha256:" + hex64('a'),
	} {
		p, err := plan(t, image)
		if err != nil || p.Reference != want {
			t.Errorf("%s: reference %q, %v; want %q", image, p.Reference, err, want)
		}
	}
	for _, bad := range []string{"", "nosuchalias-pullhelper", "library/nosuchalias-pullhelper", "https://reg.io/x", "Reg.io/UPPER", "reg_x.io/repo:1"} {
		if _, err := plan(t, bad); err == nil || failure.CodeOf(err) != failure.Usage {
			t.Errorf("%q: err = %v, want usage", bad, err)
		}
	}
	// containers/image parses "reg_x.io/repo" as a reference with no
	// registry (found by FuzzResolveImage): refused, naming the host.
	if _, err := plan(t, "reg_x.io/repo:1"); err == nil || !strings.Contains(err.Error(), `"reg_x.io" is not a registry host name`) {
		t.Errorf("reg_x.io/repo:1: %v", err)
	}
	// A digest of another algorithm than sha256 is the reference's fault
	// (exit 2 at the plan, explain too), not the registry's (it was exit 8
	// once the child had started).
	// A user name this host does not know: exit 2 at the plan (it was
	// exit 7 at the uid's allocation, and explain accepted it).
	if _, err := plan(t, "reg.io/a", [2]string{"privileges.user", "nosuchuser-pullhelper"}); failure.CodeOf(err) != failure.Usage ||
		!strings.Contains(err.Error(), `"nosuchuser-pullhelper": no such user on this host`) {
		t.Errorf("an unknown user: %v, want usage naming it", err)
	}
	if _, err := plan(t, "reg.io/a", [2]string{"privileges.user", "nobody"}); err != nil {
		t.Errorf("user nobody: %v", err)
	}
	sha512 := "reg.io/a@sha512:" + strings.Repeat("a", 128)
	if _, err := plan(t, sha512); failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), "digest algorithm sha512 is not supported") {
		t.Errorf("%s: %v, want usage naming the algorithm", sha512, err)
	}
}

func TestNewPlanNetworkErrors(t *testing.T) {
	_, err := plan(t, "reg.io/a", [2]string{"network.netns", "/etc/hostname"}, [2]string{"network.mode", "netns"})
	if err == nil || failure.CodeOf(err) != failure.Isolation || !strings.Contains(err.Error(), "not a network namespace") {
		t.Errorf("bad netns: %v", err)
	}
}

func hex64(c byte) string { return strings.Repeat(string(c), 64) }
