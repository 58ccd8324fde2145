package hosts

import (
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/pullhelper/pullhelper/internal/wire"
	"go.podman.io/image/v5/pkg/sysregistriesv2"
)

func render(t *testing.T, registry string, eps []wire.Endpoint, base *sysregistriesv2.V2RegistriesConf) childRegistriesConf {
	t.Helper()
	b, err := RenderRegistriesConf(registry, eps, base)
	if err != nil {
		t.Fatal(err)
	}
	var out childRegistriesConf
	if _, err := toml.Decode(string(b), &out); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	return out
}

// Under containerd rules: one entry, the primary as its location, the
// [host] entries as mirrors in order, one without resolve by digest only,
// an http or skip_verify host insecure, ns on every host but the registry.
func TestRenderContainerd(t *testing.T) {
	secure := wire.Trust{Verify: true}
	out := render(t, "reg.example", []wire.Endpoint{
		{Host: "m1.example", Scheme: "https", Trust: secure, Capabilities: wire.CapabilityPull, NamespaceProxy: "reg.example"},
		{Host: "m2.example", Scheme: "http", Trust: secure, NamespaceProxy: "reg.example"},
		{Host: "reg.example", Scheme: "https", Trust: wire.Trust{}},
	}, nil)
	if len(out.Registries) != 1 || len(out.CredentialHelpers) != 1 || out.CredentialHelpers[0] != sysregistriesv2.AuthenticationFileHelper {
		t.Fatalf("%+v", out)
	}
	r := out.Registries[0]
	if r.Prefix != "reg.example" || r.Location != "reg.example" || !r.Insecure || r.NamespaceProxy != "" || len(r.Mirrors) != 2 {
		t.Fatalf("registry %+v", r)
	}
	if m := r.Mirrors[0]; m.Location != "m1.example" || m.Insecure || m.PullFromMirror != sysregistriesv2.MirrorByDigestOnly || m.NamespaceProxy != "reg.example" {
		t.Errorf("mirror without resolve: %+v", m)
	}
	if m := r.Mirrors[1]; m.Location != "m2.example" || !m.Insecure || m.PullFromMirror != "" {
		t.Errorf("http mirror: %+v", m)
	}
}

// Under registries.conf rules: the entries in effect, an endpoint whose
// trust is off marked insecure where it is a location or a mirror, or
// added as an entry of its own.
func TestRenderRegistriesConf(t *testing.T) {
	base := &sysregistriesv2.V2RegistriesConf{Registries: []sysregistriesv2.Registry{{
		Prefix: "reg.example", Endpoint: sysregistriesv2.Endpoint{Location: "reg.example"},
		Mirrors: []sysregistriesv2.Endpoint{{Location: "mirror.example/ns"}},
	}}}
	off := wire.Trust{Verify: false}
	out := render(t, "reg.example", []wire.Endpoint{
		{Host: "mirror.example", Scheme: "https", Trust: off},
		{Host: "other.example", Scheme: "https", Trust: off},
		{Host: "reg.example", Scheme: "https", Trust: wire.Trust{Verify: true}},
	}, base)
	if len(out.Registries) != 2 {
		t.Fatalf("%+v", out.Registries)
	}
	r := out.Registries[0]
	if r.Insecure || !r.Mirrors[0].Insecure {
		t.Errorf("entry %+v: want the mirror insecure, the location not", r)
	}
	if a := out.Registries[1]; a.Prefix != "other.example" || a.Location != "other.example" || !a.Insecure {
		t.Errorf("added entry %+v", a)
	}
	// base is containers/image's cached parse of the snapshot, which the
	// parent goes on reading (FindRegistry): rendering leaves it as it was.
	if b := base.Registries[0]; b.Insecure || b.Mirrors[0].Insecure || len(base.Registries) != 1 {
		t.Errorf("rendering changed the registries.conf it started from: %+v", base.Registries)
	}
}
