package auth

// Fuzz targets for every file format this package parses. Internal tests:
// the decoders are unexported and the public loaders only add file I/O.
//
// Secrets: the seeds put the marker below in secret fields (auth,
// password, identitytoken, ...). A parser may quote a key or a non-secret
// value, so an error is checked for the marker only when the fuzzer left it
// in secret fields alone (markerExposed says where it is).

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/pullhelper/pullhelper/internal/wire"
	"go.yaml.in/yaml/v3"
)

const fuzzMarker = "S3CRET"

// fuzzSecretKeys are the (lower-cased) keys whose string values are secrets
// in the formats fuzzed here.
var fuzzSecretKeys = map[string]bool{
	"auth": true, "password": true, "identitytoken": true, "registrytoken": true,
	"secret": true, "token": true, "serviceaccounttoken": true,
}

// markerExposed reports whether fuzzMarker appears in v where a parser may
// legitimately name it: in a key or in a value that is not a secret. A
// string value is also looked into as base64 and as JSON (Secret data,
// stringData), since a parser decodes those.
func markerExposed(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if fuzzKeyExposed(k, e) {
				return true
			}
		}
	case map[any]any:
		for k, e := range x {
			if fuzzKeyExposed(fmt.Sprint(k), e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if markerExposed(e) {
				return true
			}
		}
	case string:
		cands := []string{x}
		if b, err := base64.StdEncoding.DecodeString(x); err == nil {
			cands = append(cands, string(b))
		}
		for _, c := range cands {
			if !strings.Contains(c, fuzzMarker) {
				continue
			}
			inner, err := fuzzDecodeAny([]byte(c))
			if err != nil || markerExposed(inner) {
				return true
			}
		}
	case nil:
	default:
		return strings.Contains(fmt.Sprint(x), fuzzMarker)
	}
	return false
}

func fuzzKeyExposed(k string, e any) bool {
	if strings.Contains(k, fuzzMarker) {
		return true
	}
	if _, isString := e.(string); isString && fuzzSecretKeys[strings.ToLower(k)] {
		return false
	}
	return markerExposed(e)
}

// fuzzDecodeAny decodes data as JSON, else as a YAML stream, else TOML.
func fuzzDecodeAny(data []byte) (any, error) {
	var v any
	if json.Unmarshal(data, &v) == nil {
		return v, nil
	}
	var docs []any
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var d any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			break
		}
		docs = append(docs, d)
	}
	var m map[string]any
	if _, err := toml.Decode(string(data), &m); err == nil {
		return m, nil
	}
	return nil, errors.New("neither JSON, YAML nor TOML")
}

// fuzzCheckErr fails unless err is one line and, where the input kept the
// marker in secret fields only, free of it.
func fuzzCheckErr(t *testing.T, err error, data []byte) {
	t.Helper()
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		t.Fatalf("error is not one line: %q", msg)
	}
	if !strings.Contains(msg, fuzzMarker) {
		return
	}
	if doc, derr := fuzzDecodeAny(data); derr == nil && markerExposed(doc) {
		return
	}
	t.Fatalf("error %q quotes the secret %q of the input", msg, fuzzMarker)
}

