package auth

// Kubelet credential keyring (research: credentials-and-dns.md, section 1).
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
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/pullhelper/pullhelper/internal/wire"
	"go.yaml.in/yaml/v3"
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

// --- decoding ---------------------------------------------------------------

// kubeletEntry is DockerConfigEntry: only username, password and email are
// kept; identitytoken and registrytoken are not parsed.
type kubeletEntry struct {
	Username string
	Password string
	Email    string
}

// UnmarshalJSON is DockerConfigEntry.UnmarshalJSON: a non-empty "auth"
// overrides username and password.
func (e *kubeletEntry) UnmarshalJSON(data []byte) error {
	var tmp struct {
		Username string `json:"username,omitempty"`
		Password string `json:"password,omitempty"`
		Email    string `json:"email,omitempty"`
		Auth     string `json:"auth,omitempty"`
	}
	if err := json.Unmarshal(data, &tmp); err != nil {
		return err
	}
	e.Username, e.Password, e.Email = tmp.Username, tmp.Password, tmp.Email
	if len(tmp.Auth) == 0 {
		return nil
	}
	user, pass, err := decodeKubeletAuth(tmp.Auth)
	if err != nil {
		return err
	}
	e.Username, e.Password = user, pass
	return nil
}

var errKubeletAuthNoColon = errors.New("unable to parse auth field, must be formatted as base64(username:password)")

// decodeKubeletAuth is decodeDockerConfigFieldAuth: padded base64 if the
// trimmed value ends in "=", unpadded otherwise; split on the first colon.
// Errors never contain the value.
func decodeKubeletAuth(field string) (string, string, error) {
	var decoded []byte
	var err error
	if strings.HasSuffix(strings.TrimSpace(field), "=") {
		decoded, err = base64.StdEncoding.DecodeString(field)
	} else {
		decoded, err = base64.RawStdEncoding.DecodeString(field)
	}
	if err != nil {
		// base64.CorruptInputError names only the offset.
		return "", "", fmt.Errorf("decoding the auth field: %w", err)
	}
	parts := strings.SplitN(string(decoded), ":", 2)
	if len(parts) != 2 {
		return "", "", errKubeletAuthNoColon
	}
	return parts[0], parts[1], nil
}

// kubeletConfig is DockerConfig (map[string]DockerConfigEntry) with the
// document order of its keys kept. Decoding follows encoding/json's map
// semantics: null clears it, a repeated key replaces the value (it keeps its
// first position), and a second object for the same field merges into it.
type kubeletConfig struct {
	entries []kubeletConfigItem
}

type kubeletConfigItem struct {
	key   string
	entry kubeletEntry
}

// entryError is an error in the n-th entry (from 1, in file order), under
// key. The key is repeated only when the entry is shaped like a docker
// config entry (an object with one of its fields): the file may be no
// docker config at all (a symlink to a root-only file), its keys its
// content.
type entryError struct {
	n   int
	key string // "" when not to be shown
	err error
}

func (e *entryError) Error() string {
	if e.key == "" || !plainKey(e.key) {
		return fmt.Sprintf("entry %d: %s", e.n, describeDecodeErr(e.err))
	}
	return fmt.Sprintf("entry %q: %s", e.key, describeDecodeErr(e.err))
}

// plainKey: a key shown as is, printable ASCII without a quote or a
// backslash (quoted, those would be escaped, which safefile.Redact treats
// as the rest of a value).
func plainKey(k string) bool {
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '\'' || c == '`' {
			return false
		}
	}
	return true
}

// dockerEntryShaped reports whether raw is an object with a field of a
// docker config entry (matched without case, as encoding/json does).
func dockerEntryShaped(raw []byte) bool {
	var probe map[string]json.RawMessage
	if json.Unmarshal(raw, &probe) != nil {
		return false
	}
	for k := range probe {
		switch strings.ToLower(k) {
		case "auth", "username", "password", "email", "identitytoken":
			return true
		}
	}
	return false
}

func (e *entryError) Unwrap() error { return e.err }

var errNotAnObject = errors.New("not a JSON object")

