package auth_test

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/auth"
	"github.com/pullhelper/pullhelper/internal/wire"
)

// kubeletB64 is padded standard base64, as docker writes "auth".
func kubeletWrite(t *testing.T, path, content string) {
	t.Helper()
	write(t, path, "", content)
}

// kubeletKV is one key of a docker config and the username of its credential; the
// password is "pw-" + user.
type kubeletKV struct{ key, user string }

// kubeletAuthsObject renders the entries, in order, as a JSON object of
// {key: {"auth": base64(user:pw-user)}}.
func kubeletAuthsObject(entries ...kubeletKV) string {
	parts := make([]string, len(entries))
	for i, e := range entries {
		k, _ := json.Marshal(e.key)
		parts[i] = string(k) + `: {"auth": "` + b64(e.user+":pw-"+e.user) + `"}`
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func kubeletConfigJSON(entries ...kubeletKV) string {
	return `{"auths": ` + kubeletAuthsObject(entries...) + `}`
}

func kubeletUsers(creds []wire.Credential) []string {
	var out []string
	for _, c := range creds {
		out = append(out, c.Username)
	}
	return out
}

func kubeletKeyringOf(t *testing.T, entries ...kubeletKV) *auth.KubeletKeyring {
	t.Helper()
	k := &auth.KubeletKeyring{}
	if err := k.AddDockerConfigJSON([]byte(kubeletConfigJSON(entries...)), "pull-secret", "/secrets/a"); err != nil {
		t.Fatal(err)
	}
	return k
}

// TestKubeletMatchExamples covers rows 1-15 of the research file's table
// (1.6) and further URLsMatch / isDefaultRegistryMatch cases.
func TestKubeletMatchExamples(t *testing.T) {
	pongAndHost := []kubeletKV{{"bar.example.com/pong", "pong"}, {"bar.example.com", "host"}}
	hub := []kubeletKV{{"https://index.docker.io/v1/", "hub"}}
	for _, tc := range []struct {
		name  string
		keys  []kubeletKV
		image string
		want  []string
	}{
		{"1 wildcard label", []kubeletKV{{"*.kubernetes.io", "w"}}, "prefix.kubernetes.io", []string{"w"}},
		{"2 label count", []kubeletKV{{"*.kubernetes.io", "w"}}, "kubernetes.io", nil},
		{"3 two wildcards vs three labels", []kubeletKV{{"*.*.kubernetes.io", "w"}}, "prefix.kubernetes.io", nil},
		{"4 glob within a label", []kubeletKV{{"k*.io", "w"}}, "quay.io", nil},
		{"5 wildcard and path prefix", []kubeletKV{{"prefix.*.io/foo", "w"}}, "prefix.kubernetes.io/foo/bar", []string{"w"}},
		{"6 port in image only", []kubeletKV{{"prefix.*.io/foo", "w"}}, "prefix.kubernetes.io:1111/foo/bar", nil},
		{"7 different ports", []kubeletKV{{"*.kubernetes.io:1234/blah", "w"}}, "prefix.kubernetes.io:1111/blah", nil},
		{"8 /v2/ stripped to /", []kubeletKV{{"https://*.docker.io/v2/", "w"}}, "prefix.docker.io/path:1111/foo/bar", []string{"w"}},
		{"9 path is not a prefix", []kubeletKV{{"https://prefix.*.io/path:1111", "w"}}, "prefix.docker.io/path/subpath:1111/foo/bar", nil},
		{"10 path key then host key", pongAndHost, "bar.example.com/pong", []string{"pong", "host"}},
		{"11 string prefix, not segment", pongAndHost, "bar.example.com/pongz", []string{"pong", "host"}},
		{"12a other host", pongAndHost, "foo.example.com", nil},
		{"12b fewer labels", pongAndHost, "example.com", nil},
		{"13 /v1/ key matches any path", []kubeletKV{{"https://quay.io/v1/", "q"}}, "quay.io/foo/bar", []string{"q"}},
		{"14a default registry, user/repo", hub, "google/docker-registry", []string{"hub"}},
		{"14b default registry, single name", hub, "jenkins", []string{"hub"}},
		{"14c default registry, docker.io", hub, "docker.io/library/nginx", []string{"hub"}},
		{"15a other registry", hub, "world.mesos.org/foo/bar", nil},
		{"15b registry with port", hub, "registry:5000/foo", nil},

		// Beyond the table.
		{"index.docker.io prefix matches directly", hub, "index.docker.io/library/nginx", []string{"hub"}},
		{"registry-1.docker.io never matches docker.io", []kubeletKV{{"registry-1.docker.io", "r1"}}, "docker.io/library/nginx", nil},
		{"*.docker.io never matches docker.io", []kubeletKV{{"*.docker.io", "star"}}, "docker.io/library/nginx", nil},
		{"fallback only when nothing matched", []kubeletKV{{"https://index.docker.io/v1/", "hub"}, {"docker.io", "dio"}}, "docker.io/library/nginx", []string{"dio"}},
		{"direct matches in index order", []kubeletKV{{"*.docker.io", "star"}, {"index.docker.io", "idx"}}, "index.docker.io/library/nginx", []string{"idx", "star"}},
		{"docker.io key is not the fallback", []kubeletKV{{"docker.io", "dio"}}, "jenkins", nil},
		{"localhost counts as default registry", hub, "localhost/foo", []string{"hub"}},
		{"localhost with port does not", hub, "localhost:5000/foo", nil},
		{"empty first component", hub, "/foo", nil},
		{"empty image", hub, "", nil},
		{"port must match", []kubeletKV{{"reg:5000", "p"}}, "reg:5000/x", []string{"p"}},
		{"absent port is not a port", []kubeletKV{{"reg:5000", "p"}}, "reg/x", nil},
		{"other port", []kubeletKV{{"reg:5000", "p"}}, "reg:5001/x", nil},
		{"key without port, image with port", []kubeletKV{{"reg.io", "p"}}, "reg.io:443/x", nil},
		// Since Go 1.24.8/1.25.2 url.Parse rejects "[" inside a host ("invalid
		// IP-literal"), so a key with a character class is skipped.
		{"[a-c] in a host is skipped", []kubeletKV{{"b[a-c].io", "g"}, {"*.io", "star"}}, "bb.io/x", []string{"star"}},
		// url.Parse reads "?" as the start of a query: the key is "reg".
		{"? starts a query, not a glob", []kubeletKV{{"reg?.io", "q"}}, "reg1.io/x", nil},
		{"? key is its host before the ?", []kubeletKV{{"reg?.io", "q"}}, "reg/x", []string{"q"}},
		// A leading "[" is an IPv6 literal: "[a-c].io" does not parse and is skipped.
		{"leading [ is not a glob", []kubeletKV{{"[a-c].io", "g"}, {"https://index.docker.io/v1/", "hub"}}, "b.io/x", nil},
		{"* matches an empty label", []kubeletKV{{"reg*.io", "g"}}, "reg.io/x", []string{"g"}},
		{"no wildcard in path", []kubeletKV{{"reg.io/*", "g"}}, "reg.io/x", nil},
		{"case-sensitive", []kubeletKV{{"Quay.io", "q"}}, "quay.io/x", nil},
		{"http scheme dropped", []kubeletKV{{"http://reg.io/v2/", "h"}}, "reg.io/x", []string{"h"}},
		{"quay.io/v1 without slash keeps its path", []kubeletKV{{"quay.io/v1", "v1"}}, "quay.io/v1x/y", []string{"v1"}},
		{"quay.io/v1 without slash is not the host", []kubeletKV{{"quay.io/v1", "v1"}}, "quay.io/foo", nil},
		{"/v2/ prefix stripped from a path", []kubeletKV{{"https://quay.io/v2/coreos", "c"}}, "quay.io/coreos/etcd", []string{"c"}},
		{"/v2/ path key, other repo", []kubeletKV{{"https://quay.io/v2/coreos", "c"}}, "quay.io/other/etcd", nil},
		{"unparsable key skipped", []kubeletKV{{"reg.io/%zz", "bad"}, {"reg.io:port", "bad2"}, {"reg.io", "good"}}, "reg.io/x", []string{"good"}},
		{"unparsable image matches no key", []kubeletKV{{"reg.io", "good"}}, "reg.io/%zz", nil},
		{"unparsable image may still fall back", []kubeletKV{{"*", "star"}, {"https://index.docker.io/v1/", "hub"}}, "foo/%zz", []string{"hub"}},
		{"single-label glob", []kubeletKV{{"*", "star"}, {"https://index.docker.io/v1/", "hub"}}, "jenkins", []string{"star"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := kubeletKeyringOf(t, tc.keys...)
			if got := kubeletUsers(k.Lookup(tc.image)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Lookup(%q) = %q, want %q", tc.image, got, tc.want)
			}
		})
	}
}

func TestKubeletCredentialFields(t *testing.T) {
	k := &auth.KubeletKeyring{}
	doc := `{"auths": {"https://index.docker.io/v1/": {"auth": "` + b64("hub:secret") + `", "email": "a@b"}}}`
	if err := k.AddDockerConfigJSON([]byte(doc), "kubelet-node-config", "/var/lib/kubelet/config.json"); err != nil {
		t.Fatal(err)
	}
	got := k.Lookup("docker.io/library/nginx")
	want := []wire.Credential{{Source: "kubelet-node-config", File: "/var/lib/kubelet/config.json", Key: "https://index.docker.io/v1/", Username: "hub", Password: "secret"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestKubeletOrdering(t *testing.T) {
	t.Run("reverse-lexicographic index", func(t *testing.T) {
		// Document order is deliberately not the lookup order.
		k := kubeletKeyringOf(t, kubeletKV{"quay.io", "host"}, kubeletKV{"quay.io/org/repo", "repo"}, kubeletKV{"*.io", "star"}, kubeletKV{"quay.io/org", "org"})
		if got, want := kubeletUsers(k.Lookup("quay.io/org/repo")), []string{"repo", "org", "host", "star"}; !reflect.DeepEqual(got, want) {
			t.Errorf("got %q, want %q", got, want)
		}
	})
	t.Run("byte order, not specificity", func(t *testing.T) {
		k := kubeletKeyringOf(t, kubeletKV{"*.example.com", "star"}, kubeletKV{"a.example.com", "a"}, kubeletKV{"b.io/x", "x"}, kubeletKV{"b.io/xyz", "xyz"})
		if got, want := kubeletUsers(k.Lookup("a.example.com/r")), []string{"a", "star"}; !reflect.DeepEqual(got, want) {
			t.Errorf("got %q, want %q", got, want)
		}
		if got, want := kubeletUsers(k.Lookup("b.io/xyz/r")), []string{"xyz", "x"}; !reflect.DeepEqual(got, want) {
			t.Errorf("got %q, want %q", got, want)
		}
	})
	t.Run("same key in one document, in document order", func(t *testing.T) {
		k := kubeletKeyringOf(t, kubeletKV{"https://reg.io/v2/", "first"}, kubeletKV{"reg.io", "second"}, kubeletKV{"http://reg.io", "third"})
		got := k.Lookup("reg.io/x")
		if want := []string{"first", "second", "third"}; !reflect.DeepEqual(kubeletUsers(got), want) {
			t.Fatalf("got %q, want %q", kubeletUsers(got), want)
		}
		if got[0].Key != "https://reg.io/v2/" || got[1].Key != "reg.io" {
			t.Errorf("keys not as written: %+v", got)
		}
	})
	t.Run("same key across Add calls, in insertion order", func(t *testing.T) {
		k := &auth.KubeletKeyring{}
		if err := k.AddDockerCfg([]byte(kubeletAuthsObject(kubeletKV{"https://quay.io/v1/", "one"})), "pull-secret", "/a"); err != nil {
			t.Fatal(err)
		}
		if err := k.AddDockerConfigJSON([]byte(kubeletConfigJSON(kubeletKV{"quay.io/org", "org"}, kubeletKV{"quay.io", "two"})), "pull-secret", "/b"); err != nil {
			t.Fatal(err)
		}
		got := k.Lookup("quay.io/org/x")
		if want := []string{"org", "one", "two"}; !reflect.DeepEqual(kubeletUsers(got), want) {
			t.Fatalf("got %q, want %q", kubeletUsers(got), want)
		}
		if got[1].File != "/a" || got[2].File != "/b" {
			t.Errorf("files: %+v", got)
		}
	})
	t.Run("JSON map semantics: a repeated key replaces, a repeated auths merges", func(t *testing.T) {
		a := `{"auth": "` + b64("a:pa") + `"}`
		b := `{"auth": "` + b64("b:pb") + `"}`
		x := `{"auth": "` + b64("x:px") + `"}`
		k := &auth.KubeletKeyring{}
		doc := `{"auths": {"reg.io": ` + a + `, "x.io": ` + x + `, "reg.io": ` + b + `}, "auths": {"y.io": ` + x + `}}`
		if err := k.AddDockerConfigJSON([]byte(doc), "pull-secret", "/a"); err != nil {
			t.Fatal(err)
		}
		for image, want := range map[string][]string{"reg.io/r": {"b"}, "x.io/r": {"x"}, "y.io/r": {"x"}} {
			if got := kubeletUsers(k.Lookup(image)); !reflect.DeepEqual(got, want) {
				t.Errorf("%s: got %q, want %q", image, got, want)
			}
		}
		bad := `{"auth": "` + b64("nocolon") + `"}`
		if err := k.AddDockerCfg([]byte(`{"z.io": `+bad+`, "z.io": `+a+`}`), "pull-secret", "/b"); err == nil {
			t.Error("a bad entry later replaced by a good one must still fail the document")
		}
	})
	t.Run("pull secrets are sorted together", func(t *testing.T) {
		dir := t.TempDir()
		a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
		kubeletWrite(t, a, kubeletConfigJSON(kubeletKV{"quay.io", "a-host"}))
		kubeletWrite(t, b, kubeletConfigJSON(kubeletKV{"quay.io/org", "b-org"}, kubeletKV{"quay.io", "b-host"}))
		k, err := auth.LoadPullSecrets([]string{a, b})
		if err != nil {
			t.Fatal(err)
		}
		got := k.Lookup("quay.io/org/repo")
		if want := []string{"b-org", "a-host", "b-host"}; !reflect.DeepEqual(kubeletUsers(got), want) {
			t.Errorf("got %q, want %q", kubeletUsers(got), want)
		}
		for _, c := range got {
			if c.Source != "pull-secret" {
				t.Errorf("source %q", c.Source)
			}
		}
	})
}

func TestKubeletAuthDecoding(t *testing.T) {
	const file = "/secrets/pull.json"
	for _, tc := range []struct {
		name       string
		entry      string // the JSON of the entry under key "reg.io"
		user, pass string
		wantErr    string   // substring; the error must also name the file and key
		secrets    []string // must not appear in the error
	}{
		{name: "padded", entry: `{"auth": "` + b64("user:pa") + `"}`, user: "user", pass: "pa"},
		{name: "unpadded", entry: `{"auth": "` + base64.RawStdEncoding.EncodeToString([]byte("user:pa")) + `"}`, user: "user", pass: "pa"},
		{name: "padded with trailing newline", entry: `{"auth": "` + b64("user:pa") + `\n"}`, user: "user", pass: "pa"},
		{name: "split on the first colon", entry: `{"auth": "` + b64("u:p:q") + `"}`, user: "u", pass: "p:q"},
		{name: "empty password", entry: `{"auth": "` + b64("u:") + `"}`, user: "u", pass: ""},
		{name: "auth overrides username and password", entry: `{"username": "x", "password": "y", "auth": "` + b64("u:p") + `"}`, user: "u", pass: "p"},
		{name: "empty auth keeps username and password", entry: `{"username": "x", "password": "y", "auth": ""}`, user: "x", pass: "y"},
		{name: "field names are case-insensitive", entry: `{"Username": "x", "PASSWORD": "y"}`, user: "x", pass: "y"},
		{name: "identitytoken is not parsed", entry: `{"auth": "` + b64("u:p") + `", "identitytoken": "tok", "registrytoken": "rt"}`, user: "u", pass: "p"},
		{name: "identitytoken alone gives an empty credential", entry: `{"identitytoken": "tok"}`, user: "", pass: ""},
		{name: "null entry", entry: `null`, user: "", pass: ""},
		{
			name: "no colon", entry: `{"auth": "` + b64("justuser") + `"}`,
			wantErr: "unable to parse auth field, must be formatted as base64(username:password)",
			secrets: []string{b64("justuser"), "justuser"},
		},
		{
			name: "wrong padding", entry: `{"auth": "` + strings.TrimSuffix(b64("user:pa"), "=") + `"}`,
			wantErr: "illegal base64 data", secrets: []string{"dXNlcjpwYQ"},
		},
		{
			name: "not base64", entry: `{"auth": "s3cr3t!!"}`,
			wantErr: "illegal base64 data", secrets: []string{"s3cr3t"},
		},
		{
			name: "wrong type", entry: `{"password": 12345}`,
			wantErr: "wrong type", secrets: []string{"12345"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, format := range []string{"config.json", ".dockercfg"} {
				k := &auth.KubeletKeyring{}
				var err error
				entries := `{"other.io": {"auth": "` + b64("o:p") + `"}, "reg.io": ` + tc.entry + `}`
				if format == "config.json" {
					err = k.AddDockerConfigJSON([]byte(`{"auths": `+entries+`}`), "pull-secret", file)
				} else {
					err = k.AddDockerCfg([]byte(entries), "pull-secret", file)
				}
				if tc.wantErr != "" {
					if err == nil {
						t.Fatalf("%s: no error", format)
					}
					msg := err.Error()
					t.Logf("%s: %s", format, msg)
					for _, want := range []string{tc.wantErr, file, `"reg.io"`} {
						if !strings.Contains(msg, want) {
							t.Errorf("%s: error %q does not contain %q", format, msg, want)
						}
					}
					for _, s := range tc.secrets {
						if strings.Contains(msg, s) {
							t.Errorf("%s: error %q leaks %q", format, msg, s)
						}
					}
					if got := k.Lookup("other.io/x"); len(got) != 0 {
						t.Errorf("%s: a failed document still added %+v", format, got)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", format, err)
				}
				got := k.Lookup("reg.io/x")
				if len(got) != 1 || got[0].Username != tc.user || got[0].Password != tc.pass || got[0].IdentityToken != "" {
					t.Errorf("%s: got %+v, want %q/%q", format, got, tc.user, tc.pass)
				}
			}
		})
	}
}

func TestKubeletDocumentErrors(t *testing.T) {
	const file = "/etc/pull.json"
	for _, tc := range []struct {
		name, doc string
		legacy    bool
		wantErr   bool
	}{
		{"syntax error", `{"auths": {"reg.io": {"auth": "c2VjcmV0"`, false, true},
		{"auths not an object", `{"auths": ["reg.io"]}`, false, true},
		{"HttpHeaders must be strings", `{"auths": {}, "HttpHeaders": {"X": 1}}`, false, true},
		{"no auths is empty, not an error", `{"credsStore": "desktop"}`, false, false},
		{"auths null", `{"auths": null}`, false, false},
		{"legacy top level must be an object", `["reg.io"]`, true, true},
		{"legacy null", `null`, true, false},
		{"legacy entry of the wrong type", `{"reg.io": "c2VjcmV0"}`, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &auth.KubeletKeyring{}
			var err error
			if tc.legacy {
				err = k.AddDockerCfg([]byte(tc.doc), "pull-secret", file)
			} else {
				err = k.AddDockerConfigJSON([]byte(tc.doc), "pull-secret", file)
			}
			if tc.wantErr != (err != nil) {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				t.Log(err)
				if !strings.Contains(err.Error(), file) {
					t.Errorf("error %q does not name the file", err)
				}
				if strings.Contains(err.Error(), "c2VjcmV0") {
					t.Errorf("error %q leaks the secret", err)
				}
			}
		})
	}
}

func TestKubeletNodeConfigSearch(t *testing.T) {
	good := func(user string) string { return kubeletConfigJSON(kubeletKV{"reg.io", user}) }
	legacy := func(user string) string { return kubeletAuthsObject(kubeletKV{"reg.io", user}) }
	for _, tc := range []struct {
		name     string
		files    map[string]string // relative to the test dir: root/, cwd/, home/, slash/
		dirs     []string          // relative paths that are directories
		wantFile string            // relative, "" for none
		want     []string
	}{
		{
			name: "root dir first",
			files: map[string]string{
				"root/config.json": good("root"), "cwd/config.json": good("cwd"),
				"home/.docker/config.json": good("home"), "slash/.docker/config.json": good("slash"),
				"root/.dockercfg": legacy("rootcfg"),
			},
			wantFile: "root/config.json", want: []string{"root"},
		},
		{
			name:     "cwd second",
			files:    map[string]string{"cwd/config.json": good("cwd"), "home/.docker/config.json": good("home")},
			wantFile: "cwd/config.json", want: []string{"cwd"},
		},
		{
			name:     "home/.docker third",
			files:    map[string]string{"home/.docker/config.json": good("home"), "slash/.docker/config.json": good("slash")},
			wantFile: "home/.docker/config.json", want: []string{"home"},
		},
		{
			name:     "/.docker last",
			files:    map[string]string{"slash/.docker/config.json": good("slash"), "home/config.json": good("homeroot")},
			wantFile: "slash/.docker/config.json", want: []string{"slash"},
		},
		{
			name:     "invalid JSON skipped",
			files:    map[string]string{"root/config.json": `{"auths": {`, "cwd/config.json": good("cwd")},
			wantFile: "cwd/config.json", want: []string{"cwd"},
		},
		{
			name: "bad auth makes the file invalid, skipped",
			files: map[string]string{
				"root/config.json":         `{"auths": {"reg.io": {"auth": "` + b64("nocolon") + `"}}}`,
				"cwd/config.json":          `{"auths": {"reg.io": {"auth": "!!"}}}`,
				"home/.docker/config.json": good("home"),
			},
			wantFile: "home/.docker/config.json", want: []string{"home"},
		},
		{
			name:     "unreadable (a directory) skipped",
			files:    map[string]string{"cwd/config.json": good("cwd")},
			dirs:     []string{"root/config.json"},
			wantFile: "cwd/config.json", want: []string{"cwd"},
		},
		{
			name: "parseable without auths stops the search",
			files: map[string]string{
				"cwd/config.json":          `{"credsStore": "desktop"}`,
				"home/.docker/config.json": good("home"),
				"root/.dockercfg":          legacy("rootcfg"),
			},
			wantFile: "cwd/config.json", want: nil,
		},
		{
			name: ".dockercfg only when no config.json parsed",
			files: map[string]string{
				"root/config.json": `not json`,
				"cwd/.dockercfg":   legacy("cwdcfg"),
				"home/.dockercfg":  legacy("homecfg"),
			},
			wantFile: "cwd/.dockercfg", want: []string{"cwdcfg"},
		},
		{
			name: ".dockercfg in root dir first",
			files: map[string]string{
				"root/.dockercfg": legacy("rootcfg"), "cwd/.dockercfg": legacy("cwdcfg"),
			},
			wantFile: "root/.dockercfg", want: []string{"rootcfg"},
		},
		{
			name: ".dockercfg in home, not home/.docker",
			files: map[string]string{
				"home/.docker/.dockercfg": legacy("wrong"),
				"home/.dockercfg":         legacy("homecfg"),
				"slash/.dockercfg":        legacy("slashcfg"),
			},
			wantFile: "home/.dockercfg", want: []string{"homecfg"},
		},
		{
			name: ".dockercfg in / (not /.docker) last, invalid ones skipped",
			files: map[string]string{
				"root/.dockercfg":          `{`,
				"home/.dockercfg":          `{"reg.io": {"auth": "` + b64("nocolon") + `"}}`,
				"slash/.docker/.dockercfg": legacy("wrong"),
				"slash/.dockercfg":         legacy("slashcfg"),
			},
			wantFile: "slash/.dockercfg", want: []string{"slashcfg"},
		},
		{
			name:     "config.json in home itself is not searched",
			files:    map[string]string{"home/config.json": good("homeroot"), "cwd/.docker/config.json": good("cwddocker")},
			wantFile: "", want: nil,
		},
		{
			name:     "legacy-format config.json has no auths: empty, ends the search",
			files:    map[string]string{"root/config.json": legacy("rootcfg"), "cwd/.dockercfg": legacy("cwdcfg")},
			wantFile: "root/config.json", want: nil,
		},
		{name: "nothing", wantFile: "", want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			for _, d := range []string{"root", "cwd", "home", "slash"} {
				if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for rel, content := range tc.files {
				kubeletWrite(t, filepath.Join(base, rel), content)
			}
			for _, rel := range tc.dirs {
				if err := os.MkdirAll(filepath.Join(base, rel), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			k, file, err := auth.LoadNodeDockerConfig(auth.NodeConfigDirs{
				RootDir: filepath.Join(base, "root"), Cwd: filepath.Join(base, "cwd"),
				Home: filepath.Join(base, "home"), Slash: filepath.Join(base, "slash"),
			})
			if err != nil {
				t.Fatal(err)
			}
			wantFile := ""
			if tc.wantFile != "" {
				wantFile = filepath.Join(base, tc.wantFile)
			}
			if file != wantFile {
				t.Errorf("file = %q, want %q", file, wantFile)
			}
			if k == nil {
				t.Fatal("nil keyring")
			}
			got := k.Lookup("reg.io/x")
			if !reflect.DeepEqual(kubeletUsers(got), tc.want) {
				t.Errorf("Lookup = %q, want %q", kubeletUsers(got), tc.want)
			}
			for _, c := range got {
				if c.Source != "kubelet-node-config" || c.File != wantFile || c.Key != "reg.io" {
					t.Errorf("credential %+v", c)
				}
			}
		})
	}
}

func TestLoadPullSecretsFormats(t *testing.T) {
	dcj := func(user string) string { return b64(kubeletConfigJSON(kubeletKV{"reg.io", user})) }
	dcfg := func(user string) string { return b64(kubeletAuthsObject(kubeletKV{"reg.io", user})) }
	for _, tc := range []struct {
		name    string
		content string
		want    []string
	}{
		{"raw config.json", kubeletConfigJSON(kubeletKV{"reg.io", "raw"}), []string{"raw"}},
		{"raw .dockercfg", kubeletAuthsObject(kubeletKV{"https://reg.io/v1/", "legacy"}), []string{"legacy"}},
		{"raw config.json without auths is empty", `{"credHelpers": {"reg.io": "x"}}`, nil},
		{"empty file ignored", ``, nil},
		{"YAML dockerconfigjson", `apiVersion: v1
kind: Secret
metadata:
  name: pull
  namespace: ns
type: kubernetes.io/dockerconfigjson
data:
  .dockerconfigjson: ` + dcj("yj") + "\n", []string{"yj"}},
		{"YAML dockercfg", `apiVersion: v1
kind: Secret
metadata: {name: pull}
type: kubernetes.io/dockercfg
data:
  .dockercfg: ` + dcfg("yc") + "\n", []string{"yc"}},
		{"JSON dockerconfigjson", `{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pull"},
	"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": "` + dcj("jj") + `"}}`, []string{"jj"}},
		{"JSON dockercfg", `{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pull"},
	"type": "kubernetes.io/dockercfg", "data": {".dockercfg": "` + dcfg("jc") + `"}}`, []string{"jc"}},
		{"stringData", `apiVersion: v1
kind: Secret
metadata: {name: pull}
type: kubernetes.io/dockerconfigjson
stringData:
  .dockerconfigjson: '` + kubeletConfigJSON(kubeletKV{"reg.io", "sd"}) + `'
`, []string{"sd"}},
		{"stringData overrides data", `apiVersion: v1
kind: Secret
metadata: {name: pull}
type: kubernetes.io/dockercfg
data:
  .dockercfg: ` + dcfg("fromdata") + `
stringData:
  .dockercfg: '` + kubeletAuthsObject(kubeletKV{"reg.io", "fromstring"}) + `'
`, []string{"fromstring"}},
		{"Opaque ignored", `apiVersion: v1
kind: Secret
metadata: {name: pull}
type: Opaque
data:
  .dockerconfigjson: ` + dcj("opaque") + "\n", nil},
		{"no type ignored", `{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pull"},
	"data": {".dockerconfigjson": "` + dcj("notype") + `"}}`, nil},
		{"dockerconfigjson type with .dockercfg key ignored", `apiVersion: v1
kind: Secret
metadata: {name: pull}
type: kubernetes.io/dockerconfigjson
data:
  .dockercfg: ` + dcfg("mismatch") + "\n", nil},
		{"dockercfg type with .dockerconfigjson key ignored", `apiVersion: v1
kind: Secret
metadata: {name: pull}
type: kubernetes.io/dockercfg
data:
  .dockerconfigjson: ` + dcj("mismatch") + "\n", nil},
		{"basic-auth type ignored", `apiVersion: v1
kind: Secret
metadata: {name: pull}
type: kubernetes.io/basic-auth
stringData: {username: u, password: p}
`, nil},
		{"empty data ignored, even if it would not parse", `apiVersion: v1
kind: Secret
metadata: {name: pull}
type: kubernetes.io/dockerconfigjson
data:
  .dockerconfigjson: ""
`, nil},
		{"several YAML documents", `apiVersion: v1
kind: Secret
metadata: {name: a}
type: kubernetes.io/dockerconfigjson
data:
  .dockerconfigjson: ` + dcj("doc1") + `
---
apiVersion: v1
kind: Secret
metadata: {name: b}
type: kubernetes.io/dockercfg
data:
  .dockercfg: ` + dcfg("doc2") + `
---
`, []string{"doc1", "doc2"}},
		{"List", `{"apiVersion": "v1", "kind": "List", "items": [
	{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a"}, "type": "kubernetes.io/dockercfg", "data": {".dockercfg": "` + dcfg("item1") + `"}},
	{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b"}, "type": "Opaque", "data": {".dockercfg": "` + dcfg("opaque") + `"}},
	{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c"}, "type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": "` + dcj("item3") + `"}}]}`,
			[]string{"item1", "item3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "secret")
			kubeletWrite(t, f, tc.content)
			k, err := auth.LoadPullSecrets([]string{f})
			if err != nil {
				t.Fatal(err)
			}
			got := k.Lookup("reg.io/x")
			if !reflect.DeepEqual(kubeletUsers(got), tc.want) {
				t.Errorf("Lookup = %q, want %q", kubeletUsers(got), tc.want)
			}
			for _, c := range got {
				if c.Source != "pull-secret" || c.File != f {
					t.Errorf("credential %+v", c)
				}
			}
		})
	}
}

func TestLoadPullSecretsErrors(t *testing.T) {
	const secret = "hunter2"
	for _, tc := range []struct {
		name    string
		content string
		want    []string // substrings of the error besides the file name
	}{
		{"bad JSON in a raw file", `{"auths": {"reg.io": {"password": "` + secret + `"`, nil},
		{"bad auth in a raw file", `{"auths": {"reg.io": {"auth": "` + b64(secret) + `"}}}`, []string{`"reg.io"`, "unable to parse auth field"}},
		{"bad auth in a manifest", `apiVersion: v1
kind: Secret
metadata: {name: pull}
type: kubernetes.io/dockerconfigjson
data:
  .dockerconfigjson: ` + b64(`{"auths": {"reg.io": {"auth": "`+b64(secret)+`"}}}`) + "\n", []string{`"reg.io"`, "unable to parse auth field", "pull"}},
		{"bad JSON in a manifest's stringData", `apiVersion: v1
kind: Secret
metadata: {name: pull}
type: kubernetes.io/dockercfg
stringData:
  .dockercfg: '{"reg.io": {"password": "` + secret + `"'
`, []string{"pull"}},
		{"data not base64", `apiVersion: v1
kind: Secret
metadata: {name: pull}
type: kubernetes.io/dockerconfigjson
data:
  .dockerconfigjson: "` + secret + `!"
`, []string{"base64"}},
		{"not a Secret", `apiVersion: v1
kind: ConfigMap
metadata: {name: cm}
data: {password: ` + secret + `}
`, []string{"its kind is not Secret, List or SecretList"}},
		{"neither JSON nor YAML manifest", "password: " + secret + "\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			goodFile, badFile := filepath.Join(dir, "good.json"), filepath.Join(dir, "bad")
			kubeletWrite(t, goodFile, kubeletConfigJSON(kubeletKV{"reg.io", "good"}))
			kubeletWrite(t, badFile, tc.content)
			k, err := auth.LoadPullSecrets([]string{goodFile, badFile})
			if err == nil {
				t.Fatalf("no error; keyring gives %q", kubeletUsers(k.Lookup("reg.io/x")))
			}
			msg := err.Error()
			t.Log(msg)
			if k != nil {
				t.Errorf("keyring returned with the error")
			}
			for _, w := range append([]string{badFile}, tc.want...) {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			for _, s := range []string{secret, b64(secret)} {
				if strings.Contains(msg, s) {
					t.Errorf("error %q leaks the secret", msg)
				}
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "nope")
		if _, err := auth.LoadPullSecrets([]string{f}); err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("no files", func(t *testing.T) {
		k, err := auth.LoadPullSecrets(nil)
		if err != nil || k == nil || len(k.Lookup("docker.io/library/nginx")) != 0 {
			t.Errorf("k=%v err=%v", k, err)
		}
	})
}
