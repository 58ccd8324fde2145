package auth_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/auth"
	"github.com/pullhelper/pullhelper/internal/testcert"
	"github.com/pullhelper/pullhelper/internal/wire"
)

// ctrdCRI is the version 2 CRI registry section.
const ctrdCRI = `plugins."io.containerd.grpc.v1.cri".registry`

// ctrdPEM returns a self-signed certificate (usable as a CA and as a client
// certificate) and its key, both PEM.
func ctrdPEM(t *testing.T) (certPEM, keyPEM string) {
	c, k := testcert.Pair(t)
	return string(c), string(k)
}

func TestParseContainerdAuth(t *testing.T) {
	for _, tc := range []struct {
		name                          string
		user, pass, authField, token  string
		wantUser, wantSecret, wantErr string
	}{
		{name: "anonymous"},
		{name: "password alone is anonymous", pass: "p"},
		{name: "username and password", user: "u", pass: "p", wantUser: "u", wantSecret: "p"},
		{name: "username wins over auth and token", user: "u", pass: "p", authField: "!!bad!!", token: "tok", wantUser: "u", wantSecret: "p"},
		{name: "username with empty password", user: "u", wantUser: "u"},
		{name: "identity token wins over auth", token: "tok", authField: "!!bad!!", wantSecret: "tok"},
		{name: "auth without padding needed", authField: b64("user:pass"), wantUser: "user", wantSecret: "pass"},
		{name: "auth padded", authField: b64("user:password"), wantUser: "user", wantSecret: "password"},
		{name: "auth single pad", authField: b64("user:passwor"), wantUser: "user", wantSecret: "passwor"},
		{name: "auth unpadded is an error", authField: strings.TrimRight(b64("user:password"), "="), wantErr: "illegal base64"},
		{name: "auth not base64", authField: "user:pass", wantErr: "illegal base64"},
		{name: "auth without colon", authField: b64("userpass"), wantErr: "invalid decoded auth"},
		{name: "auth cut on first colon", authField: b64("user:pa:ss"), wantUser: "user", wantSecret: "pa:ss"},
		{name: "auth empty password", authField: b64("user:"), wantUser: "user"},
		{name: "auth NULs trimmed from both ends of the password", authField: b64("user:\x00pa\x00ss\x00\x00"), wantUser: "user", wantSecret: "pa\x00ss"},
		{name: "auth NULs kept in the username", authField: b64("\x00user:pass"), wantUser: "\x00user", wantSecret: "pass"},
		{name: "auth newlines ignored by StdEncoding", authField: "dXNl\ncjpwYXNz", wantUser: "user", wantSecret: "pass"},
		{name: "auth with empty user", authField: b64(":secret"), wantSecret: "secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, s, err := auth.ParseContainerdAuth(tc.user, tc.pass, tc.authField, tc.token)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want error %q, got %v (%q, %q)", tc.wantErr, err, u, s)
				}
				if strings.Contains(err.Error(), "userpass") {
					t.Errorf("error quotes the decoded value: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if u != tc.wantUser || s != tc.wantSecret {
				t.Errorf("got (%q, %q), want (%q, %q)", u, s, tc.wantUser, tc.wantSecret)
			}
		})
	}
}

// The cases below were written against the pre-keyring LoadContainerd; they
// now ask the per-pull Keyring (NewKeyring with Config.ContainerdConfig,
// then Endpoints, Lookup), with the same containerd files.

type ctrdWantCred struct {
	key, user, pass, token string
}

// ctrdKeyring is a hermetic keyring (no other source) whose endpoints are
// containerd's, read from cfg.
func ctrdKeyring(t *testing.T, cfg string) (*auth.Keyring, error) {
	t.Helper()
	c := hermetic(t, t.TempDir())
	c.ContainerdConfig = cfg
	return auth.NewTestKeyring(c)
}

// ctrdImage is an image on the reference host ref ("" = docker.io).
func ctrdImage(ref string) string {
	if ref == "" {
		return "ns/app"
	}
	return ref + "/ns/app"
}

// ctrdTLS is the TLS material an endpoint gets from containerd's files.
type ctrdTLS struct {
	CAFiles     []string
	ClientPairs [][2]string
	SkipVerify  bool
}

func ctrdTLSOf(t *testing.T, e wire.Endpoint) ctrdTLS {
	t.Helper()
	if !e.Trust.Verify && !strings.HasPrefix(e.Trust.InsecureBy, "containerd skip_verify") {
		t.Errorf("%s: verification off by %q, want containerd skip_verify", e.Host, e.Trust.InsecureBy)
	}
	return ctrdTLS{CAFiles: e.Trust.CAFiles, ClientPairs: e.Trust.ClientPairs, SkipVerify: !e.Trust.Verify}
}

func ctrdHosts(eps []wire.Endpoint) []string {
	var out []string
	for _, e := range eps {
		out = append(out, e.Host)
	}
	return out
}

