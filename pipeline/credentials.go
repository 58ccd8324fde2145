package pipeline

import (
	"errors"
	"strings"

	"github.com/pullhelper/pullhelper/auth"
	"github.com/pullhelper/pullhelper/hosts"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/state"
	"github.com/pullhelper/pullhelper/internal/wire"
	"github.com/pullhelper/pullhelper/policy"
	"go.podman.io/image/v5/docker/reference"
)

// hostsConfig translates the policy's [trust] settings, auth.containerd_config
// and the registries.conf snapshot for package hosts (which imports no
// policy).
func hostsConfig(l *policy.Loaded, registriesConf string, snap *regSnapshot) hosts.Config {
	t := l.Trust
	c := hosts.Config{
		ContainerdConfig:   l.Auth.ContainerdConfig,
		RegistriesConfName: registriesConf,
		CertDir:            t.CertDir, CertsD: t.CertsD, InsecureRegistries: t.InsecureRegistries,
		TLSVerify: t.TLSVerify, TLSVerifySetting: "tls_verify",
	}
	// containers/image reads the checked bytes, not the caller's paths.
	sys := snap.sys(registriesConf)
	c.RegistriesConf, c.RegistriesConfDir = sys.SystemRegistriesConfPath, sys.SystemRegistriesConfDirPath
	if src, ok := l.Defined("trust.tls_verify"); ok && strings.HasPrefix(src, "-") {
		c.TLSVerifySetting = src
	}
	for _, f := range t.CAFiles {
		c.CAFiles = append(c.CAFiles, hosts.ScopedFile{Pattern: f.Registry, File: f.File})
	}
	return c
}

// keyringConfig translates the policy's [auth] settings for package auth
// (which imports no policy).
// The warning, when not empty, says why responses are not cached.
func keyringConfig(l *policy.Loaded, in Inputs) (auth.Config, string) {
	a := l.Auth
	c := auth.Config{
		PullSecrets: a.PullSecrets, KubeletDockerConfig: a.KubeletDockerConfig,
		CredentialProviderConfig: a.CredentialProviderConfig, CredentialProviderBinDir: a.CredentialProviderBinDir,
		RunProviders:        !in.Explain,
		ServiceAccountToken: a.ServiceAccountToken, ServiceAccountUsername: a.ServiceAccountUsername,
		ServiceAccountRegistries:    a.ServiceAccountRegistries,
		ProviderServiceAccountToken: a.ProviderServiceAccountToken,
		Authfile:                    a.Authfile, Env: in.Env,
		InlinePullSecrets: in.PullSecrets, InlineAuthfile: in.Authfile, InlineServiceAccountToken: in.ServiceAccountToken,
		InlineProviderServiceAccountToken: in.ProviderServiceAccountToken,
		Request:                           in.Request,
	}
	// Validate checked the entries.
	c.ProviderServiceAccountAnnotations, _ = policy.ParseAnnotations(a.ProviderServiceAccountAnnotations)
	if c.CredentialProviderConfig != "" && c.RunProviders {
		// The responses between pulls on this node: in a directory only
		// root can change (state.CheckDir), else not cached.
		c.ProviderCacheDir = in.stateRoot().ProviderCache()
		if err := state.CheckDir(c.ProviderCacheDir); err != nil {
			c.ProviderCacheDir = ""
			return c, "credential provider responses are not cached: " + err.Error()
		}
	}
	return c, ""
}

// resolveEndpoints reads the endpoint and trust settings (hosts) and the
// credential sources (auth) once, lists every host the pull contacts, in
// order (containerd hosts.toml [host] entries and server, or
// registries.conf mirrors, then the registry), each with its trust, and
// gives each its own credential candidates. The last endpoint is the
// primary: its candidates and trust are the plan's credentials and trust.
func (p *Plan) resolveEndpoints(l *policy.Loaded, in Inputs, named reference.Named) error {
	var k *auth.Keyring
	hc := hostsConfig(l, p.RegistriesConf, p.regSnap)
	hc.Warn = func(msg string) {
		if k != nil {
			k.Warn(msg) // one list, in the order they happen
		}
	}
	r, err := hosts.New(hc)
	if err != nil {
		return settingError(l, err)
	}
	kc, cacheWarning := keyringConfig(l, in)
	if k, err = auth.NewKeyring(kc, r); err != nil {
		return settingError(l, err)
	}
	if cacheWarning != "" {
		k.Warn(cacheWarning)
	}
	files, userSpecified := k.AuthFiles()
	p.AuthFiles = files
	// A file the caller names must exist; CRI-O's global_auth_file need
	// not (none is read while it is missing, as CRI-O reads none).
	if src, _ := l.Defined("auth.authfile"); userSpecified && in.Authfile == nil && src != policy.SourceCRIOGlobalAuthFile {
		what := "--authfile"
		if l.Auth.Authfile == "" {
			what = "REGISTRY_AUTH_FILE"
		} else if src == "file" {
			what = "auth.authfile"
		}
		if err := mustExist(files[0].Path, "auth file", what); err != nil {
			return err
		}
	}
	p.KubeletDockerConfig = k.NodeDockerConfig()
	p.Sources = "registries.conf"
	if l.Auth.ContainerdConfig != "" {
		p.Sources = "containerd"
	}
	eps, err := r.Endpoints(named.String())
	if err != nil {
		p.Warnings = append(p.Warnings, k.Warnings...)
		return failure.Wrap(failure.Usage, err, "%s", p.Reference)
	}
	p.Endpoints, err = k.Fill(eps)
	p.Warnings = append(p.Warnings, k.Warnings...)
	if err != nil {
		// As containers/image and containerd fail the lookup: fix the file.
		return failure.Wrap(failure.Usage, err, "")
	}
	primary := p.Endpoints[len(p.Endpoints)-1]
	p.Credentials = primary.Credentials
	if p.Credentials == nil {
		p.Credentials = []wire.Credential{}
	}
	p.Trust = primary.Trust
	return nil
}

// settingError is a hosts or auth configuration error as the user set it:
// the flag or policy key, then the reason.
func settingError(l *policy.Loaded, err error) error {
	var he *hosts.ConfigError
	if errors.As(err, &he) {
		return failure.Wrap(failure.Usage, he.Err, "%s", settingName(l, he.Setting))
	}
	var ce *auth.ConfigError
	if errors.As(err, &ce) {
		return failure.Wrap(failure.Usage, ce.Err, "%s", settingName(l, ce.Setting))
	}
	return failure.Wrap(failure.Usage, err, "")
}
