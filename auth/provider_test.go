package auth_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pullhelper/pullhelper/auth"
	"github.com/pullhelper/pullhelper/internal/wire"
)

const (
	provV1      = "credentialprovider.kubelet.k8s.io/v1"
	provV1beta1 = "credentialprovider.kubelet.k8s.io/v1beta1"
	provSecret  = "s3cret-pw-4711"
)

// provBuildFake builds testdata/fake-provider into a temporary directory.
func provBuildFake(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go"
	}
	out := filepath.Join(t.TempDir(), "fake-provider")
	cmd := exec.Command(goBin, "build", "-o", out, "./testdata/fake-provider")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the fake provider: %v\n%s", err, b)
	}
	return out
}

// provSetup is a plugin directory, a log and a cache directory.
type provSetup struct {
	t        *testing.T
	fake     string
	dir      string
	binDir   string
	logPath  string
	cacheDir string
}

func newProvSetup(t *testing.T) *provSetup {
	t.Helper()
	return newProvSetupWith(t, provBuildFake(t))
}

// newProvSetupWith uses an already built fake plugin.
func newProvSetupWith(t *testing.T, fake string) *provSetup {
	t.Helper()
	dir := t.TempDir()
	s := &provSetup{
		t: t, fake: fake, dir: dir,
		binDir: filepath.Join(dir, "bin"), logPath: filepath.Join(dir, "calls.log"),
		cacheDir: filepath.Join(dir, "cache"),
	}
	if err := os.Mkdir(s.binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return s
}

// provSpec is one provider of a generated configuration. The fake plugin
// is installed under its name, answers with Response and logs to the
// setup's log, with FAKE_PROVIDER_NAME set to the provider's name.
type provSpec struct {
	Name       string
	Match      []string
	Default    string // defaultCacheDuration, "" = "0s"
	APIVersion string // "" = v1
	Args       []string
	Env        []auth.ProviderEnvVar
	LogEnv     []string
	Response   string
	Mode       string
	Stderr     string
	Extra      map[string]any // more provider fields
}

func (s *provSetup) config(specs ...provSpec) *auth.ProviderConfig {
	s.t.Helper()
	var providers []map[string]any
	for _, sp := range specs {
		bin := filepath.Join(s.binDir, sp.Name)
		if _, err := os.Lstat(bin); err != nil {
			if err := os.Symlink(s.fake, bin); err != nil {
				s.t.Fatal(err)
			}
		}
		resp := filepath.Join(s.dir, "response-"+sp.Name+".json")
		if err := os.WriteFile(resp, []byte(sp.Response), 0o600); err != nil {
			s.t.Fatal(err)
		}
		env := []auth.ProviderEnvVar{
			{Name: "FAKE_PROVIDER_NAME", Value: sp.Name},
			{Name: "FAKE_PROVIDER_LOG", Value: s.logPath},
			{Name: "FAKE_PROVIDER_RESPONSE", Value: resp},
			{Name: "FAKE_PROVIDER_MODE", Value: sp.Mode},
			{Name: "FAKE_PROVIDER_STDERR", Value: sp.Stderr},
			{Name: "FAKE_PROVIDER_LOG_ENV", Value: strings.Join(append([]string{"FAKE_PROVIDER_NAME"}, sp.LogEnv...), ",")},
		}
		p := map[string]any{
			"name": sp.Name, "matchImages": sp.Match,
			"defaultCacheDuration": provOr(sp.Default, "0s"),
			"apiVersion":           provOr(sp.APIVersion, provV1),
			"env":                  append(env, sp.Env...),
		}
		if sp.Args != nil {
			p["args"] = sp.Args
		}
		for k, v := range sp.Extra {
			p[k] = v
		}
		providers = append(providers, p)
	}
	data, err := json.Marshal(map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1", "kind": "CredentialProviderConfig", "providers": providers,
	})
	if err != nil {
		s.t.Fatal(err)
	}
	path := filepath.Join(s.dir, "config.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		s.t.Fatal(err)
	}
	cfg, err := auth.LoadProviderConfig(path)
	if err != nil {
		s.t.Fatal(err)
	}
	return cfg
}

type provCall struct {
	PID     int               `json:"pid"`
	Role    string            `json:"role"`
	Argv    []string          `json:"argv"`
	Env     map[string]string `json:"env"`
	Request map[string]any    `json:"request"`
}

func (s *provSetup) calls() []provCall {
	s.t.Helper()
	data, err := os.ReadFile(s.logPath)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		s.t.Fatal(err)
	}
	var out []provCall
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var c provCall
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			s.t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		out = append(out, c)
	}
	return out
}

func (s *provSetup) pluginCalls() int {
	n := 0
	for _, c := range s.calls() {
		if c.Role == "plugin" {
			n++
		}
	}
	return n
}

func provOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// provResponse builds a response; auth maps a key to "user:password".
func provResponse(apiVersion, cacheKeyType, cacheDuration string, auth map[string]string) string {
	r := map[string]any{"apiVersion": apiVersion, "kind": "CredentialProviderResponse", "cacheKeyType": cacheKeyType}
	if cacheDuration != "" {
		r["cacheDuration"] = cacheDuration
	}
	a := map[string]any{}
	for k, v := range auth {
		u, p, _ := strings.Cut(v, ":")
		a[k] = map[string]string{"username": u, "password": p}
	}
	r["auth"] = a
	data, _ := json.Marshal(r)
	return string(data)
}

func provUsers(creds []wire.Credential) []string {
	var out []string
	for _, c := range creds {
		out = append(out, c.Username)
	}
	return out
}