func TestKeyringContainerdCredentials(t *testing.T) {
	for _, tc := range []struct {
		name, config, ref string
		// endpoints are the hosts contacted in order (legacy mirrors, then
		// the default endpoint); want the default (last) endpoint's
		// containerd candidates.
		endpoints []string
		want      []ctrdWantCred
		// wantErr: NewKeyring or Endpoints fails; wantWarn: the pull goes
		// on without that candidate and warns.
		wantErr, wantWarn string
	}{
		{
			name:      "docker.io uses registry-1.docker.io",
			config:    `[` + ctrdCRI + `.configs."registry-1.docker.io".auth]` + "\nusername = \"hub\"\npassword = \"hp\"\n",
			ref:       "docker.io",
			endpoints: []string{"registry-1.docker.io"},
			want:      []ctrdWantCred{{key: `configs."registry-1.docker.io".auth`, user: "hub", pass: "hp"}},
		},
		{
			name:      "configs.docker.io is never read for docker.io",
			config:    `[` + ctrdCRI + `.configs."docker.io".auth]` + "\nusername = \"hub\"\npassword = \"hp\"\n",
			ref:       "docker.io",
			endpoints: []string{"registry-1.docker.io"},
		},
		{
			name:      "index.docker.io is docker.io",
			config:    `[` + ctrdCRI + `.configs."registry-1.docker.io".auth]` + "\nusername = \"hub\"\npassword = \"hp\"\n",
			ref:       "index.docker.io",
			endpoints: []string{"registry-1.docker.io"},
			want:      []ctrdWantCred{{key: `configs."registry-1.docker.io".auth`, user: "hub", pass: "hp"}},
		},
		{
			name:      "no reference host is docker.io",
			config:    `[` + ctrdCRI + `.configs."registry-1.docker.io".auth]` + "\nusername = \"hub\"\npassword = \"hp\"\n",
			ref:       "",
			endpoints: []string{"registry-1.docker.io"},
			want:      []ctrdWantCred{{key: `configs."registry-1.docker.io".auth`, user: "hub", pass: "hp"}},
		},
		{
			name:      "port is significant: host key does not match host:port",
			config:    `[` + ctrdCRI + `.configs."myreg".auth]` + "\nusername = \"u\"\npassword = \"p\"\n",
			ref:       "myreg:5000",
			endpoints: []string{"myreg:5000"},
		},
		{
			name:      "port is significant: host:port key does not match host",
			config:    `[` + ctrdCRI + `.configs."myreg.io:443".auth]` + "\nusername = \"u\"\npassword = \"p\"\n",
			ref:       "myreg.io",
			endpoints: []string{"myreg.io"},
		},
		{
			name:      "exact host:port",
			config:    `[` + ctrdCRI + `.configs."myreg:5000".auth]` + "\nauth = \"" + b64("u:p") + "\"\n",
			ref:       "myreg:5000",
			endpoints: []string{"myreg:5000"},
			want:      []ctrdWantCred{{key: `configs."myreg:5000".auth`, user: "u", pass: "p"}},
		},
		{
			name:      "identity token",
			config:    `[` + ctrdCRI + `.configs."quay.io".auth]` + "\nidentitytoken = \"tok\"\n",
			ref:       "quay.io",
			endpoints: []string{"quay.io"},
			want:      []ctrdWantCred{{key: `configs."quay.io".auth`, token: "tok"}},
		},
		{
			name:      "empty auth table is anonymous",
			config:    `[` + ctrdCRI + `.configs."quay.io".auth]` + "\n",
			ref:       "quay.io",
			endpoints: []string{"quay.io"},
		},
		// containerd's ParseAuth (pkg/cri/server/image_pull.go; 2.x
		// internal/cri/server/images/image_pull.go) returns an error for an
		// auth that is not padded base64 or has no colon, and the request to
		// the host fails with it: so does the lookup (exit 2), naming the
		// file and key, never the value.
		{
			name:    "unpadded auth fails the lookup (ParseAuth)",
			config:  `[` + ctrdCRI + `.configs."quay.io".auth]` + "\nauth = \"" + strings.TrimRight(b64("u:secretpw"), "=") + "\"\n",
			ref:     "quay.io",
			wantErr: `configs."quay.io".auth: illegal base64`,
		},
		{
			name:    "auth without colon fails the lookup (ParseAuth)",
			config:  `[` + ctrdCRI + `.configs."quay.io".auth]` + "\nauth = \"" + b64("secretpw") + "\"\n",
			ref:     "quay.io",
			wantErr: `configs."quay.io".auth: invalid decoded auth`,
		},
		{
			// registryHosts's legacy loop: each endpoint's own auth, so a
			// mirror's broken one is the mirror's alone (skipped, with a
			// warning); the registry is asked without it.
			name: "legacy: a mirror's broken auth is the mirror's alone (ParseAuth)",
			config: `[` + ctrdCRI + `.mirrors."quay.io"]` + "\nendpoint = [\"https://mirror.example.com\"]\n" +
				`[` + ctrdCRI + `.configs."mirror.example.com".auth]` + "\nauth = \"" + b64("secretpw") + "\"\n",
			ref:       "quay.io",
			endpoints: []string{"quay.io"},
			wantWarn:  `skipping endpoint mirror.example.com: containerd config `,
		},
		{
			name:      "auths https URL is mapped to configs[host]",
			config:    `[` + ctrdCRI + `.auths."https://myreg.io"]` + "\nusername = \"a\"\npassword = \"ap\"\n",
			ref:       "myreg.io",
			endpoints: []string{"myreg.io"},
			want:      []ctrdWantCred{{key: `auths."https://myreg.io"`, user: "a", pass: "ap"}},
		},
		{
			name:      "auths with path and port maps to host:port",
			config:    `[` + ctrdCRI + `.auths."https://myreg.io:5000/v2/"]` + "\nusername = \"a\"\npassword = \"ap\"\n",
			ref:       "myreg.io:5000",
			endpoints: []string{"myreg.io:5000"},
			want:      []ctrdWantCred{{key: `auths."https://myreg.io:5000/v2/"`, user: "a", pass: "ap"}},
		},
		{
			name: "auths replaces configs auth of the same host",
			config: `[` + ctrdCRI + `.configs."myreg.io".auth]` + "\nusername = \"c\"\npassword = \"cp\"\n" +
				`[` + ctrdCRI + `.auths."https://myreg.io"]` + "\nusername = \"a\"\npassword = \"ap\"\n",
			ref:       "myreg.io",
			endpoints: []string{"myreg.io"},
			want:      []ctrdWantCred{{key: `auths."https://myreg.io"`, user: "a", pass: "ap"}},
		},
		{
			name:      "auths without scheme is used verbatim",
			config:    `[` + ctrdCRI + `.auths."myreg.io"]` + "\nusername = \"a\"\npassword = \"ap\"\n",
			ref:       "myreg.io",
			endpoints: []string{"myreg.io"},
			want:      []ctrdWantCred{{key: `auths."myreg.io"`, user: "a", pass: "ap"}},
		},
		{
			name:      "auths host:port without scheme parses as a scheme and never matches",
			config:    `[` + ctrdCRI + `.auths."myreg:5000"]` + "\nusername = \"a\"\npassword = \"ap\"\n",
			ref:       "myreg:5000",
			endpoints: []string{"myreg:5000"},
		},
		{
			name:    "auths unparsable URL is an error",
			config:  `[` + ctrdCRI + `.auths."1.2.3.4:5000"]` + "\nusername = \"a\"\n",
			ref:     "1.2.3.4:5000",
			wantErr: "failed to parse registry url",
		},
		{
			// registryHosts: each endpoint its own configs auth; the
			// mirror's is never offered to the default endpoint.
			name: "legacy mirror before the default endpoint: each its own auth",
			config: `[` + ctrdCRI + `.mirrors."docker.io"]` + "\nendpoint = [\"https://mirror.example.com\"]\n" +
				`[` + ctrdCRI + `.configs."mirror.example.com".auth]` + "\nusername = \"m\"\npassword = \"mp\"\n" +
				`[` + ctrdCRI + `.configs."registry-1.docker.io".auth]` + "\nusername = \"hub\"\npassword = \"hp\"\n",
			ref:       "docker.io",
			endpoints: []string{"mirror.example.com", "registry-1.docker.io"},
			want:      []ctrdWantCred{{key: `configs."registry-1.docker.io".auth`, user: "hub", pass: "hp"}},
		},
		{
			name: "legacy mirror without auth: the default endpoint's own",
			config: `[` + ctrdCRI + `.mirrors."docker.io"]` + "\nendpoint = [\"https://mirror.example.com\"]\n" +
				`[` + ctrdCRI + `.configs."registry-1.docker.io".auth]` + "\nusername = \"hub\"\npassword = \"hp\"\n",
			ref:       "docker.io",
			endpoints: []string{"mirror.example.com", "registry-1.docker.io"},
			want:      []ctrdWantCred{{key: `configs."registry-1.docker.io".auth`, user: "hub", pass: "hp"}},
		},
		{
			name: "legacy wildcard mirror",
			config: `[` + ctrdCRI + `.mirrors."*"]` + "\nendpoint = [\"mirror.example.com\"]\n" +
				`[` + ctrdCRI + `.configs."myreg.io".auth]` + "\nusername = \"u\"\npassword = \"p\"\n",
			ref:       "myreg.io",
			endpoints: []string{"mirror.example.com", "myreg.io"},
			want:      []ctrdWantCred{{key: `configs."myreg.io".auth`, user: "u", pass: "p"}},
		},
		{
			name: "legacy mirror with the reference host replaces the default endpoint",
			config: `[` + ctrdCRI + `.mirrors."docker.io"]` + "\nendpoint = [\"https://docker.io\"]\n" +
				`[` + ctrdCRI + `.configs."docker.io".auth]` + "\nusername = \"d\"\npassword = \"dp\"\n",
			ref:       "docker.io",
			endpoints: []string{"docker.io"},
			want:      []ctrdWantCred{{key: `configs."docker.io".auth`, user: "d", pass: "dp"}},
		},
		{
			name:    "legacy mirror endpoint that does not parse",
			config:  `[` + ctrdCRI + `.mirrors."docker.io"]` + "\nendpoint = [\"https://bad host\"]\n",
			ref:     "docker.io",
			wantErr: "parse endpoint url",
		},
		{
			name: "configs auth honoured in config_path mode",
			config: `[` + ctrdCRI + `]` + "\nconfig_path = \"/nonexistent/certs.d\"\n" +
				`[` + ctrdCRI + `.configs."registry-1.docker.io".auth]` + "\nusername = \"hub\"\npassword = \"hp\"\n",
			ref:       "docker.io",
			endpoints: []string{"registry-1.docker.io"},
			want:      []ctrdWantCred{{key: `configs."registry-1.docker.io".auth`, user: "hub", pass: "hp"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := write(t, t.TempDir(), "config.toml", "version = 2\n"+tc.config)
			noSecret := func(what, s string) {
				if strings.Contains(s, "secretpw") || strings.Contains(s, strings.TrimRight(b64("u:secretpw"), "=")) || strings.Contains(s, b64("secretpw")) {
					t.Errorf("%s leaks the secret: %s", what, s)
				}
			}
			k, err := ctrdKeyring(t, cfg)
			var eps []wire.Endpoint
			if err == nil {
				eps, err = k.Endpoints(ctrdImage(tc.ref))
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want error containing %q, got %v", tc.wantErr, err)
				}
				noSecret("error", err.Error())
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := ctrdHosts(eps); !reflect.DeepEqual(got, tc.endpoints) {
				t.Fatalf("endpoints %q, want %q", got, tc.endpoints)
			}
			var got []ctrdWantCred
			for _, c := range eps[len(eps)-1].Credentials {
				if c.Source != "containerd-config" || c.File != cfg {
					t.Errorf("credential source/file %q %q", c.Source, c.File)
				}
				got = append(got, ctrdWantCred{key: c.Key, user: c.Username, pass: c.Password, token: c.IdentityToken})
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("credentials %+v, want %+v", got, tc.want)
			}
			warnings := strings.Join(k.Warnings, "\n")
			noSecret("warnings", warnings)
			if tc.wantWarn == "" && warnings != "" {
				t.Errorf("unexpected warnings %q", k.Warnings)
			}
			if tc.wantWarn != "" && !strings.Contains(warnings, tc.wantWarn) {
				t.Errorf("warnings %q, want one containing %q", k.Warnings, tc.wantWarn)
			}
		})
	}
}

func TestKeyringContainerdValidation(t *testing.T) {
	for _, tc := range []struct{ name, config, wantErr string }{
		{
			name: "mirrors with config_path",
			config: `[` + ctrdCRI + `]` + "\nconfig_path = \"/etc/containerd/certs.d\"\n" +
				`[` + ctrdCRI + `.mirrors."docker.io"]` + "\nendpoint = [\"https://m.example.com\"]\n",
			wantErr: "`mirrors` cannot be set when `config_path` is provided",
		},
		{
			name: "mirror without endpoints still counts",
			config: `[` + ctrdCRI + `]` + "\nconfig_path = \"/etc/containerd/certs.d\"\n" +
				`[` + ctrdCRI + `.mirrors."docker.io"]` + "\n",
			wantErr: "`mirrors` cannot be set when `config_path` is provided",
		},
		{
			name: "configs.tls with config_path",
			config: `[` + ctrdCRI + `]` + "\nconfig_path = \"/etc/containerd/certs.d\"\n" +
				`[` + ctrdCRI + `.configs."myreg:5000".tls]` + "\ninsecure_skip_verify = true\n",
			wantErr: "`configs.tls` cannot be set when `config_path` is provided",
		},
		{
			name: "empty configs.tls table with config_path",
			config: `[` + ctrdCRI + `]` + "\nconfig_path = \"/etc/containerd/certs.d\"\n" +
				`[` + ctrdCRI + `.configs."myreg:5000".tls]` + "\n",
			wantErr: "`configs.tls` cannot be set when `config_path` is provided",
		},
		{
			name: "empty mirrors table with config_path is fine",
			config: `[` + ctrdCRI + `]` + "\nconfig_path = \"/nonexistent\"\n" +
				`[` + ctrdCRI + `.mirrors]` + "\n",
		},
		{
			name: "configs.auth with config_path is fine",
			config: `[` + ctrdCRI + `]` + "\nconfig_path = \"/nonexistent\"\n" +
				`[` + ctrdCRI + `.configs."myreg:5000".auth]` + "\nusername = \"u\"\n",
		},
		{
			name:    "TOML syntax error does not quote the value",
			config:  `[` + ctrdCRI + `.configs."q".auth]` + "\npassword = secretpw\n",
			wantErr: "line 3",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := write(t, t.TempDir(), "config.toml", "version = 2\n"+tc.config)
			k, err := ctrdKeyring(t, cfg)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if _, err := k.Endpoints("myreg:5000/ns/app"); err != nil {
					t.Fatal(err)
				}
				return
			}
			var ce *auth.ConfigError
			if !errors.As(err, &ce) || ce.Setting != "auth.containerd_config" || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("want an auth.containerd_config error containing %q, got %v", tc.wantErr, err)
			}
			if strings.Contains(err.Error(), "secretpw") {
				t.Errorf("error leaks the secret: %v", err)
			}
		})
	}
}

