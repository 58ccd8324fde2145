package auth

// The per-pull keyring: every credential source and every trust setting read
// once, answering per contacted host (issue 11). What goes to which host:
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
//     Configs[host]); in legacy mode (no config_path) the first endpoint's
//     auth sticks for the later ones, because registryHosts assigns the
//     captured auth variable inside its endpoint loop.
//   - The service-account token is offered to an endpoint host matching
//     auth.service_account_registries (internal/regpattern).
//   - containers auth files and registries.conf credential-helpers are
//     looked up by the name of the repository ON THAT HOST (the mirror's
//     rewritten reference), as newDockerClientFromRef does through
//     pkg/docker/config GetCredentialsForRef.
//
// Which endpoints: with a containerd config, containerd's (hosts.toml
// [host] entries in file order, then server or the default; or the legacy
// mirrors then the default); otherwise registries.conf's
// (PullSourcesFromReference: mirrors, then the primary location).

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pullhelper/pullhelper/internal/regpattern"
	"go.podman.io/image/v5/pkg/sysregistriesv2"
	"go.podman.io/image/v5/types"
)

// ScopedFile is one file that applies to the registries matching Pattern
// (trust.ca_files).
type ScopedFile struct {
	Pattern string `json:"registry"`
	File    string `json:"file"`
}

// Config is everything the keyring reads. The pipeline fills it from the
// policy; auth imports no policy. Empty fields turn their source off.
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
	// ContainerdConfig is containerd's config.toml; when set, containerd
	// decides the endpoints.
	ContainerdConfig string
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

// Keyring answers credential and trust questions per host for one pull. It
// is built once per pull, in the parent, and is not safe for concurrent use.
type Keyring struct {
	c Config

	secrets  *KubeletKeyring
	node     *KubeletKeyring
	nodeFile string

	providers   *ProviderConfig
	providerBin string
	provCache   map[string][]Credential

	ctrd *ctrdRegistry

	saPatterns []regpattern.Pattern
	caFiles    []scopedPattern
	insecure   []regpattern.Pattern

	authFiles         []AuthFile
	authUserSpecified bool

	sys     *types.SystemContext
	helpers []string

	ids map[string]string

	// Warnings are problems a pull goes on with (a failing provider, a
	// credential helper error, a missing XDG_RUNTIME_DIR).
	Warnings []string
}

type scopedPattern struct {
	p    regpattern.Pattern
	file string
}

// NewKeyring reads every configured source. Errors are *ConfigError and
// never quote a secret.
func NewKeyring(c Config) (*Keyring, error) {
	if c.InlineServiceAccountToken != nil {
		c.ServiceAccountToken = c.InlineServiceAccountToken.Name
	}
	if c.InlineProviderServiceAccountToken != nil {
		c.ProviderServiceAccountToken = c.InlineProviderServiceAccountToken.Name
	}
	k := &Keyring{c: c, provCache: map[string][]Credential{}, ids: map[string]string{}}
	bad := func(setting string, err error) (*Keyring, error) {
		return nil, &ConfigError{Setting: setting, Err: err}
	}
	var err error
	if len(c.PullSecrets) > 0 || len(c.InlinePullSecrets) > 0 {
		if k.secrets, err = LoadPullSecrets(c.PullSecrets, c.InlinePullSecrets...); err != nil {
			var ce *ConfigError
			if errors.As(err, &ce) {
				return nil, ce
			}
			return bad("auth.pull_secrets", err)
		}
	}
	if c.KubeletDockerConfig != "" {
		root := c.KubeletDockerConfig
		if root == "auto" {
			root = "/var/lib/kubelet"
		}
		cwd, _ := os.Getwd()
		if k.node, k.nodeFile, err = LoadNodeDockerConfig(NodeConfigDirs{RootDir: root, Cwd: cwd, Home: c.Env.Home}); err != nil {
			return bad("auth.kubelet_docker_config", err)
		}
	}
	if c.CredentialProviderConfig != "" {
		if k.providers, err = LoadProviderConfig(c.CredentialProviderConfig); err != nil {
			return bad("auth.credential_provider_config", err)
		}
		k.providerBin = c.CredentialProviderBinDir
		if k.providerBin == "" {
			k.providerBin = filepath.Dir(c.CredentialProviderConfig)
		}
		if st, err := os.Stat(k.providerBin); err != nil || !st.IsDir() {
			return bad("auth.credential_provider_bin_dir", fmt.Errorf("%s is not a directory", k.providerBin))
		}
	}
	if c.ContainerdConfig != "" {
		if k.ctrd, err = loadContainerdConfig(c.ContainerdConfig); err != nil {
			return bad("auth.containerd_config", err)
		}
	}
	if c.ServiceAccountToken != "" {
		if k.saPatterns, err = regpattern.ParseAll(c.ServiceAccountRegistries); err != nil {
			return bad("auth.service_account_registries", err)
		}
	}
	for i, f := range c.CAFiles {
		p, err := regpattern.Parse(f.Pattern)
		if err != nil {
			return bad("trust.ca_files", fmt.Errorf("entry %d: %w", i+1, err))
		}
		k.caFiles = append(k.caFiles, scopedPattern{p, f.File})
	}
	if k.insecure, err = regpattern.ParseAll(c.InsecureRegistries); err != nil {
		return bad("trust.insecure_registries", err)
	}
	var warnings []string
	if c.InlineAuthfile != nil {
		k.authFiles, k.authUserSpecified = []AuthFile{{Path: c.InlineAuthfile.Name, Data: c.InlineAuthfile.Data}}, true
	} else {
		k.authFiles, k.authUserSpecified, warnings = ContainersAuthFiles(c.Authfile, c.Env)
	}
	k.Warnings = append(k.Warnings, warnings...)
	k.sys = &types.SystemContext{SystemRegistriesConfPath: c.RegistriesConf, SystemRegistriesConfDirPath: c.RegistriesConfDir}
	if _, err := CheckRegistriesConf(k.sys); err != nil {
		return bad("pull.registries_conf", err)
	}
	if k.helpers, err = sysregistriesv2.CredentialHelpers(k.sys); err != nil {
		return bad("pull.registries_conf", fmt.Errorf("reading credential-helpers: %s", RegistriesConfError(err)))
	}
	return k, nil
}

