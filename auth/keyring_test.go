package auth_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/auth"
	"github.com/pullhelper/pullhelper/hosts"
	"github.com/pullhelper/pullhelper/internal/wire"
)

// hermetic returns a Config reading only files under dir: an empty
// registries.conf and drop-in directory, no default auth files.
func hermetic(t *testing.T, dir string) auth.TestConfig {
	t.Helper()
	rc := write(t, dir, "registries.conf", "")
	d := filepath.Join(dir, "registries.conf.d")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return auth.TestConfig{
		RegistriesConf: rc, RegistriesConfDir: d, TLSVerify: true,
		Env:      auth.Env{UID: 4242, Home: filepath.Join(dir, "home"), HomeEnv: filepath.Join(dir, "home")},
		Authfile: write(t, dir, "auth.json", `{"auths":{}}`),
		CertsD:   []string{filepath.Join(dir, "certs.d")},
	}
}

func newKeyring(t *testing.T, c auth.TestConfig) *auth.Keyring {
	t.Helper()
	k, err := auth.NewTestKeyring(c)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func endpoints(t *testing.T, k *auth.Keyring, image string) []wire.Endpoint {
	t.Helper()
	eps, err := k.Endpoints(image)
	if err != nil {
		t.Fatal(err)
	}
	return eps
}

// who lists "source:key:username" of each candidate.
func who(cs []wire.Credential) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.Source+":"+c.Key+":"+c.Username)
	}
	return out
}

func hostsOf(eps []wire.Endpoint) []string {
	var out []string
	for _, e := range eps {
		out = append(out, e.Scheme+"://"+e.Host+e.Path+" "+e.Source)
	}
	return out
}

// The issue-11 bug: a hosts.toml server is contacted with ITS credential
// (containerd pkg/cri/server/image_pull.go registryHosts: Credentials(host)
// → Configs[host].auth, host = the endpoint contacted) and its TLS
// (remotes/docker/config/hosts.go ConfigureHosts), never the image
// registry's; [host] entries come first in file order, each with its own.
func TestEndpointsContainerdHostsServer(t *testing.T) {
	dir := t.TempDir()
	certPEM, _ := ctrdPEM(t)
	root := filepath.Join(dir, "hosts")
	write(t, root, "image.example.com/ca.crt", certPEM)
	write(t, root, "image.example.com/hosts.toml", `server = "https://other.example.com"
ca = "ca.crt"
[host."https://first.example.com:8443/prefix"]
  capabilities = ["pull"]
  skip_verify = true
  [host."https://first.example.com:8443/prefix".header]
    X-Token = "v"
[host."http://second.example.com"]
  override_path = true
`)
	c := hermetic(t, dir)
	c.ContainerdConfig = write(t, dir, "config.toml", "version = 2\n["+ctrdCRI+"]\nconfig_path = \""+root+"\"\n"+
		"["+ctrdCRI+".configs.\"image.example.com\".auth]\nusername = \"image-user\"\npassword = \"ip\"\n"+
		"["+ctrdCRI+".configs.\"other.example.com\".auth]\nusername = \"other-user\"\npassword = \"op\"\n"+
		"["+ctrdCRI+".configs.\"first.example.com:8443\".auth]\nusername = \"first-user\"\npassword = \"fp\"\n")
	k := newKeyring(t, c)
	eps := endpoints(t, k, "image.example.com/ns/app:1")
	want := []string{
		"https://first.example.com:8443/prefix/v2 containerd hosts.toml host",
		"http://second.example.com containerd hosts.toml host",
		"https://other.example.com/v2 containerd hosts.toml server",
	}
	if got := hostsOf(eps); !reflect.DeepEqual(got, want) {
		t.Fatalf("endpoints %q, want %q", got, want)
	}
	wantCreds := [][]string{
		{`containerd-config:configs."first.example.com:8443".auth:first-user`},
		{},
		{`containerd-config:configs."other.example.com".auth:other-user`},
	}
	for i, e := range eps {
		if got := who(e.Credentials); !reflect.DeepEqual(got, wantCreds[i]) {
			t.Errorf("%s: credentials %q, want %q", e.Host, got, wantCreds[i])
		}
		if e.Repository != e.Host+"/ns/app" {
			t.Errorf("%s: repository %q", e.Host, e.Repository)
		}
		if e.Mirror != (i < 2) {
			t.Errorf("%s: mirror = %v", e.Host, e.Mirror)
		}
	}
	if !reflect.DeepEqual(eps[0].Capabilities.Names(), []string{"pull"}) || !reflect.DeepEqual(eps[0].Headers, []string{"X-Token"}) {
		t.Errorf("first: capabilities %q headers %q", eps[0].Capabilities.Names(), eps[0].Headers)
	}
	if eps[0].Trust.Verify || !strings.Contains(eps[0].Trust.InsecureBy, "containerd skip_verify") {
		t.Errorf("first: trust %+v, want skip_verify", eps[0].Trust)
	}
	srv := eps[2].Trust
	if !srv.Verify || !reflect.DeepEqual(srv.CAFiles, []string{filepath.Join(root, "image.example.com/ca.crt")}) {
		t.Errorf("server trust %+v, want the hosts.toml ca and verification", srv)
	}
	if len(eps[1].Trust.CAFiles) != 0 {
		t.Errorf("second: CA files %q leaked from another entry", eps[1].Trust.CAFiles)
	}
	// No endpoint is the image registry: its configs auth is never sent.
	for _, e := range eps {
		for _, cr := range e.Credentials {
			if cr.Username == "image-user" {
				t.Errorf("%s got the image registry's credential", e.Host)
			}
		}
	}
}

