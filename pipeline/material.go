package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/pullhelper/pullhelper/auth"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/safefile"
	"github.com/pullhelper/pullhelper/pull"
	"go.podman.io/image/v5/pkg/sysregistriesv2"
	"go.podman.io/image/v5/signature"
	"go.podman.io/image/v5/types"
)

// LoadMaterial reads what the copy needs and may be unable to read itself:
// every endpoint's secrets (each once, by ID), the signature policy, each
// endpoint's certificate files, the rendered registries.conf and
// registries.d. Errors are failure.Usage or failure.TLS and name the file.
func (p *Plan) LoadMaterial() (*pull.Material, error) {
	m := &pull.Material{Secrets: map[string]pull.Secret{}}
	for _, e := range p.Endpoints {
		for _, c := range e.Credentials {
			if c.ID != "" && (c.Password != "" || c.IdentityToken != "" || c.Username != "") {
				m.Secrets[c.ID] = pull.Secret{Username: c.Username, Password: c.Password, IdentityToken: c.IdentityToken}
			}
		}
	}
	// hosts.toml headers may carry tokens: they travel here, per endpoint.
	for i, e := range p.Endpoints {
		if len(e.HeaderValues) > 0 {
			if m.Headers == nil {
				m.Headers = make([]map[string][]string, len(p.Endpoints))
			}
			m.Headers[i] = e.HeaderValues
		}
	}
	if f := p.Signature.File; f != "" {
		b, err := readBounded(f)
		if err != nil {
			return nil, failure.New(failure.Usage, "reading signature policy %s: %v", f, failure.Reason(err))
		}
		if _, err := signature.NewPolicyFromBytes(b); err != nil {
			// The decoder's message may quote the file: what kind only.
			return nil, failure.New(failure.Usage, "signature policy %s: %s", f, safefile.Redact(err.Error()))
		}
		m.SignaturePolicy = b
	}
	for _, e := range p.Endpoints {
		if _, done := m.Certs[e.Host]; done || e.Blocked {
			continue
		}
		files, err := certFiles(e.Trust)
		if err != nil {
			return nil, err
		}
		if len(files) > 0 {
			if m.Certs == nil {
				m.Certs = map[string]map[string][]byte{}
			}
			m.Certs[e.Host] = files
		}
	}
	if err := p.loadRegistriesConfig(m); err != nil {
		return nil, err
	}
	return m, nil
}