func (c *kubeletConfig) UnmarshalJSON(data []byte) error {
	if string(bytes.TrimSpace(data)) == "null" {
		c.entries = nil
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return errNotAnObject
	}
	for n := 1; dec.More(); n++ {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok {
			return errNotAnObject
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		var e kubeletEntry
		if err := json.Unmarshal(raw, &e); err != nil {
			ee := &entryError{n: n, err: err}
			if dockerEntryShaped(raw) {
				ee.key = key
			}
			return ee
		}
		replaced := false
		for i := range c.entries {
			if c.entries[i].key == key {
				c.entries[i].entry = e
				replaced = true
				break
			}
		}
		if !replaced {
			c.entries = append(c.entries, kubeletConfigItem{key: key, entry: e})
		}
	}
	return nil
}

// kubeletConfigJSON is DockerConfigJSON. HttpHeaders is decoded (and so
// type-checked) as the kubelet does, then ignored.
type kubeletConfigJSON struct {
	Auths       kubeletConfig     `json:"auths"`
	HTTPHeaders map[string]string `json:"HttpHeaders,omitempty"`
}

func parseKubeletConfigJSON(data []byte) (kubeletConfig, error) {
	var cfg kubeletConfigJSON
	if err := json.Unmarshal(data, &cfg); err != nil {
		return kubeletConfig{}, err
	}
	return cfg.Auths, nil
}

func parseKubeletDockercfg(data []byte) (kubeletConfig, error) {
	var cfg kubeletConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return kubeletConfig{}, err
	}
	return cfg, nil
}

// describeDecodeErr describes a decoding error without quoting content.
func describeDecodeErr(err error) string {
	var ee *entryError
	var ce base64.CorruptInputError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &ee):
		return ee.Error()
	case errors.As(err, &te) && te.Field == "":
		return fmt.Sprintf("wrong type (%s where an object is expected)", te.Value)
	case errors.Is(err, errKubeletAuthNoColon), errors.Is(err, errNotAnObject), errors.As(err, &ce):
		return err.Error()
	}
	return jsonErrorNoData(err)
}

func configError(file string, err error) error {
	return fmt.Errorf("parsing docker config %s: %s", file, describeDecodeErr(err))
}

// --- pull secrets -------------------------------------------------------------

// secretManifest is the part of a Secret (or a List of them) that matters.
type secretManifest struct {
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	Kind       string `json:"kind" yaml:"kind"`
	Metadata   struct {
		Name      string `json:"name" yaml:"name"`
		Namespace string `json:"namespace" yaml:"namespace"`
	} `json:"metadata" yaml:"metadata"`
	Type       string            `json:"type" yaml:"type"`
	Data       map[string]string `json:"data" yaml:"data"`
	StringData map[string]string `json:"stringData" yaml:"stringData"`
	Items      []secretManifest  `json:"items" yaml:"items"`
}

// LoadPullSecrets reads pull secrets into one keyring, as the kubelet's
// MakeDockerKeyring does with a pod's imagePullSecrets. Each file is a raw
// .dockerconfigjson or .dockercfg document (config.json format if it has a
// top-level "auths" object, legacy otherwise; an empty file is ignored), or a
// Secret manifest in YAML or JSON (several YAML documents and kind List are
// accepted). Secrets of type kubernetes.io/dockerconfigjson with data key
// .dockerconfigjson and kubernetes.io/dockercfg with .dockercfg are used;
// stringData overrides data; other types or keys and empty data are ignored.
// A read or decode error in any file fails the whole load.
func LoadPullSecrets(files []string, inline ...Inline) (*KubeletKeyring, error) {
	k := &KubeletKeyring{}
	for _, f := range files {
		data, err := readFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading pull secret %s: %w", f, pathErr(err))
		}
		if err := k.addPullSecretFile(data, f); err != nil {
			return nil, err
		}
	}
	// Inline secrets (--pull-secret-fd) come after the files, with the
	// same parsing and the same errors, naming Name instead of a path.
	for _, in := range inline {
		if err := k.addPullSecretFile(in.Data, in.Name); err != nil {
			if in.Setting != "" {
				return nil, &ConfigError{Setting: in.Setting, Err: err}
			}
			return nil, err
		}
	}
	return k, nil
}

