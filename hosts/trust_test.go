package hosts

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The certs.d search is the linked containers/image's (dockerCertDir:
// configfile.GetSearchPaths for "certs.d", then /etc/docker/certs.d).
func TestDefaultCertsDIsTheLibrarySearch(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the rootful directories are searched for root only; run as root")
	}
	t.Setenv("XDG_CONFIG_HOME", "/xdg")
	want := []string{"/xdg/containers/certs.d", "/etc/containers/certs.rootful.d", "/etc/containers/certs.d",
		"/usr/share/containers/certs.rootful.d", "/usr/share/containers/certs.d", "/etc/docker/certs.d"}
	if got := DefaultCertsD(); !reflect.DeepEqual(got, want) {
		t.Errorf("DefaultCertsD() = %q\nwant %q", got, want)
	}
}

func TestResolveTrust(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := os.MkdirAll(filepath.Join(b, "reg:5000"), 0o755); err != nil {
		t.Fatal(err)
	}
	tr := ResolveTrust("reg:5000", "", []string{a, b, filepath.Join(dir, "c")})
	if tr.CertDir != filepath.Join(b, "reg:5000") || len(tr.Searched) != 2 || !tr.Verify {
		t.Fatalf("trust = %+v", tr)
	}
	tr = ResolveTrust("reg:5000", "/flat", []string{b})
	if tr.CertDir != "/flat" || len(tr.Searched) != 1 {
		t.Fatalf("flat cert dir must win: %+v", tr)
	}
	tr = ResolveTrust("none:1", "", []string{a})
	if tr.CertDir != "" || len(tr.Searched) != 1 {
		t.Fatalf("no dir: %+v", tr)
	}
}

// hermeticConfig reads only files under dir: an empty registries.conf and
// drop-in directory.
func hermeticConfig(t *testing.T, dir string) Config {
	t.Helper()
	d := filepath.Join(dir, "registries.conf.d")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return Config{RegistriesConf: writeFile(t, dir, "registries.conf", ""), RegistriesConfDir: d, TLSVerify: true,
		CertsD: []string{filepath.Join(dir, "certs.d")}}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func newResolver(t *testing.T, c Config) *Resolver {
	t.Helper()
	r, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestTrustFor(t *testing.T) {
	dir := t.TempDir()
	c := hermeticConfig(t, dir)
	if err := os.MkdirAll(filepath.Join(dir, "certs.d", "reg.example.com:5000"), 0o755); err != nil {
		t.Fatal(err)
	}
	c.CAFiles = []ScopedFile{{Pattern: "*.example.com:5000", File: "/ca/a.pem"}, {Pattern: "reg.example.com", File: "/ca/b.pem"}}
	c.InsecureRegistries = []string{"*.insecure.test"}
	c.RegistriesConf = writeFile(t, dir, "registries.conf", "[[registry]]\nlocation = \"rc.example.com\"\ninsecure = true\n")
	r := newResolver(t, c)
	tr := r.TrustFor("reg.example.com:5000")
	if tr.CertDir != filepath.Join(dir, "certs.d", "reg.example.com:5000") || !reflect.DeepEqual(tr.CAFiles, []string{"/ca/a.pem"}) || !tr.Verify {
		t.Errorf("reg:5000: %+v", tr)
	}
	if tr := r.TrustFor("reg.example.com"); !reflect.DeepEqual(tr.CAFiles, []string{"/ca/b.pem"}) {
		t.Errorf("reg: CA files %q", tr.CAFiles)
	}
	if tr := r.TrustFor("a.insecure.test"); tr.Verify || tr.InsecureBy != "trust.insecure_registries *.insecure.test" {
		t.Errorf("insecure: %+v", tr)
	}
	if tr := r.TrustFor("a.insecure.test:443"); !tr.Verify {
		t.Errorf("a pattern without a port must not match another port: %+v", tr)
	}
	if tr := r.TrustFor("rc.example.com"); tr.Verify || !strings.Contains(tr.InsecureBy, "registries.conf insecure") {
		t.Errorf("registries.conf insecure not honoured: %+v", tr)
	}
	// Under containerd rules registries.conf says nothing of trust
	// (containerd never reads it); pullhelper's own insecure_registries
	// still does.
	cc := c
	cc.ContainerdConfig = writeFile(t, dir, "config.toml", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".registry]\nconfig_path = \""+filepath.Join(dir, "hosts")+"\"\n")
	rc := newResolver(t, cc)
	if !rc.Containerd() {
		t.Fatal("the resolver does not use containerd rules")
	}
	if tr := rc.TrustFor("rc.example.com"); !tr.Verify || tr.InsecureBy != "" {
		t.Errorf("containerd rules: registries.conf insecure honoured: %+v", tr)
	}
	if tr := rc.TrustFor("a.insecure.test"); tr.Verify {
		t.Errorf("containerd rules: insecure_registries not honoured: %+v", tr)
	}
	c.TLSVerify, c.TLSVerifySetting = false, "--tls-verify"
	if tr := newResolver(t, c).TrustFor("x.example.com"); tr.Verify || tr.InsecureBy != "--tls-verify=false" {
		t.Errorf("tls_verify: %+v", tr)
	}
}
