package auth

import (
	"go.podman.io/storage/pkg/configfile"
	"os"
	"path/filepath"
)

// Trust is the TLS material chosen for one registry.
type Trust struct {
	// CertDir is the one directory whose *.crt, *.cert and *.key files are
	// used ("" when none exists: the system pool alone).
	CertDir string `json:"cert_dir,omitempty"`
	// Searched lists every directory considered, in order.
	Searched []string `json:"searched"`
	// Verify is false when certificates are not checked (--tls-verify=false
	// or the registry is listed as insecure).
	Verify bool `json:"verify"`
	// InsecureBy says what turned verification off.
	InsecureBy string `json:"insecure_by,omitempty"`
	// CAFiles are extra CA bundles for this registry (policy trust.ca_files
	// matching it, containerd's hosts configuration), added to the pool.
	CAFiles []string `json:"ca_files,omitempty"`
	// ClientPairs are extra client certificate/key files ([cert, key]).
	ClientPairs [][2]string `json:"client_pairs,omitempty"`
}

// ResolveTrust picks the certificate directory for host ("host[:port]") the
// containers way: a flat certDir for every host when given; otherwise the
// first existing ROOT/host among certsD (unreadable candidates are skipped).
func ResolveTrust(host, certDir string, certsD []string) Trust {
	if certDir != "" {
		return Trust{CertDir: certDir, Searched: []string{certDir}, Verify: true}
	}
	t := Trust{Verify: true, Searched: []string{}}
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