// AuthFiles are the containers auth files searched, in order, and whether
// the first was named by the user (--authfile or REGISTRY_AUTH_FILE; then it
// is the only one and must exist -- the pipeline checks, naming the flag).
func (k *Keyring) AuthFiles() ([]AuthFile, bool) { return k.authFiles, k.authUserSpecified }

// NodeDockerConfig is the node docker config file the kubelet search found
// ("" when the search is off or found none).
func (k *Keyring) NodeDockerConfig() string { return k.nodeFile }

// query is one host's credential question.
type query struct {
	host     string // endpoint host[:port]
	logical  string // the image's repository, what the kubelet matches
	physical string // the repository on host, what auth files match
	// kubelet: the kubelet's credentials go to this host.
	kubelet bool
	// ctrdKey: the configs."KEY".auth consulted ("" = none).
	ctrdKey string
}

// Lookup returns the ordered credential candidates for host when pulling
// repository (the image's normalized name, "registry.example.com/ns/repo",
// no tag or digest), as if host served that repository under the same path:
// the kubelet's credentials (pull secrets, node docker config, provider
// plugins -- to any host with a containerd config, to the image's own
// registry only without one), containerd's configs."host".auth, the
// service-account token, then the containers auth files / registries.conf
// credential-helpers. Secrets never marshal; equal secrets share one ID.
func (k *Keyring) Lookup(host, repository string) []Credential {
	domain, path := splitRepo(repository)
	q := query{host: host, logical: repository, physical: host + path}
	q.kubelet = k.ctrd != nil || host == domain
	if k.ctrd != nil {
		q.ctrdKey = host
	}
	return k.lookup(q)
}

func splitRepo(repository string) (domain, path string) {
	domain, rest, ok := strings.Cut(repository, "/")
	if ok {
		path = "/" + rest
	}
	return domain, path
}

func (k *Keyring) lookup(q query) []Credential {
	var out []Credential
	add := func(cs ...Credential) {
		for _, c := range cs {
			out = append(out, k.withID(c))
		}
	}
	// What the kubelet sends over CRI: pull secrets, node config, provider
	// plugins, and the service-account token (a pull secret by another
	// name). containerd reads configs."HOST".auth only when the kubelet sent
	// none (pkg/cri/server/image_pull.go registryHosts: the CRI auth is
	// used when non-nil, Credentials(host) consults the config otherwise).
	kubeletSide := 0
	if q.kubelet {
		if k.secrets != nil {
			add(k.secrets.Lookup(q.logical)...)
		}
		if k.node != nil {
			add(k.node.Lookup(q.logical)...)
		}
		if k.providers != nil {
			add(k.providerCredentials(q.logical)...)
		}
	}
	if k.c.ServiceAccountToken != "" {
		var data []byte
		if k.c.InlineServiceAccountToken != nil {
			data = k.c.InlineServiceAccountToken.Data
		}
		c, err := serviceAccountToken(k.c.ServiceAccountToken, data, k.c.ServiceAccountUsername, k.saPatterns, q.host)
		if err != nil {
			k.warn(err.Error())
		} else if c != nil {
			add(*c)
		}
	}
	kubeletSide = len(out)
	if k.ctrd != nil && q.ctrdKey != "" && kubeletSide == 0 {
		c, err := k.ctrdCredential(q.ctrdKey)
		if err != nil {
			k.warn(err.Error())
		} else if c != nil {
			add(*c)
		}
	}
	if c := k.containersCredential(q.physical); c != nil {
		add(*c)
	}
	return out
}

