package auth_test

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/auth"
	"github.com/pullhelper/pullhelper/internal/wire"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLookupContainersMatching(t *testing.T) {
	dir := t.TempDir()
	f := write(t, dir, "auth.json", `{"auths":{
		"quay.io": {"auth": "`+b64("host:hp")+`"},
		"quay.io/org": {"auth": "`+b64("org:op")+`"},
		"quay.io/org/repo": {"auth": "`+b64("repo:rp")+`"},
		"https://index.docker.io/v1/": {"auth": "`+b64("hub:hubp")+`"},
		"reg:5000": {"auth": "`+b64("port:pp")+`", "identitytoken": "tok"},
		"nocolon.io": {"auth": "`+b64("justuser")+`"}
	}}`)
	files := []wire.AuthFile{{Path: f}}
	for _, tc := range []struct{ name, wantUser, wantKey string }{
		{"quay.io/org/repo", "repo", "quay.io/org/repo"},
		{"quay.io/org/repo2", "org", "quay.io/org"},
		{"quay.io/org2/x", "host", "quay.io"},
		{"quay.io/orgx/y", "host", "quay.io"}, // path-component aware: "quay.io/org" does not match "orgx"
		{"docker.io/library/nginx", "hub", "https://index.docker.io/v1/"},
		{"reg:5000/a", "port", "reg:5000"},
		{"reg/a", "", ""},        // the port is part of the key
		{"nocolon.io/a", "", ""}, // no colon: empty, search continues
		{"other.io/a/b", "", ""}, // nothing matches: anonymous
	} {
		c, err := auth.LookupContainers(files, tc.name)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tc.wantUser == "" {
			if c != nil {
				t.Errorf("%s: want anonymous, got %+v", tc.name, c)
			}
			continue
		}
		if c == nil || c.Username != tc.wantUser || c.Key != tc.wantKey || c.File != f {
			t.Errorf("%s: got %+v, want user %s key %s", tc.name, c, tc.wantUser, tc.wantKey)
		}
	}
	c, _ := auth.LookupContainers(files, "reg:5000/a")
	if c.IdentityToken != "tok" || c.Password != "pp" {
		t.Errorf("identity token / password not carried: %+v", c)
	}
	js, _ := json.Marshal(c)
	if strings.Contains(string(js), "pp") || strings.Contains(string(js), "tok") {
		t.Fatalf("secret in JSON: %s", js)
	}
}

func TestLookupContainersOrderAndErrors(t *testing.T) {
	dir := t.TempDir()
	first := write(t, dir, "a.json", `{"auths":{"r.io": {"auth": "`+b64("novalue")+`"}}}`)
	second := write(t, dir, "b.json", `{"auths":{"r.io": {"auth": "`+b64("u2:p2")+`"}}}`)
	legacy := write(t, dir, "dockercfg", `{"https://r.io/v1/": {"auth": "`+b64("u3:p3")+`"}}`)
	c, err := auth.LookupContainers([]wire.AuthFile{{Path: filepath.Join(dir, "missing.json")}, {Path: first}, {Path: second}}, "r.io/x")
	if err != nil || c == nil || c.Username != "u2" || c.File != second {
		t.Fatalf("want u2 from the second file, got %+v %v", c, err)
	}
	c, err = auth.LookupContainers([]wire.AuthFile{{Path: legacy, Legacy: true}}, "r.io/x")
	if err != nil || c == nil || c.Username != "u3" {
		t.Fatalf("legacy: %+v %v", c, err)
	}
	unpadded := write(t, dir, "unpadded.json", `{"auths":{"r.io": {"auth": "`+strings.TrimRight(b64("ab:c"), "=")+`"}}}`)
	if _, err := auth.LookupContainers([]wire.AuthFile{{Path: unpadded}, {Path: second}}, "r.io/x"); err == nil || !strings.Contains(err.Error(), "padding is required") {
		t.Fatalf("unpadded base64 must fail the lookup, got %v", err)
	}
	bad := write(t, dir, "bad.json", `{"auths": {"r.io": {"auth": "secretvalue"`)
	_, err = auth.LookupContainers([]wire.AuthFile{{Path: bad}}, "r.io/x")
	if err == nil || !strings.Contains(err.Error(), bad) || strings.Contains(err.Error(), "secretvalue") {
		t.Fatalf("malformed file: %v", err)
	}
	// username/password fields are ignored by containers/image.
	up := write(t, dir, "up.json", `{"auths":{"r.io": {"username": "u", "password": "p"}}}`)
	if c, err := auth.LookupContainers([]wire.AuthFile{{Path: up}}, "r.io/x"); err != nil || c != nil {
		t.Fatalf("username/password must be ignored: %+v %v", c, err)
	}
}

