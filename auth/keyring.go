package auth

// The per-pull keyring: every credential source read once, answering per
// contacted host (issue 11); package hosts says which hosts and their trust.
// What goes to which host:
//
//   - The kubelet's credentials (pull secrets, node docker config, provider
//     plugins) are matched against the IMAGE's repository, as the kubelet's
//     Lookup(repoToPull) does (kuberuntime_image.go PullImage). The kubelet
//     hands each one to the runtime as PullImageRequest.Auth without a
//     ServerAddress (keyring.go BasicDockerKeyring.Add copies only
//     username, password, email), so:
//       * containerd sends it to EVERY host it contacts, mirrors and the
//         hosts.toml server included: ParseAuth(auth, host) only refuses a
//         host when ServerAddress is set and differs
//         (containerd pkg/cri/server/image_pull.go ParseAuth);
//       * CRI-O sets it as SystemContext.DockerAuthConfig, which
//         containers/image drops for an endpoint whose domain differs from
//         the image's (go.podman.io/image/v5 docker/docker_image_src.go
//         newPullClient: "we must not blindly send the credentials intended
//         for the primary endpoint to mirrors").
//   - containerd's configs."HOST".auth is offered only when the kubelet sent
//     no credential for the host (none of the above matched and no
//     service-account token applies): registryHosts uses a non-nil CRI auth
//     and consults the config otherwise. It is looked up by the endpoint host
//     actually contacted (image_pull.go registryHosts: Credentials(host) →
//     Configs[host]), in legacy mode (no config_path) too: registryHosts
//     copies the captured credentials for each endpoint before it fills
//     them from Configs[u.Host], so no host's auth is offered to another.
//   - The service-account token is offered to an endpoint host matching
//     auth.service_account_registries (internal/regpattern).
//   - containers auth files and registries.conf credential-helpers are
//     looked up by the name of the repository ON THAT HOST (the mirror's
//     rewritten reference), as newDockerClientFromRef does through
//     pkg/docker/config GetCredentialsForRef.
//
// Which endpoints is package hosts' answer: with a containerd config,
// containerd's (hosts.toml [host] entries in file order, then server or the
// default; or the legacy mirrors then the default); otherwise
// registries.conf's (PullSourcesFromReference: mirrors, then the primary
// location). Each comes with the hosts.Query the sources above answer.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pullhelper/pullhelper/hosts"
	"github.com/pullhelper/pullhelper/internal/regpattern"
	"github.com/pullhelper/pullhelper/internal/wire"
)

// Config is every credential source the keyring reads (the files package
// hosts owns -- containerd's config.toml, registries.conf -- come through
// its Resolver). The pipeline fills it from the policy; auth imports no
// policy. Empty fields turn their source off.
type Config struct {
	// PullSecrets are pull secret files (auth.pull_secrets);
	// InlinePullSecrets pull secrets already read (--pull-secret-fd),
	// used after the files.
	PullSecrets       []string
	InlinePullSecrets []Inline
	// KubeletDockerConfig is "", "auto" (root dir /var/lib/kubelet) or the
	// kubelet's root dir (auth.kubelet_docker_config).
	KubeletDockerConfig string
	// CredentialProviderConfig and CredentialProviderBinDir (default: the
	// config's directory) configure the kubelet's plugins;
	// ProviderCacheDir holds their responses ("" = no cache).
	CredentialProviderConfig, CredentialProviderBinDir, ProviderCacheDir string
	// RunProviders runs the provider plugins and registries.conf
	// credential-helpers (false for explain: they may use the network).
	RunProviders bool
	// ProviderServiceAccountToken is the pod service account's token file
	// and ProviderServiceAccountAnnotations its annotations, for the
	// credential providers with tokenAttributes ("" = no service account).
	ProviderServiceAccountToken       string
	ProviderServiceAccountAnnotations map[string]string
	// ServiceAccountToken is the token file offered to the hosts matching
	// ServiceAccountRegistries, with ServiceAccountUsername ("" =
	// DefaultServiceAccountUsername).
	// InlineServiceAccountToken (--service-account-token-fd), when not
	// nil, is the token itself; it replaces ServiceAccountToken.
	ServiceAccountToken, ServiceAccountUsername string
	ServiceAccountRegistries                    []string
	InlineServiceAccountToken                   *Inline
	// InlineProviderServiceAccountToken (--provider-service-account-token-fd),
	// when not nil, is the pod service-account token for credential
	// providers, instead of ProviderServiceAccountToken's file.
	InlineProviderServiceAccountToken *Inline
	// Authfile is --authfile / auth.authfile; Env the environment of the
	// default auth-file search. InlineAuthfile (--authfile-fd), when not
	// nil, replaces both: it is the only auth file, as --authfile's is.
	Authfile       string
	InlineAuthfile *Inline
	Env            Env
	// Request, when not nil, is a CRI PullImage request's credential: the
	// kubelet's, offered to its one host only (Request). containerd's
	// configs."HOST".auth are then not read for any host, as containerd's
	// registryHosts reads them only when the request carries no auth.
	Request *Request
}