// withID gives c the ID of the first equal credential seen (same source,
// file, key and secret), so the pipeline carries each secret once.
func (k *Keyring) withID(c Credential) Credential {
	ident := strings.Join([]string{c.Source, c.File, c.Key, c.Username, c.Password, c.IdentityToken}, "\x00")
	id, ok := k.ids[ident]
	if !ok {
		id = "cred-" + strconv.Itoa(len(k.ids)+1)
		k.ids[ident] = id
	}
	c.ID = id
	return c
}

func (k *Keyring) warn(msg string) {
	for _, w := range k.Warnings {
		if w == msg {
			return
		}
	}
	k.Warnings = append(k.Warnings, msg)
}

// providerCredentials runs the plugins matching repository once per
// repository (never when RunProviders is false: explain only says which
// would run and why the others are skipped).
func (k *Keyring) providerCredentials(repository string) []Credential {
	if cs, ok := k.provCache[repository]; ok {
		return cs
	}
	var sa *ProviderServiceAccount
	if k.c.ProviderServiceAccountToken != "" {
		sa = &ProviderServiceAccount{TokenFile: k.c.ProviderServiceAccountToken, Annotations: k.c.ProviderServiceAccountAnnotations}
		if k.c.InlineProviderServiceAccountToken != nil {
			sa.TokenData = k.c.InlineProviderServiceAccountToken.Data
		}
	}
	var creds []Credential
	var skipped []string
	if !k.c.RunProviders {
		plan, err := PlanProviders(k.providers, repository, sa)
		if err != nil {
			k.warn("credential provider: " + err.Error())
		}
		run := 0
		for _, d := range plan {
			if d.Skipped != "" {
				skipped = append(skipped, fmt.Sprintf("%q: %s", d.Name, d.Skipped))
			} else {
				run++
			}
		}
		if run > 0 {
			creds = []Credential{{Source: "credential-provider", File: k.c.CredentialProviderConfig,
				Key: "(plugins run at pull time; not run by explain)"}}
		}
	} else {
		var err error
		creds, skipped, err = cpProviders(k.providers, k.providerBin, repository, k.c.ProviderCacheDir, ProviderOptions{ServiceAccount: sa})
		if err != nil {
			// The kubelet logs a failing provider and pulls with the rest.
			k.warn("credential provider: " + err.Error())
		}
	}
	for _, s := range skipped {
		k.warn("credential provider " + s + " (skipped for " + repository + ", as the kubelet skips it)")
	}
	k.provCache[repository] = creds
	return creds
}

// ctrdCredential is configs."host".auth through ParseAuth.
func (k *Keyring) ctrdCredential(host string) (*Credential, error) {
	a := k.ctrd.Configs[host].Auth
	if a == nil {
		return nil, nil
	}
	key := k.ctrd.authKey[host]
	user, secret, err := ParseContainerdAuth(a.Username, a.Password, a.Auth, a.IdentityToken)
	if err != nil {
		return nil, fmt.Errorf("containerd config %s: %s: %v", k.ctrd.file, key, err)
	}
	if user == "" && secret == "" {
		return nil, nil
	}
	c := &Credential{Source: containerdSource, File: k.ctrd.file, Key: key, Username: user, Password: secret}
	if user == "" {
		c.Password, c.IdentityToken = "", secret
	}
	return c, nil
}

// containersCredential is pkg/docker/config getCredentialsWithHomeDir:
// each registries.conf credential-helper in order ("containers-auth.json"
// walks the auth files), the first non-empty result wins, errors are
// collected and reported (as warnings here) only when nothing was found.
func (k *Keyring) containersCredential(physical string) *Credential {
	registry, _, _ := strings.Cut(physical, "/")
	var errs []string
	for _, h := range k.helpers {
		var c *Credential
		var err error
		if h == sysregistriesv2.AuthenticationFileHelper {
			c, err = LookupContainers(k.authFiles, physical)
		} else if !k.c.RunProviders {
			c = &Credential{Source: "credential-helper", File: k.registriesConfName(), Key: "credential-helpers " + h + " (run at pull time; not run by explain)"}
		} else {
			c, err = runHelper(h, registry, "credential-helper", k.registriesConfName(), "credential-helpers "+h)
		}
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if c != nil {
			return c
		}
	}
	for _, e := range errs {
		k.warn("looking up credentials for " + registry + ": " + e)
	}
	return nil
}

func (k *Keyring) registriesConfName() string {
	if k.c.RegistriesConfName != "" {
		return k.c.RegistriesConfName
	}
	if k.c.RegistriesConf != "" {
		return k.c.RegistriesConf
	}
	return "registries.conf"
}

// errBlocked is returned by Endpoints when every endpoint is blocked.
var errBlocked = errors.New("blocked in registries.conf")

// ErrBlocked marks an image whose every endpoint registries.conf blocks.
var ErrBlocked = errBlocked
