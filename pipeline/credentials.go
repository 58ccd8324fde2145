package pipeline

import (
	"errors"
	"os"
	"strings"

	"github.com/pullhelper/pullhelper/auth"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/policy"
	"go.podman.io/image/v5/docker/reference"
)

// DefaultProviderCacheDir holds the kubelet credential-provider responses
// between pulls on this node (0700).
const DefaultProviderCacheDir = "/run/pullhelper/credential-provider-cache"

// keyringConfig translates the policy's [auth] and [trust] settings for
// package auth (which imports no policy).
func keyringConfig(l *policy.Loaded, in Inputs, registriesConf string, snap *regSnapshot) auth.Config {
	a, t := l.Auth, l.Trust
	c := auth.Config{
		PullSecrets: a.PullSecrets, KubeletDockerConfig: a.KubeletDockerConfig,
		CredentialProviderConfig: a.CredentialProviderConfig, CredentialProviderBinDir: a.CredentialProviderBinDir,
		RunProviders:        !in.Explain,
		ContainerdConfig:    a.ContainerdConfig,
		ServiceAccountToken: a.ServiceAccountToken, ServiceAccountUsername: a.ServiceAccountUsername,
		ServiceAccountRegistries:    a.ServiceAccountRegistries,
		ProviderServiceAccountToken: a.ProviderServiceAccountToken,
		Authfile:                    a.Authfile, Env: in.Env,
		InlinePullSecrets: in.PullSecrets, InlineAuthfile: in.Authfile, InlineServiceAccountToken: in.ServiceAccountToken,
		InlineProviderServiceAccountToken: in.ProviderServiceAccountToken,
		RegistriesConfName:                registriesConf,
		CertDir:                           t.CertDir, CertsD: t.CertsD, InsecureRegistries: t.InsecureRegistries,
		TLSVerify: t.TLSVerify, TLSVerifySetting: "tls_verify",
	}
	// containers/image reads the checked bytes, not the caller's paths.
	sys := snap.sys(registriesConf)
	c.RegistriesConf, c.RegistriesConfDir = sys.SystemRegistriesConfPath, sys.SystemRegistriesConfDirPath
	if src, ok := l.Defined("trust.tls_verify"); ok && strings.HasPrefix(src, "-") {
		c.TLSVerifySetting = src
	}
	// Validate checked the entries.
	c.ProviderServiceAccountAnnotations, _ = policy.ParseAnnotations(a.ProviderServiceAccountAnnotations)
	for _, f := range t.CAFiles {
		c.CAFiles = append(c.CAFiles, auth.ScopedFile{Pattern: f.Registry, File: f.File})
	}
	if c.CredentialProviderConfig != "" && c.RunProviders {
		c.ProviderCacheDir = DefaultProviderCacheDir
		if err := os.MkdirAll(c.ProviderCacheDir, 0o700); err != nil {
			c.ProviderCacheDir = ""
		}
	}
	return c
}

// resolveEndpoints builds the keyring once and asks it for every host the
// pull contacts, in order (containerd hosts.toml [host] entries and
// server, or registries.conf mirrors, then the registry), each with its own
// credential candidates and trust. The last endpoint is the primary: its
// candidates and trust are the plan's credentials and trust.
func (p *Plan) resolveEndpoints(l *policy.Loaded, in Inputs, named reference.Named) error {
	k, err := auth.NewKeyring(keyringConfig(l, in, p.RegistriesConf, p.regSnap))
	if err != nil {
		var ce *auth.ConfigError
		if errors.As(err, &ce) {
			return failure.New(failure.Usage, "%s: %w", settingName(l, ce.Setting), ce.Err)
		}
		return failure.Wrap(failure.Usage, err, "")
	}
	files, userSpecified := k.AuthFiles()
	p.AuthFiles = files
	if userSpecified && in.Authfile == nil {
		what := "--authfile"
		if l.Auth.Authfile == "" {
			what = "REGISTRY_AUTH_FILE"
		} else if src, _ := l.Defined("auth.authfile"); src == "file" {
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
	eps, err := k.Endpoints(named.String())
	p.Warnings = append(p.Warnings, k.Warnings...)
	if err != nil {
		return failure.New(failure.Usage, "%s: %w", p.Reference, err)
	}
	p.Endpoints = eps
	primary := eps[len(eps)-1]
	p.Credentials = primary.Credentials
	if p.Credentials == nil {
		p.Credentials = []auth.Credential{}
	}
	p.Trust = primary.Trust
	return nil
}