func TestKeyringContainerdConfigVersions(t *testing.T) {
	v2 := `[plugins."io.containerd.grpc.v1.cri".registry.configs."r.io".auth]` + "\nusername = \"v2\"\n"
	v1 := `[plugins.cri.registry.configs."r.io".auth]` + "\nusername = \"v1\"\n"
	for _, tc := range []struct{ name, config, wantUser string }{
		{"version 2", "version = 2\n" + v2, "v2"},
		{"version 2 ignores plugins.cri", "version = 2\n" + v1, ""},
		{"version 1", "version = 1\n" + v1, "v1"},
		{"no version is version 1", v1, "v1"},
		{"version 1 ignores the v2 section", "version = 1\n" + v1 + v2, "v1"},
		{"no version ignores the v2 section", v2, ""},
		{"no registry section", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\nsandbox_image = \"x\"\n", ""},
		{"empty file", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := write(t, t.TempDir(), "config.toml", tc.config)
			k, err := ctrdKeyring(t, cfg)
			if err != nil {
				t.Fatal(err)
			}
			creds := k.Lookup("r.io", "r.io/app")
			var got string
			if len(creds) > 0 {
				got = creds[0].Username
			}
			if got != tc.wantUser || len(creds) > 1 {
				t.Errorf("credentials %+v, want user %q", creds, tc.wantUser)
			}
		})
	}
}

