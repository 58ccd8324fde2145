package pipeline

import (
	"bytes"
	"crypto/sha256"
	"encoding/pem"
	"io/fs"
	"os"
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
// handshake), and reads no trust root of the host. A file is read once
// whatever names reach it (Debian's bundle is also in its directory): its
// certificates are in the result already. Unreadable files are skipped, as
// Go skips them. Past a bound (a file, the total, the count)
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
		read  = make(map[safefile.FileID]bool, 512)   // the files read: the bundle is also in the directory
		buf   []byte                                  // each file's bytes, read into one buffer
		total int
		n     int
	)
	tooBig := false
	// add reads one file (path, or name in dir) and adds its
	// certificates not seen yet; a file read before under another name
	// (the bundle in the directory, a second link) is not read again:
	// its certificates are there already.
	add := func(dir *safefile.Dir, path string) bool {
		var (
			fresh bool
			err   error
		)
		if dir != nil {
			buf, fresh, err = dir.ReadFileOnce(path, maxRootFile, buf, read)
		} else {
			buf, fresh, err = safefile.ReadFileOnce(path, maxRootFile, buf, read)
		}
		if err != nil {
			tooBig = tooBig || safefile.TooBig(err)
			return false
		}
		if !fresh {
			return true
		}
		n++
		total += len(buf)
		if n == 1 {
			// The first file, the bundle, holds about every root once
			// (the directory repeats them): room for its certificates
			// as they are re-encoded, without the buffer's doublings.
			out.Grow(len(buf) + len(buf)/8)
		}
		for _, der := range pull.CertificateDERs(buf) {
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
		if add(nil, f) {
			break
		}
	}
	over := func() bool { return tooBig || total > maxRootTotal || n >= maxRootFiles }
	for _, path := range dirs {
		if !addDir(path, add, over) {
			return nil
		}
	}
	if tooBig || total > maxRootTotal {
		return nil
	}
	return out.Bytes()
}

// addDir adds every file of the directory at path as x509 reads them
// (same-directory symlinks skipped), and is false past a bound: more than
// maxRootFiles entries, or over before a file is read.
func addDir(path string, add func(*safefile.Dir, string) bool, over func() bool) bool {
	dir, err := safefile.OpenDir(path)
	if err != nil {
		return true // x509 skips a directory it cannot read
	}
	defer dir.Close()
	ents, err := dir.Entries(maxRootFiles + 1)
	if err != nil {
		return true
	}
	if len(ents) > maxRootFiles {
		return false
	}
	for _, e := range ents {
		if sameDirSymlink(dir, e) {
			continue
		}
		if over() {
			return false
		}
		add(dir, e.Name())
	}
	return true
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
func sameDirSymlink(dir *safefile.Dir, e fs.DirEntry) bool {
	if e.Type()&fs.ModeSymlink == 0 {
		return false
	}
	target, err := dir.Readlink(e.Name())
	return err == nil && !strings.Contains(target, "/")
}
