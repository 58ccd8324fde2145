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
	"github.com/pullhelper/pullhelper/internal/wire"
)

const satInternal = "image-registry.openshift-image-registry.svc:5000"

// satKeyring is a hermetic keyring whose only source is the token file
// offered to patterns.
func satKeyring(t *testing.T, tokenFile, username string, patterns []string) (*auth.Keyring, error) {
	t.Helper()
	c := hermetic(t, t.TempDir())
	c.ServiceAccountToken, c.ServiceAccountUsername, c.ServiceAccountRegistries = tokenFile, username, patterns
	return auth.NewTestKeyring(c)
}

// satLookup is the one candidate (or nil) the keyring offers host.
func satLookup(t *testing.T, k *auth.Keyring, host, repository string) *wire.Credential {
	t.Helper()
	cs := k.Lookup(host, repository)
	if len(cs) > 1 {
		t.Fatalf("%s: %d candidates %q, want at most the token", host, len(cs), who(cs))
	}
	if len(cs) == 0 {
		return nil
	}
	c := cs[0]
	c.ID = ""
	return &c
}

func TestServiceAccountTokenMatching(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("tok-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		patterns []string
		host     string // the endpoint host asked about
		key      string // matched pattern; "" = no credential
	}{
		{[]string{satInternal}, satInternal, satInternal},
		{[]string{satInternal}, "image-registry.openshift-image-registry.svc", ""},
		{[]string{satInternal}, "image-registry.openshift-image-registry.svc:5001", ""},
		{[]string{"image-registry.openshift-image-registry.svc"}, satInternal, ""}, // no port matches no port only
		{[]string{"*.svc:5000"}, satInternal, "*.svc:5000"},
		{[]string{"*.svc:5000"}, "registry.svc:5000", "*.svc:5000"},
		{[]string{"*.svc:5000"}, "svc:5000", ""}, // at least one label before the domain
		{[]string{"*.svc:5000"}, "registry.svc.example.com:5000", ""},
		{[]string{"*.svc"}, satInternal, ""},
		{[]string{"*.svc"}, "registry.svc", "*.svc"},
		{[]string{"*.cluster.local:5000"}, "image-registry.openshift-image-registry.svc.cluster.local:5000", "*.cluster.local:5000"},
		{[]string{"Registry.Example.COM"}, "registry.example.com", "Registry.Example.COM"},
		{[]string{"registry.example.com"}, "REGISTRY.example.com", "registry.example.com"},
		{[]string{"quay.io", "*.svc:5000", satInternal}, satInternal, "*.svc:5000"}, // the first matching pattern
		{nil, satInternal, ""},
		{[]string{"[::1]:5000"}, "[::1]:5000", "[::1]:5000"},
	}
	for _, tt := range tests {
		k, err := satKeyring(t, token, "", tt.patterns)
		if err != nil {
			t.Errorf("%q: %v", tt.patterns, err)
			continue
		}
		// The token goes by the endpoint host, whatever the repository.
		for _, repo := range []string{tt.host + "/ns/app", "elsewhere.example.com/ns/app"} {
			c := satLookup(t, k, tt.host, repo)
			if tt.key == "" {
				if c != nil {
					t.Errorf("%q vs %s (%s): got %+v, want nil", tt.patterns, tt.host, repo, c)
				}
				continue
			}
			want := &wire.Credential{Source: "service-account-token", File: token, Key: tt.key, Username: "serviceaccount", Password: "tok-1"}
			if !reflect.DeepEqual(c, want) {
				t.Errorf("%q vs %s (%s): got %+v, want %+v", tt.patterns, tt.host, repo, c, want)
			}
		}
		if len(k.Warnings) != 0 {
			t.Errorf("%q vs %s: warnings %q", tt.patterns, tt.host, k.Warnings)
		}
	}
}