func TestKeyringContainerdMissingConfig(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		ref, endpoint string
		skip          bool // http endpoint, skip_verify
	}{
		{"docker.io", "https://registry-1.docker.io/v2 containerd default", false},
		{"quay.io", "https://quay.io/v2 containerd default", false},
		{"localhost:5000", "http://localhost:5000/v2 containerd default", true},
		{"127.0.0.1:5000", "http://127.0.0.1:5000/v2 containerd default", true},
		{"localhost", "http://localhost/v2 containerd default", true},
	} {
		k, err := ctrdKeyring(t, filepath.Join(dir, "absent.toml"))
		if err != nil {
			t.Fatalf("%s: %v", tc.ref, err)
		}
		eps, err := k.Endpoints(ctrdImage(tc.ref))
		if err != nil {
			t.Fatalf("%s: %v", tc.ref, err)
		}
		if got := hostsOf(eps); !reflect.DeepEqual(got, []string{tc.endpoint}) {
			t.Errorf("%s: endpoints %q, want %q", tc.ref, got, tc.endpoint)
			continue
		}
		if got := ctrdTLSOf(t, eps[0]); !reflect.DeepEqual(got, ctrdTLS{SkipVerify: tc.skip}) || len(eps[0].Credentials) != 0 {
			t.Errorf("%s: TLS %+v credentials %+v, want skip_verify %v and none", tc.ref, got, eps[0].Credentials, tc.skip)
		}
	}
	if _, err := ctrdKeyring(t, dir); err == nil {
		t.Error("a directory as config.toml must be an error")
	}
}

