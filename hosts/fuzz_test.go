package hosts

// Fuzz targets for the containerd files this package parses. Internal tests:
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
	"time"

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

// fuzzTOMLImportsLocal reports whether every import of a containerd config
// stays in its directory: the fuzzer must not make the loader read the
// host's files (an import of /dev/zero never ends).
func fuzzTOMLImportsLocal(data []byte) bool {
	var top struct {
		Imports []string `toml:"imports"`
	}
	if _, err := toml.Decode(string(data), &top); err != nil {
		return true // the loader fails on it too, before reading imports
	}
	for _, p := range top.Imports {
		if !filepath.IsLocal(p) {
			return false
		}
	}
	return true
}

// FuzzContainerdConfig: containerd's config.toml (versions 1 to 4, imports
// of a drop-in): errors one line naming a file, no secret; a loaded
// registry names the file it came from and an auth key for every auth.
func FuzzContainerdConfig(f *testing.F) {
	auth := `[plugins."io.containerd.grpc.v1.cri".registry.configs."reg.io".auth]` + "\nusername = \"u\"\npassword = \"p" + fuzzMarker + "\"\n"
	for _, s := range [][2]string{
		{"version = 2\n" + auth, ""},
		{"version = 2\nimports = [\"conf.d/*.toml\"]\n", "version = 2\n" + auth},
		{"version = 3\nimports = [\"conf.d/a.toml\"]\n", "version = 3\n[plugins.\"io.containerd.cri.v1.images\".registry]\nconfig_path = \"/etc/containerd/certs.d\"\n"},
		{"[plugins.cri.registry.mirrors.\"docker.io\"]\nendpoint = [\"https://m.example\"]\n[plugins.cri.registry.auths.\"https://reg.io\"]\nauth = \"" + fuzzB64("u:p"+fuzzMarker) + "\"\n", ""},
		{"version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".registry]\nconfig_path = \"/x\"\n[plugins.\"io.containerd.grpc.v1.cri\".registry.mirrors.\"a\"]\nendpoint = [\"b\"]\n", ""},
		{"version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".registry.auths.\"%zz\"]\nidentitytoken = \"t" + fuzzMarker + "\"\n", ""},
		{"version = 4\n", ""},
		{"version = 5\n", ""},
		{"version = 4\nimports = [\"conf.d/a.toml\"]\n[plugins.\"io.containerd.server.v1.grpc\"]\naddress = \"/s.sock\"\n", "version = 3\n[plugins.\"io.containerd.cri.v1.images\"]\nsnapshotter = \"native\"\n"},
		{"version = 2\nimports = [\"conf.d/a.toml\"]\n", "version = 3\n"},
		{"version = 2\nimports = [\"missing.toml\"]\n", ""},
		{"version = 2\n[plugins\npassword = \"" + fuzzMarker + "\"\n", "["},
	} {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, root, dropin []byte) {
		if !fuzzTOMLImportsLocal(root) || !fuzzTOMLImportsLocal(dropin) {
			return
		}
		dir := t.TempDir()
		p := fuzzWrite(t, dir, "config.toml", root)
		fuzzWrite(t, dir, "conf.d/a.toml", dropin)
		reg, err := loadContainerdConfig(p)
		if err != nil {
			fuzzCheckErr(t, err, append(append(root, '\n'), dropin...))
			if msg := err.Error(); !strings.Contains(msg, dir) {
				t.Fatalf("error %q names no config file", msg)
			}
			return
		}
		if reg.file != p && !strings.HasPrefix(reg.file, dir) {
			t.Fatalf("registry from %q, not from the config or its imports", reg.file)
		}
		for host, c := range reg.Configs {
			if c.Auth != nil && reg.authKey[host] == "" {
				t.Fatalf("configs %q has an auth without a key naming it", host)
			}
		}
	})
}