func fuzzB64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// fuzzWrite writes data to a fresh file named name and returns its path.
func fuzzWrite(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// FuzzContainersAuthFile: containers-auth.json (and its legacy .dockercfg
// form) as containers/image reads it: no panic; errors one line, no secret;
// a credential found comes from an "auths" key and its decoded auth field.
func FuzzContainersAuthFile(f *testing.F) {
	// A credHelpers entry runs docker-credential-NAME: let none be found.
	f.Setenv("PATH", f.TempDir())
	auth := fuzzB64("user:pw-" + fuzzMarker)
	for _, s := range []string{
		`{"auths": {"quay.io": {"auth": "` + auth + `"}}}`,
		`{"auths": {"quay.io/org": {"auth": "` + auth + `", "identitytoken": "tok-` + fuzzMarker + `"}}}`,
		`{"auths": {"https://quay.io/v1/": {"auth": "` + auth + `"}}}`,
		`{"auths": {"quay.io": {"auth": "` + strings.TrimSuffix(auth, "=") + `"}}}`,
		`{"auths": {"quay.io": {"auth": "` + fuzzB64("nocolon"+fuzzMarker) + `"}}}`,
		`{"auths": {"quay.io": {"auth": 1}}}`,
		`{"credHelpers": {"quay.io": "none"}}`,
		`{"auths": {"quay.io": {"auth": "c2VjcmV0"`,
	} {
		f.Add([]byte(s), false)
	}
	f.Add([]byte(`{"quay.io": {"auth": "`+auth+`"}}`), true)
	f.Add([]byte(`{"https://quay.io/v1/": {"auth": "`+auth+`"}}`), true)
	f.Fuzz(func(t *testing.T, data []byte, legacy bool) {
		p := fuzzWrite(t, t.TempDir(), "auth.json", data)
		for _, name := range []string{"quay.io/org/repo", "docker.io/library/busybox"} {
			registry := strings.SplitN(name, "/", 2)[0]
			c, err := lookupFile(wire.AuthFile{Path: p, Legacy: legacy}, name, registry, lookupOpts{})
			if err != nil {
				fuzzCheckErr(t, err, data)
				continue
			}
			if c == nil || c.Source == "credential-helper" {
				continue
			}
			if c.File != p || c.Key == "" {
				t.Fatalf("credential %+v does not name the file and key", c)
			}
			if strings.HasPrefix(c.Password, "\x00") || strings.HasSuffix(c.Password, "\x00") {
				t.Fatalf("password of %q keeps NUL padding", c.Key)
			}
		}
	})
}

// fuzzDockerSeeds are config.json / .dockercfg documents of the table tests.
func fuzzDockerSeeds() []string {
	e := `{"auth": "` + fuzzB64("user:pw-"+fuzzMarker) + `"}`
	return []string{
		`{"auths": {"https://index.docker.io/v1/": ` + e + `, "reg.io/ns": {"username": "u", "password": "p-` + fuzzMarker + `"}}}`,
		`{"auths": {"reg.io": ` + e + `, "x.io": ` + e + `, "reg.io": {"auth": ""}}, "auths": {"y.io": ` + e + `}}`,
		`{"auths": {"reg.io": {"auth": "` + base64.RawStdEncoding.EncodeToString([]byte("u:p:q"+fuzzMarker)) + `"}}}`,
		`{"auths": {"reg.io": {"auth": "` + fuzzB64("nocolon"+fuzzMarker) + `"}}}`,
		`{"auths": {"reg.io": {"auth": "s3cr3t!!` + fuzzMarker + `"}}}`,
		`{"auths": {"reg.io": {"password": 12345}}}`,
		`{"auths": {}, "HttpHeaders": {"X": 1}}`,
		`{"auths": ["reg.io"]}`,
		`{"auths": null}`,
		`{"reg.io": ` + e + `, "*.reg.io:5000/path": ` + e + `}`,
		`{"reg.io": "c2VjcmV0"}`,
		`null`,
		`["reg.io"]`,
	}
}

// fuzzKeyring checks a keyring's invariants: the index is unique and
// reverse-sorted, each key has credentials, and the Lookup of an image
// under a key does not panic.
func fuzzKeyring(t *testing.T, k *KubeletKeyring) {
	t.Helper()
	if !sort.IsSorted(sort.Reverse(sort.StringSlice(k.index))) {
		t.Fatalf("index not reverse-sorted: %q", k.index)
	}
	for i, key := range k.index {
		if i > 0 && k.index[i-1] == key {
			t.Fatalf("index key %q repeated", key)
		}
		if len(k.creds[key]) == 0 {
			t.Fatalf("index key %q has no credential", key)
		}
		_ = k.Lookup(key + "/img:1")
	}
}

// FuzzDockerConfigJSON: a kubelet config.json (.dockerconfigjson): all or
// nothing, errors one line without a secret, the keyring well-formed.
func FuzzDockerConfigJSON(f *testing.F) {
	for _, s := range fuzzDockerSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		k := &KubeletKeyring{}
		if err := k.AddDockerConfigJSON(data, sourcePullSecret, "/f/config.json"); err != nil {
			fuzzCheckErr(t, err, data)
			if len(k.index) != 0 {
				t.Fatalf("a failed document added %q", k.index)
			}
			return
		}
		fuzzKeyring(t, k)
	})
}