func TestKeyringContainerdLegacyTLS(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM := ctrdPEM(t)
	ca := write(t, dir, "ca.pem", certPEM)
	cert := write(t, dir, "client.pem", certPEM)
	key := write(t, dir, "client.key", keyPEM)
	garbage := write(t, dir, "garbage.pem", "not a certificate\n")
	tlsFor := func(host, body string) string {
		return `[` + ctrdCRI + `.configs."` + host + `".tls]` + "\n" + body
	}
	for _, tc := range []struct {
		name, config, ref string
		endpoint          string // hostsOf form; "" = https://REF/v2 containerd default
		want              ctrdTLS
		wantErr           string
	}{
		{
			name:   "ca, client pair, skip_verify",
			config: tlsFor("myreg:5000", `ca_file = "`+ca+`"`+"\n"+`cert_file = "`+cert+`"`+"\n"+`key_file = "`+key+`"`+"\ninsecure_skip_verify = true\n"),
			ref:    "myreg:5000",
			want:   ctrdTLS{CAFiles: []string{ca}, ClientPairs: [][2]string{{cert, key}}, SkipVerify: true},
		},
		{
			name:   "exact host: host without port is another registry",
			config: tlsFor("myreg", `ca_file = "`+ca+`"`+"\n"),
			ref:    "myreg:5000",
		},
		{
			name:     "docker.io TLS is keyed registry-1.docker.io",
			config:   tlsFor("registry-1.docker.io", `ca_file = "`+ca+`"`+"\n") + tlsFor("docker.io", "insecure_skip_verify = true\n"),
			ref:      "docker.io",
			endpoint: "https://registry-1.docker.io/v2 containerd default",
			want:     ctrdTLS{CAFiles: []string{ca}},
		},
		{
			name:    "cert without key",
			config:  tlsFor("myreg:5000", `cert_file = "`+cert+`"`+"\n"),
			ref:     "myreg:5000",
			wantErr: "no corresponding key file was specified",
		},
		{
			name:    "key without cert",
			config:  tlsFor("myreg:5000", `key_file = "`+key+`"`+"\n"),
			ref:     "myreg:5000",
			wantErr: "no corresponding cert file was specified",
		},
		{
			name:    "unreadable CA",
			config:  tlsFor("myreg:5000", `ca_file = "`+filepath.Join(dir, "absent.pem")+`"`+"\n"),
			ref:     "myreg:5000",
			wantErr: "failed to load CA file",
		},
		{
			name:   "unparsable CA is ignored, as containerd ignores AppendCertsFromPEM",
			config: tlsFor("myreg:5000", `ca_file = "`+garbage+`"`+"\n"),
			ref:    "myreg:5000",
		},
		{
			name:    "a broken mirror TLS config fails the pull",
			config:  `[` + ctrdCRI + `.mirrors."myreg:5000"]` + "\nendpoint = [\"https://m.example.com\"]\n" + tlsFor("m.example.com", `cert_file = "`+cert+`"`+"\n"),
			ref:     "myreg:5000",
			wantErr: "no corresponding key file",
		},
		{
			name:     "localhost without TLS config skips verification",
			ref:      "localhost:5000",
			config:   "",
			endpoint: "http://localhost:5000/v2 containerd default",
			want:     ctrdTLS{SkipVerify: true},
		},
		{
			name:     "localhost with a TLS config uses it",
			config:   tlsFor("localhost:5000", `ca_file = "`+ca+`"`+"\n"),
			ref:      "localhost:5000",
			endpoint: "http://localhost:5000/v2 containerd default",
			want:     ctrdTLS{CAFiles: []string{ca}},
		},
		{
			name:   "localhost https mirror of itself is not skipped",
			config: `[` + ctrdCRI + `.mirrors."localhost:5000"]` + "\nendpoint = [\"https://localhost:5000\"]\n",
			ref:    "localhost:5000",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := write(t, t.TempDir(), "config.toml", "version = 2\n"+tc.config)
			k, err := ctrdKeyring(t, cfg)
			if err != nil {
				t.Fatal(err)
			}
			eps, err := k.Endpoints(ctrdImage(tc.ref))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want error containing %q, got %v", tc.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			endpoint := tc.endpoint
			if endpoint == "" {
				endpoint = "https://" + tc.ref + "/v2 containerd default"
			}
			if got := hostsOf(eps); !reflect.DeepEqual(got, []string{endpoint}) {
				t.Fatalf("endpoints %q, want %q", got, endpoint)
			}
			if got := ctrdTLSOf(t, eps[0]); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("TLS %+v, want %+v", got, tc.want)
			}
			if eps[0].File != "" {
				t.Errorf("hosts directory %q in legacy mode", eps[0].File)
			}
		})
	}
}