const provDocsYAML = `apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: ecr-credential-provider
    matchImages:
      - "*.dkr.ecr.*.amazonaws.com"
      - "*.dkr.ecr.*.amazonaws.com.cn"
    defaultCacheDuration: "12h"
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    args:
      - get-credentials
    env:
      - name: AWS_PROFILE
        value: temp
  - name: token-provider
    matchImages: ["registry.example.com:5000/team"]
    defaultCacheDuration: 0s
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    tokenAttributes:
      serviceAccountTokenAudience: registry.example.com
      cacheType: ServiceAccount
      requireServiceAccount: false
      optionalServiceAccountAnnotationKeys: ["example.com/role"]
`

func TestLoadProviderConfig(t *testing.T) {
	dir := t.TempDir()
	path := write(t, dir, "config.yaml", provDocsYAML)
	cfg, err := auth.LoadProviderConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	twelve, zero := 12*time.Hour, time.Duration(0)
	no := false
	want := &auth.ProviderConfig{Path: path, Providers: []auth.CredentialProvider{{
		Name:                 "ecr-credential-provider",
		MatchImages:          []string{"*.dkr.ecr.*.amazonaws.com", "*.dkr.ecr.*.amazonaws.com.cn"},
		DefaultCacheDuration: &twelve, APIVersion: provV1,
		Args: []string{"get-credentials"}, Env: []auth.ProviderEnvVar{{Name: "AWS_PROFILE", Value: "temp"}},
		File: path,
	}, {
		Name: "token-provider", MatchImages: []string{"registry.example.com:5000/team"},
		DefaultCacheDuration: &zero, APIVersion: provV1,
		TokenAttributes: &auth.ProviderTokenAttributes{
			ServiceAccountTokenAudience: "registry.example.com", CacheType: "ServiceAccount", RequireServiceAccount: &no,
			OptionalServiceAccountAnnotationKeys: []string{"example.com/role"},
		},
		File: path,
	}}}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("got %+v\nwant %+v", cfg, want)
	}

	// JSON, and the older config versions.
	for _, v := range []string{"v1beta1", "v1alpha1"} {
		p := write(t, dir, v+".json", `{"apiVersion":"kubelet.config.k8s.io/`+v+`","kind":"CredentialProviderConfig",
			"providers":[{"name":"p","matchImages":["*.io"],"defaultCacheDuration":"1m30s","apiVersion":"`+provV1beta1+`"}]}`)
		cfg, err := auth.LoadProviderConfig(p)
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if got := cfg.Providers[0]; got.Name != "p" || *got.DefaultCacheDuration != 90*time.Second || got.APIVersion != provV1beta1 {
			t.Errorf("%s: got %+v", v, got)
		}
	}

	// A directory: *.json, *.yaml, *.yml in lexical order, others ignored.
	d := filepath.Join(dir, "conf.d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	one := func(name string) string {
		return `{"apiVersion":"kubelet.config.k8s.io/v1","kind":"CredentialProviderConfig","providers":[{"name":"` + name +
			`","matchImages":["x.io"],"defaultCacheDuration":"1h","apiVersion":"` + provV1 + `"}]}`
	}
	write(t, d, "20-b.yaml", one("b"))
	write(t, d, "10-a.json", one("a"))
	write(t, d, "30-c.yml", one("c"))
	write(t, d, "40-d.txt", one("d"))
	cfg, err = auth.LoadProviderConfig(d)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range cfg.Providers {
		names = append(names, p.Name+"@"+filepath.Base(p.File))
	}
	if want := []string{"a@10-a.json", "b@20-b.yaml", "c@30-c.yml"}; !reflect.DeepEqual(names, want) {
		t.Errorf("directory: got %v, want %v", names, want)
	}
	write(t, d, "50-dup.json", one("a"))
	if _, err := auth.LoadProviderConfig(d); err == nil || !strings.Contains(err.Error(), `duplicate provider name "a"`) {
		t.Errorf("duplicate across files: got %v", err)
	}
	empty := filepath.Join(dir, "empty.d")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.LoadProviderConfig(empty); err == nil || !strings.Contains(err.Error(), "no configuration files found") {
		t.Errorf("empty directory: got %v", err)
	}
	if _, err := auth.LoadProviderConfig(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: got %v", err)
	}
}