// FuzzDockercfg: a legacy .dockercfg, as FuzzDockerConfigJSON.
func FuzzDockercfg(f *testing.F) {
	for _, s := range fuzzDockerSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		k := &KubeletKeyring{}
		if err := k.AddDockerCfg(data, sourcePullSecret, "/f/.dockercfg"); err != nil {
			fuzzCheckErr(t, err, data)
			if len(k.index) != 0 {
				t.Fatalf("a failed document added %q", k.index)
			}
			return
		}
		fuzzKeyring(t, k)
	})
}

// FuzzPullSecret: a pull secret file (raw docker config, or a Secret or
// List manifest in YAML or JSON): errors one line without a secret.
func FuzzPullSecret(f *testing.F) {
	dcj := fuzzB64(`{"auths": {"reg.io": {"auth": "` + fuzzB64("u:pw-"+fuzzMarker) + `"}}}`)
	dcfg := fuzzB64(`{"reg.io": {"auth": "` + fuzzB64("u:pw-"+fuzzMarker) + `"}}`)
	for _, s := range append(fuzzDockerSeeds(),
		"apiVersion: v1\nkind: Secret\nmetadata:\n  name: pull\n  namespace: ns\ntype: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: "+dcj+"\n",
		"apiVersion: v1\nkind: Secret\nmetadata:\n  name: pull\ntype: kubernetes.io/dockercfg\ndata:\n  .dockercfg: "+dcfg+"\n---\n",
		`{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pull"}, "type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": "`+dcj+`"}}`,
		"apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\ntype: kubernetes.io/dockerconfigjson\nstringData:\n  .dockerconfigjson: '{\"auths\": {\"reg.io\": {\"password\": \"p"+fuzzMarker+"\"}}}'\n",
		"apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Secret\n  metadata: {name: a}\n  type: kubernetes.io/dockercfg\n  data: {.dockercfg: "+dcfg+"}\n- kind: ConfigMap\n",
		"apiVersion: v1\nkind: Secret\ntype: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: '!!notbase64'\n",
		"kind: [\n",
		"- a\n",
	) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		k := &KubeletKeyring{}
		if err := k.addPullSecretFile(data, "/f/secret"); err != nil {
			fuzzCheckErr(t, err, data)
			return
		}
		fuzzKeyring(t, k)
	})
}

// FuzzNodeDockerConfig: the kubelet's node config.json / .dockercfg search
// never fails, and uses a file only when it parsed.
func FuzzNodeDockerConfig(f *testing.F) {
	for _, s := range fuzzDockerSeeds() {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, legacy bool) {
		dir := t.TempDir()
		name := "config.json"
		if legacy {
			name = ".dockercfg"
		}
		p := fuzzWrite(t, dir, "root/"+name, data)
		empty := filepath.Join(dir, "empty")
		k, used, err := LoadNodeDockerConfig(NodeConfigDirs{RootDir: filepath.Join(dir, "root"), Cwd: empty, Home: empty, Slash: empty})
		if err != nil {
			t.Fatalf("the node config search failed: %v", err)
		}
		parse := parseKubeletConfigJSON
		if legacy {
			parse = parseKubeletDockercfg
		}
		_, perr := parse(data)
		if (used == p) != (perr == nil) {
			t.Fatalf("used %q, but parsing it gave %v", used, perr)
		}
		fuzzKeyring(t, k)
	})
}

// FuzzKubeletAuthField: the "auth" field decodes as base64(user:password)
// and round-trips; errors never hold the field.
func FuzzKubeletAuthField(f *testing.F) {
	f.Add("u", "p:q", true)
	f.Add("", "", false)
	f.Add("user", "pa\n", true)
	f.Fuzz(func(t *testing.T, user, pass string, padded bool) {
		if strings.Contains(user, ":") {
			return
		}
		enc := base64.RawStdEncoding
		if padded {
			enc = base64.StdEncoding
		}
		field := enc.EncodeToString([]byte(user + ":" + pass))
		u, p, err := decodeKubeletAuth(field)
		if err != nil {
			// An unpadded field that happens to end in '=' cannot occur.
			t.Fatalf("decoding %q: %v", field, err)
		}
		if u != user || p != pass {
			t.Fatalf("decoded (%q, %q), want (%q, %q)", u, p, user, pass)
		}
		raw := user + fuzzMarker + pass // not base64 of anything with a colon
		if _, _, err := decodeKubeletAuth(raw); err != nil && strings.Contains(err.Error(), fuzzMarker) {
			t.Fatalf("error %q quotes the field", err)
		}
	})
}

