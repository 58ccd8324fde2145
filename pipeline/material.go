package pipeline

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/BurntSushi/toml"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/pull"
	"go.podman.io/image/v5/pkg/sysregistriesv2"
	"go.podman.io/image/v5/signature"
	"go.podman.io/image/v5/types"
)

// LoadMaterial reads the credential, the signature policy and the
// certificate directory's files for this plan. Errors are failure.Usage or
// failure.TLS and name the file.
func (p *Plan) LoadMaterial() (*pull.Material, error) {
	m := &pull.Material{}
	for _, c := range p.Credentials {
		m.Secrets = append(m.Secrets, pull.Secret{Username: c.Username, Password: c.Password, IdentityToken: c.IdentityToken})
	}
	if f := p.Signature.File; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, failure.New(failure.Usage, "reading signature policy %s: %v", f, failure.Reason(err))
		}
		if _, err := signature.NewPolicyFromBytes(b); err != nil {
			return nil, failure.New(failure.Usage, "signature policy %s: %v", f, err)
		}
		m.SignaturePolicy = b
	}
	if dir := p.Trust.CertDir; dir != "" {
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
			b, err := os.ReadFile(full)
			if err != nil {
				return nil, failure.New(failure.TLS, "reading %s: %v", full, failure.Reason(err))
			}
			if m.Certs == nil {
				m.Certs = map[string][]byte{}
			}
			m.Certs[n] = b
		}
	}
	add := func(name, file string) error {
		b, err := os.ReadFile(file)
		if err != nil {
			return failure.New(failure.TLS, "reading %s: %v", file, failure.Reason(err))
		}
		if m.Certs == nil {
			m.Certs = map[string][]byte{}
		}
		m.Certs[name] = b
		return nil
	}
	for i, f := range p.Trust.CAFiles {
		if err := add(fmt.Sprintf("pullhelper-ca-%d.crt", i), f); err != nil {
			return nil, err
		}
	}
	for i, pair := range p.Trust.ClientPairs {
		if err := add(fmt.Sprintf("pullhelper-client-%d.cert", i), pair[0]); err != nil {
			return nil, err
		}
		if err := add(fmt.Sprintf("pullhelper-client-%d.key", i), pair[1]); err != nil {
			return nil, err
		}
	}
	if err := p.loadRegistriesConfig(m); err != nil {
		return nil, err
	}
	return m, nil
}

// SystemRegistriesD is the signature lookaside configuration directory a
// root process reads (containers-registries.d(5)).
const SystemRegistriesD = "/etc/containers/registries.d"

// maxConfigFile bounds each configuration file read for the copy.
const maxConfigFile = 4 << 20

// loadRegistriesConfig renders the registries.conf in effect (the file and
// its drop-ins, merged by containers/image as this process sees them) and
// reads registries.d, so that the copy, which may be unable to read them
// (root-only files, a /tmp the child does not see), gets their contents.
func (p *Plan) loadRegistriesConfig(m *pull.Material) error {
	sys := &types.SystemContext{SystemRegistriesConfPath: p.RegistriesConf}
	conf, err := sysregistriesv2.TryUpdatingCache(sys)
	if err != nil {
		return failure.New(failure.Usage, "reading registries.conf %s: %v", sysregistriesv2.ConfigurationSourceDescription(sys), err)
	}
	out := *conf
	// Credentials are resolved here, in the parent; the copy consults only
	// the auth data it is handed.
	out.CredentialHelpers = []string{"containers-auth.json"}
	// The copy gets a fully qualified reference; aliases and short-name
	// prompts are the parent's business.
	out.ShortNameMode = ""
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(struct {
		Registries                  []sysregistriesv2.Registry `toml:"registry"`
		UnqualifiedSearchRegistries []string                   `toml:"unqualified-search-registries"`
		CredentialHelpers           []string                   `toml:"credential-helpers"`
	}{out.Registries, out.UnqualifiedSearchRegistries, out.CredentialHelpers}); err != nil {
		return failure.Wrap(failure.Internal, err, "rendering registries.conf for the copy")
	}
	m.RegistriesConf = buf.Bytes()

	ents, err := os.ReadDir(SystemRegistriesD)
	if err != nil && !os.IsNotExist(err) {
		return failure.New(failure.Usage, "reading %s: %v", SystemRegistriesD, err)
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
			return failure.New(failure.Usage, "reading %s: %v", filepath.Join(SystemRegistriesD, n), err)
		}
		if m.RegistriesD == nil {
			m.RegistriesD = map[string][]byte{}
		}
		m.RegistriesD[n] = b
	}
	return nil
}

// readBounded reads a regular file of at most maxConfigFile bytes without
// following a symlink at its last component.
func readBounded(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfigFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxConfigFile {
		return nil, fmt.Errorf("larger than %d bytes", maxConfigFile)
	}
	return b, nil
}
