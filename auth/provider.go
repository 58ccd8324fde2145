package auth

// Kubelet credential-provider plugins: the CredentialProviderConfig
// (kubelet.config.k8s.io/v1, v1beta1, v1alpha1) and the exec protocol
// (credentialprovider.kubelet.k8s.io/v1, v1beta1, v1alpha1).
//
// This mirrors kubernetes pkg/credentialprovider/plugin: config.go
// (readCredentialProviderConfig, decode, validateCredentialProviderConfig),
// plugin.go (RegisterCredentialProviderPlugins, pluginProvider.provide,
// isImageAllowed, getCachedCredentials, execPlugin.ExecPlugin), plugins.go
// (externalCredentialProviderKeyring.Lookup) and the keyring's Add, Lookup
// and URLsMatch (keyring.go).
//
// What the kubelet does, and so what this file does:
//   - The image given to the plugins is the repository the kubelet pulls,
//     parsers.ParseImageName(image) = ParseNormalizedNamed(image).Name():
//     "nginx:1" becomes "docker.io/library/nginx"; tags and digests are
//     dropped. That string is matched against matchImages, sent as
//     request.image, used as the Image cache key, and looked up in the
//     returned auth map.
//   - A provider runs only if one of its matchImages matches the image:
//     both are parsed as "https://"+s; the ports must be equal (no port
//     only matches no port), the hosts must have the same number of
//     "."-labels, each label matches as a filepath.Match glob, and the
//     image path must string-start-with the pattern path. A matchImages
//     entry that carries a scheme is accepted by the kubelet's validation
//     but never matches (its "host" becomes "https:"); the same here.
//   - The plugin is binDir/name with args, and the environment is the
//     caller's followed by the provider's env (so env wins). The request
//     is {"kind","apiVersion","image"} on stdin; the response is read from
//     stdout. Its apiVersion must equal the provider's apiVersion, its
//     kind must be CredentialProviderResponse, and unknown or duplicate
//     fields are errors (the kubelet's decoder is strict).
//   - cacheKeyType Image caches under the image, Registry under the part
//     before the first "/", Global under one key; anything else is an error
//     and the response is not used. Lookups try image, registry, global in
//     that order. cacheDuration absent means defaultCacheDuration; a zero
//     duration (either one) means "do not cache".
//   - The auth maps of all providers go into one keyring: keys normalized as
//     in BasicDockerKeyring.Add (scheme dropped, /v1/ or /v2/ path prefix
//     dropped), de-duplicated and sorted in reverse lexical order; every key
//     that matches the image contributes, in that order, the credentials of
//     each provider that returned it, in config order. If none matches and
//     the image is on Docker Hub, the "index.docker.io" credentials are used.
//   - A provider that fails (exec error, timeout, bad response) contributes
//     nothing and the others still do: the kubelet logs the failure and
//     pulls with the rest. cpProviders returns the rest together with an
//     error naming each failed provider.
//
// Where this file differs, and why:
//   - The cache is a JSON file per provider (cacheDir/NAME.json, mode 0600)
//     instead of the kubelet's memory, because pullhelper is one process per
//     pull. The file records a fingerprint of the provider's configuration
//     (binary path, apiVersion, args, env, matchImages, cache duration); a
//     different fingerprint discards it, as a kubelet restart would.
//     Concurrent writers do not lock: the last atomic rename wins, and a
//     lost entry only costs one more plugin run.
//   - The plugin runs in its own process group, and the whole group is
//     killed on timeout, so a helper it forked cannot keep the pull waiting;
//     the kubelet kills only the plugin process.
//   - The kubelet passes a pod's service-account token to providers with
//     tokenAttributes. pullhelper pulls for no pod: the agent supplies the
//     token and the annotations (ProviderOptions.ServiceAccount), and
//     without them it behaves as the kubelet does for a pod without a
//     service account: a provider with requireServiceAccount: true is
//     skipped, one with false runs without a token (provider_sa.go).
//   - The kubelet refuses to start when a configured plugin binary is
//     missing; cpProviders fails the same way (no credentials, an error).
//   - An empty provider name is rejected explicitly; the kubelet rejects it
//     later, when it looks up binDir/"" as the plugin.
//   - Plugin stderr is quoted in errors truncated, with every password of the
//     plugin's stdout response replaced by "[redacted]"; stdout is never
//     quoted.

import (
	"sort"
	"time"
)