// FuzzContainerdAuth: containerd's ParseAuth precedence, the round trip of
// an auth field, and errors that never quote the field.
func FuzzContainerdAuth(f *testing.F) {
	f.Add("", "", fuzzB64("u:p"+fuzzMarker), "")
	f.Add("u", "p", "", "tok")
	f.Add("", "", "", "tok"+fuzzMarker)
	f.Add("", "", fuzzB64("nocolon"+fuzzMarker), "")
	f.Add("", "", "!!"+fuzzMarker, "")
	f.Add("", "", fuzzB64("u:p\x00"), "")
	f.Fuzz(func(t *testing.T, username, password, auth, token string) {
		u, s, err := ParseContainerdAuth(username, password, auth, token)
		switch {
		case username != "":
			if err != nil || u != username || s != password {
				t.Fatalf("username given: got (%q, %q, %v)", u, s, err)
			}
		case token != "":
			if err != nil || u != "" || s != token {
				t.Fatalf("identitytoken given: got (%q, %q, %v)", u, s, err)
			}
		case auth == "":
			if err != nil || u != "" || s != "" {
				t.Fatalf("nothing given: got (%q, %q, %v)", u, s, err)
			}
		case err != nil:
			msg := err.Error()
			if strings.Contains(msg, "\n") || (len(auth) >= 4 && strings.Contains(msg, auth)) {
				t.Fatalf("error %q is not one line or quotes the auth field", msg)
			}
			if raw, derr := base64.StdEncoding.DecodeString(auth); derr == nil && len(raw) >= 4 && strings.Contains(msg, string(raw)) {
				t.Fatalf("error %q quotes the decoded auth field", msg)
			}
		default:
			raw, derr := base64.StdEncoding.DecodeString(auth)
			if derr != nil {
				t.Fatalf("auth %q is not base64 but parsed", auth)
			}
			wu, wp, _ := strings.Cut(string(raw), ":")
			if u != wu || s != strings.Trim(wp, "\x00") {
				t.Fatalf("auth %q: got (%q, %q)", auth, u, s)
			}
		}
	})
}

// FuzzProviderConfig: a CredentialProviderConfig (YAML or JSON) decodes
// and validates, or fails with one line; it never panics.
func FuzzProviderConfig(f *testing.F) {
	const head = "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\n"
	const prov = "providers:\n- name: p\n  matchImages: [\"*.example.com\", \"reg.io:5000/x\"]\n  defaultCacheDuration: 1h\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n"
	for _, s := range []string{
		head + prov + "  args: [a]\n  env:\n  - name: K\n    value: v\n",
		head + prov + "  tokenAttributes:\n    serviceAccountTokenAudience: aud\n    cacheType: ServiceAccount\n    requireServiceAccount: true\n    requiredServiceAccountAnnotationKeys: [a.io/k]\n",
		`{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"CredentialProviderConfig","providers":[{"name":"p","matchImages":["*.io"],"defaultCacheDuration":"1m30s","apiVersion":"credentialprovider.kubelet.k8s.io/v1beta1"}]}`,
		`{"apiVersion":"kubelet.config.k8s.io/v1","kind":"CredentialProviderConfig","providers":[{"name":"p","name":"q"}]}`,
		head + "providers:\n- name: p\n  matchImages: [\"foo bar\"]\n  defaultCacheDuration: -1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v2\n",
		head + "providers: []\nunknown: 1\n",
		"apiVersion: kubelet.config.k8s.io/v2\nkind: Other\n",
		"{\"kind\": 1}",
		"a: [\n",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		providers, err := cpDecodeConfig(data, "/f/config.yaml")
		if err != nil {
			fuzzCheckErr(t, err, data)
			return
		}
		cfg := &ProviderConfig{Path: "/f/config.yaml", Providers: providers}
		if err := cfg.Validate(); err != nil {
			fuzzCheckErr(t, err, data)
			return
		}
		for _, p := range providers {
			if p.DefaultCacheDuration == nil || *p.DefaultCacheDuration < 0 || len(p.MatchImages) == 0 || p.Name == "" {
				t.Fatalf("provider %+v validated", p)
			}
		}
	})
}