func TestKeyringContainerdHostDirLookup(t *testing.T) {
	for _, tc := range []struct {
		name  string
		dirs  []string // created under root1/ and root2/
		roots string   // config_path, with ROOT1/ROOT2 placeholders
		ref   string
		want  string // "" for none
	}{
		{"host_PORT_ first", []string{"r1/myreg_5000_", "r1/myreg:5000", "r1/_default"}, "R1", "myreg:5000", "r1/myreg_5000_"},
		{"then host:port", []string{"r1/myreg:5000", "r1/_default"}, "R1", "myreg:5000", "r1/myreg:5000"},
		{"then _default", []string{"r1/_default", "r1/myreg"}, "R1", "myreg:5000", "r1/_default"},
		{"port-less dir is not used for host:port", []string{"r1/myreg"}, "R1", "myreg:5000", ""},
		{"no port: host", []string{"r1/myreg.io", "r1/_default", "r1/myreg.io_443_"}, "R1", "myreg.io", "r1/myreg.io"},
		{"no port: _default", []string{"r1/_default", "r1/myreg.io_443_"}, "R1", "myreg.io", "r1/_default"},
		{"docker.io directory", []string{"r1/docker.io", "r1/registry-1.docker.io"}, "R1", "docker.io", "r1/docker.io"},
		{"index.docker.io normalised", []string{"r1/docker.io"}, "R1", "index.docker.io", "r1/docker.io"},
		{"first root with any match wins", []string{"r1/_default", "r2/myreg:5000"}, "R1:R2", "myreg:5000", "r1/_default"},
		{"second root when the first has nothing", []string{"r2/myreg_5000_"}, "R1:R2", "myreg:5000", "r2/myreg_5000_"},
		{"missing root skipped", []string{"r2/myreg.io"}, "R1/absent:R2", "myreg.io", "r2/myreg.io"},
		{"nothing", nil, "R1:R2", "myreg.io", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			for _, d := range tc.dirs {
				if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			roots := strings.NewReplacer("R1", filepath.Join(base, "r1"), "R2", filepath.Join(base, "r2")).Replace(tc.roots)
			cfg := write(t, base, "config.toml", "version = 2\n["+ctrdCRI+"]\nconfig_path = \""+roots+"\"\n")
			k, err := ctrdKeyring(t, cfg)
			if err != nil {
				t.Fatal(err)
			}
			eps, err := k.Endpoints(ctrdImage(tc.ref))
			if err != nil {
				t.Fatal(err)
			}
			want := ""
			if tc.want != "" {
				want = filepath.Join(base, tc.want)
			}
			if len(eps) != 1 || eps[0].File != want {
				t.Errorf("endpoints %q from %q, want one from %q", hostsOf(eps), eps[0].File, want)
			}
		})
	}
}