// Inline is a credential file's content that the caller read once (from a
// pipe: --pull-secret-fd, --authfile-fd) instead of a path. Name stands for
// the path in results and errors ("fd:N"); Setting, when set, is what a
// load error names instead of the policy key ("--pull-secret-fd N"); Data is
// secret and never marshals.
type Inline struct {
	Name    string `json:"name"`
	Setting string `json:"-"`
	Data    []byte `json:"-"`
}

func (k *KubeletKeyring) addPullSecretFile(data []byte, file string) error {
	if len(data) == 0 {
		return nil // empty data is ignored, as for a Secret
	}
	if json.Valid(data) {
		var top map[string]json.RawMessage
		if json.Unmarshal(data, &top) == nil {
			if kind, ok := top["kind"]; ok && len(kind) > 0 && kind[0] == '"' {
				var m secretManifest
				if err := json.Unmarshal(data, &m); err != nil {
					return fmt.Errorf("parsing Secret manifest %s: %s", file, jsonErrorNoData(err))
				}
				return k.addManifests([]secretManifest{m}, file)
			}
			if auths, ok := top["auths"]; ok && len(auths) > 0 && auths[0] == '{' {
				return k.AddDockerConfigJSON(data, sourcePullSecret, file)
			}
		}
		return k.AddDockerCfg(data, sourcePullSecret, file)
	}
	docs, yerr := decodeSecretYAML(data)
	if yerr == nil && len(docs) > 0 {
		return k.addManifests(docs, file)
	}
	// Neither JSON nor a manifest: report the JSON error of a raw document.
	jerr := json.Unmarshal(data, new(any))
	msg := fmt.Sprintf("parsing pull secret %s: not a docker config (%s)", file, jsonErrorNoData(jerr))
	if yerr != nil {
		msg += " nor a Secret manifest (" + yerr.Error() + ")"
	} else {
		msg += " nor a Secret manifest"
	}
	return errors.New(msg)
}

var yamlLineRE = regexp.MustCompile(`line (\d+)`)

// decodeSecretYAML decodes a YAML stream of manifests. Errors give at most a
// line number: YAML errors may quote values.
func decodeSecretYAML(data []byte) ([]secretManifest, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []secretManifest
	for {
		var node yaml.Node
		err := dec.Decode(&node)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, yamlErrorNoData(err)
		}
		if len(node.Content) == 0 || node.Content[0].ShortTag() == "!!null" {
			continue // empty document
		}
		if node.Content[0].Kind != yaml.MappingNode {
			return nil, errors.New("a YAML document is not a mapping")
		}
		var m secretManifest
		if err := node.Decode(&m); err != nil {
			return nil, yamlErrorNoData(err)
		}
		if m.Kind == "" {
			return nil, errors.New("a YAML document has no kind")
		}
		docs = append(docs, m)
	}
	return docs, nil
}

func yamlErrorNoData(err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return errors.New("YAML field of the wrong type")
	}
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Errorf("YAML syntax error at line %s", m[1])
	}
	return errors.New("YAML syntax error")
}

func (k *KubeletKeyring) addManifests(docs []secretManifest, file string) error {
	for _, m := range docs {
		switch m.Kind {
		case "Secret":
			if err := k.addSecret(m, file); err != nil {
				return err
			}
		case "List", "SecretList":
			for _, item := range m.Items {
				if item.Kind != "" && item.Kind != "Secret" {
					return fmt.Errorf("parsing Secret manifest %s: an item of a %s is not a Secret", file, m.Kind)
				}
				if err := k.addSecret(item, file); err != nil {
					return err
				}
			}
		default:
			// Not quoted: the file may be no manifest at all.
			return fmt.Errorf("parsing Secret manifest %s: its kind is not Secret, List or SecretList", file)
		}
	}
	return nil
}