// FuzzProviderResponse: a plugin's stdout decodes as a
// CredentialProviderResponse of the provider's apiVersion or fails with one
// line that holds none of the response's passwords nor the service-account
// token.
func FuzzProviderResponse(f *testing.F) {
	const v1 = "credentialprovider.kubelet.k8s.io/v1"
	for _, s := range []string{
		`{"apiVersion":"` + v1 + `","kind":"CredentialProviderResponse","cacheKeyType":"Registry","cacheDuration":"5m","auth":{"*.reg.io":{"username":"u","password":"pw-` + fuzzMarker + `"}}}`,
		`{"apiVersion":"` + v1 + `","kind":"CredentialProviderResponse","cacheKeyType":"Image","auth":{"reg.io/x":{"username":"u","password":"pw-` + fuzzMarker + `"}},"extra":1}`,
		`{"apiVersion":"pw-` + fuzzMarker + `","kind":"CredentialProviderResponse","auth":{"reg.io":{"password":"pw-` + fuzzMarker + `"}}}`,
		`{"apiVersion":"` + v1 + `","kind":"pw-` + fuzzMarker + `","auth":{"reg.io":{"password":"pw-` + fuzzMarker + `"}}}`,
		`{"apiVersion":"` + v1 + `","kind":"CredentialProviderResponse","cacheDuration":"forever","auth":{"reg.io":{"password":"pw-` + fuzzMarker + `"}}}`,
		`{"apiVersion":"` + v1 + `","kind":"CredentialProviderResponse","auth":{"reg.io":{"password":1}}}`,
		`{"apiVersion":"` + v1 + `"} {}`,
		`not json`,
	} {
		f.Add([]byte(s))
	}
	p := &CredentialProvider{Name: "fake", APIVersion: v1}
	const token = "sa-token-" + fuzzMarker
	fail := func(format string, a ...any) error {
		return fmt.Errorf("credential provider %q (image %s): "+format, append([]any{p.Name, "reg.io/img"}, a...)...)
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		resp, err := cpDecodeResponse(p, out, token, fail)
		if err == nil {
			if resp.Kind != cpResponseKind || resp.APIVersion != v1 {
				t.Fatalf("decoded a %q %q", resp.APIVersion, resp.Kind)
			}
			return
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") {
			t.Fatalf("error is not one line: %q", msg)
		}
		for _, pw := range append(cpPasswordsFromOutput(out), token) {
			if strings.Contains(pw, fuzzMarker) && strings.Contains(msg, pw) {
				t.Fatalf("error %q holds the secret %q", msg, pw)
			}
		}
	})
}

// FuzzServiceAccountToken: the unverified claims of a JWT: nil or claims,
// never a panic; the audiences are the "aud" string or list.
func FuzzServiceAccountToken(f *testing.F) {
	seg := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	f.Add(seg(`{"alg":"RS256"}`) + "." + seg(`{"aud":"a","kubernetes.io":{"namespace":"ns","serviceaccount":{"name":"sa","uid":"u"}}}`) + ".sig")
	f.Add(seg(`{}`) + "." + seg(`{"aud":["a","b"]}`) + "==.sig")
	f.Add("a.b")
	f.Add("a.!!.c")
	f.Fuzz(func(t *testing.T, token string) {
		c := cpParseToken(token)
		if c == nil {
			return
		}
		if strings.Count(token, ".") != 2 {
			t.Fatalf("%q is not a JWT but parsed", token)
		}
		aud, ok := c.audiences()
		if ok != (len(c.Aud) > 0 && (json.Unmarshal(c.Aud, new(string)) == nil || json.Unmarshal(c.Aud, new([]string)) == nil)) {
			t.Fatalf("audiences %q, %v of %s", aud, ok, c.Aud)
		}
	})
}
