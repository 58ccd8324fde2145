package hosts

import (
	"errors"
	"fmt"
	"strings"

	"github.com/pullhelper/pullhelper/internal/regpattern"
	"github.com/pullhelper/pullhelper/internal/safefile"
	"go.podman.io/image/v5/pkg/sysregistriesv2"
	"go.podman.io/image/v5/types"
)

// ScopedFile is one file that applies to the registries matching Pattern
// (trust.ca_files).
type ScopedFile struct {
	Pattern string `json:"registry"`
	File    string `json:"file"`
}

// Config is everything the resolver reads. The pipeline fills it from the
// policy; hosts imports no policy. Empty fields turn their source off.
type Config struct {
	// ContainerdConfig is containerd's config.toml; when set, containerd
	// decides the endpoints.
	ContainerdConfig string
	// RegistriesConf is the effective registries.conf ("" = the
	// containers default search); RegistriesConfDir the drop-in directory
	// ("" = the containers default drop-in directories). The pipeline
	// names its snapshot of the checked files here (pipeline/snapshot.go),
	// so that containers/image reads the bytes that were checked, and
	// RegistriesConfName the caller's file, for messages and explain
	// ("" = RegistriesConf).
	RegistriesConf, RegistriesConfDir, RegistriesConfName string
	// CertDir (one flat directory for every host) or CertsD (roots of
	// ROOT/HOST[:PORT]); CAFiles scoped by pattern (trust.ca_files);
	// InsecureRegistries patterns; TLSVerify false turns verification off
	// everywhere, TLSVerifySetting names who said so ("" = "tls_verify").
	CertDir            string
	CertsD             []string
	CAFiles            []ScopedFile
	InsecureRegistries []string
	TLSVerify          bool
	TLSVerifySetting   string
	// Warn receives the problems a pull goes on with (an unreadable
	// hosts.toml entry); nil drops them.
	Warn func(string)
}

// ConfigError is a Config value the resolver cannot use. Setting is the
// policy key ("auth.containerd_config", ...); the pipeline maps it to the
// flag that set it.
type ConfigError struct {
	Setting string
	Err     error
}

func (e *ConfigError) Error() string { return e.Setting + ": " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Resolver answers endpoint and trust questions for one pull. It is built
// once per pull, in the parent (the files may be readable by root alone).
type Resolver struct {
	c        Config
	ctrd     *ctrdRegistry
	caFiles  []scopedPattern
	insecure []regpattern.Pattern
	sys      *types.SystemContext
}

type scopedPattern struct {
	p    regpattern.Pattern
	file string
}

// New reads containerd's config.toml, the trust settings and
// registries.conf once. Errors are *ConfigError.
func New(c Config) (*Resolver, error) {
	r := &Resolver{c: c}
	bad := func(setting string, err error) (*Resolver, error) {
		return nil, &ConfigError{Setting: setting, Err: err}
	}
	var err error
	if c.ContainerdConfig != "" {
		if r.ctrd, err = loadContainerdConfig(c.ContainerdConfig); err != nil {
			return bad("auth.containerd_config", err)
		}
	}
	for i, f := range c.CAFiles {
		p, err := regpattern.Parse(f.Pattern)
		if err != nil {
			return bad("trust.ca_files", fmt.Errorf("entry %d: %w", i+1, err))
		}
		r.caFiles = append(r.caFiles, scopedPattern{p, f.File})
	}
	if r.insecure, err = regpattern.ParseAll(c.InsecureRegistries); err != nil {
		return bad("trust.insecure_registries", err)
	}
	r.sys = &types.SystemContext{SystemRegistriesConfPath: c.RegistriesConf, SystemRegistriesConfDirPath: c.RegistriesConfDir}
	if _, err := CheckRegistriesConf(r.sys); err != nil {
		return bad("pull.registries_conf", err)
	}
	return r, nil
}

// Containerd reports whether containerd's configuration decides the
// endpoints.
func (r *Resolver) Containerd() bool { return r.ctrd != nil }

// ContainerdAuth is a configs."HOST".auth table of containerd's
// config.toml, undecoded (package auth decodes it as ParseAuth does).
type ContainerdAuth struct {
	Username, Password, Auth, IdentityToken string
}

// ContainerdAuth returns configs."key".auth, the file it is in and where
// in that file it was written (`configs."H".auth` or `auths."URL"`); nil
// when there is none or no containerd config.
func (r *Resolver) ContainerdAuth(key string) (a *ContainerdAuth, file, where string) {
	if r.ctrd == nil {
		return nil, "", ""
	}
	c := r.ctrd.Configs[key].Auth
	if c == nil {
		return nil, "", ""
	}
	return &ContainerdAuth{Username: c.Username, Password: c.Password, Auth: c.Auth, IdentityToken: c.IdentityToken},
		r.ctrd.file, r.ctrd.authKey[key]
}

// CredentialHelpers is registries.conf's credential-helpers list (the
// containers default when it sets none).
func (r *Resolver) CredentialHelpers() ([]string, error) {
	h, err := sysregistriesv2.CredentialHelpers(r.sys)
	if err != nil {
		return nil, fmt.Errorf("reading credential-helpers: %s", RegistriesConfError(err))
	}
	return h, nil
}

// RegistriesConfName names the registries.conf in messages: the caller's
// file, not the snapshot.
func (r *Resolver) RegistriesConfName() string {
	if r.c.RegistriesConfName != "" {
		return r.c.RegistriesConfName
	}
	if r.c.RegistriesConf != "" {
		return r.c.RegistriesConf
	}
	return "registries.conf"
}

func (r *Resolver) warn(msg string) {
	if r.c.Warn != nil {
		r.c.Warn(msg)
	}
}

// ErrBlocked is wrapped by Endpoints when registries.conf blocks every
// endpoint of the image.
var ErrBlocked = errors.New("blocked in registries.conf")

func splitRepo(repository string) (domain, path string) {
	domain, rest, ok := strings.Cut(repository, "/")
	if ok {
		path = "/" + rest
	}
	return domain, path
}

// readFile reads a file root reads for the caller: a regular file (a FIFO
// or a device is refused without blocking), at most safefile.MaxConfig
// bytes, symlinks followed as the owners of these formats do
// (containers/image and containerd use os.ReadFile). A missing file still
// matches fs.ErrNotExist.
func readFile(path string) ([]byte, error) { return safefile.ReadFile(path, safefile.MaxConfig) }
