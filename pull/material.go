package pull

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pullhelper/pullhelper/internal/failure"
	"go.podman.io/image/v5/signature"
	"go.podman.io/image/v5/types"
)

// Material is everything secret or privileged a Copy needs, read by the
// parent (which may read root-only files) and handed to the network-facing
// code, over the plan pipe when isolated. It never appears in explain, logs
// or errors.
type Material struct {
	// Secrets are the plan's Credentials, in the same order.
	Secrets         []Secret          `json:"secrets,omitempty"`
	SignaturePolicy json.RawMessage   `json:"signature_policy,omitempty"` // nil: built-in accept-anything
	Certs           map[string][]byte `json:"certs,omitempty"`            // file name → content (*.crt, *.cert, *.key)
}

// Secret is one credential as the registry client needs it.
type Secret struct {
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	IdentityToken string `json:"identity_token,omitempty"`
}

// LoadMaterial reads the credential, the signature policy and the
// certificate directory's files for this plan. Errors are failure.Usage or
// failure.TLS and name the file.
func (p *Plan) LoadMaterial() (*Material, error) {
	m := &Material{}
	for _, c := range p.Credentials {
		m.Secrets = append(m.Secrets, Secret{Username: c.Username, Password: c.Password, IdentityToken: c.IdentityToken})
	}
	if f := p.Signature.File; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, failure.New(failure.Usage, "reading signature policy %s: %v", f, pathErrno(err))
		}
		if _, err := signature.NewPolicyFromBytes(b); err != nil {
			return nil, failure.New(failure.Usage, "signature policy %s: %v", f, err)
		}
		m.SignaturePolicy = b
	}
	if dir := p.Trust.CertDir; dir != "" {
		ents, err := os.ReadDir(dir)
		if err != nil && !os.IsNotExist(err) {
			return nil, failure.New(failure.TLS, "reading certificate directory %s: %v", dir, pathErrno(err))
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
				return nil, failure.New(failure.TLS, "reading %s: %v", full, pathErrno(err))
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
			return failure.New(failure.TLS, "reading %s: %v", file, pathErrno(err))
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
	return m, nil
}

// systemContext is the one place a Plan and its Material become
// containers/image settings. Certificates are written into a private
// directory inside the staging area, so nothing outside it is read.
func (m *Material) systemContext(p *Plan, st *Stage) (*types.SystemContext, error) {
	sys := &types.SystemContext{
		DockerCertPath:           noCertDir,
		SystemRegistriesConfPath: p.RegistriesConf,
		DockerRegistryUserAgent:  "pullhelper/" + Version,
		// Always set, so that containers/image searches no auth file of
		// its own: empty means anonymous. Copy sets each candidate in turn.
		DockerAuthConfig: &types.DockerAuthConfig{},
		// Keep containers/image's blob-info cache inside the staging area:
		// a pull leaves nothing behind outside DEST.
		BlobInfoCacheDir: st.Root,
	}
	if len(m.Certs) > 0 {
		dir := filepath.Join(st.Root, "certs")
		if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
			return nil, failure.Wrap(failure.Destination, err, "preparing certificates")
		}
		for n, b := range m.Certs {
			if err := os.WriteFile(filepath.Join(dir, filepath.Base(n)), b, 0o600); err != nil {
				return nil, failure.Wrap(failure.Destination, err, "preparing certificates")
			}
		}
		sys.DockerCertPath = dir
	}
	if !p.Trust.Verify {
		sys.DockerInsecureSkipTLSVerify = types.OptionalBoolTrue
	}
	return sys, nil
}

func (m *Material) policyContext(p *Plan) (*signature.PolicyContext, error) {
	pol := &signature.Policy{Default: signature.PolicyRequirements{signature.NewPRInsecureAcceptAnything()}}
	if m.SignaturePolicy != nil {
		var err error
		if pol, err = signature.NewPolicyFromBytes(m.SignaturePolicy); err != nil {
			return nil, failure.New(failure.Usage, "signature policy %s: %v", p.Signature.File, err)
		}
	}
	pc, err := signature.NewPolicyContext(pol)
	if err != nil {
		return nil, failure.Wrap(failure.Usage, err, "signature policy")
	}
	return pc, nil
}

// syncTree fsyncs every file and directory under root, so that a commit
// by rename publishes data that is on disk (and, on cgroup v1, so that the
// write-back is charged to the pull's cgroup).
func syncTree(root string) error {
	return filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := f.Sync(); err != nil {
			return fmt.Errorf("fsync %s: %w", path, err)
		}
		return nil
	})
}
