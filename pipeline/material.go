package pipeline

import (
	"crypto/tls"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/pullhelper/pullhelper/hosts"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/safefile"
	"github.com/pullhelper/pullhelper/internal/wire"
	"github.com/pullhelper/pullhelper/pull"
	"go.podman.io/image/v5/docker/reference"
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
		pol, b, err := loadSignaturePolicy(f)
		if err != nil {
			return nil, err
		}
		if err := p.refuseSigstore(pol); err != nil {
			return nil, err
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
		if err := checkClientPairs(e.Host, files); err != nil {
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
	if err := p.loadFileLookaside(m); err != nil {
		return nil, err
	}
	return m, nil
}

// loadSignaturePolicy reads and parses the signature policy f, and
// returns it with the key files it names read and inlined (the copy
// cannot read them, and the re-check must not read them unbounded).
func loadSignaturePolicy(f string) (*signature.Policy, []byte, error) {
	b, err := readBounded(f)
	if err != nil {
		return nil, nil, failure.New(failure.Usage, "reading signature policy %s: %w", f, err)
	}
	pol, err := signature.NewPolicyFromBytes(b)
	if err != nil {
		// The decoder's message may quote the file: what kind only.
		return nil, nil, failure.New(failure.Usage, "signature policy %s: %s", f, safefile.Redact(err.Error()))
	}
	if b, err = inlinePolicyKeys(f, b); err != nil {
		return nil, nil, err
	}
	if _, err := signature.NewPolicyFromBytes(b); err != nil {
		return nil, nil, failure.New(failure.Usage, "signature policy %s with its key files inlined: %s", f, safefile.Redact(err.Error()))
	}
	return pol, b, nil
}

// refuseSigstore refuses a policy whose requirements for this image ask
// for sigstore signatures (sigstoreSigned): the copy reads signatures
// through containers/image's copy of pullhelper's own image source, which
// hands over simple signing signatures only (imagesource.FromPublic), so
// such a requirement would reject every image, signed or not.
func (p *Plan) refuseSigstore(pol *signature.Policy) error {
	named, err := reference.ParseNormalizedNamed(p.Reference)
	if err != nil {
		return failure.Wrap(failure.Internal, err, "")
	}
	if scope, ok := sigstoreScope(pol, named); ok {
		return failure.New(failure.Usage, "signature policy %s: the requirements for %s are sigstoreSigned: pullhelper cannot check sigstore signatures yet (its copy sees only simple signing signatures)", p.Signature.File, scope)
	}
	return nil
}

// certFiles reads one host's TLS material as containers/image lays it out
// in a per-host directory: CA bundles (*.crt) and client pairs (X.cert,
// X.key) from the certificate directory, then trust.ca_files and
// containerd's ca/client files under names of their own.
func certFiles(t wire.Trust) (map[string][]byte, error) {
	out := map[string][]byte{}
	if dir := t.CertDir; dir != "" {
		ents, err := os.ReadDir(dir)
		if err != nil && !os.IsNotExist(err) {
			return nil, failure.New(failure.TLS, "reading certificate directory %s: %w", dir, &causeError{failure.Reason(err), err})
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
				return nil, failure.New(failure.TLS, "reading %s: %w", full, err)
			}
			out[n] = b
		}
	}
	add := func(name, file string) error {
		b, err := readBounded(file)
		if err != nil {
			return failure.New(failure.TLS, "reading %s: %w", file, err)
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

// checkClientPairs refuses, as containers/image's SetupCertificates
// refuses them when the copy loads a host's certificates (exit 4, after
// the setup), a client certificate (X.cert) without its key (X.key), a key
// without its certificate, and a pair that does not load; the same
// messages. A CA bundle (*.crt) that holds no certificate is ignored, as
// it ignores one.
func checkClientPairs(host string, files map[string][]byte) error {
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if base, ok := strings.CutSuffix(name, ".cert"); ok {
			key, ok := files[base+".key"]
			if !ok {
				return failure.New(failure.TLS, "loading the certificates of %s: missing key %s for client certificate %s. Note that CA certificates should use the extension .crt", host, base+".key", name)
			}
			if _, err := tls.X509KeyPair(files[name], key); err != nil {
				return failure.New(failure.TLS, "loading the certificates of %s: client certificate %s and key %s: %v", host, name, base+".key", err)
			}
		}
		if base, ok := strings.CutSuffix(name, ".key"); ok {
			if _, ok := files[base+".cert"]; !ok {
				return failure.New(failure.TLS, "loading the certificates of %s: missing client certificate %s for key %s", host, base+".cert", name)
			}
		}
	}
	return nil
}

// SystemRegistriesD is the signature lookaside configuration directory a
// root process reads (containers-registries.d(5)).
const SystemRegistriesD = "/etc/containers/registries.d"

// maxConfigFile bounds each configuration file read for the copy.
const maxConfigFile = 4 << 20

// loadRegistriesConfig renders the registries.conf the copy uses
// (hosts.RenderRegistriesConf) and reads registries.d, so that the copy,
// which may be unable to read them (root-only files, a /tmp the child does
// not see), gets their contents.
func (p *Plan) loadRegistriesConfig(m *pull.Material) error {
	var base *sysregistriesv2.V2RegistriesConf
	if p.Sources != "containerd" {
		// The snapshot of what NewPlan checked (snapshot.go), not the
		// paths, as containers/image parsed it for NewPlan (its cache,
		// which Plan.Close drops; the snapshot does not change): only the
		// registries are rendered.
		regs, err := sysregistriesv2.GetRegistries(p.regSnap.sys(p.RegistriesConf))
		if err != nil {
			return failure.New(failure.Usage, "reading registries.conf %s: %s",
				sysregistriesv2.ConfigurationSourceDescription(&types.SystemContext{SystemRegistriesConfPath: p.RegistriesConf}), p.regSnap.describe(hosts.RegistriesConfError(err)))
		}
		base = &sysregistriesv2.V2RegistriesConf{Registries: regs}
	}
	conf, err := hosts.RenderRegistriesConf(p.Registry, p.Endpoints, base)
	if err != nil {
		return failure.Wrap(failure.Internal, err, "rendering registries.conf for the copy")
	}
	m.RegistriesConf = conf

	ents, err := os.ReadDir(SystemRegistriesD)
	if err != nil && !os.IsNotExist(err) {
		return failure.Wrap(failure.Usage, err, "reading %s", SystemRegistriesD)
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
			return failure.Wrap(failure.Usage, err, "reading %s", filepath.Join(SystemRegistriesD, n))
		}
		if m.RegistriesD == nil {
			m.RegistriesD = map[string][]byte{}
		}
		m.RegistriesD[n] = b
	}
	return nil
}

// causeError is a file error said by its reason (the caller names the
// file) that keeps its cause, so that errors.Is(err, fs.ErrPermission)
// tells a file the caller may not read (explain as another user).
type causeError struct {
	msg string
	err error
}

func (e *causeError) Error() string { return e.msg }
func (e *causeError) Unwrap() error { return e.err }

// reason is err said as safefile.Reason says it, its cause kept.
func reason(err error) error { return &causeError{safefile.Reason(err), err} }

// readBounded reads a regular file of at most maxConfigFile bytes without
// following a symlink at its last component, through safefile (a FIFO or
// a device is refused without being opened for reading).
func readBounded(path string) ([]byte, error) {
	b, err := safefile.ReadFileNoFollow(path, maxConfigFile)
	if err != nil {
		return nil, reason(err)
	}
	return b, nil
}
