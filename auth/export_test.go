package auth

import (
	"errors"
	"strings"

	"github.com/pullhelper/pullhelper/hosts"
	"github.com/pullhelper/pullhelper/internal/wire"
)

// Lookup is, for the tests, the ordered credential candidates for host
// when pulling repository (the image's normalized name, no tag or digest),
// as if host served that repository under the same path and were one of
// its endpoints: the kubelet's credentials to any host with a containerd
// config and to the image's own registry only without one, containerd's
// configs."host".auth, the service-account token, then the containers
// auth files / credential-helpers.
func (k *Keyring) Lookup(host, repository string) []wire.Credential {
	cs, _ := k.LookupE(host, repository)
	return cs
}

// LookupE is Lookup with the lookup's error (a *LookupError: the owner fails
// the pull).
func (k *Keyring) LookupE(host, repository string) ([]wire.Credential, error) {
	domain, rest, ok := strings.Cut(repository, "/")
	q := hosts.Query{Host: host, Logical: repository, Physical: host}
	if ok {
		q.Physical += "/" + rest
	}
	q.Kubelet = k.hosts.Containerd() || host == domain
	if k.hosts.Containerd() {
		q.ContainerdKey = host
	}
	return k.credentials(q)
}

// TestConfig is, for the tests, a Config and the hosts.Config of the same
// pull in one literal, as the pipeline fills both from one policy.
type TestConfig struct {
	PullSecrets                       []string
	InlinePullSecrets                 []Inline
	KubeletDockerConfig               string
	CredentialProviderConfig          string
	CredentialProviderBinDir          string
	ProviderCacheDir                  string
	RunProviders                      bool
	ProviderServiceAccountToken       string
	ProviderServiceAccountAnnotations map[string]string
	ContainerdConfig                  string
	ServiceAccountToken               string
	ServiceAccountUsername            string
	ServiceAccountRegistries          []string
	InlineServiceAccountToken         *Inline
	InlineProviderServiceAccountToken *Inline
	Authfile                          string
	InlineAuthfile                    *Inline
	Env                               Env
	RegistriesConf                    string
	RegistriesConfDir                 string
	RegistriesConfName                string
	CertDir                           string
	CertsD                            []string
	CAFiles                           []hosts.ScopedFile
	InsecureRegistries                []string
	TLSVerify                         bool
	TLSVerifySetting                  string
	Request                           *Request
}

// NewTestKeyring is what the pipeline does: hosts.New, then NewKeyring on
// its Resolver, hosts' warnings joining the keyring's. Errors are
// *ConfigError either way.
func NewTestKeyring(c TestConfig) (*Keyring, error) {
	var k *Keyring
	r, err := hosts.New(hosts.Config{
		ContainerdConfig: c.ContainerdConfig,
		RegistriesConf:   c.RegistriesConf, RegistriesConfDir: c.RegistriesConfDir, RegistriesConfName: c.RegistriesConfName,
		CertDir: c.CertDir, CertsD: c.CertsD, CAFiles: c.CAFiles, InsecureRegistries: c.InsecureRegistries,
		TLSVerify: c.TLSVerify, TLSVerifySetting: c.TLSVerifySetting,
		Warn: func(s string) {
			if k != nil {
				k.Warn(s)
			}
		},
	})
	if err != nil {
		var he *hosts.ConfigError
		if errors.As(err, &he) {
			return nil, &ConfigError{Setting: he.Setting, Err: he.Err}
		}
		return nil, err
	}
	k, err = NewKeyring(Config{
		PullSecrets: c.PullSecrets, InlinePullSecrets: c.InlinePullSecrets, KubeletDockerConfig: c.KubeletDockerConfig,
		CredentialProviderConfig: c.CredentialProviderConfig, CredentialProviderBinDir: c.CredentialProviderBinDir,
		ProviderCacheDir: c.ProviderCacheDir, RunProviders: c.RunProviders,
		ProviderServiceAccountToken: c.ProviderServiceAccountToken, ProviderServiceAccountAnnotations: c.ProviderServiceAccountAnnotations,
		ServiceAccountToken: c.ServiceAccountToken, ServiceAccountUsername: c.ServiceAccountUsername,
		ServiceAccountRegistries: c.ServiceAccountRegistries, InlineServiceAccountToken: c.InlineServiceAccountToken,
		InlineProviderServiceAccountToken: c.InlineProviderServiceAccountToken,
		Authfile:                          c.Authfile, InlineAuthfile: c.InlineAuthfile, Env: c.Env,
		Request: c.Request,
	}, r)
	return k, err
}

// Endpoints is, for the tests, the pipeline's join: the resolver's
// endpoints, filled.
func (k *Keyring) Endpoints(image string) ([]wire.Endpoint, error) {
	eps, err := k.hosts.Endpoints(image)
	if err != nil {
		return nil, err
	}
	return k.Fill(eps)
}

// Providers is, for the tests, cpProviders without the skip reasons.
func Providers(cfg *ProviderConfig, binDir, image, cacheDir string, opts ProviderOptions) ([]wire.Credential, error) {
	creds, _, err := cpProviders(cfg, binDir, image, cacheDir, opts)
	return creds, err
}