// The kubelet's credentials reach containerd without a ServerAddress, so
// ParseAuth (image_pull.go) hands them to every host, mirrors included; the
// kubelet matches them against the IMAGE name (kuberuntime_image.go
// PullImage → keyring Lookup(repoToPull)). The service-account token by
// endpoint host; configs."host".auth of the endpoint only when the kubelet
// sent nothing (TestContainerdAuthPrecedence), so not here; auth files by
// the repository on that host.
func TestEndpointsContainerdKubeletCredentialsEverywhere(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "hosts")
	write(t, root, "image.example.com/hosts.toml", "server = \"https://other.example.com\"\n")
	c := hermetic(t, dir)
	c.ContainerdConfig = write(t, dir, "config.toml", "version = 2\n["+ctrdCRI+"]\nconfig_path = \""+root+"\"\n"+
		"["+ctrdCRI+".configs.\"other.example.com\".auth]\nusername = \"other-user\"\npassword = \"op\"\n")
	c.PullSecrets = []string{write(t, dir, "secret.json", `{"auths":{"image.example.com":{"auth":"`+b64("sec:sp")+`"},"other.example.com":{"auth":"`+b64("wrong:x")+`"}}}`)}
	tok := write(t, dir, "token", "tok\n")
	c.ServiceAccountToken, c.ServiceAccountRegistries = tok, []string{"other.example.com"}
	c.Authfile = write(t, dir, "auth2.json", `{"auths":{"other.example.com/ns":{"auth":"`+b64("af:ap")+`"},"image.example.com":{"auth":"`+b64("img:x")+`"}}}`)
	k := newKeyring(t, c)
	eps := endpoints(t, k, "image.example.com/ns/app")
	if len(eps) != 1 || eps[0].Host != "other.example.com" {
		t.Fatalf("endpoints %q", hostsOf(eps))
	}
	want := []string{
		"pull-secret:image.example.com:sec",
		"service-account-token:other.example.com:serviceaccount",
		"containers-auth.json:other.example.com/ns:af",
	}
	if got := who(eps[0].Credentials); !reflect.DeepEqual(got, want) {
		t.Errorf("credentials %q, want %q", got, want)
	}
}

