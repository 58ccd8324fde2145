package auth

import (
	"os"
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

// Without $HOME, the home-directory auth files are the passwd entry's
// (containers/image homedir.Get): services often run without HOME.
func TestOSEnvHomeWithoutHOME(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("checks root's passwd entry (/root); run as root")
	}
	t.Setenv("HOME", "")
	if h := OSEnv().Home; h != "/root" {
		t.Errorf("OSEnv().Home without HOME = %q, want /root (the passwd entry)", h)
	}
}