const (
	sourceCredentialProvider = "credential-provider"

	// DefaultProviderTimeout is the kubelet's catch-all timeout for one
	// plugin run (execPlugin.ExecPlugin).
	DefaultProviderTimeout = time.Minute

	cpConfigGroup  = "kubelet.config.k8s.io"
	cpConfigKind   = "CredentialProviderConfig"
	cpRequestKind  = "CredentialProviderRequest"
	cpResponseKind = "CredentialProviderResponse"
	cpGlobalKey    = "global"

	cpMaxStdout     = 4 << 20
	cpMaxStderr     = 64 << 10
	cpStderrInError = 512
	cpWaitDelay     = 2 * time.Second
	cpCacheVersion  = 1
)

// The versions the kubelet registers (plugin.go apiVersions and the
// kubelet.config.k8s.io scheme).
var (
	cpPluginAPIVersions = []string{
		"credentialprovider.kubelet.k8s.io/v1",
		"credentialprovider.kubelet.k8s.io/v1alpha1",
		"credentialprovider.kubelet.k8s.io/v1beta1",
	}
	cpConfigVersions = []string{"v1", "v1alpha1", "v1beta1"}
	// cpCacheTypes is config.go validCacheTypes, sorted as sets.List
	// prints it.
	cpCacheTypes = []string{cpCacheServiceAccount, cpCacheToken}
)

// tokenAttributes.cacheType values (kubeletconfig ServiceAccountTokenCacheType).
const (
	cpCacheServiceAccount = "ServiceAccount"
	cpCacheToken          = "Token"
)

// ProviderConfig is a parsed kubelet.config.k8s.io CredentialProviderConfig.
type ProviderConfig struct {
	// Path is the file or directory it was loaded from.
	Path      string
	Providers []CredentialProvider
}

// CredentialProvider is one exec plugin of a CredentialProviderConfig.
type CredentialProvider struct {
	Name        string
	MatchImages []string
	// DefaultCacheDuration is required; nil means it was absent.
	DefaultCacheDuration *time.Duration
	// APIVersion is the credentialprovider.kubelet.k8s.io version spoken.
	APIVersion      string
	Args            []string
	Env             []ProviderEnvVar
	TokenAttributes *ProviderTokenAttributes
	// File is the configuration file that declared the provider.
	File string
}

// ProviderEnvVar is an ExecEnvVar.
type ProviderEnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// ProviderTokenAttributes is a provider's tokenAttributes (service-account
// token mode). It is validated as the kubelet does; see the file comment for
// how pullhelper runs such providers.
type ProviderTokenAttributes struct {
	ServiceAccountTokenAudience          string
	CacheType                            string
	RequireServiceAccount                *bool
	RequiredServiceAccountAnnotationKeys []string
	OptionalServiceAccountAnnotationKeys []string
}

// ProviderOptions tunes cpProviders. The zero value is the kubelet's behaviour.
type ProviderOptions struct {
	// Timeout bounds one plugin run; 0 means DefaultProviderTimeout.
	Timeout time.Duration
	// Now is the clock used for the cache; nil means time.Now.
	Now func() time.Time
	// ServiceAccount is the pod's service account for providers with
	// tokenAttributes (provider_sa.go); nil means none, as for a pod
	// without one.
	ServiceAccount *ProviderServiceAccount
}

// ---- matching and the keyring ----

// cpImageAllowed is pluginProvider.isImageAllowed, with the kubelet
// keyring's URLsMatch (kubelet.go).
func cpImageAllowed(matchImages []string, image string) bool {
	for _, m := range matchImages {
		if kubeletURLsMatch(m, image) {
			return true
		}
	}
	return false
}

// cpAddToKeyring adds one provider's auth map to the BasicDockerKeyring that
// externalCredentialProviderKeyring fills (the kubelet keyring of
// kubelet.go, not a copy). The kubelet walks the map in Go's random order;
// sort so that two keys of one response that normalize alike keep a stable
// order.
func cpAddToKeyring(k *KubeletKeyring, provider string, auth map[string]cpAuthConfig) {
	locs := make([]string, 0, len(auth))
	for loc := range auth {
		locs = append(locs, loc)
	}
	sort.Strings(locs)
	var cfg kubeletConfig
	for _, loc := range locs {
		a := auth[loc]
		cfg.entries = append(cfg.entries, kubeletConfigItem{key: loc, entry: kubeletEntry{Username: a.Username, Password: a.Password}})
	}
	k.add(cfg, sourceCredentialProvider, provider)
}
