package pipeline

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pullhelper/pullhelper/internal/testcert"
	"golang.org/x/sys/unix"
)

// testCA is a self-signed CA certificate as PEM.
func testCA(t *testing.T, name string) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: testcert.CA(t, name)})
}

// subjects lists the common names of the certificates in b, in order.
func subjects(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	for len(b) > 0 {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c.Subject.CommonName)
	}
	return out
}

// systemRoots reads what x509.SystemCertPool reads (SSL_CERT_FILE, then
// every file of SSL_CERT_DIR but same-directory symlinks), each
// certificate once.
func TestSystemRootsReadsWhatGoReads(t *testing.T) {
	dir := t.TempDir()
	a, b, c := testCA(t, "a"), testCA(t, "b"), testCA(t, "c")
	bundle := filepath.Join(dir, "bundle.pem")
	if err := os.WriteFile(bundle, append(append([]byte{}, a...), b...), 0o644); err != nil {
		t.Fatal(err)
	}
	certs := filepath.Join(dir, "certs")
	if err := os.Mkdir(certs, 0o755); err != nil {
		t.Fatal(err)
	}
	for n, content := range map[string][]byte{"b.pem": b, "c.pem": c, "notes.txt": []byte("not a certificate\n")} {
		if err := os.WriteFile(filepath.Join(certs, n), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("c.pem", filepath.Join(certs, "1234abcd.0")); err != nil { // c_rehash's link
		t.Fatal(err)
	}
	// The bundle in the directory too, as Debian's ca-certificates.crt
	// is (read once: its roots are there already).
	if err := os.Symlink(bundle, filepath.Join(certs, "ca-certificates.crt")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", bundle)
	t.Setenv("SSL_CERT_DIR", certs)
	got := systemRoots()
	if s := subjects(t, got); len(s) != 3 || s[0] != "a" || s[1] != "b" || s[2] != "c" {
		t.Fatalf("roots %v, want [a b c] (each once)", s)
	}
	ours := x509.NewCertPool()
	ours.AppendCertsFromPEM(got)
	if !ours.Equal(poolOf(t, a, b, c)) {
		t.Fatal("the pool of the roots read is not the pool of a, b and c")
	}
}

func poolOf(t *testing.T, pems ...[]byte) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	for _, b := range pems {
		if !p.AppendCertsFromPEM(b) {
			t.Fatal("bad PEM")
		}
	}
	return p
}

// Past a bound nothing is handed over: the copy loads the roots itself
// (as Go would, the big file included), never a pool missing one.
func TestSystemRootsTooBigIsNone(t *testing.T) {
	dir := t.TempDir()
	a := testCA(t, "a")
	bundle := filepath.Join(dir, "bundle.pem")
	if err := os.WriteFile(bundle, a, 0o644); err != nil {
		t.Fatal(err)
	}
	certs := filepath.Join(dir, "certs")
	if err := os.Mkdir(certs, 0o755); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("#"), maxRootFile+1)
	if err := os.WriteFile(filepath.Join(certs, "huge.pem"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", bundle)
	t.Setenv("SSL_CERT_DIR", certs)
	if got := systemRoots(); got != nil {
		t.Fatalf("a file past %d bytes: got %d bytes of roots, want none", maxRootFile, len(got))
	}
}

// A certificate directory of more entries than the bound is not listed
// whole: nothing is handed over (the copy loads the roots itself).
func TestSystemRootsTooManyFilesIsNone(t *testing.T) {
	dir := t.TempDir()
	bundle := filepath.Join(dir, "bundle.pem")
	if err := os.WriteFile(bundle, testCA(t, "a"), 0o644); err != nil {
		t.Fatal(err)
	}
	certs := filepath.Join(dir, "certs")
	if err := os.Mkdir(certs, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= maxRootFiles; i++ {
		if err := os.WriteFile(filepath.Join(certs, fmt.Sprintf("%05d.txt", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("SSL_CERT_FILE", bundle)
	t.Setenv("SSL_CERT_DIR", certs)
	if got := systemRoots(); got != nil {
		t.Fatalf("%d files in the directory: got %d bytes of roots, want none", maxRootFiles+1, len(got))
	}
}

// An SSL_CERT_DIR entry that is a FIFO is skipped at once (opened
// O_DIRECTORY), not waited on: the roots of the bundle are still read.
func TestSystemRootsSkipsFIFODir(t *testing.T) {
	dir := t.TempDir()
	bundle := filepath.Join(dir, "bundle.pem")
	if err := os.WriteFile(bundle, testCA(t, "a"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "certs")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", bundle)
	t.Setenv("SSL_CERT_DIR", fifo)
	done := make(chan []byte, 1)
	go func() { done <- systemRoots() }()
	select {
	case got := <-done:
		if s := subjects(t, got); len(s) != 1 || s[0] != "a" {
			t.Fatalf("roots %v, want [a]", s)
		}
	case <-time.After(30 * time.Second): // a hang guard, not a timing assertion
		if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		t.Fatal("reading the system roots blocked on a FIFO named by SSL_CERT_DIR")
	}
}

// On this host the roots read are the ones x509.SystemCertPool reads, by
// the same environment (none set here: the distribution's bundle and
// directory).
func TestSystemRootsAreThisHostsPool(t *testing.T) {
	want, err := x509.SystemCertPool()
	if err != nil {
		t.Skipf("no system certificate pool here to compare with: %v", err)
	}
	got := systemRoots()
	if got == nil {
		t.Fatal("the system roots were past a bound here: nothing to compare")
	}
	ours := x509.NewCertPool()
	ours.AppendCertsFromPEM(got)
	if !ours.Equal(want) {
		t.Fatalf("the pool of the %d bytes of roots read is not x509.SystemCertPool's", len(got))
	}
}