func TestKeyringContainerdHostsToml(t *testing.T) {
	certPEM, keyPEM := ctrdPEM(t)
	for _, tc := range []struct {
		name  string
		ref   string
		hosts string            // hosts.toml content ("-" for none)
		files map[string]string // extra files in the host dir; "CERT"/"KEY"/"BOTH" expand
		// endpoints in hostsOf form, want their TLS (paths relative to the
		// host dir; nil: none for every endpoint).
		endpoints []string
		want      []ctrdTLS
		wantErr   string
	}{
		{
			name:      "server only with relative ca string (1.7.32+)",
			ref:       "myreg:5000",
			hosts:     "server = \"https://myreg:5000\"\nca = \"ca.pem\"\n",
			files:     map[string]string{"ca.pem": "CERT"},
			endpoints: []string{"https://myreg:5000/v2 containerd hosts.toml server"},
			want:      []ctrdTLS{{CAFiles: []string{"ca.pem"}}},
		},
		{
			name:      "root keys only, no server: default host",
			ref:       "docker.io",
			hosts:     "ca = [\"a.pem\", \"/ABS/b.pem\"]\nskip_verify = true\n",
			files:     map[string]string{"a.pem": "CERT", "b.pem": "CERT", "other.crt": "CERT"},
			endpoints: []string{"https://registry-1.docker.io/v2 containerd default"},
			want:      []ctrdTLS{{CAFiles: []string{"a.pem", "b.pem"}, SkipVerify: true}},
		},
		{
			name:      "server changes the endpoint",
			ref:       "docker.io",
			hosts:     "server = \"mirror.example.com:8443\"\n",
			endpoints: []string{"https://mirror.example.com:8443/v2 containerd hosts.toml server"},
		},
		{
			name:      "client string holds cert and key",
			ref:       "myreg.io",
			hosts:     "client = \"both.pem\"\n",
			files:     map[string]string{"both.pem": "BOTH"},
			endpoints: []string{"https://myreg.io/v2 containerd default"},
			want:      []ctrdTLS{{ClientPairs: [][2]string{{"both.pem", "both.pem"}}}},
		},
		{
			name:      "client list of strings and list of pairs",
			ref:       "myreg.io",
			hosts:     "client = [\"both.pem\", [\"c.pem\", \"k.pem\"]]\n",
			files:     map[string]string{"both.pem": "BOTH", "c.pem": "CERT", "k.pem": "KEY"},
			endpoints: []string{"https://myreg.io/v2 containerd default"},
			want:      []ctrdTLS{{ClientPairs: [][2]string{{"both.pem", "both.pem"}, {"c.pem", "k.pem"}}}},
		},
		{
			name:      "client list of pairs",
			ref:       "myreg.io",
			hosts:     "client = [[\"c.pem\", \"k.pem\"]]\n",
			files:     map[string]string{"c.pem": "CERT", "k.pem": "KEY"},
			endpoints: []string{"https://myreg.io/v2 containerd default"},
			want:      []ctrdTLS{{ClientPairs: [][2]string{{"c.pem", "k.pem"}}}},
		},
		{
			// LoadContainerd merged the two registry-1.docker.io entries
			// (hub.pem, root.pem); each endpoint now has its own.
			name: "host entry for the default endpoint is tried before the default",
			ref:  "docker.io",
			hosts: "ca = \"root.pem\"\n" +
				"[host.\"https://mirror.example.com\"]\nca = \"mirror.pem\"\nskip_verify = true\n" +
				"[host.\"https://registry-1.docker.io\"]\nca = \"hub.pem\"\ncapabilities = [\"pull\", \"Resolve\"]\n",
			files: map[string]string{"root.pem": "CERT", "mirror.pem": "CERT", "hub.pem": "CERT"},
			endpoints: []string{
				"https://mirror.example.com/v2 containerd hosts.toml host",
				"https://registry-1.docker.io/v2 containerd hosts.toml host",
				"https://registry-1.docker.io/v2 containerd default",
			},
			want: []ctrdTLS{{CAFiles: []string{"mirror.pem"}, SkipVerify: true}, {CAFiles: []string{"hub.pem"}}, {CAFiles: []string{"root.pem"}}},
		},
		{
			name:  "host entry without scheme and skip_verify",
			ref:   "myreg:5000",
			hosts: "server = \"https://myreg:5000\"\n[host.\"myreg:5000\"]\nskip_verify = true\n",
			endpoints: []string{
				"https://myreg:5000/v2 containerd hosts.toml host",
				"https://myreg:5000/v2 containerd hosts.toml server",
			},
			want: []ctrdTLS{{SkipVerify: true}, {}},
		},
		{
			name:    "unparsable CA in a mirror entry fails the resolve",
			ref:     "docker.io",
			hosts:   "[host.\"https://mirror.example.com\"]\nca = \"bad.pem\"\n",
			files:   map[string]string{"bad.pem": "junk"},
			wantErr: "unable to load CA cert",
		},
		{
			name:    "missing CA is an error",
			ref:     "myreg.io",
			hosts:   "ca = \"absent.pem\"\n",
			wantErr: "unable to read CA cert",
		},
		{
			name:    "bad client pair is an error",
			ref:     "myreg.io",
			hosts:   "client = \"c.pem\"\n",
			files:   map[string]string{"c.pem": "CERT"},
			wantErr: "failed to load X509 key pair",
		},
		{
			// containerd 2.x's parseHostConfig knows referrers.
			name:      "referrers capability: hosts.toml kept",
			ref:       "myreg.io",
			hosts:     "server = \"https://elsewhere.example.com\"\ncapabilities = [\"pull\", \"resolve\", \"referrers\"]\n",
			endpoints: []string{"https://elsewhere.example.com/v2 containerd hosts.toml server"},
			want:      []ctrdTLS{{}},
		},
		{
			name:      "unknown capability: hosts.toml rejected, Docker layout used",
			ref:       "myreg.io",
			hosts:     "server = \"https://elsewhere.example.com\"\ncapabilities = [\"pull\", \"fly\"]\n",
			files:     map[string]string{"ca.crt": "CERT"},
			endpoints: []string{"https://myreg.io/v2 containerd default"},
			want:      []ctrdTLS{{CAFiles: []string{"ca.crt"}}},
		},
		{
			name:      "invalid client pair length: Docker layout used",
			ref:       "myreg.io",
			hosts:     "client = [[\"a\", \"b\", \"c\"]]\n",
			files:     map[string]string{"ca.crt": "CERT"},
			endpoints: []string{"https://myreg.io/v2 containerd default"},
			want:      []ctrdTLS{{CAFiles: []string{"ca.crt"}}},
		},
		{
			name:      "invalid ca type: Docker layout used",
			ref:       "myreg.io",
			hosts:     "ca = 5\n",
			files:     map[string]string{"ca.crt": "CERT"},
			endpoints: []string{"https://myreg.io/v2 containerd default"},
			want:      []ctrdTLS{{CAFiles: []string{"ca.crt"}}},
		},
		{
			name:      "unparsable hosts.toml: Docker layout used",
			ref:       "myreg.io",
			hosts:     "server = \n[[[\n",
			files:     map[string]string{"ca.crt": "CERT"},
			endpoints: []string{"https://myreg.io/v2 containerd default"},
			want:      []ctrdTLS{{CAFiles: []string{"ca.crt"}}},
		},
		{
			name:      "empty hosts.toml: Docker layout used",
			ref:       "myreg.io",
			hosts:     "",
			files:     map[string]string{"ca.crt": "CERT"},
			endpoints: []string{"https://myreg.io/v2 containerd default"},
			want:      []ctrdTLS{{CAFiles: []string{"ca.crt"}}},
		},
		{
			name:      "comment-only hosts.toml is valid (1.7.32+): no Docker layout",
			ref:       "myreg.io",
			hosts:     "# nothing\n",
			files:     map[string]string{"ca.crt": "CERT"},
			endpoints: []string{"https://myreg.io/v2 containerd default"},
		},
		{
			name:  "Docker layout: crt, cert with key, cert without key, dirs skipped",
			ref:   "myreg:5000",
			hosts: "-",
			files: map[string]string{
				"ca.crt": "CERT", "b.crt": "CERT", "client.cert": "CERT", "client.key": "KEY",
				"both.cert": "BOTH", "notes.txt": "x", "sub.crt/x": "x",
			},
			endpoints: []string{"https://myreg:5000/v2 containerd default"},
			want: []ctrdTLS{{
				CAFiles:     []string{"b.crt", "ca.crt"},
				ClientPairs: [][2]string{{"both.cert", "both.cert"}, {"client.cert", "client.key"}},
			}},
		},
		{
			name:    "Docker layout: unparsable .crt is an error",
			ref:     "myreg.io",
			hosts:   "-",
			files:   map[string]string{"ca.crt": "junk"},
			wantErr: "unable to load CA cert",
		},
		{
			// http with skip_verify, which ConfigureHosts tries
			// over https first (TLSFallback; hosts' own test).
			name:      "localhost default skips verification",
			ref:       "localhost:5000",
			hosts:     "-",
			endpoints: []string{"https://localhost:5000/v2 containerd default"},
			want:      []ctrdTLS{{SkipVerify: true}},
		},
		{
			name:      "localhost default overrides skip_verify = false without server",
			ref:       "localhost:5000",
			hosts:     "skip_verify = false\n",
			endpoints: []string{"https://localhost:5000/v2 containerd default"},
			want:      []ctrdTLS{{SkipVerify: true}},
		},
		{
			name:      "localhost:80 verifies",
			ref:       "localhost:80",
			hosts:     "-",
			endpoints: []string{"http://localhost:80/v2 containerd default"},
		},
		{
			name:      "localhost with a server entry gets no default",
			ref:       "localhost:5000",
			hosts:     "server = \"https://localhost:5000\"\n",
			endpoints: []string{"https://localhost:5000/v2 containerd hosts.toml server"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			root := filepath.Join(base, "certs.d")
			hostDir := filepath.Join(root, strings.Replace(tc.ref, ":", "_", 1)+map[bool]string{true: "_", false: ""}[strings.Contains(tc.ref, ":")])
			if tc.ref == "docker.io" {
				hostDir = filepath.Join(root, "docker.io")
			}
			if err := os.MkdirAll(hostDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.hosts != "-" {
				write(t, hostDir, "hosts.toml", strings.ReplaceAll(tc.hosts, "/ABS/", hostDir+"/"))
			}
			for name, content := range tc.files {
				switch content {
				case "CERT":
					content = certPEM
				case "KEY":
					content = keyPEM
				case "BOTH":
					content = certPEM + keyPEM
				}
				write(t, hostDir, name, content)
			}
			cfg := write(t, base, "config.toml", "version = 2\n["+ctrdCRI+"]\nconfig_path = \""+root+"\"\n")
			k, err := ctrdKeyring(t, cfg)
			if err != nil {
				t.Fatal(err)
			}
			eps, err := k.Endpoints(ctrdImage(tc.ref))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want error containing %q, got %v", tc.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := hostsOf(eps); !reflect.DeepEqual(got, tc.endpoints) {
				t.Fatalf("endpoints %q, want %q", got, tc.endpoints)
			}
			for i, e := range eps {
				if e.File != hostDir && e.File != filepath.Join(hostDir, "hosts.toml") {
					t.Errorf("%s: from %q, want the hosts directory %q", e.Host, e.File, hostDir)
				}
				var want ctrdTLS
				if tc.want != nil {
					want = tc.want[i]
				}
				for j, f := range want.CAFiles {
					want.CAFiles[j] = filepath.Join(hostDir, f)
				}
				for j, p := range want.ClientPairs {
					want.ClientPairs[j] = [2]string{filepath.Join(hostDir, p[0]), filepath.Join(hostDir, p[1])}
				}
				if got := ctrdTLSOf(t, e); !reflect.DeepEqual(got, want) {
					t.Errorf("%s: TLS %+v, want %+v", e.Host, got, want)
				}
			}
		})
	}
}

