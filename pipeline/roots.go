package pipeline

import (
	"bytes"
	"crypto/sha256"
	"encoding/pem"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/pullhelper/pullhelper/internal/safefile"
	"github.com/pullhelper/pullhelper/pull"
)

// The places Go's crypto/x509 reads the system's trust roots from on
// Linux (root_linux.go's certFiles and certDirectories, go1.26), and the
// variables that override them (root_unix.go): the first bundle that can
// be read, then every file of each directory.
var (
	systemRootFiles = []string{
		"/etc/ssl/certs/ca-certificates.crt",
		"/etc/pki/tls/certs/ca-bundle.crt",
		"/etc/ssl/ca-bundle.pem",
		"/etc/pki/tls/cacert.pem",
		"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
		"/etc/ssl/cert.pem",
	}
	systemRootDirs = []string{"/etc/ssl/certs", "/etc/pki/tls/certs"}
)

// Bounds on what systemRoots reads: a file, and the whole (Debian's bundle
// and directory together are about 0.5 MiB, 300 files).
const (
	maxRootFile  = 4 << 20
	maxRootTotal = 16 << 20
	maxRootFiles = 4096
)

// systemRoots reads the system's trust roots where, and as, Go's
// x509.SystemCertPool would in this process (SSL_CERT_FILE and
// SSL_CERT_DIR included; same-directory symlinks skipped as
// readUniqueDirectoryEntries does), and returns each CERTIFICATE block
// once, as PEM, for the copy's Material: the copy then builds its pool from
// these bytes (about 3 ms) instead of reading and parsing the host's
// bundle and directory itself (11–20 ms on the way to its first TLS
// handshake), and reads no trust root of the host. Unreadable files are
// skipped, as Go skips them. Past a bound (a file, the total, the count)
// nil is returned, and the copy loads the system's roots itself as Go
// does: the roots are the same either way.
func systemRoots() []byte {
	files := systemRootFiles
	if f := os.Getenv("SSL_CERT_FILE"); f != "" {
		files = []string{f}
	}
	dirs := systemRootDirs
	if d := os.Getenv("SSL_CERT_DIR"); d != "" {
		dirs = strings.Split(d, ":")
	}
	var (
		out   bytes.Buffer
		seen  = make(map[[sha256.Size]byte]bool, 512) // by the DER's digest: no copy of each certificate kept
		total int
		n     int
	)
	tooBig := false
	add := func(path string) bool {
		b, err := safefile.ReadFile(path, maxRootFile)
		if err != nil {
			tooBig = tooBig || safefile.TooBig(err)
			return false
		}
		n++
		total += len(b)
		if n == 1 {
			// The first file, the bundle, holds about every root once
			// (the directory repeats them): room for its certificates
			// as they are re-encoded, without the buffer's doublings.
			out.Grow(len(b) + len(b)/8)
		}
		for _, der := range pull.CertificateDERs(b) {
			sum := sha256.Sum256(der)
			if seen[sum] {
				continue
			}
			seen[sum] = true
			_ = pem.Encode(&out, &pem.Block{Type: "CERTIFICATE", Bytes: der})
		}
		return true
	}
	for _, f := range files {
		if add(f) {
			break
		}
	}
	for _, dir := range dirs {
		ents, err := safefile.ReadDirAtMost(dir, maxRootFiles+1)
		if err != nil {
			continue
		}
		if len(ents) > maxRootFiles {
			return nil
		}
		for _, e := range ents {
			if sameDirSymlink(e, dir) {
				continue
			}
			if tooBig || total > maxRootTotal || n >= maxRootFiles {
				return nil
			}
			add(dir + "/" + e.Name())
		}
	}
	if tooBig || total > maxRootTotal {
		return nil
	}
	return out.Bytes()
}

// readSystemRoots starts systemRoots in the background and returns what
// waits for its result: the pull reads them while it prepares (the lock,
// the staging area, the cgroup and the child's start), and hands them to
// the copy with its Material.
func readSystemRoots() func() []byte {
	done := make(chan []byte, 1)
	go func() { done <- systemRoots() }()
	return func() []byte { return <-done }
}

// sameDirSymlink is x509's isSameDirSymlink: a symlink to a name in the
// same directory (c_rehash's hash links) is read through its target's own
// entry.
func sameDirSymlink(e fs.DirEntry, dir string) bool {
	if e.Type()&fs.ModeSymlink == 0 {
		return false
	}
	target, err := os.Readlink(filepath.Join(dir, e.Name()))
	return err == nil && !strings.Contains(target, "/")
}
