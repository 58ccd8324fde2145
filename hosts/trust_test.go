package hosts

import (
	"os"
	"path/filepath"
	"reflect"
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