func TestKeyringContainerdHostsCredentials(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "certs.d")
	write(t, root, "docker.io/hosts.toml", "server = \"https://mirror.example.com\"\n")
	cfg := write(t, base, "config.toml", "version = 2\n["+ctrdCRI+"]\nconfig_path = \""+root+"\"\n"+
		"["+ctrdCRI+".configs.\"registry-1.docker.io\".auth]\nusername = \"hub\"\npassword = \"hp\"\n"+
		"["+ctrdCRI+".configs.\"mirror.example.com\".auth]\nusername = \"m\"\npassword = \"mp\"\n")
	k, err := ctrdKeyring(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The server entry is the only endpoint, so its host's auth is used.
	eps := endpoints(t, k, "docker.io/library/app")
	if got := hostsOf(eps); !reflect.DeepEqual(got, []string{"https://mirror.example.com/v2 containerd hosts.toml server"}) {
		t.Fatalf("endpoints %q", got)
	}
	if got := who(eps[0].Credentials); !reflect.DeepEqual(got, []string{`containerd-config:configs."mirror.example.com".auth:m`}) {
		t.Errorf("credentials %q", got)
	}
	// quay.io has no directory: default endpoint, exact-host auth (none).
	eps = endpoints(t, k, "quay.io/ns/app")
	if got := hostsOf(eps); !reflect.DeepEqual(got, []string{"https://quay.io/v2 containerd default"}) || len(eps[0].Credentials) != 0 || eps[0].File != "" {
		t.Errorf("quay.io: endpoints %q credentials %q from %q", got, who(eps[0].Credentials), eps[0].File)
	}
}
