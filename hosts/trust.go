package hosts

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/pullhelper/pullhelper/internal/wire"
	"go.podman.io/image/v5/pkg/sysregistriesv2"
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

// TrustFor returns the TLS trust for host ("host[:port]") on top of the
// system pool: the certificate directory (a flat cert_dir, else the first
// existing certs.d ROOT/host, containers/image docker_client.go
// dockerCertDir), trust.ca_files whose pattern matches, and whether
// verification is off and why (tls_verify=false, trust.insecure_registries,
// or, under registries.conf rules, registries.conf insecure = true for the
// registry host -- the value newDockerClient uses before an endpoint's own
// setting applies).
func (r *Resolver) TrustFor(host string) wire.Trust {
	t := ResolveTrust(host, r.c.CertDir, r.c.CertsD)
	for _, cf := range r.caFiles {
		if cf.p.Match(host) {
			t.CAFiles = append(t.CAFiles, cf.file)
		}
	}
	off := func(by string) {
		if t.Verify {
			t.Verify, t.InsecureBy = false, by
		}
	}
	if !r.c.TLSVerify {
		s := r.c.TLSVerifySetting
		if s == "" {
			s = "tls_verify"
		}
		off(s + "=false")
	}
	for _, p := range r.insecure {
		if p.Match(host) {
			off("trust.insecure_registries " + p.String())
		}
	}
	// Under containerd rules registries.conf says nothing of trust:
	// containerd never reads it (its hosts' skip_verify, ca, client and
	// http:// are applied by Endpoints).
	if r.ctrd != nil {
		return t
	}
	if reg, err := sysregistriesv2.FindRegistry(r.sys, host); err == nil && reg != nil && reg.Insecure {
		off(fmt.Sprintf("registries.conf insecure (prefix %q in %s)", reg.Prefix, r.RegistriesConfName()))
	}
	return t
}
