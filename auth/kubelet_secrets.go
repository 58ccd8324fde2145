package auth

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"

	"github.com/pullhelper/pullhelper/internal/safefile"
	"go.yaml.in/yaml/v3"
)

// Pull secrets as the kubelet reads a pod's imagePullSecrets (kubernetes
// pkg/credentialprovider/secrets/secrets.go secretsToTrackedDockerConfigs):
// raw documents or Secret manifests, into one KubeletKeyring.

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
			return nil, fmt.Errorf("reading pull secret %s: %w", f, safefile.Cause(err))
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
			return fmt.Errorf("parsing Secret %q in %s: data key %q is not valid base64: %w", name, file, key, err)
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