func TestContainersAuthFiles(t *testing.T) {
	dir := t.TempDir()
	env := auth.Env{UID: 0, Home: "/home/u", XDGRuntimeDir: dir}
	files, user, _ := auth.ContainersAuthFiles("", env)
	want := []string{filepath.Join(dir, "containers/auth.json"), "/home/u/.config/containers/auth.json", "/home/u/.docker/config.json", "/home/u/.dockercfg"}
	if user || len(files) != len(want) {
		t.Fatalf("files = %+v", files)
	}
	for i, w := range want {
		if files[i].Path != w {
			t.Errorf("file %d = %s, want %s", i, files[i].Path, w)
		}
	}
	if !files[3].Legacy {
		t.Error(".dockercfg must be legacy")
	}
	env.XDGRuntimeDir = filepath.Join(dir, "nope")
	env.DockerConfig = "/dc"
	files, _, warns := auth.ContainersAuthFiles("", env)
	if files[0].Path != "/home/u/.config/containers/auth.json" || files[1].Path != "/dc/config.json" || len(warns) != 1 {
		t.Fatalf("files = %+v warns = %v", files, warns)
	}
	env.RegistryAuthFn = "/env/auth.json"
	files, user, _ = auth.ContainersAuthFiles("", env)
	if !user || len(files) != 1 || files[0].Path != "/env/auth.json" {
		t.Fatalf("REGISTRY_AUTH_FILE must disable the search: %+v", files)
	}
	files, _, _ = auth.ContainersAuthFiles("/flag.json", env)
	if files[0].Path != "/flag.json" {
		t.Fatalf("--authfile must win over REGISTRY_AUTH_FILE: %+v", files)
	}
	env = auth.Env{UID: 1000, Home: "/h"}
	files, _, _ = auth.ContainersAuthFiles("", env)
	if files[0].Path != "/run/containers/1000/auth.json" {
		t.Fatalf("primary = %s", files[0].Path)
	}
}

// containers/image's getCredentialsFromAuthFiles passes over an entry that
// decodes to no user, no password and no identity token (":"), as over no
// entry: the next file's credential is used.
func TestLookupContainersEmptyEntryPassedOver(t *testing.T) {
	dir := t.TempDir()
	first := write(t, dir, "run.json", `{"auths":{"quay.io":{"auth":"`+b64(":")+`"}}}`)
	second := write(t, dir, "cfg.json", `{"auths":{"quay.io":{"auth":"`+b64("u:p")+`"}}}`)
	c, err := auth.LookupContainers([]wire.AuthFile{{Path: first}, {Path: second}}, "quay.io/org/repo")
	if err != nil || c == nil || c.Username != "u" || c.File != second {
		t.Fatalf("got %+v %v; want u from %s", c, err, second)
	}
	// An identity token alone is a credential.
	tok := write(t, dir, "tok.json", `{"auths":{"quay.io":{"auth":"`+b64(":")+`","identitytoken":"it"}}}`)
	if c, err := auth.LookupContainers([]wire.AuthFile{{Path: tok}, {Path: second}}, "quay.io/org/repo"); err != nil || c == nil || c.IdentityToken != "it" {
		t.Fatalf("identity token entry: %+v %v", c, err)
	}
}

// XDG_RUNTIME_DIR that is not a directory is used as containers/image uses
// it (getPathToAuthWithOS drops it only when it does not exist), so reading
// the auth file below it fails the lookup instead of being skipped.
func TestContainersAuthFilesRuntimeDirNotADirectory(t *testing.T) {
	dir := t.TempDir()
	rt := write(t, dir, "rtfile", "x")
	files, _, warns := auth.ContainersAuthFiles("", auth.Env{UID: 1, Home: "/h", XDGRuntimeDir: rt})
	if len(warns) != 0 || files[0].Path != filepath.Join(rt, "containers/auth.json") {
		t.Fatalf("files %+v warnings %v; want the runtime file below %s", files, warns, rt)
	}
	if _, err := auth.LookupContainers(files[:1], "quay.io/org/repo"); err == nil {
		t.Fatal("a runtime auth file below a regular file was read as absent; want the lookup to fail")
	}
}
