package hosts

import (
	"os"
	"path/filepath"

	"github.com/pullhelper/pullhelper/internal/wire"
	"go.podman.io/storage/pkg/configfile"
)

// ResolveTrust picks the certificate directory for host ("host[:port]") the
// containers way: a flat certDir for every host when given; otherwise the
// first existing ROOT/host among certsD (unreadable candidates are skipped).
func ResolveTrust(host, certDir string, certsD []string) wire.Trust {
	if certDir != "" {
		return wire.Trust{CertDir: certDir, Searched: []string{certDir}, Verify: true}
	}
	t := wire.Trust{Verify: true, Searched: []string{}}
	for _, root := range certsD {
		d := filepath.Join(root, host)
		t.Searched = append(t.Searched, d)
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			t.CertDir = d
			break
		}
	}
	return t
}

// DefaultCertsD is the per-host certificate search of the linked
// containers/image (docker_client.go dockerCertDir): the certs.d drop-in
// directories go.podman.io/storage's configfile lists for this user (the
// user's $XDG_CONFIG_HOME or ~/.config/containers/certs.d, then
// /etc/containers/certs.rootful.d and /etc/containers/certs.d, then the
// same under /usr/share; the rootful ones for root), then
// /etc/docker/certs.d.
func DefaultCertsD() []string {
	var out []string
	if p, err := configfile.GetSearchPaths(&configfile.File{
		Name: "certs", Extension: "d", DoNotUseExtensionForConfigName: true, UserId: os.Geteuid(),
	}); err == nil {
		out = append(out, p.DropInDirectories...)
	}
	return append(out, "/etc/docker/certs.d")
}