// A pull asks only hosts.toml hosts with the pull capability (containerd's
// Resolve and Fetch: docker.dockerBase.filterHosts): a push-only or
// resolve-only [host] is not an endpoint, its credential offered to no
// one; the default host (no server) has every capability whatever the
// file's top level says (ConfigureHosts); a server without pull is not
// asked either, and a mirror after it is still a mirror, never the
// registry's; with no host left the plan fails, naming the directory.
func TestEndpointsContainerdCapabilities(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "hosts")
	write(t, root, "image.example.com/hosts.toml", `capabilities = ["resolve"]
[host."https://push.example.com"]
  capabilities = ["push"]
[host."https://resolve.example.com"]
  capabilities = ["resolve"]
[host."https://pull.example.com"]
  capabilities = ["pull"]
`)
	write(t, root, "server.example.com/hosts.toml", `server = "https://server.example.com"
capabilities = ["push"]
[host."https://push.example.com"]
  capabilities = ["push", "resolve"]
[host."https://pull.example.com"]
`)
	write(t, root, "none.example.com/hosts.toml", `server = "https://none.example.com"
capabilities = ["resolve"]
[host."https://push.example.com"]
  capabilities = ["push"]
`)
	c := hermetic(t, dir)
	c.ContainerdConfig = write(t, dir, "config.toml", "version = 2\n["+ctrdCRI+"]\nconfig_path = \""+root+"\"\n"+
		"["+ctrdCRI+".configs.\"push.example.com\".auth]\nusername = \"push-user\"\npassword = \"pp\"\n"+
		"["+ctrdCRI+".configs.\"resolve.example.com\".auth]\nusername = \"resolve-user\"\npassword = \"rp\"\n")
	k := newKeyring(t, c)
	eps := endpoints(t, k, "image.example.com/ns/app:1")
	want := []string{
		"https://pull.example.com/v2 containerd hosts.toml host",
		"https://image.example.com/v2 containerd default",
	}
	if got := hostsOf(eps); !reflect.DeepEqual(got, want) {
		t.Fatalf("endpoints %q, want %q", got, want)
	}
	if !reflect.DeepEqual(eps[0].Capabilities.Names(), []string{"pull"}) || eps[1].Capabilities != 0 {
		t.Errorf("capabilities %q and %q, want [pull] and every one", eps[0].Capabilities.Names(), eps[1].Capabilities.Names())
	}
	for _, e := range eps {
		if len(e.Credentials) != 0 {
			t.Errorf("%s: credentials %q, want none (no host asked has one)", e.Host, who(e.Credentials))
		}
	}
	eps = endpoints(t, k, "server.example.com/ns/app:1")
	if got, want := hostsOf(eps), []string{"https://pull.example.com/v2 containerd hosts.toml host"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("endpoints %q, want %q", got, want)
	}
	if !eps[0].Mirror {
		t.Error("the mirror left alone is not a mirror")
	}
	if _, err := k.Endpoints("none.example.com/ns/app:1"); err == nil || !strings.Contains(err.Error(), "no host for none.example.com has the pull capability") ||
		!strings.Contains(err.Error(), filepath.Join(root, "none.example.com")) {
		t.Fatalf("no host with pull: %v, want an error naming the directory", err)
	}
}

