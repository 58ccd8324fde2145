package auth

import (
	"os"
	"testing"
)

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
