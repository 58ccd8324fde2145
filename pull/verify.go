package pull

import (
	"archive/tar"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/pullhelper/pullhelper/internal/failure"
	"golang.org/x/sys/unix"
)

// Handover gives the staging area to the unprivileged pull uid: the root
// directory (0700) becomes its own, nothing else is reachable to it.
func (s *Stage) Handover(uid, gid int) error {
	dirs := []string{s.Root}
	if s.Seeded != nil {
		// The seeded layout's directories (not DEST's blobs in them).
		subs, _ := filepath.Glob(filepath.Join(s.Path, "blobs", "*"))
		dirs = append(append(dirs, s.Path, filepath.Join(s.Path, "blobs")), subs...)
	}
	for _, d := range dirs {
		if err := os.Lchown(d, uid, gid); err != nil {
			return failure.Wrap(failure.Isolation, err, "handing the staging directory to uid %d", uid)
		}
	}
	return nil
}

// TakeBack is the parent's side after the child and everything in its
// cgroup are dead: it takes the staging area back, refuses anything but
// directories and plain files (no symlink, device, FIFO, socket or hard
// link planted by the child), gives every file to owner uid/gid with normal
// modes, and checks every blob against its digest and the stored manifest
// against the one the child reported. Errors are failure.Verification.
func (s *Stage) TakeBack(d Destination, res *Result, uid, gid int) error {
	if err := os.Lchown(s.Root, 0, 0); err != nil {
		return failure.Wrap(failure.Verification, err, "taking back the staging directory")
	}
	if err := os.Chmod(s.Root, 0o700); err != nil {
		return failure.Wrap(failure.Verification, err, "taking back the staging directory")
	}
	bad := func(format string, args ...any) error {
		return failure.New(failure.Verification, "refusing the staged image: "+format, args...)
	}
	err := filepath.WalkDir(s.Path, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if err := os.Lchown(p, uid, gid); err != nil {
				return err
			}
			return os.Chmod(p, 0o755)
		case unix.S_IFREG:
			if ino, ok := s.Seeded[rel(s.Path, p)]; ok && ino == st.Ino {
				return nil // DEST's own blob, linked in by the parent
			}
			if st.Nlink != 1 {
				return bad("%s has %d hard links", rel(s.Path, p), st.Nlink)
			}
			if err := os.Lchown(p, uid, gid); err != nil {
				return err
			}
			return os.Chmod(p, 0o644)
		case unix.S_IFLNK:
			return bad("%s is a symbolic link", rel(s.Path, p))
		default:
			return bad("%s is a special file (mode %o)", rel(s.Path, p), st.Mode)
		}
	})
	if err != nil {
		var fe *failure.Error
		if errors.As(err, &fe) {
			return err
		}
		return failure.Wrap(failure.Verification, err, "checking the staged image")
	}
	want := res.Digest
	if res.InstanceDigest != "" {
		want = res.InstanceDigest
	}
	if res.DestinationDigest != "" {
		want = res.DestinationDigest
	}
	switch d.Transport {
	case "oci":
		return verifyOCILayout(s.Path, want, s.Seeded)
	case "dir":
		return verifyDir(s.Path, want)
	case "oci-archive", "docker-archive":
		return verifyArchive(s.Path)
	}
	return nil
}

func rel(root, p string) string {
	r, err := filepath.Rel(root, p)
	if err != nil {
		return p
	}
	return r
}

var hexName = regexp.MustCompile(`^[0-9a-f]{64}$|^[0-9a-f]{128}$`)

