package auth_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/auth"
	"github.com/pullhelper/pullhelper/internal/wire"
)

// Broken credential files fail the lookup where the owner fails it, and
// only warn where it warns. containers/image: pkg/docker/config
// getCredentialsWithHomeDir (helpers in registries.conf order, errors
// returned only when no helper has a credential), findCredentialsInFile
// (authPath.parse: a file that does not parse fails, legacy ~/.dockercfg
// too), decodeDockerAuth (not padded base64 fails; no colon warns and
// skips to the next file). containerd's ParseAuth: TestKeyringContainerdCredentials.
// The kubelet's ReadDockerConfigFile skips a node config.json that does not
// parse: TestLookupNodeConfigBrokenSkipped.
func TestLookupContainersBrokenFiles(t *testing.T) {
	const secret = "topsecret9"
	good := `{"auths":{"r.io":{"auth":"` + b64("u:"+secret) + `"}}}`
	for _, tc := range []struct {
		name string
		// files under XDG_CONFIG_HOME/containers/auth.json ("xdg"),
		// ~/.docker/config.json ("docker"), ~/.dockercfg ("legacy").
		files map[string]string
		// helpers is registries.conf's credential-helpers ("" = default).
		helpers    string
		pullSecret bool
		want       []string // who() of the candidates
		wantErr    string   // a *auth.LookupError containing it
		wantWarn   string
	}{
		{
			name:    "auth.json that does not parse fails (authPath.parse)",
			files:   map[string]string{"xdg": `{"auths": {"r.io": {"auth": "` + secret, "docker": good},
			wantErr: "xdg/containers/auth.json does not parse: ",
		},
		{
			name:    "~/.dockercfg that does not parse fails (authPath.parse, legacyFormat)",
			files:   map[string]string{"legacy": `[1,`},
			wantErr: "home/.dockercfg does not parse: ",
		},
		{
			name:    "auth not padded base64 fails (decodeDockerAuth)",
			files:   map[string]string{"xdg": `{"auths":{"r.io":{"auth":"` + strings.TrimRight(b64("u:"+secret+"x"), "=") + `"}}}`, "docker": good},
			wantErr: `auths."r.io".auth is not valid base64 (padding is required)`,
		},
		{
			name:    "legacy auth not base64 fails, its key named (decodeDockerAuth)",
			files:   map[string]string{"legacy": `{"https://r.io/v1/":{"auth":"!!` + secret + `"}}`},
			wantErr: `"https://r.io/v1/".auth is not valid base64`,
		},
		{
			name:     "auth without a colon warns and the next file is searched (decodeDockerAuth)",
			files:    map[string]string{"xdg": `{"auths":{"r.io":{"auth":"` + b64(secret) + `"}}}`, "docker": good},
			want:     []string{"containers-auth.json:r.io:u"},
			wantWarn: `auths."r.io".auth decodes to no user:password (no colon); skipped`,
		},
		{
			name:  "an empty auth (a credential helper's marker) is skipped without a word",
			files: map[string]string{"xdg": `{"auths":{"r.io":{}}}`, "docker": good},
			want:  []string{"containers-auth.json:r.io:u"},
		},
		{
			name:    "a broken auth file is ignored when a later helper has the credential (getCredentialsWithHomeDir)",
			files:   map[string]string{"xdg": `{`},
			helpers: `["containers-auth.json", "fake"]`,
			want:    []string{"credential-helper:credential-helpers fake:hu"},
		},
		{
			name:    "a helper that cannot run fails when no other has a credential",
			helpers: `["missing", "containers-auth.json"]`,
			wantErr: "looking up credentials for r.io: running credential helper docker-credential-missing",
		},
		{
			name:    "an earlier helper's credential wins; the broken file is never read",
			files:   map[string]string{"xdg": `{`},
			helpers: `["fake", "containers-auth.json"]`,
			want:    []string{"credential-helper:credential-helpers fake:hu"},
		},
		{
			// CRI-O hands the kubelet's credential to containers/image as
			// DockerAuthConfig: no auth file is read.
			name:       "with a kubelet credential a broken auth file only warns",
			files:      map[string]string{"xdg": `{`},
			pullSecret: true,
			want:       []string{"pull-secret:r.io:ps"},
			wantWarn:   "does not parse",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "bin")
			write(t, bin, "docker-credential-fake", "#!/bin/sh\nread reg\nif [ \"$reg\" = r.io ]; then echo '{\"Username\":\"hu\",\"Secret\":\"hs\"}'; else echo 'credentials not found in native keychain'; exit 1; fi\n")
			if err := os.Chmod(filepath.Join(bin, "docker-credential-fake"), 0o755); err != nil {
				t.Fatal(err)
			}
			t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
			c := hermetic(t, dir)
			c.Authfile = ""
			c.RunProviders = true
			c.Env = auth.Env{UID: 4242, Home: filepath.Join(dir, "home"), XDGConfigHome: filepath.Join(dir, "xdg"), XDGRuntimeDir: filepath.Join(dir, "run")}
			if err := os.MkdirAll(c.Env.XDGRuntimeDir, 0o700); err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.files {
				switch k {
				case "xdg":
					write(t, filepath.Join(dir, "xdg", "containers"), "auth.json", v)
				case "docker":
					write(t, filepath.Join(dir, "home", ".docker"), "config.json", v)
				case "legacy":
					write(t, filepath.Join(dir, "home"), ".dockercfg", v)
				}
			}
			if tc.helpers != "" {
				c.RegistriesConf = write(t, dir, "registries.conf", "credential-helpers = "+tc.helpers+"\n")
			}
			if tc.pullSecret {
				c.PullSecrets = []string{write(t, dir, "secret.json", `{"auths":{"r.io":{"auth":"`+b64("ps:pspass")+`"}}}`)}
			}
			k := newKeyring(t, c)
			got, err := k.LookupE("r.io", "r.io/app")
			warnings := strings.Join(k.Warnings, "\n")
			if err != nil && strings.Contains(err.Error(), secret) || strings.Contains(warnings, secret) {
				t.Fatalf("a secret in the error or warnings: %v / %s", err, warnings)
			}
			if tc.wantErr != "" {
				var le *auth.LookupError
				if !errors.As(err, &le) || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("error %v, want one line, a *LookupError containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if w := who(got); !reflect.DeepEqual(w, tc.want) {
				t.Errorf("candidates %q, want %q", w, tc.want)
			}
			if tc.wantWarn == "" && warnings != "" || !strings.Contains(warnings, tc.wantWarn) {
				t.Errorf("warnings %q, want %q", warnings, tc.wantWarn)
			}
		})
	}
}