// Legacy mode (no config_path): registryHosts copies the captured
// credentials for each endpoint and fills them from that host's own
// configs.auth (containerd 1.6/1.7 pkg/cri/server/image_pull.go, 2.x
// internal/cri/server/images/image_pull.go): a mirror's auth is never
// offered to the registry or another mirror.
func TestEndpointsContainerdLegacyMirrors(t *testing.T) {
	dir := t.TempDir()
	c := hermetic(t, dir)
	c.ContainerdConfig = write(t, dir, "config.toml", "version = 2\n"+
		"["+ctrdCRI+".mirrors.\"docker.io\"]\nendpoint = [\"https://m1.example.com\", \"m2.example.com:5000\"]\n"+
		"["+ctrdCRI+".configs.\"m2.example.com:5000\".auth]\nusername = \"m2\"\npassword = \"p\"\n"+
		"["+ctrdCRI+".configs.\"registry-1.docker.io\".auth]\nusername = \"hub\"\npassword = \"p\"\n")
	k := newKeyring(t, c)
	eps := endpoints(t, k, "docker.io/library/busybox:latest")
	want := []string{
		"https://m1.example.com/v2 containerd legacy mirror",
		"https://m2.example.com:5000/v2 containerd legacy mirror",
		"https://registry-1.docker.io/v2 containerd default",
	}
	if got := hostsOf(eps); !reflect.DeepEqual(got, want) {
		t.Fatalf("endpoints %q, want %q", got, want)
	}
	wantUsers := [][]string{{}, {`containerd-config:configs."m2.example.com:5000".auth:m2`}, {`containerd-config:configs."registry-1.docker.io".auth:hub`}}
	for i, e := range eps {
		if got := who(e.Credentials); !reflect.DeepEqual(got, wantUsers[i]) {
			t.Errorf("%s: %q, want %q", e.Host, got, wantUsers[i])
		}
	}
}

// registries.conf mirrors (go.podman.io/image/v5 pkg/sysregistriesv2
// FindRegistry + PullSourcesFromReference; docker/docker_image_src.go
// newPullClient): mirrors first, each looked up in the auth files by its own
// rewritten repository; the kubelet's credential (CRI-O: DockerAuthConfig)
// only for endpoints in the image's domain; insecure per endpoint; blocked
// per physical repository (docker_client.go newDockerClientFromRef).
func TestEndpointsRegistriesConfMirrors(t *testing.T) {
	dir := t.TempDir()
	c := hermetic(t, dir)
	c.RegistriesConf = write(t, dir, "registries.conf", `
[[registry]]
prefix = "image.example.com/ns"
location = "image.example.com/ns"
[[registry.mirror]]
location = "mirror.example.com:5000/cache/ns"
insecure = true
[[registry.mirror]]
location = "digest.example.com"
pull-from-mirror = "digest-only"
[[registry.mirror]]
location = "blocked.example.com/x"
[[registry]]
location = "blocked.example.com"
blocked = true
`)
	c.PullSecrets = []string{write(t, dir, "secret.json", `{"auths":{"image.example.com":{"auth":"`+b64("sec:sp")+`"}}}`)}
	c.Authfile = write(t, dir, "auth2.json", `{"auths":{"mirror.example.com:5000/cache":{"auth":"`+b64("mir:mp")+`"},"image.example.com":{"auth":"`+b64("img:ip")+`"}}}`)
	k := newKeyring(t, c)
	eps := endpoints(t, k, "image.example.com/ns/app:1")
	want := []string{
		"https://mirror.example.com:5000 registries.conf mirror",
		"https://blocked.example.com registries.conf mirror",
		"https://image.example.com registry",
	}
	if got := hostsOf(eps); !reflect.DeepEqual(got, want) {
		t.Fatalf("endpoints %q, want %q", got, want)
	}
	m := eps[0]
	if got := who(m.Credentials); !reflect.DeepEqual(got, []string{"containers-auth.json:mirror.example.com:5000/cache:mir"}) {
		t.Errorf("mirror credentials %q: want only its own auth-file entry, no pull secret", got)
	}
	if m.Repository != "mirror.example.com:5000/cache/ns/app" || !m.Insecure || m.Trust.Verify ||
		!strings.Contains(m.Trust.InsecureBy, "registries.conf insecure") {
		t.Errorf("mirror %+v", m)
	}
	if !eps[1].Blocked || eps[0].Blocked || eps[2].Blocked {
		t.Errorf("blocked flags %v %v %v", eps[0].Blocked, eps[1].Blocked, eps[2].Blocked)
	}
	p := eps[2]
	if got := who(p.Credentials); !reflect.DeepEqual(got, []string{"pull-secret:image.example.com:sec", "containers-auth.json:image.example.com:img"}) {
		t.Errorf("primary credentials %q", got)
	}
	if !p.Trust.Verify || p.Insecure || p.Mirror {
		t.Errorf("primary %+v", p)
	}
	// By digest, the digest-only mirror joins, in file order.
	eps = endpoints(t, k, "image.example.com/ns/app@sha256:"+strings.Repeat("a", 64))
	if len(eps) != 4 || eps[1].Host != "digest.example.com" {
		t.Errorf("by digest: %q", hostsOf(eps))
	}
	// Every endpoint blocked: an error.
	if _, err := k.Endpoints("blocked.example.com/x:1"); !errors.Is(err, hosts.ErrBlocked) {
		t.Errorf("blocked image: err %v, want ErrBlocked", err)
	}

	// blocked is judged by the endpoint's physical repository
	// (newDockerClientFromRef: FindRegistry(ref.Name())): a blocked
	// namespace of a host blocks it, not the host's other repositories,
	// and an unblocked namespace of a blocked host is not blocked.
	c.RegistriesConf = write(t, dir, "registries2.conf", `
[[registry]]
location = "127.0.0.1:45111/forbidden"
blocked = true
[[registry]]
location = "mirror.example.com"
blocked = true
[[registry]]
location = "mirror.example.com/ok"
`)
	k = newKeyring(t, c)
	if _, err := k.Endpoints("127.0.0.1:45111/forbidden/img:1"); !errors.Is(err, hosts.ErrBlocked) {
		t.Errorf("a blocked namespace: err %v, want ErrBlocked", err)
	}
	if eps := endpoints(t, k, "127.0.0.1:45111/open/img:1"); len(eps) != 1 || eps[0].Blocked {
		t.Errorf("another namespace of that host: %+v, want it not blocked", eps)
	}
	if eps := endpoints(t, k, "mirror.example.com/ok/img:1"); len(eps) != 1 || eps[0].Blocked {
		t.Errorf("an unblocked namespace of a blocked host: %+v, want it not blocked", eps)
	}
}

