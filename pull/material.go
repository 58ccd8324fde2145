package pull

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

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
	// RegistriesConf is the registries.conf in effect (drop-ins merged),
	// rendered by the pipeline; the copy reads no host configuration.
	RegistriesConf []byte `json:"registries_conf,omitempty"`
	// RegistriesD are the files of registries.d (signature lookaside
	// configuration), name → content.
	RegistriesD map[string][]byte `json:"registries_d,omitempty"`
}

// Secret is one credential as the registry client needs it.
type Secret struct {
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	IdentityToken string `json:"identity_token,omitempty"`
}

// systemContext is the one place a Plan and its Material become
// containers/image settings. Certificates are written into a private
// directory inside the staging area, so nothing outside it is read.
func (m *Material) systemContext(p *Request, st *Stage) (*types.SystemContext, error) {
	config := st.Config
	if err := os.Mkdir(config, 0o700); err != nil && !os.IsExist(err) {
		return nil, failure.Wrap(failure.Destination, err, "preparing the copy's configuration")
	}
	write := func(name string, b []byte) (string, error) {
		f := filepath.Join(config, name)
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			return "", failure.Wrap(failure.Destination, err, "preparing the copy's configuration")
		}
		return f, failure.Wrap(failure.Destination, os.WriteFile(f, b, 0o600), "preparing the copy's configuration")
	}
	regConf, err := write("registries.conf", m.RegistriesConf)
	if err != nil {
		return nil, err
	}
	regD := filepath.Join(config, "registries.d")
	if err := os.MkdirAll(regD, 0o700); err != nil {
		return nil, failure.Wrap(failure.Destination, err, "preparing the copy's configuration")
	}
	for n, b := range m.RegistriesD {
		if _, err := write(filepath.Join("registries.d", filepath.Base(n)), b); err != nil {
			return nil, err
		}
	}
	sys := &types.SystemContext{
		DockerCertPath: noCertDir,
		// Only the files the pipeline handed over: the rendered
		// registries.conf (no drop-in directory) and registries.d.
		SystemRegistriesConfPath:    regConf,
		SystemRegistriesConfDirPath: filepath.Join(config, "registries.conf.d"),
		RegistriesDirPath:           regD,
		DockerRegistryUserAgent:     p.UserAgent,
		// Large temporary files (docker-archive) go to the staging area
		// on DEST's filesystem, never to the host's /var/tmp.
		BigFilesTemporaryDir: st.Root,
		// Always set, so that containers/image searches no auth file of
		// its own: empty means anonymous. Copy sets each candidate in turn.
		DockerAuthConfig: &types.DockerAuthConfig{},
		// Keep containers/image's blob-info cache with the configuration:
		// a pull leaves nothing behind.
		BlobInfoCacheDir: config,
	}
	if len(m.Certs) > 0 {
		dir := filepath.Join(config, "certs")
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

func (m *Material) policyContext(p *Request) (*signature.PolicyContext, error) {
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