func TestServiceAccountTokenRotation(t *testing.T) {
	// A projected volume: token -> ..data/token, ..data -> a timestamped
	// directory that the kubelet swaps atomically.
	dir := t.TempDir()
	write := func(name, tok string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "token"), []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	write("..2030_01_01", "first-token")
	token := filepath.Join(dir, "token")
	if err := os.Symlink("..data/token", token); err != nil {
		t.Fatal(err)
	}
	// One keyring across the rotation: the token is read per lookup.
	k, err := satKeyring(t, token, "builder", []string{"*.svc:5000"})
	if err != nil {
		t.Fatal(err)
	}
	get := func() string {
		t.Helper()
		c := satLookup(t, k, satInternal, satInternal+"/ns/app")
		if c == nil {
			t.Fatalf("no candidate; warnings %q", k.Warnings)
		}
		if c.Username != "builder" {
			t.Errorf("username %q", c.Username)
		}
		return c.Password
	}
	if got := get(); got != "first-token" {
		t.Errorf("first read: %q", got)
	}
	write("..2030_01_02", "second-token")
	if got := get(); got != "second-token" {
		t.Errorf("after rotation: %q", got)
	}
	// A plain file rewritten in place is re-read too.
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("a-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err = satKeyring(t, plain, "", []string{satInternal})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"a-token", "b-token"} {
		if err := os.WriteFile(plain, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if c := satLookup(t, k, satInternal, satInternal+"/ns/app"); c == nil || c.Password != tok {
			t.Errorf("got %+v (warnings %q); want %s", c, k.Warnings, tok)
		}
	}
}

func TestServiceAccountTokenErrors(t *testing.T) {
	dir := t.TempDir()
	secret := "eyJhbGciOiJSUzI1NiJ9.secret-payload"
	good := filepath.Join(dir, "token")
	if err := os.WriteFile(good, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	multi := filepath.Join(dir, "multi")
	if err := os.WriteFile(multi, []byte(secret+"\n"+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")

	// A token file that cannot be used: no candidate, and a warning naming
	// the file (the pull goes on with the other sources).
	for _, tt := range []struct {
		name, file, host, want string
	}{
		{"missing file", missing, satInternal, "reading service account token " + missing + ": no such file or directory"},
		{"empty file", empty, satInternal, "service account token " + empty + " is empty"},
		{"several lines", multi, satInternal, "holds more than one line"},
		{"directory", dir, satInternal, "reading service account token " + dir},
		{"empty registry", good, "", "the image registry is empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k, err := satKeyring(t, tt.file, "", []string{satInternal})
			if err != nil {
				t.Fatal(err)
			}
			if c := satLookup(t, k, tt.host, satInternal+"/ns/app"); c != nil {
				t.Fatalf("got %+v, want no candidate", c)
			}
			w := strings.Join(k.Warnings, "\n")
			if !strings.Contains(w, tt.want) {
				t.Errorf("warnings %q do not contain %q", k.Warnings, tt.want)
			}
			if strings.Contains(w, "secret-payload") {
				t.Errorf("a warning shows the token: %q", w)
			}
		})
	}

	// A bad pattern: NewKeyring fails, naming the setting and the pattern.
	for _, tt := range []struct {
		name     string
		patterns []string
		want     string
	}{
		{"scheme", []string{"https://" + satInternal}, "without a scheme"},
		{"path", []string{satInternal + "/ns"}, "without a path"},
		{"bare star", []string{"*"}, "only as a leading"},
		{"inner star", []string{"registry.*.svc"}, "only as a leading"},
		{"empty pattern", []string{""}, "empty pattern"},
		{"bad port", []string{"registry.svc:http"}, "port must be a number"},
		{"empty label", []string{"registry..svc"}, "empty host label"},
		{"no host", []string{":5000"}, "no host"},
		{"later bad pattern", []string{satInternal, "*"}, `pattern "*"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := satKeyring(t, good, "", tt.patterns)
			var ce *auth.ConfigError
			if !errors.As(err, &ce) || ce.Setting != "auth.service_account_registries" {
				t.Fatalf("err %v, want an auth.service_account_registries ConfigError", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "secret-payload") {
				t.Errorf("the error shows the token: %q", err)
			}
		})
	}

	// No token file configured: the source is off, whatever the patterns.
	k, err := satKeyring(t, "", "", []string{satInternal})
	if err != nil {
		t.Fatal(err)
	}
	if c := satLookup(t, k, satInternal, satInternal+"/ns/app"); c != nil || len(k.Warnings) != 0 {
		t.Errorf("no token file: got %+v, warnings %q", c, k.Warnings)
	}

	// No matching pattern: nothing, and the file is not even read.
	k, err = satKeyring(t, missing, "", []string{"*.svc:5000"})
	if err != nil {
		t.Fatal(err)
	}
	if c := satLookup(t, k, "quay.io", "quay.io/ns/app"); c != nil || len(k.Warnings) != 0 {
		t.Errorf("no match: got %+v, warnings %q", c, k.Warnings)
	}

	// The token never marshals.
	k, err = satKeyring(t, good, "", []string{satInternal})
	if err != nil {
		t.Fatal(err)
	}
	j, _ := json.Marshal(k.Lookup(satInternal, satInternal+"/ns/app"))
	if strings.Contains(string(j), "secret-payload") || !strings.Contains(string(j), `"username":"serviceaccount"`) {
		t.Errorf("JSON form: %s", j)
	}
}
