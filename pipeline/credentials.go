package pipeline

import (
	"os"
	"path/filepath"

	"github.com/pullhelper/pullhelper/auth"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/policy"
	"go.podman.io/image/v5/docker/reference"
)

// DefaultProviderCacheDir holds the kubelet credential-provider responses
// between pulls on this node (0700).
const DefaultProviderCacheDir = "/run/pullhelper/credential-provider-cache"

// kubeletCredentials builds the kubelet's keyring order: pull secrets, the
// node's docker config, credential-provider plugins; then containerd's CRI
// registry config and the service-account token. Each source is read with
// the semantics of the tool that owns it. containers auth.json comes last
// (resolveCredential).
func (p *Plan) kubeletCredentials(l *policy.Loaded, named reference.Named, explain bool) error {
	a := l.Auth
	repo := named.Name() // what the kubelet passes to Lookup: normalized, no tag or digest
	if len(a.PullSecrets) > 0 {
		k, err := auth.LoadPullSecrets(a.PullSecrets)
		if err != nil {
			return failure.New(failure.Usage, "%s: %v", settingName(l, "auth.pull_secrets"), err)
		}
		p.Credentials = append(p.Credentials, k.Lookup(repo)...)
	}
	if a.KubeletDockerConfig != "" {
		root := a.KubeletDockerConfig
		if root == "auto" {
			root = "/var/lib/kubelet"
		}
		cwd, _ := os.Getwd()
		home, _ := os.UserHomeDir()
		k, file, err := auth.LoadNodeDockerConfig(auth.NodeConfigDirs{RootDir: root, Cwd: cwd, Home: home})
		if err != nil {
			return failure.New(failure.Usage, "%s: %v", settingName(l, "auth.kubelet_docker_config"), err)
		}
		p.KubeletDockerConfig = file
		p.Credentials = append(p.Credentials, k.Lookup(repo)...)
	}
	if a.CredentialProviderConfig != "" {
		if err := p.providerCredentials(l, explain); err != nil {
			return err
		}
	}
	if a.ContainerdConfig != "" {
		reg, err := auth.LoadContainerd(a.ContainerdConfig, reference.Domain(named))
		if err != nil {
			return failure.New(failure.Usage, "%s: %v", settingName(l, "auth.containerd_config"), err)
		}
		p.Credentials = append(p.Credentials, reg.Credentials...)
		p.Trust.CAFiles = append(p.Trust.CAFiles, reg.TLS.CAFiles...)
		p.Trust.ClientPairs = append(p.Trust.ClientPairs, reg.TLS.ClientPairs...)
		if reg.TLS.SkipVerify && p.Trust.Verify {
			p.Trust.Verify, p.Trust.InsecureBy = false, "containerd skip_verify ("+a.ContainerdConfig+")"
		}
	}
	if a.ServiceAccountToken != "" {
		c, err := auth.ServiceAccountToken(a.ServiceAccountToken, a.ServiceAccountUsername, a.ServiceAccountRegistries, p.Registry)
		if err != nil {
			return failure.New(failure.Usage, "%s: %v", settingName(l, "auth.service_account_token"), err)
		}
		if c != nil {
			p.Credentials = append(p.Credentials, *c)
		}
	}
	return nil
}

// providerCredentials runs the kubelet credential-provider plugins that
// match the image (never for explain: plugins may talk to the network).
func (p *Plan) providerCredentials(l *policy.Loaded, explain bool) error {
	a := l.Auth
	cfg, err := auth.LoadProviderConfig(a.CredentialProviderConfig)
	if err != nil {
		return failure.New(failure.Usage, "%s: %v", settingName(l, "auth.credential_provider_config"), err)
	}
	bin := a.CredentialProviderBinDir
	if bin == "" {
		bin = filepath.Dir(a.CredentialProviderConfig)
	}
	if st, err := os.Stat(bin); err != nil || !st.IsDir() {
		return failure.New(failure.Usage, "%s: %s is not a directory", settingName(l, "auth.credential_provider_bin_dir"), bin)
	}
	if explain {
		p.Credentials = append(p.Credentials, auth.Credential{Source: "credential-provider",
			File: a.CredentialProviderConfig, Key: "(plugins run at pull time; not run by explain)"})
		return nil
	}
	cache := DefaultProviderCacheDir
	if err := os.MkdirAll(cache, 0o700); err != nil {
		cache = ""
	}
	creds, err := auth.Providers(cfg, bin, p.Reference, cache, auth.ProviderOptions{})
	if err != nil {
		// The kubelet logs a failing provider and pulls with the rest.
		p.Warnings = append(p.Warnings, "credential provider: "+err.Error())
	}
	p.Credentials = append(p.Credentials, creds...)
	return nil
}