// containers/image's newImageSource goes on with the next pull source when
// a mirror's GetCredentialsForRef fails (docker/docker_image_src.go): the
// mirror is dropped with a warning, the primary keeps its credential; a
// failure on the primary is Endpoints' error.
func TestEndpointsMirrorLookupFails(t *testing.T) {
	dir := t.TempDir()
	c := hermetic(t, dir)
	c.RegistriesConf = write(t, dir, "registries.conf", `
[[registry]]
location = "r.io"
[[registry.mirror]]
location = "mirror.example.com"
`)
	c.Authfile = write(t, dir, "auth2.json", `{"auths":{"mirror.example.com":{"auth":"x"},"r.io":{"auth":"`+b64("u:p")+`"}}}`)
	k := newKeyring(t, c)
	eps := endpoints(t, k, "r.io/app:1")
	if len(eps) != 1 || eps[0].Host != "r.io" || len(eps[0].Credentials) != 1 {
		t.Fatalf("endpoints %q, want the mirror dropped", hostsOf(eps))
	}
	if w := strings.Join(k.Warnings, "\n"); !strings.Contains(w, `skipping endpoint mirror.example.com: looking up credentials for mirror.example.com: auth file `+c.Authfile+`: auths."mirror.example.com".auth is not valid base64`) {
		t.Errorf("warnings %q", w)
	}
	c.Authfile = write(t, dir, "auth3.json", `{"auths":{"r.io":{"auth":"x"}}}`)
	k = newKeyring(t, c)
	var le *auth.LookupError
	if _, err := k.Endpoints("r.io/app:1"); !errors.As(err, &le) {
		t.Fatalf("primary: err %v, want a *LookupError", err)
	}
}

// The kubelet's ReadDockerConfigFile (pkg/credentialprovider config.go
// ReadDockerConfigJSONFile) logs a node config.json that does not parse
// and searches on: a warning, never an error.
func TestLookupNodeConfigBrokenSkipped(t *testing.T) {
	const secret = "topsecret8"
	dir := t.TempDir()
	c := hermetic(t, dir)
	root := filepath.Join(dir, "kubelet")
	broken := write(t, root, "config.json", `{"auths":{"r.io":{"auth":"`+secret)
	write(t, filepath.Join(c.Env.Home, ".docker"), "config.json", `{"auths":{"r.io":{"auth":"`+b64("node:"+secret)+`"}}}`)
	c.KubeletDockerConfig = root
	k := newKeyring(t, c)
	got, err := k.LookupE("r.io", "r.io/app")
	if err != nil || !reflect.DeepEqual(who(got), []string{"kubelet-node-config:r.io:node"}) {
		t.Fatalf("got %q, %v; want the home config's credential", who(got), err)
	}
	w := strings.Join(k.Warnings, "\n")
	if !strings.Contains(w, "parsing docker config "+broken+": ") || !strings.Contains(w, "skipped, as the kubelet skips it") || strings.Contains(w, secret) {
		t.Errorf("warnings %q", w)
	}
}