// hashFile digests a file without following symlinks.
func hashFile(p string, h hash.Hash) (string, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func hasher(alg string) hash.Hash {
	switch alg {
	case "sha256":
		return sha256.New()
	case "sha512":
		return sha512.New()
	}
	return nil
}

func verifyOCILayout(root, manifestDigest string, seeded map[string]uint64) error {
	blobs := filepath.Join(root, "blobs")
	algs, err := os.ReadDir(blobs)
	if err != nil {
		return failure.Wrap(failure.Verification, err, "staged OCI layout")
	}
	for _, a := range algs {
		h := hasher(a.Name())
		if h == nil || !a.IsDir() {
			return failure.New(failure.Verification, "refusing the staged image: unexpected blobs/%s", a.Name())
		}
		files, err := os.ReadDir(filepath.Join(blobs, a.Name()))
		if err != nil {
			return failure.Wrap(failure.Verification, err, "staged OCI layout")
		}
		for _, f := range files {
			if _, ok := seeded[filepath.Join("blobs", a.Name(), f.Name())]; ok {
				continue // DEST's own blob (its inode was checked above)
			}
			got, err := hashFile(filepath.Join(blobs, a.Name(), f.Name()), hasher(a.Name()))
			if err != nil {
				return failure.Wrap(failure.Verification, err, "hashing blob %s", f.Name())
			}
			if got != f.Name() {
				return failure.New(failure.Verification, "digest mismatch in the staged image: blobs/%s/%s hashes to %s", a.Name(), f.Name(), got)
			}
		}
	}
	var idx struct {
		Manifests []struct {
			Digest string `json:"digest"`
		} `json:"manifests"`
	}
	if err := readJSON(filepath.Join(root, "index.json"), &idx); err != nil {
		return failure.Wrap(failure.Verification, err, "staged OCI layout")
	}
	for _, m := range idx.Manifests {
		if m.Digest == manifestDigest {
			alg, hx, _ := strings.Cut(m.Digest, ":")
			if _, err := os.Lstat(filepath.Join(blobs, alg, hx)); err != nil {
				return failure.New(failure.Verification, "staged index.json names %s but the blob is missing", m.Digest)
			}
			return nil
		}
	}
	return failure.New(failure.Verification, "staged index.json does not reference the reported manifest %s", manifestDigest)
}

func verifyDir(root, manifestDigest string) error {
	ents, err := os.ReadDir(root)
	if err != nil {
		return failure.Wrap(failure.Verification, err, "staged dir: image")
	}
	for _, e := range ents {
		n := e.Name()
		if !hexName.MatchString(n) {
			continue
		}
		got, err := hashFile(filepath.Join(root, n), sha256.New())
		if err != nil {
			return failure.Wrap(failure.Verification, err, "hashing %s", n)
		}
		if got != n {
			return failure.New(failure.Verification, "digest mismatch in the staged image: %s hashes to %s", n, got)
		}
	}
	got, err := hashFile(filepath.Join(root, "manifest.json"), sha256.New())
	if err != nil {
		return failure.Wrap(failure.Verification, err, "staged dir: image")
	}
	if "sha256:"+got != manifestDigest {
		return failure.New(failure.Verification, "staged manifest.json is sha256:%s, the child reported %s", got, manifestDigest)
	}
	return nil
}

// verifyArchive checks every archive member named by a digest
// (blobs/sha256/HEX in oci-archive; HEX.tar / HEX.json in docker-archive).
func verifyArchive(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return failure.Wrap(failure.Verification, err, "staged archive")
	}
	defer f.Close()
	tr := tar.NewReader(f)
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return failure.Wrap(failure.Verification, err, "reading the staged archive")
		}
		base := filepath.Base(h.Name)
		base = strings.TrimSuffix(strings.TrimSuffix(base, ".tar"), ".json")
		if h.Typeflag != tar.TypeReg || !hexName.MatchString(base) {
			continue
		}
		sum := sha256.New()
		if _, err := io.Copy(sum, tr); err != nil {
			return failure.Wrap(failure.Verification, err, "reading %s in the staged archive", h.Name)
		}
		if got := hex.EncodeToString(sum.Sum(nil)); got != base {
			return failure.New(failure.Verification, "digest mismatch in the staged archive: %s hashes to %s", h.Name, got)
		}
		n++
	}
	if n == 0 {
		return failure.New(failure.Verification, "the staged archive holds no content-addressed member")
	}
	return nil
}