func TestLoadProviderConfigErrors(t *testing.T) {
	head := "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\n"
	prov := func(fields string) string {
		return head + "providers:\n  - " + strings.ReplaceAll(strings.TrimSpace(fields), "\n", "\n    ") + "\n"
	}
	const ok = "matchImages: [\"*.example.com\"]\ndefaultCacheDuration: 1h\napiVersion: " + provV1
	tests := []struct {
		name, content string
		want          []string
	}{
		{"no providers", head + "providers: []\n", []string{"providers: Required value: at least 1 item in plugins is required"}},
		{"no name", prov(ok), []string{"providers.name: Required value"}},
		{"slash in name", prov("name: a/b\n" + ok), []string{"provider name cannot contain '/'"}},
		{"space in name", prov("name: a b\n" + ok), []string{"provider name cannot contain spaces"}},
		{"dot name", prov("name: .\n" + ok), []string{"provider name cannot be '.'"}},
		{"dotdot name", prov("name: ..\n" + ok), []string{"provider name cannot be '..'"}},
		{"duplicate name", prov("name: dup\n"+ok) + "  - " + strings.ReplaceAll("name: dup\n"+ok, "\n", "\n    ") + "\n",
			[]string{`providers[1] ("dup"): providers.name: Duplicate value: "dup"`}},
		{"no apiVersion", prov("name: p\nmatchImages: [x.io]\ndefaultCacheDuration: 1h"), []string{"providers.apiVersion: Required value"}},
		{"bad apiVersion", prov("name: p\nmatchImages: [x.io]\ndefaultCacheDuration: 1h\napiVersion: credentialprovider.kubelet.k8s.io/v2"),
			[]string{`providers.apiVersion: Unsupported value: supported values: "credentialprovider.kubelet.k8s.io/v1"`}},
		{"no matchImages", prov("name: p\ndefaultCacheDuration: 1h\napiVersion: " + provV1), []string{"at least 1 item in matchImages is required"}},
		{"bad matchImage", prov("name: p\nmatchImages: [\"foo bar\"]\ndefaultCacheDuration: 1h\napiVersion: " + provV1),
			[]string{`providers.matchImages: Invalid value: "foo bar": match image is invalid`}},
		{"no defaultCacheDuration", prov("name: p\nmatchImages: [x.io]\napiVersion: " + provV1), []string{"providers.defaultCacheDuration: Required value"}},
		{"negative defaultCacheDuration", prov("name: p\nmatchImages: [x.io]\ndefaultCacheDuration: -1m\napiVersion: " + provV1),
			[]string{"defaultCacheDuration must be greater than or equal to 0"}},
		{"unparsable duration", prov("name: p\nmatchImages: [x.io]\ndefaultCacheDuration: 12x\napiVersion: " + provV1), []string{`invalid duration (want`}},
		{"numeric duration", prov("name: p\nmatchImages: [x.io]\ndefaultCacheDuration: 60\napiVersion: " + provV1), []string{"must be a string"}},
		{"several errors", prov("apiVersion: " + provV1), []string{"providers.name: Required value", "matchImages is required", "defaultCacheDuration: Required value"}},
		{"wrong kind", "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\nproviders: []\n", []string{`failed to decode: kind is not CredentialProviderConfig (wrong Kind)`}},
		{"wrong group", "apiVersion: credentialprovider.kubelet.k8s.io/v1\nkind: CredentialProviderConfig\nproviders: []\n", []string{"unexpected Group (want kubelet.config.k8s.io)"}},
		{"wrong version", "apiVersion: kubelet.config.k8s.io/v2\nkind: CredentialProviderConfig\nproviders: []\n", []string{`unsupported apiVersion (supported: kubelet.config.k8s.io/v1`}},
		{"no kind", "apiVersion: kubelet.config.k8s.io/v1\nproviders: []\n", []string{"apiVersion and kind must be set"}},
		{"unknown field", prov("name: p\nmatchImage: [x.io]\n" + ok), []string{`unknown field "providers.matchImage"`}},
		{"field case", prov("Name: p\n" + ok), []string{`unknown field "providers.Name"`}},
		{"duplicate field", `{"apiVersion":"kubelet.config.k8s.io/v1","kind":"CredentialProviderConfig","kind":"CredentialProviderConfig","providers":[]}`,
			[]string{`duplicate field "kind"`}},
		{"YAML syntax", head + "providers:\n  - name: [unclosed\n", []string{"YAML syntax error at line"}},
		{"JSON syntax", `{"apiVersion": "kubelet.config.k8s.io/v1",`, []string{"unexpected end of JSON"}},
		{"empty", "  \n", []string{"the file is empty"}},
		{"token audience", prov("name: p\n" + ok + "\ntokenAttributes:\n  requireServiceAccount: true"),
			[]string{"providers.tokenAttributes.serviceAccountTokenAudience: Required value"}},
		{"token require", prov("name: p\n" + ok + "\ntokenAttributes:\n  serviceAccountTokenAudience: a"),
			[]string{"providers.tokenAttributes.requireServiceAccount: Required value"}},
		{"token version", prov("name: p\nmatchImages: [x.io]\ndefaultCacheDuration: 1h\napiVersion: " + provV1beta1 +
			"\ntokenAttributes:\n  serviceAccountTokenAudience: a\n  requireServiceAccount: true"),
			[]string{"tokenAttributes is only supported for credentialprovider.kubelet.k8s.io/v1 API version"}},
		{"token required keys", prov("name: p\n" + ok + "\ntokenAttributes:\n  serviceAccountTokenAudience: a\n  requireServiceAccount: false\n  requiredServiceAccountAnnotationKeys: [example.com/a]"),
			[]string{"requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set"}},
		{"token key syntax", prov("name: p\n" + ok + "\ntokenAttributes:\n  serviceAccountTokenAudience: a\n  requireServiceAccount: true\n  requiredServiceAccountAnnotationKeys: [-bad, Example.COM/ok, a/b/c]"),
			[]string{`"-bad": name part`, `"a/b/c": a qualified name`}},
		{"token key both", prov("name: p\n" + ok + "\ntokenAttributes:\n  serviceAccountTokenAudience: a\n  requireServiceAccount: true\n  requiredServiceAccountAnnotationKeys: [example.com/a]\n  optionalServiceAccountAnnotationKeys: [example.com/a, example.com/a]"),
			[]string{"annotation keys cannot be both required and optional", `optionalServiceAccountAnnotationKeys: Duplicate value: "example.com/a"`}},
		// config.go validateCredentialProviderConfig: the intersection is one
		// error listing the keys (sets.List, sorted).
		{"token keys both listed", prov("name: p\n" + ok + "\ntokenAttributes:\n  serviceAccountTokenAudience: a\n  cacheType: Token\n  requireServiceAccount: true\n  requiredServiceAccountAnnotationKeys: [z.io/b, a.io/a]\n  optionalServiceAccountAnnotationKeys: [a.io/a, z.io/b]"),
			[]string{`providers.tokenAttributes: Invalid value: "a.io/a", "z.io/b": annotation keys cannot be both required and optional`}},
		{"token cacheType missing", prov("name: p\n" + ok + "\ntokenAttributes:\n  serviceAccountTokenAudience: a\n  requireServiceAccount: true"),
			[]string{"providers.tokenAttributes.cacheType: Required value: cacheType is required to be set when tokenAttributes is specified. Supported values are: ServiceAccount, Token"}},
		{"token cacheType unsupported", prov("name: p\n" + ok + "\ntokenAttributes:\n  serviceAccountTokenAudience: a\n  cacheType: token\n  requireServiceAccount: true"),
			[]string{`providers.tokenAttributes.cacheType: Unsupported value: "token": supported values: "ServiceAccount", "Token"`}},
	}
	dir := t.TempDir()
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := write(t, dir, fmt.Sprintf("c%d.yaml", i), tt.content)
			cfg, err := auth.LoadProviderConfig(path)
			if err == nil {
				t.Fatalf("no error; config %+v", cfg)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
	t.Run("valid token attributes", func(t *testing.T) {
		path := write(t, dir, "ok.yaml", prov("name: p\n"+ok+"\ntokenAttributes:\n  serviceAccountTokenAudience: a\n  cacheType: ServiceAccount\n  requireServiceAccount: true\n  requiredServiceAccountAnnotationKeys: [example.com/a, Example.COM/B]\n  optionalServiceAccountAnnotationKeys: [c]"))
		if _, err := auth.LoadProviderConfig(path); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("secrets stay out of errors", func(t *testing.T) {
		path := write(t, dir, "secret.yaml", prov("name: p\nmatchImages: [x.io]\napiVersion: "+provV1+"\nenv:\n  - name: TOKEN\n    value: "+provSecret))
		_, err := auth.LoadProviderConfig(path)
		if err == nil || strings.Contains(err.Error(), provSecret) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestProvidersRequestResponse(t *testing.T) {
	s := newProvSetup(t)
	t.Setenv("PROV_TEST_INHERITED", "from-parent")
	t.Setenv("PROV_TEST_OVERRIDE", "from-parent")
	cfg := s.config(provSpec{
		Name: "example-provider", Match: []string{"*.example.com"},
		Args: []string{"get-credentials", "--region", "eu west 1"},
		Env: []auth.ProviderEnvVar{
			{Name: "PROV_TEST_FROM_CONFIG", Value: "from-config"},
			{Name: "PROV_TEST_OVERRIDE", Value: "from-config"},
		},
		LogEnv:   []string{"PROV_TEST_INHERITED", "PROV_TEST_OVERRIDE", "PROV_TEST_FROM_CONFIG"},
		Response: provResponse(provV1, "Image", "", map[string]string{"registry.example.com": "robot:" + provSecret}),
	})
	creds, err := auth.Providers(cfg, s.binDir, "registry.example.com/org/repo:1.0", "", auth.ProviderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []wire.Credential{{Source: "credential-provider", File: "example-provider", Key: "registry.example.com", Username: "robot", Password: provSecret}}
	if !reflect.DeepEqual(creds, want) {
		t.Errorf("credentials: got %+v, want %+v", creds, want)
	}
	calls := s.calls()
	if len(calls) != 1 {
		t.Fatalf("got %d calls, want 1", len(calls))
	}
	c := calls[0]
	if got := c.Argv[1:]; !reflect.DeepEqual(got, []string{"get-credentials", "--region", "eu west 1"}) {
		t.Errorf("args: got %q", got)
	}
	if c.Argv[0] != filepath.Join(s.binDir, "example-provider") {
		t.Errorf("argv[0]: got %q", c.Argv[0])
	}
	wantEnv := map[string]string{
		"FAKE_PROVIDER_NAME": "example-provider", "PROV_TEST_INHERITED": "from-parent",
		"PROV_TEST_OVERRIDE": "from-config", "PROV_TEST_FROM_CONFIG": "from-config",
	}
	if !reflect.DeepEqual(c.Env, wantEnv) {
		t.Errorf("env: got %v, want %v", c.Env, wantEnv)
	}
	// The kubelet sends the repository it pulls: no tag, no digest.
	wantReq := map[string]any{"apiVersion": provV1, "kind": "CredentialProviderRequest", "image": "registry.example.com/org/repo"}
	if !reflect.DeepEqual(c.Request, wantReq) {
		t.Errorf("request: got %v, want %v", c.Request, wantReq)
	}
	j, _ := json.Marshal(creds)
	if strings.Contains(string(j), provSecret) {
		t.Errorf("the password marshals: %s", j)
	}
	if log, _ := os.ReadFile(s.logPath); strings.Contains(string(log), provSecret) {
		t.Errorf("the fake plugin logged the password")
	}

	// Short names are normalized as the kubelet does; an older protocol
	// version is spoken when configured.
	s2 := newProvSetupWith(t, s.fake)
	cfg = s2.config(provSpec{
		Name: "hub", Match: []string{"docker.io"}, APIVersion: provV1beta1,
		Response: provResponse(provV1beta1, "Registry", "", map[string]string{"docker.io": "hubuser:" + provSecret}),
	})
	if _, err := auth.Providers(cfg, s2.binDir, "nginx@sha256:"+strings.Repeat("a", 64), "", auth.ProviderOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := s2.calls()[0].Request; got["image"] != "docker.io/library/nginx" || got["apiVersion"] != provV1beta1 {
		t.Errorf("request: got %v", got)
	}
}

func TestProvidersMatchImages(t *testing.T) {
	tests := []struct {
		match []string
		image string
		run   bool
	}{
		{[]string{"*.example.com"}, "registry.example.com/org/repo:tag", true},
		{[]string{"*.example.com"}, "example.com/org/repo", false},        // label count
		{[]string{"*.*.example.com"}, "registry.example.com/repo", false}, // label count
		{[]string{"registry.*.com"}, "registry.example.com/repo", true},   // glob in a middle label
		{[]string{"k8s.*"}, "k8s.io/pause:3.9", true},                     // glob in the TLD
		{[]string{"regis*.example.com"}, "registry.example.com/r", true},
		{[]string{"reg?stry.example.com"}, "registry.example.com/r", false}, // url.Parse makes "?" a query: host "reg"
		{[]string{"app*.example.com"}, "apps.example.com/r", true},          // partial label
		{[]string{"app*.example.com"}, "registry.example.com/r", false},
		{[]string{"registry.example.com"}, "registry.example.com:5000/repo", false}, // port in image only
		{[]string{"registry.example.com:5000"}, "registry.example.com/repo", false}, // port in pattern only
		{[]string{"registry.example.com:5000"}, "registry.example.com:5000/repo", true},
		{[]string{"registry.example.com:5001"}, "registry.example.com:5000/repo", false},
		{[]string{"*.example.com:5000"}, "registry.example.com:5000/repo", true},
		{[]string{"registry.example.com/org"}, "registry.example.com/org/repo", true},
		{[]string{"registry.example.com/org"}, "registry.example.com/orgz/repo", true}, // string prefix, as the kubelet
		{[]string{"registry.example.com/org"}, "registry.example.com/other/repo", false},
		{[]string{"registry.example.com/org/repo:tag"}, "registry.example.com/org/repo:tag", false}, // tags are dropped first
		{[]string{"docker.io"}, "nginx", true},
		{[]string{"docker.io/library"}, "nginx:1.25", true},
		{[]string{"index.docker.io"}, "nginx", false},
		{[]string{"https://registry.example.com"}, "registry.example.com/repo", false}, // a scheme never matches
		{[]string{"quay.io", "*.example.com"}, "registry.example.com/repo", true},
	}
	s := newProvSetup(t)
	for i, tt := range tests {
		name := fmt.Sprintf("p%d", i)
		cfg := s.config(provSpec{
			Name: name, Match: tt.match,
			Response: provResponse(provV1, "Image", "", map[string]string{"registry.example.com": "u:p"}),
		})
		before := s.pluginCalls()
		if _, err := auth.Providers(cfg, s.binDir, tt.image, "", auth.ProviderOptions{}); err != nil {
			t.Errorf("%v vs %s: %v", tt.match, tt.image, err)
			continue
		}
		if ran := s.pluginCalls() > before; ran != tt.run {
			t.Errorf("matchImages %q, image %s: plugin ran = %v, want %v", tt.match, tt.image, ran, tt.run)
		}
	}
}

func TestProvidersOrdering(t *testing.T) {
	s := newProvSetup(t)
	cfg := s.config(provSpec{
		Name: "first", Match: []string{"*.example.com"},
		Response: provResponse(provV1, "Image", "", map[string]string{
			"registry.example.com":             "u1:p1",
			"registry.example.com/org":         "u2:p2",
			"*.example.com":                    "u3:p3",
			"other.io":                         "u4:p4",
			"https://registry.example.com/v2/": "u5:p5",
			"registry.example.com:5000":        "u6:p6",
		}),
	}, provSpec{
		Name: "second", Match: []string{"registry.example.com/org"},
		Response: provResponse(provV1, "Image", "", map[string]string{
			"registry.example.com":          "v1:q1",
			"registry.example.com/org/repo": "v2:q2",
		}),
	}, provSpec{
		Name: "not-matching", Match: []string{"quay.io"},
		Response: provResponse(provV1, "Image", "", map[string]string{"registry.example.com": "w1:r1"}),
	})
	creds, err := auth.Providers(cfg, s.binDir, "registry.example.com/org/repo:1.0", "", auth.ProviderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// One keyring over both responses, keys reverse-sorted; one key's
	// credentials in provider order.
	if got, want := provUsers(creds), []string{"v2", "u2", "u5", "u1", "v1", "u3"}; !reflect.DeepEqual(got, want) {
		t.Errorf("order: got %v, want %v", got, want)
	}
	var keys []string
	for _, c := range creds {
		keys = append(keys, c.File+" "+c.Key)
	}
	want := []string{"second registry.example.com/org/repo", "first registry.example.com/org", "first https://registry.example.com/v2/",
		"first registry.example.com", "second registry.example.com", "first *.example.com"}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("sources: got %v, want %v", keys, want)
	}
	if n := len(s.calls()); n != 2 {
		t.Errorf("got %d plugin runs, want 2", n)
	}

	// Docker Hub: the index.docker.io entry is the fallback when no key
	// matches.
	hub := newProvSetupWith(t, s.fake)
	cfg = hub.config(provSpec{
		Name: "hub", Match: []string{"docker.io"},
		Response: provResponse(provV1, "Global", "", map[string]string{"https://index.docker.io/v1/": "hub:h", "quay.io": "q:q"}),
	})
	creds, err = auth.Providers(cfg, hub.binDir, "nginx:latest", "", auth.ProviderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := provUsers(creds); !reflect.DeepEqual(got, []string{"hub"}) {
		t.Errorf("docker hub fallback: got %v", got)
	}

	// A response without a matching key gives nothing.
	none := newProvSetupWith(t, s.fake)
	cfg = none.config(provSpec{Name: "p", Match: []string{"*.example.com"}, Response: provResponse(provV1, "Image", "", map[string]string{"quay.io": "q:q"})})
	creds, err = auth.Providers(cfg, none.binDir, "registry.example.com/r", "", auth.ProviderOptions{})
	if err != nil || len(creds) != 0 {
		t.Errorf("got %v, %v", creds, err)
	}
}

func TestProvidersResponseErrors(t *testing.T) {
	good := map[string]string{"registry.example.com": "robot:" + provSecret}
	tests := []struct {
		name     string
		response string
		mode     string
		stderr   string
		want     []string
	}{
		{"apiVersion mismatch", provResponse(provV1beta1, "Image", "", good), "", "",
			[]string{"did not match expected apiVersion:credentialprovider.kubelet.k8s.io/v1, actual apiVersion:credentialprovider.kubelet.k8s.io/v1beta1"}},
		{"no apiVersion", `{"kind":"CredentialProviderResponse","cacheKeyType":"Image","auth":{"registry.example.com":{"username":"robot","password":"` + provSecret + `"}}}`, "", "",
			[]string{"actual apiVersion:"}},
		{"not JSON", "robot " + provSecret, "", "", []string{"error reading GVK from response"}},
		{"empty", "", "", "", []string{"error reading GVK from response"}},
		{"wrong kind", strings.Replace(provResponse(provV1, "Image", "", good), "CredentialProviderResponse", "CredentialProviderRequest", 1), "", "",
			[]string{`unexpected Kind: "CredentialProviderRequest"`}},
		{"bad cacheKeyType", provResponse(provV1, "Pod", "", good), "", "", []string{`did not return a valid cacheKeyType: "Pod"`}},
		{"no cacheKeyType", provResponse(provV1, "", "", good), "", "", []string{`did not return a valid cacheKeyType: ""`}},
		{"unknown field", strings.Replace(provResponse(provV1, "Image", "", good), `"auth"`, `"Auth"`, 1), "", "",
			[]string{`error decoding credential provider plugin response from stdout: unknown field "Auth"`}},
		{"unknown auth field", strings.Replace(provResponse(provV1, "Image", "", good), `"username"`, `"user"`, 1), "", "",
			[]string{`unknown field "auth.registry.example.com.user"`}},
		{"duplicate field", strings.Replace(provResponse(provV1, "Image", "", good), `"cacheKeyType":"Image"`, `"cacheKeyType":"Image","cacheKeyType":"Image"`, 1), "", "",
			[]string{`duplicate field "cacheKeyType"`}},
		{"bad duration", provResponse(provV1, "Image", "soon", good), "", "", []string{`invalid duration (want`}},
		{"exit status", provResponse(provV1, "Image", "", good), "fail", "cannot reach the token service",
			[]string{"exit status 1", "stderr: cannot reach the token service"}},
		{"stderr redacted", provResponse(provV1, "Image", "", good), "fail", "debug: got password " + provSecret + " for robot",
			[]string{"stderr: debug: got password [redacted] for robot"}},
		{"stderr truncated", provResponse(provV1, "Image", "", good), "fail", "start " + strings.Repeat("x", 4000) + " end",
			[]string{"stderr: start xxx", "...(truncated)"}},
	}
	fake := provBuildFake(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newProvSetupWith(t, fake)
			cfg := s.config(provSpec{Name: "broken", Match: []string{"registry.example.com"}, Response: tt.response, Mode: tt.mode, Stderr: tt.stderr})
			creds, err := auth.Providers(cfg, s.binDir, "registry.example.com/org/repo", s.cacheDir, auth.ProviderOptions{})
			if err == nil {
				t.Fatalf("no error; credentials %+v", creds)
			}
			if len(creds) != 0 {
				t.Errorf("credentials from a failed provider: %+v", creds)
			}
			msg := err.Error()
			for _, w := range append(tt.want, `credential provider "broken"`, "registry.example.com/org/repo") {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			if strings.Contains(msg, provSecret) {
				t.Errorf("error shows the password: %q", msg)
			}
			if strings.Contains(msg, " end") {
				t.Errorf("stderr not truncated: %q", msg)
			}
			if _, err := os.Stat(filepath.Join(s.cacheDir, "broken.json")); !os.IsNotExist(err) {
				t.Errorf("a failed response was cached (%v)", err)
			}
		})
	}
}

func TestProvidersFailureKeepsOthers(t *testing.T) {
	s := newProvSetup(t)
	cfg := s.config(
		provSpec{Name: "bad", Match: []string{"*.example.com"}, Mode: "fail", Response: "{}"},
		provSpec{Name: "good", Match: []string{"*.example.com"}, Response: provResponse(provV1, "Image", "", map[string]string{"registry.example.com": "g:g"})},
	)
	creds, err := auth.Providers(cfg, s.binDir, "registry.example.com/r", "", auth.ProviderOptions{})
	if err == nil || !strings.Contains(err.Error(), `credential provider "bad"`) || strings.Contains(err.Error(), `"good"`) {
		t.Errorf("error: got %v", err)
	}
	if got := provUsers(creds); !reflect.DeepEqual(got, []string{"g"}) {
		t.Errorf("credentials: got %v", got)
	}
}

func TestProvidersBinaries(t *testing.T) {
	s := newProvSetup(t)
	cfg := s.config(provSpec{Name: "present", Match: []string{"quay.io"}, Response: "{}"})
	cfg.Providers = append(cfg.Providers, cfg.Providers[0])
	cfg.Providers[1].Name = "absent"
	// As the kubelet refuses to start, no provider runs, matching or not.
	_, err := auth.Providers(cfg, s.binDir, "registry.example.com/r", "", auth.ProviderOptions{})
	if err == nil || !strings.Contains(err.Error(), "plugin binary executable "+filepath.Join(s.binDir, "absent")+" did not exist") {
		t.Errorf("missing binary: got %v", err)
	}
	_, err = auth.Providers(cfg, filepath.Join(s.dir, "nope"), "registry.example.com/r", "", auth.ProviderOptions{})
	if err == nil || !strings.Contains(err.Error(), "plugin binary directory") {
		t.Errorf("missing directory: got %v", err)
	}
	if _, err := auth.Providers(cfg, s.binDir, "UPPER/case", "", auth.ProviderOptions{}); err == nil || !strings.Contains(err.Error(), "couldn't parse image name") {
		t.Errorf("bad image: got %v", err)
	}
	if creds, err := auth.Providers(nil, s.binDir, "registry.example.com/r", "", auth.ProviderOptions{}); creds != nil || err != nil {
		t.Errorf("nil config: got %v, %v", creds, err)
	}
	bad := &auth.ProviderConfig{Providers: []auth.CredentialProvider{{Name: "x", MatchImages: []string{"x.io"}, APIVersion: provV1}}}
	if _, err := auth.Providers(bad, s.binDir, "x.io/r", "", auth.ProviderOptions{}); err == nil || !strings.Contains(err.Error(), "defaultCacheDuration: Required value") {
		t.Errorf("unvalidated config: got %v", err)
	}
}

func TestProvidersTokenAttributes(t *testing.T) {
	s := newProvSetup(t)
	resp := provResponse(provV1, "Image", "", map[string]string{"registry.example.com": "u:p"})
	attrs := func(require bool) map[string]any {
		return map[string]any{"tokenAttributes": map[string]any{"serviceAccountTokenAudience": "aud", "cacheType": "Token", "requireServiceAccount": require}}
	}
	cfg := s.config(
		provSpec{Name: "needs-sa", Match: []string{"registry.example.com"}, Response: resp, Extra: attrs(true)},
		provSpec{Name: "optional-sa", Match: []string{"registry.example.com"}, Response: resp, Extra: attrs(false)},
	)
	creds, err := auth.Providers(cfg, s.binDir, "registry.example.com/r", "", auth.ProviderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	calls := s.calls()
	if len(calls) != 1 || calls[0].Env["FAKE_PROVIDER_NAME"] != "optional-sa" {
		t.Fatalf("runs: %+v", calls)
	}
	if _, ok := calls[0].Request["serviceAccountToken"]; ok {
		t.Errorf("a token was sent: %v", calls[0].Request)
	}
	if len(creds) != 1 || creds[0].File != "optional-sa" {
		t.Errorf("credentials: %+v", creds)
	}
}

// provProcessGone reports whether pid has exited (a zombie counts).
func provProcessGone(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(data, ')')
	return i < 0 || i+2 >= len(data) || data[i+2] == 'Z' || data[i+2] == 'X'
}

func TestProvidersTimeout(t *testing.T) {
	s := newProvSetup(t)
	cfg := s.config(provSpec{Name: "slow", Match: []string{"registry.example.com"}, Mode: "hang-child"})
	// Wait for the child to log as well, so both pids are known.
	timeout := 1500 * time.Millisecond
	start := time.Now()
	creds, err := auth.Providers(cfg, s.binDir, "registry.example.com/r", "", auth.ProviderOptions{Timeout: timeout})
	elapsed := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "timed out after 1.5s") || !strings.Contains(err.Error(), `credential provider "slow"`) {
		t.Errorf("error: got %v", err)
	}
	if creds != nil {
		t.Errorf("credentials: %+v", creds)
	}
	if elapsed < timeout || elapsed > timeout+1500*time.Millisecond {
		t.Errorf("returned after %s; the timeout is %s", elapsed, timeout)
	}
	calls := s.calls()
	if len(calls) != 2 {
		t.Fatalf("expected the plugin and its child in the log, got %+v", calls)
	}
	for _, c := range calls {
		deadline := time.Now().Add(5 * time.Second)
		for !provProcessGone(c.PID) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if !provProcessGone(c.PID) {
			t.Errorf("%s process %d still runs", c.Role, c.PID)
		}
	}
}

func TestProvidersCache(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	auths := map[string]string{"*.example.com": "robot:" + provSecret}
	type step struct {
		advance time.Duration
		image   string
		runs    int // plugin runs so far
	}
	tests := []struct {
		name, keyType, duration, def string
		noCacheDir                   bool
		steps                        []step
	}{
		{"image key", "Image", "10m", "", false, []step{
			{0, "registry.example.com/a/one:1", 1},
			{time.Minute, "registry.example.com/a/one:2", 1}, // same repository, other tag
			{0, "registry.example.com/a/two", 2},             // other repository
			{0, "registry.example.com/a/one", 2},
			{9 * time.Minute, "registry.example.com/a/one", 2}, // exactly at expiry: still valid
			{time.Nanosecond, "registry.example.com/a/one", 3}, // expired
		}},
		{"registry key", "Registry", "10m", "", false, []step{
			{0, "registry.example.com/a/one", 1},
			{0, "registry.example.com/b/two", 1},
			{0, "other.example.com/a/one", 2},
			{0, "registry.example.com:5000/a/one", 3}, // the port is part of the registry
			{11 * time.Minute, "registry.example.com/b/two", 4},
		}},
		{"global key", "Global", "10m", "", false, []step{
			{0, "registry.example.com/a/one", 1},
			{0, "other.example.com/b/two", 1},
			{11 * time.Minute, "other.example.com/b/two", 2},
		}},
		{"default duration", "Image", "", "5m", false, []step{
			{0, "registry.example.com/a/one", 1},
			{5 * time.Minute, "registry.example.com/a/one", 1},
			{time.Second, "registry.example.com/a/one", 2},
		}},
		{"zero default", "Image", "", "0s", false, []step{
			{0, "registry.example.com/a/one", 1},
			{0, "registry.example.com/a/one", 2},
		}},
		{"zero cacheDuration", "Image", "0s", "1h", false, []step{
			{0, "registry.example.com/a/one", 1},
			{0, "registry.example.com/a/one", 2},
		}},
		{"no cache dir", "Global", "1h", "1h", true, []step{
			{0, "registry.example.com/a/one", 1},
			{0, "registry.example.com/a/one", 2},
		}},
	}
	fake := provBuildFake(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newProvSetupWith(t, fake)
			cfg := s.config(provSpec{
				Name: "cached", Match: []string{"*.example.com", "*.example.com:5000"}, Default: tt.def,
				Response: provResponse(provV1, tt.keyType, tt.duration, auths),
			})
			cacheDir := s.cacheDir
			if tt.noCacheDir {
				cacheDir = ""
			}
			now := t0
			opts := auth.ProviderOptions{Now: func() time.Time { return now }}
			for i, st := range tt.steps {
				now = now.Add(st.advance)
				creds, err := auth.Providers(cfg, s.binDir, st.image, cacheDir, opts)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				want := []wire.Credential{{Source: "credential-provider", File: "cached", Key: "*.example.com", Username: "robot", Password: provSecret}}
				if strings.Contains(st.image, ":5000") {
					want = nil // the key has no port
				}
				if !reflect.DeepEqual(creds, want) {
					t.Errorf("step %d: credentials %+v", i, creds)
				}
				if got := s.pluginCalls(); got != st.runs {
					t.Errorf("step %d (%s at +%s): %d plugin runs, want %d", i, st.image, now.Sub(t0), got, st.runs)
				}
			}
		})
	}

	t.Run("file", func(t *testing.T) {
		s := newProvSetupWith(t, fake)
		cfg := s.config(provSpec{Name: "cached", Match: []string{"*.example.com"}, Response: provResponse(provV1, "Registry", "1h", auths)})
		opts := auth.ProviderOptions{Now: func() time.Time { return t0 }}
		if _, err := auth.Providers(cfg, s.binDir, "registry.example.com/a", s.cacheDir, opts); err != nil {
			t.Fatal(err)
		}
		entries, err := os.ReadDir(s.cacheDir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].Name() != "cached.json" {
			t.Fatalf("cache directory holds %v", entries)
		}
		st, err := os.Stat(filepath.Join(s.cacheDir, "cached.json"))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("cache file mode %v", st.Mode())
		}
		if dst, _ := os.Stat(s.cacheDir); dst.Mode().Perm() != 0o700 {
			t.Errorf("cache directory mode %v", dst.Mode())
		}

		// Another configuration of the provider (here its args) does not
		// use the cache; a corrupt cache file is ignored and replaced.
		cfg.Providers[0].Args = []string{"--other"}
		if _, err := auth.Providers(cfg, s.binDir, "registry.example.com/a", s.cacheDir, opts); err != nil {
			t.Fatal(err)
		}
		if n := s.pluginCalls(); n != 2 {
			t.Errorf("after a config change: %d runs, want 2", n)
		}
		write(t, s.cacheDir, "cached.json", "{not json")
		if _, err := auth.Providers(cfg, s.binDir, "registry.example.com/a", s.cacheDir, opts); err != nil {
			t.Fatal(err)
		}
		if _, err := auth.Providers(cfg, s.binDir, "registry.example.com/a", s.cacheDir, opts); err != nil {
			t.Fatal(err)
		}
		if n := s.pluginCalls(); n != 3 {
			t.Errorf("after a corrupt cache: %d runs, want 3", n)
		}

		// An unwritable cache is reported, and the credentials still come.
		blocked := filepath.Join(s.dir, "blocked")
		write(t, s.dir, "blocked", "a file, not a directory")
		creds, err := auth.Providers(cfg, s.binDir, "registry.example.com/a", blocked, opts)
		if err == nil || !strings.Contains(err.Error(), "writing cache") || len(creds) != 1 {
			t.Errorf("unwritable cache: %v, %v", creds, err)
		}
	})
}

// A password longer than the error's 128-byte excerpt, echoed back as the
// apiVersion, is redacted before the excerpt is cut: no prefix of it shows.
func TestProvidersLongSecretEchoedIsRedacted(t *testing.T) {
	long := strings.Repeat("Z", 40) + provSecret + strings.Repeat("Q", 160)
	fake := provBuildFake(t)
	s := newProvSetupWith(t, fake)
	resp := provResponse(long, "Image", "", map[string]string{"registry.example.com": "robot:" + long})
	cfg := s.config(provSpec{Name: "echo", Match: []string{"registry.example.com"}, Response: resp})
	_, err := auth.Providers(cfg, s.binDir, "registry.example.com/org/repo", s.cacheDir, auth.ProviderOptions{})
	if err == nil {
		t.Fatal("no error for a wrong apiVersion")
	}
	if strings.Contains(err.Error(), long[:40]) {
		t.Errorf("the error shows a prefix of the password: %q", err)
	}
}