// An auth file's credHelpers entry (findCredentialsInFile →
// getCredsFromCredHelper) runs at pull time; explain (RunProviders false)
// runs no helper and says which one would serve the registry.
func TestLookupCredHelpersNotRunByExplain(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	calls := filepath.Join(dir, "calls")
	write(t, bin, "docker-credential-fake", "#!/bin/sh\nread reg\necho \"$reg\" >>"+calls+"\necho '{\"Username\":\"hu\",\"Secret\":\"hs\"}'\n")
	if err := os.Chmod(filepath.Join(bin, "docker-credential-fake"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	c := hermetic(t, dir)
	c.Authfile = write(t, dir, "auth2.json", `{"credHelpers":{"r.io":"fake"}}`)
	k := newKeyring(t, c)
	got, err := k.LookupE("r.io", "r.io/app")
	if err != nil || len(got) != 1 || got[0].Key != "credHelpers.r.io: docker-credential-fake get r.io (run at pull time; not run by explain)" || got[0].Password != "" {
		t.Fatalf("explain: %+v, %v", got, err)
	}
	if _, err := os.Stat(calls); err == nil {
		t.Fatal("explain ran the helper")
	}
	c.RunProviders = true
	k = newKeyring(t, c)
	got, err = k.LookupE("r.io", "r.io/app")
	if err != nil || !reflect.DeepEqual(who(got), []string{"credential-helper:credHelpers.r.io:hu"}) {
		t.Fatalf("pull: %q, %v", who(got), err)
	}
}

// docker-credential-helpers' client.Get: only exactly "credentials not found
// in native keychain" on stdout is no credential; any other failure (a
// stderr that merely mentions it included) fails the lookup; the answer is
// the first JSON value on stdout, text after it ignored.
func TestCredHelperAnswers(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	af := write(t, dir, "auth.json", `{"credHelpers":{"r.io":"fake"}}`)
	for _, tc := range []struct {
		script string
		user   string
		fails  bool
	}{
		{"echo 'credentials not found in native keychain'; exit 1", "", false},
		{"echo 'keychain unreachable: credentials not found because the daemon is down' >&2; exit 1", "", true},
		{"echo '{\"ServerURL\":\"r.io\",\"Username\":\"u\",\"Secret\":\"p\"}'; echo 'token refreshed'", "u", false},
	} {
		write(t, bin, "docker-credential-fake", "#!/bin/sh\nread reg\n"+tc.script+"\n")
		if err := os.Chmod(filepath.Join(bin, "docker-credential-fake"), 0o755); err != nil {
			t.Fatal(err)
		}
		c, err := auth.LookupContainers([]wire.AuthFile{{Path: af}}, "r.io/app")
		switch {
		case tc.fails && err == nil:
			t.Errorf("%q: %+v, want an error", tc.script, c)
		case !tc.fails && err != nil:
			t.Errorf("%q: %v", tc.script, err)
		case !tc.fails && tc.user == "" && c != nil:
			t.Errorf("%q: %+v, want no credential", tc.script, c)
		case !tc.fails && tc.user != "" && (c == nil || c.Username != tc.user):
			t.Errorf("%q: %+v, want %s", tc.script, c, tc.user)
		}
	}
}

// The kubelet's node docker config search takes $HOME as it is
// (os.UserHomeDir): without HOME it does not look in the passwd entry's
// home directory, where containers/image's own search does.
func TestNodeConfigSearchWithoutHOME(t *testing.T) {
	dir := t.TempDir()
	c := hermetic(t, dir)
	write(t, filepath.Join(c.Env.Home, ".docker"), "config.json", `{"auths":{"r.io":{"auth":"`+b64("node:pw")+`"}}}`)
	c.KubeletDockerConfig = filepath.Join(dir, "kubelet")
	c.Env.HomeEnv = ""
	got, err := newKeyring(t, c).LookupE("r.io", "r.io/app")
	if err != nil || len(got) != 0 {
		t.Fatalf("without HOME: %q, %v; want no kubelet-node-config credential", who(got), err)
	}
}

// explain runs no helper, but a helper that is not in PATH fails explain's
// lookup as it fails the pull's (registries.conf credential-helpers and an
// auth file's credHelpers alike), with the same error.
func TestExplainRefusesAHelperNotInPath(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PATH", filepath.Join(dir, "empty-bin"))
	for name, setup := range map[string]func(c *auth.TestConfig){
		"credential-helpers": func(c *auth.TestConfig) {
			c.RegistriesConf = write(t, dir, "registries.conf", `credential-helpers = ["pullhelper-nosuch"]`)
		},
		"credHelpers": func(c *auth.TestConfig) {
			c.Authfile = write(t, dir, "auth2.json", `{"credHelpers":{"r.io":"pullhelper-nosuch"}}`)
		},
	} {
		var errs [2]error
		for i, run := range []bool{false, true} {
			c := hermetic(t, dir)
			setup(&c)
			c.RunProviders = run
			_, errs[i] = newKeyring(t, c).LookupE("r.io", "r.io/app")
		}
		if errs[0] == nil || errs[1] == nil || errs[0].Error() != errs[1].Error() ||
			!strings.Contains(errs[0].Error(), `docker-credential-pullhelper-nosuch": executable file not found in $PATH`) {
			t.Errorf("%s: explain %v, pull %v; want the same error", name, errs[0], errs[1])
		}
	}
}
