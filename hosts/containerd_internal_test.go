package hosts

import (
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/pullhelper/pullhelper/internal/testcert"
)

// An IPv6 literal registry ("[::1]:5000") cannot be named in an image
// reference (docker/reference rejects it), so Endpoints never sees one;
// containerd's host-directory rules for it are checked here, below the
// public API.
func TestContainerdEndpointListIPv6(t *testing.T) {
	root := t.TempDir()
	// hostDirFromRoots turns only the LAST colon into _PORT_.
	dir := filepath.Join(root, "[::1]_5000_")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	list, err := containerdEndpointList(&ctrdRegistry{ConfigPath: root}, "[::1]:5000", nil)
	if err != nil {
		t.Fatal(err)
	}
	// The localhost default is http with skip_verify, which
	// ConfigureHosts tries over https first (its port is not 80).
	if len(list) != 1 || list[0].file != dir || list[0].scheme != "https" || !list[0].tlsFallback || list[0].host != "[::1]:5000" || !list[0].tls.SkipVerify {
		t.Errorf("config_path: %+v, want https (falling back to http) to [::1]:5000 from %s with the localhost skip_verify", list, dir)
	}
	// No config: the legacy default endpoint, http and skip_verify for a
	// loopback address; the CRI's legacy registryHosts has no fallback.
	list, err = containerdEndpointList(&ctrdRegistry{}, "[::1]:5000", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].scheme != "http" || list[0].tlsFallback || list[0].host != "[::1]:5000" || !list[0].tls.SkipVerify {
		t.Errorf("legacy: %+v, want http://[::1]:5000 with skip_verify", list)
	}
}

// ConfigureHosts (containerd 2.x) tries a http:// host over https first,
// falling back to plain http (docker.NewHTTPFallback), when the host has
// TLS settings of its own (ca, client, skip_verify, even false) and its
// port is not 80; otherwise http stays http.
func TestContainerdHTTPHostWithTLSTriesHTTPSFirst(t *testing.T) {
	root := t.TempDir()
	ca := filepath.Join(root, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: testcert.CA(t, "reg.example CA")}), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "reg.example")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	toml := `server = "http://reg.example:5000"
[host."http://m1.example:5000"]
  ca = "` + ca + `"
[host."http://m2.example:80"]
  skip_verify = true
[host."http://m3.example:5000"]
[host."http://m4.example"]
  skip_verify = false
[host."https://m5.example:5000"]
  skip_verify = true
`
	if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	list, err := containerdEndpointList(&ctrdRegistry{ConfigPath: root}, "reg.example", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		scheme   string
		fallback bool
	}{
		"m1.example:5000":  {"https", true},  // ca
		"m2.example:80":    {"http", false},  // port 80: not ambiguous
		"m3.example:5000":  {"http", false},  // no TLS settings
		"m4.example":       {"https", true},  // skip_verify set, even false
		"m5.example:5000":  {"https", false}, // https already
		"reg.example:5000": {"http", false},  // the server, no TLS settings
	}
	if len(list) != len(want) {
		t.Fatalf("got %d endpoints, want %d: %+v", len(list), len(want), list)
	}
	for _, e := range list {
		w, ok := want[e.host]
		if !ok || e.scheme != w.scheme || e.tlsFallback != w.fallback {
			t.Errorf("%s: scheme %s, fallback %v; want %s, %v", e.host, e.scheme, e.tlsFallback, w.scheme, w.fallback)
		}
	}
}

// containerd 2.x (config versions 3 and 4): config_path defaults to
// /etc/containerd/certs.d:/etc/docker/certs.d when neither it nor mirrors
// are set (plugins/cri/images InitFn), and the legacy mirrors' configs.HOST.tls
// is not read (RegistryConfig is Auth alone): certificates stay verified.
// Version 2 keeps containerd 1.x's reading of both.
func TestContainerd2Registry(t *testing.T) {
	dir := t.TempDir()
	cfg := func(name, body string) *ctrdRegistry {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		reg, _, err := readContainerdConfig(p)
		if err != nil {
			t.Fatal(err)
		}
		return reg
	}
	if reg := cfg("v3.toml", "version = 3\n"); reg.ConfigPath != ctrdDefaultConfigPath {
		t.Errorf("v3 without config_path or mirrors: config_path %q, want %q", reg.ConfigPath, ctrdDefaultConfigPath)
	}
	// configs.*.tls beside the default config_path is no error for 2.x
	// (loadContainerdConfig validates as containerd 2.x does).
	p := filepath.Join(dir, "v3-tls-only.toml")
	if err := os.WriteFile(p, []byte("version = 3\n[plugins.\"io.containerd.cri.v1.images\".registry.configs.\"r.example\".tls]\n  insecure_skip_verify = true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if reg, err := loadContainerdConfig(p); err != nil || reg.ConfigPath != ctrdDefaultConfigPath {
		t.Errorf("v3 with configs.tls only: %+v %v; want the default config_path and no error", reg, err)
	}
	if reg := cfg("v2.toml", "version = 2\n"); reg.ConfigPath != "" {
		t.Errorf("v2: config_path %q, want none (containerd 1.x's legacy mode)", reg.ConfigPath)
	}
	tlsCfg := `[plugins."%s".registry.mirrors."reg.example"]
  endpoint = ["https://mirror.example"]
[plugins."%s".registry.configs."mirror.example".tls]
  insecure_skip_verify = true
`
	for _, tc := range []struct {
		name, version, plugin string
		skip                  bool
	}{
		{"v3-tls.toml", "3", "io.containerd.cri.v1.images", false},
		{"v2-tls.toml", "2", "io.containerd.grpc.v1.cri", true},
	} {
		reg := cfg(tc.name, "version = "+tc.version+"\n"+fmt.Sprintf(tlsCfg, tc.plugin, tc.plugin))
		if reg.ConfigPath != "" {
			t.Fatalf("%s: mirrors set, config_path %q, want none", tc.name, reg.ConfigPath)
		}
		list, err := containerdEndpointList(reg, "reg.example", nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 0 || list[0].host != "mirror.example" || list[0].tls.SkipVerify != tc.skip {
			t.Errorf("%s: %+v; want the mirror first, skip_verify %v", tc.name, list, tc.skip)
		}
	}
}
