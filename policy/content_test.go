package policy_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pullhelper/pullhelper/policy"
)

// A policy path may be a symlink to a root-only file that is no policy at
// all: its errors say where and what kind, never the file's bytes.
func TestPolicyErrorsCarryNoContent(t *testing.T) {
	const m = "S3CRETMARK"
	for _, doc := range []string{
		"root:" + m + ":19000:0:99999:7:::\n",                // /etc/shadow
		m + " = 1\n",                                         // an unknown top-level key
		"[" + m + "]\nx = 1\n",                               // an unknown section
		"version = 1\n[" + m + ".a]\nb = 2\n",                // a dotted unknown section
		"password = \"" + m + "\"\n",                         // a secret under an unknown key
		"version = 1\n[pull]\ntimeout = \"5s\"\n" + m + "\n", // a bare word
		"version = 1\nx = '''" + m,                           // unterminated string
		"{\"auths\": {\"r\": {\"auth\": \"" + m + "\"}}}\n",  // an auth.json
		"-----BEGIN PRIVATE KEY-----\n" + m + "\n-----END\n", // a key
	} {
		_, err := policy.Parse("p.toml", []byte(doc))
		if err == nil {
			t.Fatalf("%q: want an error", doc)
		}
		if strings.Contains(err.Error(), m) {
			t.Errorf("%q: the error quotes the file: %v", doc, err)
		}
		if !strings.HasPrefix(err.Error(), "p.toml:") {
			t.Errorf("%q: the error does not name the file and line: %v", doc, err)
		}
	}
	// An integer out of range, which the decoder repeats unquoted: the key
	// and line only.
	const num = "4242424242424242424242424242"
	if _, err := policy.Parse("p.toml", []byte("version = 1\n[pull]\nretries = "+num+"\n")); err == nil ||
		strings.Contains(err.Error(), num) || !strings.HasPrefix(err.Error(), "p.toml:3: pull.retries") {
		t.Errorf("out-of-range integer: %v; want the key and line, not the number", err)
	}
	// A misspelt key of a section is still named.
	_, err := policy.Parse("p.toml", []byte("version = 1\n[pull]\nretires = 2\n"))
	if err == nil || !strings.Contains(err.Error(), "p.toml:3: pull.retires: unknown key") {
		t.Fatalf("err = %v", err)
	}
}

// A FIFO as the policy is refused without waiting for a writer (the test
// would hang otherwise; go test's own -timeout is the guard).
func TestPolicyFIFORefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := policy.LoadFile(p)
	if err == nil || !strings.Contains(err.Error(), p+": reading policy: a FIFO, not a regular file") {
		t.Fatalf("err = %v", err)
	}
	_ = os.Remove(p)
}
