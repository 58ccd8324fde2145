package pull

import (
	"encoding/base64"
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
	// Secrets are every endpoint's credentials, each once, by ID.
	Secrets         map[string]Secret `json:"secrets,omitempty"`
	SignaturePolicy json.RawMessage   `json:"signature_policy,omitempty"` // nil: built-in accept-anything
	// Certs are each endpoint host's TLS files, host → file name →
	// content (*.crt CAs, X.cert/X.key client pairs).
	Certs map[string]map[string][]byte `json:"certs,omitempty"`
	// RegistriesConf is the registries.conf in effect (drop-ins merged),
	// rendered by the pipeline; the copy reads no host configuration.
	RegistriesConf []byte `json:"registries_conf,omitempty"`
	// Headers are the extra headers of each endpoint (hosts.toml header),
	// by the endpoint's index in Request.Endpoints; nil when none has any.
	Headers []map[string][]string `json:"headers,omitempty"`
	// RegistriesD are the files of registries.d (signature lookaside
	// configuration), name → content.
	RegistriesD map[string][]byte `json:"registries_d,omitempty"`
	// SystemRoots are the system's trust roots as x509.SystemCertPool
	// would read them in the parent (PEM, each certificate once); nil: the
	// copy loads them itself, as Go does. Every endpoint's pool starts
	// from them (roots.go). Not JSON: the child gets them raw after its
	// request line (reexec).
	SystemRoots []byte `json:"-"`
	// Lookaside are the signatures of a file:// lookaside the policy
	// needs, read by the parent (nil: none, or not a file:// one).
	Lookaside *Lookaside `json:"lookaside,omitempty"`

	roots rootPool // built from SystemRoots once per Copy
}

// Secret is one credential as the registry client needs it.
type Secret struct {
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	IdentityToken string `json:"identity_token,omitempty"`
}

// systemContext is the one place a Request and its Material become
// containers/image settings. Certificates, the auth file and the rendered
// configuration are written into the private configuration directory
// (Stage.Config, in memory, apart from the staging area on DEST's disk),
// and every configuration path containers/image reads points into it, so
// that it reads none of the host's.
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
	files := m.RegistriesD
	if m.Lookaside != nil {
		var err error
		if files, err = writeLookaside(m.Lookaside, config, m.RegistriesD); err != nil {
			return nil, failure.Wrap(failure.Destination, err, "preparing the copy's signature lookaside")
		}
	}
	for n, b := range files {
		if _, err := write(filepath.Join("registries.d", filepath.Base(n)), b); err != nil {
			return nil, err
		}
	}
	sys := &types.SystemContext{
		// Credentials come from the auth file Copy writes for each
		// candidate (per host), never from DockerAuthConfig, which
		// containers/image would send to every host of the image's domain.
		// Only the files the pipeline handed over: the rendered
		// registries.conf (no drop-in directory) and registries.d.
		SystemRegistriesConfPath:    regConf,
		SystemRegistriesConfDirPath: filepath.Join(config, "registries.conf.d"),
		RegistriesDirPath:           regD,
		DockerRegistryUserAgent:     p.UserAgent,
		// Large temporary files (docker-archive) go to the staging area
		// on DEST's filesystem, never to the host's /var/tmp.
		BigFilesTemporaryDir: st.Work,
		// Keep containers/image's blob-info cache with the configuration:
		// a pull leaves nothing behind.
		BlobInfoCacheDir: config,
	}
	if pl := p.Platform; pl != nil {
		// The instance of an index the copy chooses (ChooseInstance).
		sys.OSChoice, sys.ArchitectureChoice, sys.VariantChoice = pl.OS, pl.Architecture, pl.Variant
	}
	// Per-host certificate directories, as containers/image lays them out
	// (ROOT/HOST[:PORT]/…): each endpoint gets exactly its own trust.
	certs := filepath.Join(config, "certs.d")
	if err := os.MkdirAll(certs, 0o700); err != nil {
		return nil, failure.Wrap(failure.Destination, err, "preparing certificates")
	}
	for host, files := range m.Certs {
		for n, b := range files {
			if _, err := write(filepath.Join("certs.d", filepath.Base(host), filepath.Base(n)), b); err != nil {
				return nil, err
			}
		}
	}
	sys.DockerPerHostCertDirPath = certs
	sys.AuthFilePath = filepath.Join(config, "auth.json")
	// --tls-verify=false (or tls_verify = false) turns verification off
	// for every host; per-host insecurity is in the rendered
	// registries.conf.
	if !p.TLSVerify {
		sys.DockerInsecureSkipTLSVerify = types.OptionalBoolTrue
	}
	return sys, nil
}

func (m *Material) policyContext(p *Request) (*signature.PolicyContext, error) {
	pol := &signature.Policy{Default: signature.PolicyRequirements{signature.NewPRInsecureAcceptAnything()}}
	if m.SignaturePolicy != nil {
		var err error
		if pol, err = signature.NewPolicyFromBytes(m.SignaturePolicy); err != nil {
			return nil, failure.New(failure.Usage, "signature policy %s: %w", p.Signature.File, err)
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
// write-back is charged to the pull's cgroup); Copy skips it for a
// Stage.NoSync.
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

// authFile is containers-auth.json(5): one entry per host.
type authFile struct {
	Auths map[string]authEntry `json:"auths"`
}

type authEntry struct {
	Auth          string `json:"auth,omitempty"`
	IdentityToken string `json:"identitytoken,omitempty"`
}

// candidates is how many credential rounds the copy may need: the largest
// candidate list of any endpoint, at least one (anonymous).
func (p *Request) candidates() int {
	n := 1
	for _, e := range p.Endpoints {
		n = max(n, len(e.Credentials))
	}
	return n
}

// writeAuth writes the auth file of round i: every endpoint host gets its
// own i-th candidate (its last when it has fewer), so that each credential
// goes only to the host it is for; a host without one is anonymous.
func (m *Material) writeAuth(p *Request, path string, i int) error {
	f := authFile{Auths: map[string]authEntry{}}
	for _, e := range p.Endpoints {
		if len(e.Credentials) == 0 || e.Blocked {
			continue
		}
		if _, done := f.Auths[e.Host]; done {
			continue
		}
		c := e.Credentials[min(i, len(e.Credentials)-1)]
		s, ok := m.Secrets[c.ID]
		if !ok {
			continue
		}
		var entry authEntry
		if s.IdentityToken != "" {
			entry.IdentityToken = s.IdentityToken
			if s.Username != "" {
				entry.Auth = base64.StdEncoding.EncodeToString([]byte(s.Username + ":"))
			}
		} else {
			entry.Auth = base64.StdEncoding.EncodeToString([]byte(s.Username + ":" + s.Password))
		}
		f.Auths[e.Host] = entry
	}
	b, err := json.Marshal(f)
	if err != nil {
		return failure.Wrap(failure.Internal, err, "rendering the auth file")
	}
	return failure.Wrap(failure.Destination, os.WriteFile(path, b, 0o600), "writing the auth file")
}