// certFiles reads one host's TLS material as containers/image lays it out
// in a per-host directory: CA bundles (*.crt) and client pairs (X.cert,
// X.key) from the certificate directory, then trust.ca_files and
// containerd's ca/client files under names of their own.
func certFiles(t auth.Trust) (map[string][]byte, error) {
	out := map[string][]byte{}
	if dir := t.CertDir; dir != "" {
		ents, err := os.ReadDir(dir)
		if err != nil && !os.IsNotExist(err) {
			return nil, failure.New(failure.TLS, "reading certificate directory %s: %v", dir, failure.Reason(err))
		}
		for _, e := range ents {
			n := e.Name()
			if !strings.HasSuffix(n, ".crt") && !strings.HasSuffix(n, ".cert") && !strings.HasSuffix(n, ".key") {
				continue
			}
			full := filepath.Join(dir, n)
			st, err := os.Stat(full)
			if err != nil || !st.Mode().IsRegular() {
				continue
			}
			b, err := readBounded(full)
			if err != nil {
				return nil, failure.New(failure.TLS, "reading %s: %v", full, failure.Reason(err))
			}
			out[n] = b
		}
	}
	add := func(name, file string) error {
		b, err := readBounded(file)
		if err != nil {
			return failure.New(failure.TLS, "reading %s: %v", file, failure.Reason(err))
		}
		out[name] = b
		return nil
	}
	for i, f := range t.CAFiles {
		if err := add(fmt.Sprintf("pullhelper-ca-%d.crt", i), f); err != nil {
			return nil, err
		}
	}
	for i, pair := range t.ClientPairs {
		if err := add(fmt.Sprintf("pullhelper-client-%d.cert", i), pair[0]); err != nil {
			return nil, err
		}
		if err := add(fmt.Sprintf("pullhelper-client-%d.key", i), pair[1]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// SystemRegistriesD is the signature lookaside configuration directory a
// root process reads (containers-registries.d(5)).
const SystemRegistriesD = "/etc/containers/registries.d"

// maxConfigFile bounds each configuration file read for the copy.
const maxConfigFile = 4 << 20

// loadRegistriesConfig renders the registries.conf the copy uses and reads
// registries.d, so that the copy, which may be unable to read them
// (root-only files, a /tmp the child does not see), gets their contents.
func (p *Plan) loadRegistriesConfig(m *pull.Material) error {
	conf, err := p.registriesConf()
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(conf); err != nil {
		return failure.Wrap(failure.Internal, err, "rendering registries.conf for the copy")
	}
	m.RegistriesConf = buf.Bytes()

	ents, err := os.ReadDir(SystemRegistriesD)
	if err != nil && !os.IsNotExist(err) {
		return failure.New(failure.Usage, "reading %s: %w", SystemRegistriesD, err)
	}
	names := []string{}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".yaml") && e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, n := range names {
		b, err := readBounded(filepath.Join(SystemRegistriesD, n))
		if err != nil {
			return failure.New(failure.Usage, "reading %s: %w", filepath.Join(SystemRegistriesD, n), err)
		}
		if m.RegistriesD == nil {
			m.RegistriesD = map[string][]byte{}
		}
		m.RegistriesD[n] = b
	}
	return nil
}

// readBounded reads a regular file of at most maxConfigFile bytes without
// following a symlink at its last component, through safefile (a FIFO or
// a device is refused without being opened for reading).
func readBounded(path string) ([]byte, error) {
	b, err := safefile.ReadFileNoFollow(path, maxConfigFile)
	if err != nil {
		return nil, errors.New(safefile.Reason(err))
	}
	return b, nil
}

// childRegistriesConf is what the copy's registries.conf holds: the
// endpoints, nothing of short names (the copy gets a qualified reference)
// and no credential helper (credentials are resolved in the parent and
// handed over per host).
type childRegistriesConf struct {
	Registries        []sysregistriesv2.Registry `toml:"registry"`
	CredentialHelpers []string                   `toml:"credential-helpers"`
}

// registriesConf renders the endpoints for containers/image. With
// registries.conf rules: the registries.conf in effect (the file and its
// drop-ins, merged by containers/image as this process sees them). With
// containerd rules: one entry for the image's registry whose location is
// the hosts.toml server (or the registry) and whose mirrors are the
// [host] entries, in order. Either way an endpoint whose trust is off
// (trust.insecure_registries, containerd skip_verify or http) is insecure
// for that host alone.
func (p *Plan) registriesConf() (*childRegistriesConf, error) {
	out := &childRegistriesConf{CredentialHelpers: []string{sysregistriesv2.AuthenticationFileHelper}}
	if p.Sources == "containerd" {
		// containerd asks every host other than the image's registry with
		// ?ns=<registry> (the keyring sets NamespaceProxy by containerd's
		// isProxy rule).
		ns := func(e auth.Endpoint) string { return e.NamespaceProxy }
		primary := p.Endpoints[len(p.Endpoints)-1]
		reg := sysregistriesv2.Registry{Prefix: p.Registry, Endpoint: sysregistriesv2.Endpoint{
			Location: endpointLocation(primary), Insecure: insecure(primary), NamespaceProxy: ns(primary)}}
		for _, e := range p.Endpoints[:len(p.Endpoints)-1] {
			mirror := sysregistriesv2.Endpoint{Location: endpointLocation(e), Insecure: insecure(e), NamespaceProxy: ns(e)}
			if !hasCapability(e, "resolve") {
				mirror.PullFromMirror = sysregistriesv2.MirrorByDigestOnly
			}
			reg.Mirrors = append(reg.Mirrors, mirror)
		}
		out.Registries = []sysregistriesv2.Registry{reg}
		return out, nil
	}
	// The snapshot of what NewPlan checked (snapshot.go), not the paths.
	conf, err := sysregistriesv2.TryUpdatingCache(p.regSnap.sys(p.RegistriesConf))
	if err != nil {
		return nil, failure.New(failure.Usage, "reading registries.conf %s: %s",
			sysregistriesv2.ConfigurationSourceDescription(&types.SystemContext{SystemRegistriesConfPath: p.RegistriesConf}), p.regSnap.describe(auth.RegistriesConfError(err)))
	}
	out.Registries = conf.Registries
	for _, e := range p.Endpoints {
		if !insecure(e) || e.Insecure {
			continue // secure, or registries.conf already says so
		}
		marked := false
		for i := range out.Registries {
			r := &out.Registries[i]
			if r.Location == e.Host {
				r.Insecure, marked = true, true
			}
			for j := range r.Mirrors {
				if hostOf(r.Mirrors[j].Location) == e.Host {
					r.Mirrors[j].Insecure, marked = true, true
				}
			}
		}
		if !marked {
			out.Registries = append(out.Registries, sysregistriesv2.Registry{Prefix: e.Host,
				Endpoint: sysregistriesv2.Endpoint{Location: e.Host, Insecure: true}})
		}
	}
	return out, nil
}

// insecure: containers/image must not verify this endpoint's certificate
// (and may fall back to plain http).
func insecure(e auth.Endpoint) bool { return e.Insecure || !e.Trust.Verify || e.Scheme == "http" }

func hasCapability(e auth.Endpoint, c string) bool {
	for _, x := range e.Capabilities {
		if x == c {
			return true
		}
	}
	return len(e.Capabilities) == 0
}

// endpointLocation is the registries.conf location of a containerd
// endpoint: its host, which serves the image under the same repository
// path (containerd's rule for server and [host] entries).
func endpointLocation(e auth.Endpoint) string { return e.Host }

func hostOf(location string) string {
	h, _, _ := strings.Cut(location, "/")
	return h
}
