package auth

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pullhelper/pullhelper/internal/wire"
)

// contentMarker stands for a secret in a file root reads for the caller.
const contentMarker = "ROOTONLYMARK"

// secretShapes are documents a caller's path might lead to (a symlink to a
// root-only file): none is a valid file of any format here, and each
// carries the marker where a decoder might quote it (a key, a value, a
// bare word, the first line).
var secretShapes = []string{
	"root:" + contentMarker + ":19000:0:99999:7:::\nbin:*:19000:0:99999:7:::\n",
	contentMarker + "\n",
	contentMarker + " = 1\n[x\n",
	"password = \"" + contentMarker + "\"\n",
	"[" + contentMarker + "]\nk = 1\nk = 2\n",
	"{\"" + contentMarker + "\": 1}\n",
	"{\"kind\": \"" + contentMarker + "\", \"apiVersion\": \"v1\"}\n",
	"{\"auths\": {\"r.io\": {\"auth\": 5, \"x\": \"" + contentMarker + "\"}}}\n",
	"kind: " + contentMarker + "\napiVersion: v1\n",
	contentMarker + ": [\n",
	"- " + contentMarker + "\n- : :\n",
	"-----BEGIN PRIVATE KEY-----\n" + contentMarker + "\n-----END PRIVATE KEY-----\n",
	"version = 2\n[plugins.\"" + contentMarker + "\"]\nx = [1, \"a\"]\n",
	"server = 5\n[host.\"" + contentMarker + "\"]\ncapabilities = 7\n",
	"server = \"" + contentMarker + ":%\"\n",
	"capabilities = [\"" + contentMarker + "\"]\n",
	"[host.\"https://r.io\"]\nclient = [[\"" + contentMarker + "\", 1, 2]]\n",
	"dial_timeout = \"" + contentMarker + "\"\n",
}

func noMarker(t *testing.T, what, doc string, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), contentMarker) {
		t.Errorf("%s, file %q: the error quotes the file: %v", what, doc, err)
	}
}

// Every decoder of a file root reads for the caller keeps the file's
// content out of its errors (package hosts checks its own readers the
// same way).
func TestDecoderErrorsCarryNoContent(t *testing.T) {
	for _, doc := range secretShapes {
		dir := t.TempDir()
		f := filepath.Join(dir, "f")
		if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadPullSecrets([]string{f})
		noMarker(t, "pull secret", doc, err)
		_, err = LoadProviderConfig(f)
		noMarker(t, "credential provider config", doc, err)
		_, err = lookupFile(wire.AuthFile{Path: f}, "r.io/x", "r.io", lookupOpts{})
		noMarker(t, "auth.json", doc, err)
		_, err = lookupFile(wire.AuthFile{Path: f, Legacy: true}, "r.io/x", "r.io", lookupOpts{})
		noMarker(t, ".dockercfg", doc, err)
		_, err = satToken(f, nil)
		noMarker(t, "service account token", doc, err) // (a one-line token file is a token, not an error)
	}
}

// The same readers refuse a FIFO at once (go test's -timeout is the hang
// guard) and a device, naming the file.
func TestReadersRefuseNonRegular(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, "/dev/zero"} {
		for what, fn := range map[string]func() error{
			"pull secret":     func() error { _, err := LoadPullSecrets([]string{p}); return err },
			"provider config": func() error { _, err := LoadProviderConfig(p); return err },
			"auth file": func() error {
				_, err := lookupFile(wire.AuthFile{Path: p}, "r.io/x", "r.io", lookupOpts{})
				return err
			},
			"service account": func() error { _, err := satToken(p, nil); return err },
		} {
			err := fn()
			if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("%s %s: want a refusal naming the file, got %v", what, p, err)
			}
		}
	}
}

// Values the decoders accept but the checks refuse, and paths a file names
// (review 3, finding 6): the errors name the key or entry, never the value.
func TestValueErrorsCarryNoContent(t *testing.T) {
	dir := t.TempDir()
	write := func(name, doc string) string {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	const prov = "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: p\n  matchImages: [x.io]\n"
	for _, doc := range []string{
		prov + "  defaultCacheDuration: " + contentMarker + "\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n",
		prov + "  defaultCacheDuration: 1h\n  apiVersion: " + contentMarker + "\n",
		"apiVersion: kubelet.config.k8s.io/" + contentMarker + "\nkind: CredentialProviderConfig\nproviders: []\n",
		"apiVersion: " + contentMarker + "/v1\nkind: CredentialProviderConfig\nproviders: []\n",
	} {
		_, err := LoadProviderConfig(write("provider.yaml", doc))
		if err == nil {
			t.Errorf("provider config %q: want an error", doc)
		}
		noMarker(t, "credential provider config", doc, err)
	}
	// A docker-shaped entry whose key holds a quote.
	doc := `{"auths": {"r.io\"` + contentMarker + `": {"auth": 5}}}`
	_, err := LoadPullSecrets([]string{write("secret.json", doc)})
	if err == nil {
		t.Errorf("pull secret %q: want an error", doc)
	}
	noMarker(t, "pull secret", doc, err)
}