// registries.conf credential-helpers (pkg/docker/config
// getCredentialsWithHomeDir): in order, "containers-auth.json" is the auth
// files, others run docker-credential-NAME with the registry; the first hit
// wins; not run for explain.
func TestLookupRegistriesConfCredentialHelpers(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	write(t, bin, "docker-credential-fake", "#!/bin/sh\nread reg\nif [ \"$reg\" = helped.example.com ]; then echo '{\"Username\":\"hu\",\"Secret\":\"hs\"}'; else echo 'credentials not found in native keychain'; exit 1; fi\n")
	if err := os.Chmod(filepath.Join(bin, "docker-credential-fake"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	c := hermetic(t, dir)
	c.RegistriesConf = write(t, dir, "registries.conf", `credential-helpers = ["fake", "containers-auth.json"]`)
	c.Authfile = write(t, dir, "auth2.json", `{"auths":{"helped.example.com":{"auth":"`+b64("file:fp")+`"},"plain.example.com":{"auth":"`+b64("file:fp")+`"}}}`)
	c.RunProviders = true
	k := newKeyring(t, c)
	if got := who(k.Lookup("helped.example.com", "helped.example.com/a")); !reflect.DeepEqual(got, []string{"credential-helper:credential-helpers fake:hu"}) {
		t.Errorf("helped: %q, want the helper first", got)
	}
	if got := who(k.Lookup("plain.example.com", "plain.example.com/a")); !reflect.DeepEqual(got, []string{"containers-auth.json:plain.example.com:file"}) {
		t.Errorf("plain: %q, want the auth file after the helper found nothing", got)
	}
	c.RunProviders = false
	k = newKeyring(t, c)
	// explain: the helper's placeholder (what it would be asked), then the
	// auth file it would fall back to.
	got := k.Lookup("helped.example.com", "helped.example.com/a")
	if len(got) != 2 || got[0].Password != "" || got[0].Key != "credential-helpers fake: docker-credential-fake get helped.example.com (run at pull time; not run by explain)" ||
		got[1].Source != "containers-auth.json" {
		t.Errorf("explain: %+v, want a placeholder, then the auth file", got)
	}
}

// One rule for trust per host: certs.d/HOST, trust.ca_files and
// trust.insecure_registries by internal/regpattern (ports equal),
// registries.conf insecure by FindRegistry(host).
// The kubelet keyring order (pull secrets, node docker config, provider
// plugins), then containerd, token, auth files; equal secrets share an ID,
// and no secret is in the JSON.
func TestLookupOrderIDsAndNoSecrets(t *testing.T) {
	dir := t.TempDir()
	c := hermetic(t, dir)
	c.PullSecrets = []string{write(t, dir, "s.json", `{"auths":{"reg.example.com":{"auth":"`+b64("sec:topsecret1")+`"}}}`)}
	kroot := filepath.Join(dir, "kubelet")
	write(t, kroot, "config.json", `{"auths":{"reg.example.com":{"auth":"`+b64("node:topsecret2")+`"}}}`)
	c.KubeletDockerConfig = kroot
	c.ServiceAccountToken = write(t, dir, "token", "topsecret3\n")
	c.ServiceAccountRegistries = []string{"reg.example.com"}
	c.Authfile = write(t, dir, "auth2.json", `{"auths":{"reg.example.com":{"auth":"`+b64("af:topsecret4")+`"}}}`)
	k := newKeyring(t, c)
	a := k.Lookup("reg.example.com", "reg.example.com/app")
	want := []string{"pull-secret:reg.example.com:sec", "kubelet-node-config:reg.example.com:node",
		"service-account-token:reg.example.com:serviceaccount", "containers-auth.json:reg.example.com:af"}
	if got := who(a); !reflect.DeepEqual(got, want) {
		t.Fatalf("order %q, want %q", got, want)
	}
	b := k.Lookup("reg.example.com", "reg.example.com/other")
	ids := map[string]bool{}
	for i := range a {
		if a[i].ID == "" || a[i].ID != b[i].ID {
			t.Errorf("candidate %d: IDs %q and %q, want one stable ID", i, a[i].ID, b[i].ID)
		}
		ids[a[i].ID] = true
	}
	if len(ids) != len(a) {
		t.Errorf("IDs %v are not distinct", ids)
	}
	out, err := json.Marshal(endpoints(t, k, "reg.example.com/app:1"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "topsecret") {
		t.Errorf("a secret is in the endpoint JSON: %s", out)
	}
	if k.NodeDockerConfig() != filepath.Join(kroot, "config.json") {
		t.Errorf("node config %q", k.NodeDockerConfig())
	}
}

func TestNewKeyringConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		setting string
		mod     func(*auth.TestConfig)
	}{
		{"auth.pull_secrets", func(c *auth.TestConfig) { c.PullSecrets = []string{filepath.Join(dir, "missing")} }},
		{"auth.service_account_registries", func(c *auth.TestConfig) {
			c.ServiceAccountToken, c.ServiceAccountRegistries = "/t", []string{"https://x"}
		}},
		{"trust.ca_files", func(c *auth.TestConfig) { c.CAFiles = []hosts.ScopedFile{{Pattern: "a*b", File: "/f"}} }},
		{"trust.insecure_registries", func(c *auth.TestConfig) { c.InsecureRegistries = []string{"x/y"} }},
		{"auth.containerd_config", func(c *auth.TestConfig) { c.ContainerdConfig = write(t, dir, "bad.toml", "version = [") }},
	} {
		c := hermetic(t, dir)
		tc.mod(&c)
		_, err := auth.NewTestKeyring(c)
		var ce *auth.ConfigError
		if !errors.As(err, &ce) || ce.Setting != tc.setting {
			t.Errorf("%s: err %v, want a ConfigError for it", tc.setting, err)
		}
	}
}

// TestContainerdAuthPrecedence: containerd reads configs."HOST".auth only
// when the kubelet sent no credential (containerd pkg/cri/server/image_pull.go
// registryHosts: a non-nil PullImageRequest.Auth is used for every host;
// Credentials(host) falls back to the config otherwise). The kubelet sends
// what its keyring matched for the image (kuberuntime_image.go PullImage):
// pull secrets, node docker config, provider plugins; the service-account
// token is sent the same way. Auth files are not the kubelet's and stay last.
func TestContainerdAuthPrecedence(t *testing.T) {
	const ctrdWho = `containerd-config:configs."reg.example.com".auth:ctrd-user`
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string, c *auth.TestConfig)
		want  []string
	}{
		{"nothing from the kubelet: configs auth", func(t *testing.T, dir string, c *auth.TestConfig) {}, []string{ctrdWho}},
		{"pull secret matches: not offered", func(t *testing.T, dir string, c *auth.TestConfig) {
			c.PullSecrets = []string{write(t, dir, "s.json", `{"auths":{"reg.example.com":{"auth":"`+b64("sec:p")+`"}}}`)}
		}, []string{"pull-secret:reg.example.com:sec"}},
		{"pull secret for another registry: offered", func(t *testing.T, dir string, c *auth.TestConfig) {
			c.PullSecrets = []string{write(t, dir, "s.json", `{"auths":{"other.example.com":{"auth":"`+b64("sec:p")+`"}}}`)}
		}, []string{ctrdWho}},
		{"node docker config matches: not offered", func(t *testing.T, dir string, c *auth.TestConfig) {
			root := filepath.Join(dir, "kubelet")
			write(t, root, "config.json", `{"auths":{"reg.example.com":{"auth":"`+b64("node:p")+`"}}}`)
			c.KubeletDockerConfig = root
		}, []string{"kubelet-node-config:reg.example.com:node"}},
		{"credential provider runs: not offered", func(t *testing.T, dir string, c *auth.TestConfig) {
			write(t, dir, "bin/p", "#!/bin/sh\nexit 1\n")
			c.CredentialProviderConfig = write(t, dir, "cp.yaml", "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\n"+
				"providers:\n  - name: p\n    matchImages: [reg.example.com]\n    defaultCacheDuration: 1m\n    apiVersion: "+provV1+"\n")
			c.CredentialProviderBinDir = filepath.Join(dir, "bin")
		}, []string{"credential-provider:(plugins run at pull time; not run by explain):"}},
		{"credential provider skipped (needs a service account): offered", func(t *testing.T, dir string, c *auth.TestConfig) {
			write(t, dir, "bin/p", "#!/bin/sh\nexit 1\n")
			c.CredentialProviderConfig = write(t, dir, "cp.yaml", "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\n"+
				"providers:\n  - name: p\n    matchImages: [reg.example.com]\n    defaultCacheDuration: 1m\n    apiVersion: "+provV1+"\n"+
				"    tokenAttributes: {serviceAccountTokenAudience: a, cacheType: Token, requireServiceAccount: true}\n")
			c.CredentialProviderBinDir = filepath.Join(dir, "bin")
		}, []string{ctrdWho}},
		{"service-account token matches: not offered", func(t *testing.T, dir string, c *auth.TestConfig) {
			c.ServiceAccountToken, c.ServiceAccountRegistries = write(t, dir, "token", "tok\n"), []string{"reg.example.com"}
		}, []string{"service-account-token:reg.example.com:serviceaccount"}},
		{"auth file: after configs auth", func(t *testing.T, dir string, c *auth.TestConfig) {
			c.Authfile = write(t, dir, "a.json", `{"auths":{"reg.example.com":{"auth":"`+b64("af:p")+`"}}}`)
		}, []string{ctrdWho, "containers-auth.json:reg.example.com:af"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			c := hermetic(t, dir)
			c.ContainerdConfig = write(t, dir, "config.toml", "version = 2\n["+ctrdCRI+".configs.\"reg.example.com\".auth]\nusername = \"ctrd-user\"\npassword = \"cp\"\n")
			tt.setup(t, dir, &c)
			k := newKeyring(t, c)
			if got := who(k.Lookup("reg.example.com", "reg.example.com/ns/app")); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("candidates %q, want %q", got, tt.want)
			}
		})
	}
}
