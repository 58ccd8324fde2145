package auth

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// The kubelet's docker config decoding (kubernetes pkg/credentialprovider
// config.go: DockerConfigJSON, DockerConfig, DockerConfigEntry and
// decodeDockerConfigFieldAuth), shared by pull secrets and the node docker
// config; kubelet.go says why the decoding is encoding/json's.

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