// ConfigError is a Config value the keyring cannot use. Setting is the
// policy key ("auth.pull_secrets", ...); the pipeline maps it to the flag
// that set it.
type ConfigError struct {
	Setting string
	Err     error
}

func (e *ConfigError) Error() string { return e.Setting + ": " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Keyring answers credential questions per host for one pull: Fill gives
// the endpoints package hosts resolved their candidates. It is built once
// per pull, in the parent, and is not safe for concurrent use.
type Keyring struct {
	// hosts is the pull's resolver (the tests' Endpoints join asks it).
	hosts *hosts.Resolver
	// chain is every configured source in the order of NewKeyring's
	// comment.
	chain Keychain

	nodeFile          string
	authFiles         []wire.AuthFile
	authUserSpecified bool

	ids map[string]string

	// Warnings are problems a pull goes on with (a failing provider, a
	// skipped node docker config, a missing XDG_RUNTIME_DIR).
	Warnings []string
}

// NewKeyring reads every configured source once; r is the pull's
// hosts.Resolver, which has read containerd's config.toml (its
// configs.*.auth are a source when it is set) and registries.conf (its
// credential-helpers are). Errors are *ConfigError and never quote a
// secret.
//
// The sources are composed in this order, as the kubelet and the runtime
// apply them (the file comment says why):
//
//	OrElse(
//	  the CRI request's credential, to its one host (then its only one),
//	  Fallback(
//	    OrElse(
//	      Multi(Kubelet(Multi(pull secrets, node docker config, credential providers)),
//	            service-account token),
//	      containerd configs."HOST".auth (not with a CRI request's credential)),
//	    First(each registries.conf credential-helper in order, "containers-auth.json"
//	          walking the auth files)))
//
// A lookup that fails as its owner fails it (a *LookupError: containerd's
// ParseAuth, containers/image's auth files and helpers when the kubelet's
// sources offer nothing) fails Fill; every other problem is a warning.
func NewKeyring(c Config, r *hosts.Resolver) (*Keyring, error) {
	if c.InlineServiceAccountToken != nil {
		c.ServiceAccountToken = c.InlineServiceAccountToken.Name
	}
	if c.InlineProviderServiceAccountToken != nil {
		c.ProviderServiceAccountToken = c.InlineProviderServiceAccountToken.Name
	}
	k := &Keyring{ids: map[string]string{}}
	bad := func(setting string, err error) (*Keyring, error) {
		return nil, &ConfigError{Setting: setting, Err: err}
	}
	var kubelet Multi
	if len(c.PullSecrets) > 0 || len(c.InlinePullSecrets) > 0 {
		secrets, err := LoadPullSecrets(c.PullSecrets, c.InlinePullSecrets...)
		if err != nil {
			var ce *ConfigError
			if errors.As(err, &ce) {
				return nil, ce
			}
			return bad("auth.pull_secrets", err)
		}
		kubelet = append(kubelet, secrets)
	}
	if c.KubeletDockerConfig != "" {
		root := c.KubeletDockerConfig
		if root == "auto" {
			root = "/var/lib/kubelet"
		}
		cwd, _ := os.Getwd()
		// The kubelet's search takes $HOME as it is (os.UserHomeDir: none
		// when unset), not the passwd entry's.
		node, file, err := LoadNodeDockerConfig(NodeConfigDirs{RootDir: root, Cwd: cwd, Home: c.Env.HomeEnv, Warn: k.Warn})
		if err != nil {
			return bad("auth.kubelet_docker_config", err)
		}
		kubelet, k.nodeFile = append(kubelet, node), file
	}
	if c.CredentialProviderConfig != "" {
		pk, err := newProviderKeychain(c)
		if err != nil {
			return bad(err.Setting, err.Err)
		}
		kubelet = append(kubelet, pk)
	}
	var ctrd Keychain
	if r.Containerd() && c.Request == nil {
		ctrd = &containerdKeychain{hosts: r}
	}
	k.hosts = r
	var sa Keychain
	if c.ServiceAccountToken != "" {
		pats, err := regpattern.ParseAll(c.ServiceAccountRegistries)
		if err != nil {
			return bad("auth.service_account_registries", err)
		}
		st := &serviceAccountKeychain{file: c.ServiceAccountToken, username: c.ServiceAccountUsername, patterns: pats}
		if c.InlineServiceAccountToken != nil {
			st.data = c.InlineServiceAccountToken.Data
		}
		sa = st
	}
	var warnings []string
	if c.InlineAuthfile != nil {
		k.authFiles, k.authUserSpecified = []wire.AuthFile{{Path: c.InlineAuthfile.Name, Data: c.InlineAuthfile.Data}}, true
	} else {
		k.authFiles, k.authUserSpecified, warnings = ContainersAuthFiles(c.Authfile, c.Env)
	}
	k.Warnings = append(k.Warnings, warnings...)
	helpers, err := r.CredentialHelpers()
	if err != nil {
		return bad("pull.registries_conf", err)
	}
	var containers First
	for _, h := range helpers {
		containers = append(containers, newHelperKeychain(h, k.authFiles, c.RunProviders, r.RegistriesConfName(), k.Warn))
	}
	k.chain = Fallback{First: OrElse{First: Multi{Kubelet{kubelet}, sa}, Then: ctrd}, Then: containers}
	if c.Request != nil {
		// The request's credential is its host's only one: containerd's
		// CRI reads its own configs only for a request without auth
		// (GRPCCRIImageService.PullImage), and CRI-O's DockerAuthConfig
		// makes containers/image read no auth file; either way a refused
		// one fails the pull, it never falls back to the node's.
		k.chain = OrElse{First: requestKeychain{c.Request}, Then: k.chain}
	}
	return k, nil
}

// AuthFiles are the containers auth files searched, in order, and whether
// the first was named by the user (--authfile or REGISTRY_AUTH_FILE; then it
// is the only one and must exist -- the pipeline checks, naming the flag).
func (k *Keyring) AuthFiles() ([]wire.AuthFile, bool) { return k.authFiles, k.authUserSpecified }

// NodeDockerConfig is the node docker config file the kubelet search found
// ("" when the search is off or found none).
func (k *Keyring) NodeDockerConfig() string { return k.nodeFile }

// Fill returns eps (hosts.Resolver.Endpoints, in order) each with its
// credential candidates: what the composed sources offer for its
// hosts.Query, equal secrets sharing one ID. A lookup that fails (a
// *LookupError) drops a mirror with a warning -- containers/image's
// newImageSource and containerd's resolver go on with the next endpoint
// when one's credentials cannot be read -- and is the error when it is the
// primary's (the last endpoint), as it fails the owner's pull.
func (k *Keyring) Fill(eps []hosts.Endpoint) ([]wire.Endpoint, error) {
	out := make([]wire.Endpoint, 0, len(eps))
	for i, e := range eps {
		cs, err := k.credentials(e.Query)
		if err != nil {
			if i == len(eps)-1 {
				return nil, err
			}
			k.Warn("skipping endpoint " + e.Endpoint.Host + ": " + err.Error())
			continue
		}
		ep := e.Endpoint
		ep.Credentials = cs
		out = append(out, ep)
	}
	return out, nil
}

// credentials asks the chain about q: every candidate gets its ID, every
// error but a *LookupError becomes a warning (the pull goes on with the
// rest); the LookupErrors are the error, one line.
func (k *Keyring) credentials(q hosts.Query) ([]wire.Credential, error) {
	cs, err := k.chain.Resolve(q)
	var failed []string
	for _, e := range flatten(err) {
		var le *LookupError
		if errors.As(e, &le) {
			failed = append(failed, le.Error())
			continue
		}
		k.Warn(e.Error())
	}
	if len(failed) > 0 {
		return nil, &LookupError{Err: errors.New(strings.Join(failed, "; "))}
	}
	out := make([]wire.Credential, 0, len(cs))
	for _, c := range cs {
		out = append(out, k.withID(c))
	}
	return out, nil
}

// withID gives c the ID of the first equal credential seen (same source,
// file, key and secret), so the pipeline carries each secret once.
func (k *Keyring) withID(c wire.Credential) wire.Credential {
	ident := strings.Join([]string{c.Source, c.File, c.Key, c.Username, c.Password, c.IdentityToken}, "\x00")
	id, ok := k.ids[ident]
	if !ok {
		id = "cred-" + strconv.Itoa(len(k.ids)+1)
		k.ids[ident] = id
	}
	c.ID = id
	return c
}

// Warn adds msg to Warnings unless it is there already (package hosts'
// warnings join them: the pipeline hands it Warn).
func (k *Keyring) Warn(msg string) {
	for _, w := range k.Warnings {
		if w == msg {
			return
		}
	}
	k.Warnings = append(k.Warnings, msg)
}

// newProviderKeychain checks the credential-provider settings.
func newProviderKeychain(c Config) (*providerKeychain, *ConfigError) {
	cfg, err := LoadProviderConfig(c.CredentialProviderConfig)
	if err != nil {
		return nil, &ConfigError{Setting: "auth.credential_provider_config", Err: err}
	}
	bin := c.CredentialProviderBinDir
	if bin == "" {
		bin = filepath.Dir(c.CredentialProviderConfig)
	}
	if st, err := os.Stat(bin); err != nil || !st.IsDir() {
		return nil, &ConfigError{Setting: "auth.credential_provider_bin_dir", Err: fmt.Errorf("%s is not a directory", bin)}
	}
	p := &providerKeychain{cfg: cfg, bin: bin, file: c.CredentialProviderConfig, cacheDir: c.ProviderCacheDir,
		run: c.RunProviders, cache: map[string][]wire.Credential{}}
	if c.ProviderServiceAccountToken != "" {
		p.sa = &ProviderServiceAccount{TokenFile: c.ProviderServiceAccountToken, Annotations: c.ProviderServiceAccountAnnotations}
		if c.InlineProviderServiceAccountToken != nil {
			p.sa.TokenData = c.InlineProviderServiceAccountToken.Data
		}
	}
	return p, nil
}
