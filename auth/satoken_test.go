package auth_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/auth"
)

const satInternal = "image-registry.openshift-image-registry.svc:5000"

func TestServiceAccountTokenMatching(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("tok-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		patterns []string
		registry string
		key      string // matched pattern; "" = no credential
	}{
		{[]string{satInternal}, satInternal, satInternal},
		{[]string{satInternal}, satInternal + "/ns/app", satInternal}, // a repository name works too
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
		{[]string{"registry.example.com"}, "REGISTRY.example.com/a", "registry.example.com"},
		{[]string{"quay.io", "*.svc:5000", satInternal}, satInternal, "*.svc:5000"}, // the first matching pattern
		{nil, satInternal, ""},
		{[]string{"[::1]:5000"}, "[::1]:5000", "[::1]:5000"},
	}
	for _, tt := range tests {
		c, err := auth.ServiceAccountToken(token, "", tt.patterns, tt.registry)
		if err != nil {
			t.Errorf("%q vs %s: %v", tt.patterns, tt.registry, err)
			continue
		}
		if tt.key == "" {
			if c != nil {
				t.Errorf("%q vs %s: got %+v, want nil", tt.patterns, tt.registry, c)
			}
			continue
		}
		want := &auth.Credential{Source: "service-account-token", File: token, Key: tt.key, Username: "serviceaccount", Password: "tok-1"}
		if !reflect.DeepEqual(c, want) {
			t.Errorf("%q vs %s: got %+v, want %+v", tt.patterns, tt.registry, c, want)
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
	get := func() string {
		t.Helper()
		c, err := auth.ServiceAccountToken(token, "builder", []string{"*.svc:5000"}, satInternal)
		if err != nil || c == nil {
			t.Fatalf("got %+v, %v", c, err)
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
	for _, tok := range []string{"a-token", "b-token"} {
		if err := os.WriteFile(plain, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := auth.ServiceAccountToken(plain, "", []string{satInternal}, satInternal)
		if err != nil || c == nil || c.Password != tok {
			t.Errorf("got %+v, %v; want %s", c, err, tok)
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
	tests := []struct {
		name, file string
		patterns   []string
		registry   string
		want       string
	}{
		{"missing file", missing, []string{satInternal}, satInternal, "reading service account token " + missing + ": no such file or directory"},
		{"empty file", empty, []string{satInternal}, satInternal, "service account token " + empty + " is empty"},
		{"several lines", multi, []string{satInternal}, satInternal, "holds more than one line"},
		{"directory", dir, []string{satInternal}, satInternal, "reading service account token " + dir},
		{"no file configured", "", []string{satInternal}, satInternal, "no token file configured"},
		{"scheme", good, []string{"https://" + satInternal}, satInternal, "without a scheme"},
		{"path", good, []string{satInternal + "/ns"}, satInternal, "without a path"},
		{"bare star", good, []string{"*"}, satInternal, "only as a leading"},
		{"inner star", good, []string{"registry.*.svc"}, satInternal, "only as a leading"},
		{"empty pattern", good, []string{""}, satInternal, "empty pattern"},
		{"bad port", good, []string{"registry.svc:http"}, satInternal, "port must be a number"},
		{"empty label", good, []string{"registry..svc"}, satInternal, "empty host label"},
		{"no host", good, []string{":5000"}, satInternal, "no host"},
		{"later bad pattern", good, []string{satInternal, "*"}, satInternal, `pattern "*"`},
		{"empty registry", good, []string{satInternal}, "", "the image registry is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := auth.ServiceAccountToken(tt.file, "", tt.patterns, tt.registry)
			if err == nil {
				t.Fatalf("no error; got %+v", c)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "secret-payload") {
				t.Errorf("the error shows the token: %q", err)
			}
		})
	}

	// No matching pattern: nil, and the file is not even read.
	c, err := auth.ServiceAccountToken(missing, "", []string{"*.svc:5000"}, "quay.io")
	if c != nil || err != nil {
		t.Errorf("no match: got %+v, %v", c, err)
	}

	// The token never marshals.
	c, err = auth.ServiceAccountToken(good, "", []string{satInternal}, satInternal)
	if err != nil {
		t.Fatal(err)
	}
	j, _ := json.Marshal(c)
	if strings.Contains(string(j), "secret-payload") || !strings.Contains(string(j), `"username":"serviceaccount"`) {
		t.Errorf("JSON form: %s", j)
	}
}
