package auth

// Kubelet credential keyring (research: credentials-and-dns.md, section 1):
// the keyring and its matching here; the decoding in kubelet_decode.go, pull
// secrets in kubelet_secrets.go, the node docker config in kubelet_node.go.
//
// This mirrors kubernetes pkg/credentialprovider: BasicDockerKeyring.Add and
// Lookup (keyring.go), URLsMatch, isDefaultRegistryMatch, the
// DockerConfigJSON / DockerConfig / DockerConfigEntry JSON decoding and
// decodeDockerConfigFieldAuth (config.go), ReadDockerConfigFile's search
// (config.go) and secretsToTrackedDockerConfigs (secrets/secrets.go).
//
// The JSON is decoded with encoding/json into types shaped like the
// kubelet's, so a document fails here exactly when it fails there: a syntax
// error, a wrong type in a known field (including "HttpHeaders", which must be
// an object of strings), or a bad "auth" in any entry fails the whole
// document. The one deliberate difference is determinism: the kubelet adds
// the entries of one document in Go map order, which is random; this file
// adds them in document order.

import (
	"net"
	"net/url"
	"path/filepath"
	"sort"
	"strings"

	"github.com/pullhelper/pullhelper/internal/wire"
)

// Credential sources of the kubelet keyrings.
const (
	sourcePullSecret        = "pull-secret"
	sourceKubeletNodeConfig = "kubelet-node-config"
)

// Secret types and data keys the kubelet accepts (k8s.io/api/core/v1).
const (
	secretTypeDockerConfigJSON = "kubernetes.io/dockerconfigjson"
	secretKeyDockerConfigJSON  = ".dockerconfigjson"
	secretTypeDockercfg        = "kubernetes.io/dockercfg"
	secretKeyDockercfg         = ".dockercfg"
)

// defaultRegistryHost is the key whose credentials are the fallback for
// images on Docker Hub (keyring.go defaultRegistryHost).
const defaultRegistryHost = "index.docker.io"

// KubeletKeyring is a BasicDockerKeyring: entries indexed by normalized key,
// sorted reverse-lexicographically. The zero value is an empty keyring.
type KubeletKeyring struct {
	index []string
	creds map[string][]wire.Credential
}

// AddDockerConfigJSON adds the "auths" of a config.json-format document
// (.dockerconfigjson). A document without "auths" adds nothing. On a JSON
// error or a bad "auth" field nothing is added and the error names the file
// and the key, never the secret.
func (k *KubeletKeyring) AddDockerConfigJSON(data []byte, source, file string) error {
	cfg, err := parseKubeletConfigJSON(data)
	if err != nil {
		return configError(file, err)
	}
	k.add(cfg, source, file)
	return nil
}

// AddDockerCfg adds a legacy .dockercfg-format document, whose top-level
// object is the map of keys to entries. Errors as for AddDockerConfigJSON.
func (k *KubeletKeyring) AddDockerCfg(data []byte, source, file string) error {
	cfg, err := parseKubeletDockercfg(data)
	if err != nil {
		return configError(file, err)
	}
	k.add(cfg, source, file)
	return nil
}

// add is BasicDockerKeyring.Add: normalize each key, append its credential,
// then de-duplicate and reverse-sort the index.
func (k *KubeletKeyring) add(cfg kubeletConfig, source, file string) {
	if k.creds == nil {
		k.creds = map[string][]wire.Credential{}
	}
	for _, item := range cfg.entries {
		key, ok := normalizeKubeletKey(item.key)
		if !ok {
			continue // the kubelet logs "Entry %q in dockercfg invalid" and ignores it
		}
		k.creds[key] = append(k.creds[key], wire.Credential{
			Source:   source,
			File:     file,
			Key:      item.key,
			Username: item.entry.Username,
			Password: item.entry.Password,
		})
		k.index = append(k.index, key)
	}
	seen := make(map[string]bool, len(k.index))
	uniq := k.index[:0]
	for _, key := range k.index {
		if !seen[key] {
			seen[key] = true
			uniq = append(uniq, key)
		}
	}
	k.index = uniq
	sort.Sort(sort.Reverse(sort.StringSlice(k.index)))
}