// FuzzHostsTOML: a containerd hosts.toml: every [host] table then the
// server, in order; paths end in /v2 unless override_path; capabilities
// known; relative certificate paths made absolute; headers sorted; the
// dial timeout a non-negative duration.
func FuzzHostsTOML(f *testing.F) {
	for _, s := range []string{
		"server = \"https://registry-1.docker.io\"\n[host.\"https://mirror.example\"]\ncapabilities = [\"pull\", \"resolve\"]\nca = \"ca.crt\"\nclient = [[\"c.cert\", \"c.key\"]]\n[host.\"https://mirror.example\".header]\nAuthorization = \"Basic " + fuzzMarker + "\"\n",
		"[host.\"http://10.0.0.1:5000/path/\"]\noverride_path = true\nskip_verify = true\ndial_timeout = \"5s\"\nca = [\"/abs.crt\", \"rel.crt\"]\nclient = \"c.pem\"\n",
		"server = \"reg.io\"\nheader = {X-A = [\"1\", \"2\"], X-B = \"3\"}\n",
		"[host.\"a\"]\ncapabilities = [\"delete\"]\n",
		"[host.\"a\"]\ndial_timeout = \"-1s\"\n",
		"[host.\"a\"]\nclient = [[\"only-one\"]]\n",
		"[host.\"a\"]\nca = 1\n",
		"host = 1\n",
		"[host.\"%zz\"]\n",
	} {
		f.Add([]byte(s))
	}
	const base = "/etc/containerd/certs.d/reg.io"
	f.Fuzz(func(t *testing.T, data []byte) {
		hosts, err := parseContainerdHostsFile(base, data)
		if err != nil {
			return // containerd logs it and falls back to the certificate files
		}
		if len(hosts) == 0 {
			t.Fatal("no server entry")
		}
		var override map[string]bool
		var top struct {
			OverridePath bool `toml:"override_path"`
			Host         map[string]struct {
				OverridePath bool `toml:"override_path"`
			} `toml:"host"`
		}
		md, err := toml.Decode(string(data), &top)
		if err != nil {
			t.Fatalf("parsed, but its override_path does not decode: %v", err)
		}
		override = map[string]bool{}
		for k, v := range top.Host {
			override[k] = v.OverridePath
		}
		// The host tables are those whose key starts with exactly "host"
		// (containerd's getSortedHosts compares case-sensitively; the TOML
		// decoder matches struct fields case-insensitively, so top.Host
		// may also hold a [HOST."x"] table, which containerd ignores).
		tables := map[string]bool{}
		for _, k := range md.Keys() {
			if len(k) >= 2 && k[0] == "host" {
				tables[k[1]] = true
			}
		}
		if len(hosts) != len(tables)+1 {
			t.Fatalf("%d entries for %d host tables and the server", len(hosts), len(tables))
		}
		for i, h := range hosts {
			if h.host != "" && !fuzzPathOK(h, i == len(hosts)-1, top.OverridePath, override) {
				t.Fatalf("entry %d: path %q does not end in /v2", i, h.path)
			}
			if h.capabilities&^(wire.CapabilityPull|wire.CapabilityResolve|wire.CapabilityPush) != 0 {
				t.Fatalf("entry %d: capabilities %b", i, h.capabilities)
			}
			for _, p := range h.caCerts {
				if !filepath.IsAbs(p) {
					t.Fatalf("entry %d: ca %q not absolute", i, p)
				}
			}
			for _, p := range h.clientPairs {
				if !filepath.IsAbs(p[0]) {
					t.Fatalf("entry %d: client %q not absolute", i, p[0])
				}
			}
			if !sort.StringsAreSorted(h.headers) {
				t.Fatalf("entry %d: headers %q not sorted", i, h.headers)
			}
			if h.dialTimeout != "" {
				if d, err := time.ParseDuration(h.dialTimeout); err != nil || d < 0 {
					t.Fatalf("entry %d: dial_timeout %q", i, h.dialTimeout)
				}
			}
		}
	})
}

// overrideOK: a path ends in /v2 unless override_path was set for this
// entry. last is the server entry (the top-level override_path).
func fuzzPathOK(h ctrdHostConfig, last, topOverride bool, override map[string]bool) bool {
	if strings.HasSuffix(h.path, "/v2") {
		return true
	}
	if last {
		return topOverride
	}
	for _, v := range override {
		if v {
			return true // some table set it; which one is the parser's order
		}
	}
	return false
}