// addSecret is one step of secretsToTrackedDockerConfigs.
func (k *KubeletKeyring) addSecret(m secretManifest, file string) error {
	name := m.Metadata.Name
	if m.Metadata.Namespace != "" {
		name = m.Metadata.Namespace + "/" + name
	}
	data := make(map[string][]byte, len(m.Data)+len(m.StringData))
	for key, v := range m.Data {
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return fmt.Errorf("parsing Secret %q in %s: data key %q is not valid base64: %v", name, file, key, err)
		}
		data[key] = b
	}
	for key, v := range m.StringData {
		data[key] = []byte(v) // the API server merges stringData over data
	}
	if b := data[secretKeyDockerConfigJSON]; m.Type == secretTypeDockerConfigJSON && len(b) > 0 {
		cfg, err := parseKubeletConfigJSON(b)
		if err != nil {
			return fmt.Errorf("parsing Secret %q in %s (%s): %s", name, file, secretKeyDockerConfigJSON, describeDecodeErr(err))
		}
		k.add(cfg, sourcePullSecret, file)
	} else if b := data[secretKeyDockercfg]; m.Type == secretTypeDockercfg && len(b) > 0 {
		cfg, err := parseKubeletDockercfg(b)
		if err != nil {
			return fmt.Errorf("parsing Secret %q in %s (%s): %s", name, file, secretKeyDockercfg, describeDecodeErr(err))
		}
		k.add(cfg, sourcePullSecret, file)
	}
	return nil
}

// --- node docker config -------------------------------------------------------

// NodeConfigDirs are the directories the kubelet searches for the node's
// docker config: RootDir is --root-dir (default /var/lib/kubelet), Cwd the
// kubelet's working directory, Home its home directory, Slash the file
// system root ("/" when empty; tests substitute their own). Empty RootDir,
// Cwd or Home behave as in the kubelet, where filepath.Abs resolves them
// against the process's working directory.
type NodeConfigDirs struct {
	RootDir, Cwd, Home, Slash string
}

// LoadNodeDockerConfig searches like the kubelet's ReadDockerConfigFile:
// config.json in RootDir, Cwd, Home/.docker, Slash/.docker, the first file
// that reads and parses wins (missing, unreadable or invalid files, including
// a bad "auth" field, are skipped); a config.json without "auths" yields an
// empty keyring and ends the search. Only if no config.json parsed, .dockercfg
// in RootDir, Cwd, Home, Slash. It returns the keyring and the file used (""
// if none). As in the kubelet, nothing here is an error: the error is always
// nil and exists for callers' uniformity.
func LoadNodeDockerConfig(dirs NodeConfigDirs) (*KubeletKeyring, string, error) {
	slash := dirs.Slash
	if slash == "" {
		slash = "/"
	}
	jsonDirs := []string{dirs.RootDir, dirs.Cwd, filepath.Join(dirs.Home, ".docker"), filepath.Join(slash, ".docker")}
	if cfg, file, ok := searchNodeConfig(jsonDirs, "config.json", parseKubeletConfigJSON); ok {
		k := &KubeletKeyring{}
		k.add(cfg, sourceKubeletNodeConfig, file)
		return k, file, nil
	}
	cfgDirs := []string{dirs.RootDir, dirs.Cwd, dirs.Home, slash}
	if cfg, file, ok := searchNodeConfig(cfgDirs, ".dockercfg", parseKubeletDockercfg); ok {
		k := &KubeletKeyring{}
		k.add(cfg, sourceKubeletNodeConfig, file)
		return k, file, nil
	}
	return &KubeletKeyring{}, "", nil
}

func searchNodeConfig(dirs []string, name string, parse func([]byte) (kubeletConfig, error)) (kubeletConfig, string, bool) {
	for _, d := range dirs {
		p, err := filepath.Abs(filepath.Join(d, name))
		if err != nil {
			continue
		}
		data, err := readFile(p)
		if err != nil {
			continue
		}
		cfg, err := parse(data)
		if err != nil {
			continue
		}
		return cfg, p, true
	}
	return kubeletConfig{}, "", false
}