// normalizeKubeletKey turns a key as written in a docker config into the
// keyring's index key: scheme dropped, a leading /v1/ or /v2/ reduced to /,
// host[:port] plus the path unless the path is empty or "/".
func normalizeKubeletKey(loc string) (string, bool) {
	value := loc
	if !strings.HasPrefix(value, "https://") && !strings.HasPrefix(value, "http://") {
		value = "https://" + value
	}
	parsed, err := url.Parse(value)
	if err != nil {
		return "", false
	}
	effectivePath := parsed.Path
	if strings.HasPrefix(effectivePath, "/v2/") || strings.HasPrefix(effectivePath, "/v1/") {
		effectivePath = effectivePath[3:]
	}
	if len(effectivePath) > 0 && effectivePath != "/" {
		return parsed.Host + effectivePath, true
	}
	return parsed.Host, true
}

// Lookup returns every matching credential in kubelet order: all matching
// keys in index order, each key's credentials in insertion order. If no key
// matches and the image is on the default registry, the credentials stored
// under index.docker.io are returned. image is the normalized repository
// name without tag or digest, as the kubelet passes it (e.g.
// "docker.io/library/nginx", "quay.io/org/repo", "reg:5000/x").
func (k *KubeletKeyring) Lookup(image string) []wire.Credential {
	var ret []wire.Credential
	for _, key := range k.index {
		if kubeletURLsMatch(key, image) {
			ret = append(ret, k.creds[key]...)
		}
	}
	if len(ret) > 0 {
		return ret
	}
	if isDefaultRegistryMatch(image) {
		if creds, ok := k.creds[defaultRegistryHost]; ok {
			return append([]wire.Credential(nil), creds...)
		}
	}
	return nil
}

// parseSchemelessURL is the kubelet's ParseSchemelessURL.
func parseSchemelessURL(s string) (*url.URL, error) {
	u, err := url.Parse("https://" + s)
	if err != nil {
		return nil, err
	}
	u.Scheme = ""
	return u, nil
}

// splitURL is the kubelet's SplitURL: host labels and port ("" if none).
func splitURL(u *url.URL) ([]string, string) {
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		host, port = u.Host, ""
	}
	return strings.Split(host, "."), port
}

// kubeletURLsMatch is URLsMatchStr(glob, target): equal ports, the same
// number of host labels, the target path string-prefixed by the glob path,
// and each label matched by filepath.Match. Errors count as no match, as in
// Lookup.
func kubeletURLsMatch(glob, target string) bool {
	globURL, err := parseSchemelessURL(glob)
	if err != nil {
		return false
	}
	targetURL, err := parseSchemelessURL(target)
	if err != nil {
		return false
	}
	globParts, globPort := splitURL(globURL)
	targetParts, targetPort := splitURL(targetURL)
	if globPort != targetPort {
		return false
	}
	if len(globParts) != len(targetParts) {
		return false
	}
	if !strings.HasPrefix(targetURL.Path, globURL.Path) {
		return false
	}
	for i, g := range globParts {
		matched, err := filepath.Match(g, targetParts[i])
		if err != nil || !matched {
			return false
		}
	}
	return true
}

// isDefaultRegistryMatch reports whether the image would be pulled from
// Docker Hub, judged by its first component.
func isDefaultRegistryMatch(image string) bool {
	parts := strings.SplitN(image, "/", 2)
	if len(parts[0]) == 0 {
		return false
	}
	if len(parts) == 1 {
		return true
	}
	if parts[0] == "docker.io" || parts[0] == "index.docker.io" {
		return true
	}
	return !strings.ContainsAny(parts[0], ".:")
}
