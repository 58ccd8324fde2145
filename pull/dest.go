package pull

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/proc"
	"go.podman.io/image/v5/directory"
	"go.podman.io/image/v5/docker/archive"
	"go.podman.io/image/v5/docker/reference"
	ociarchive "go.podman.io/image/v5/oci/archive"
	ocilayout "go.podman.io/image/v5/oci/layout"
	"go.podman.io/image/v5/types"
	"golang.org/x/sys/unix"
)

// reference returns the containers/image reference for this destination's
// transport and Ref at path (the staging path during a pull).
func (d Destination) reference(path string) (types.ImageReference, error) {
	switch d.Transport {
	case "oci":
		return ocilayout.NewReference(path, d.Ref)
	case "oci-archive":
		return ociarchive.NewReference(path, d.Ref)
	case "dir":
		return directory.NewReference(path)
	case "docker-archive":
		var tagged reference.NamedTagged
		if d.Ref != "" {
			n, err := reference.ParseNormalizedNamed(d.Ref)
			if err != nil {
				return nil, fmt.Errorf("parsing docker-archive reference %q: %w", d.Ref, err)
			}
			n = reference.TagNameOnly(n)
			t, ok := n.(reference.NamedTagged)
			if !ok {
				return nil, fmt.Errorf("docker-archive reference %q must be NAME[:TAG], not a digest", d.Ref)
			}
			tagged = t
		}
		return archive.NewReference(path, tagged)
	}
	return nil, fmt.Errorf("unknown transport %q", d.Transport)
}

// isDir reports whether the transport writes a directory (else one file).
func (d Destination) isDir() bool { return d.Transport == "oci" || d.Transport == "dir" }

// Stage is a staging area on DEST's filesystem, next to DEST.
type Stage struct {
	Root string `json:"root"` // .pullhelper-staging-NAME-XXXX, 0700
	Path string `json:"path"` // what containers/image writes: Root/image or Root/image.tar
	// Seeded are DEST's existing blobs hard-linked into the staged layout
	// (path relative to Path → inode), so that containers/image skips what
	// DEST already has. They are DEST's files: never re-owned or re-hashed.
	Seeded map[string]uint64 `json:"-"`
	// Config is where the copy writes its configuration and key material
	// (certificates, registries.conf): the child's private tmpfs; in
	// process, Root/config.
	Config string `json:"config"`
	// Reclaimed lists stale staging directories Prepare removed.
	Reclaimed []string `json:"-"`
}

// Prepare checks DEST before any network byte and creates the staging area
// beside it. Errors are failure.Destination.
func Prepare(d Destination) (*Stage, error) {
	parent := filepath.Dir(d.Path)
	st, err := os.Stat(parent)
	if err != nil {
		return nil, failure.New(failure.Destination, "destination %s: parent directory %s: %v", d.Raw, parent, pathErrno(err))
	}
	if !st.IsDir() {
		return nil, failure.New(failure.Destination, "destination %s: %s is not a directory", d.Raw, parent)
	}
	if err := d.checkExisting(); err != nil {
		return nil, err
	}
	reclaimed := reclaimStaging(parent)
	root, err := os.MkdirTemp(parent, stagingPrefix+filepath.Base(d.Path)+"-")
	if err != nil {
		return nil, failure.New(failure.Destination, "destination %s: cannot write in %s: %v", d.Raw, parent, pathErrno(err))
	}
	// Record the owner, so that a later run can reclaim this directory if
	// this process is killed before it removes it.
	if tag, err := proc.SelfTag(); err == nil {
		err = os.WriteFile(filepath.Join(root, ownerFile), []byte(tag), 0o600)
		if err != nil {
			_ = os.RemoveAll(root)
			return nil, failure.New(failure.Destination, "destination %s: cannot write in %s: %v", d.Raw, parent, pathErrno(err))
		}
	}
	s := &Stage{Root: root, Path: filepath.Join(root, "image"), Config: filepath.Join(root, "config"), Reclaimed: reclaimed}
	if !d.isDir() {
		s.Path += ".tar"
	}
	if d.Transport == "oci" {
		if err := s.seed(d.Path); err != nil {
			s.Remove()
			return nil, failure.Wrap(failure.Destination, err, "destination %s: linking its existing blobs into staging", d.Raw)
		}
	}
	return s, nil
}

// seed hard-links the blobs of an existing DEST layout into the staged
// layout (same filesystem), so that layers DEST already has are skipped.
func (s *Stage) seed(dest string) error {
	algs, err := os.ReadDir(filepath.Join(dest, "blobs"))
	if err != nil {
		return nil // no layout yet: nothing to seed
	}
	for _, a := range algs {
		if !a.IsDir() || hasher(a.Name()) == nil {
			continue
		}
		files, err := os.ReadDir(filepath.Join(dest, "blobs", a.Name()))
		if err != nil {
			return err
		}
		for _, f := range files {
			src := filepath.Join(dest, "blobs", a.Name(), f.Name())
			if !f.Type().IsRegular() || !hexName.MatchString(f.Name()) || isManifest(src) {
				continue // containers/image rewrites manifests in place: never link those
			}
			if s.Seeded == nil {
				if err := os.MkdirAll(filepath.Join(s.Path, "blobs"), 0o755); err != nil {
					return err
				}
				s.Seeded = map[string]uint64{}
			}
			dir := filepath.Join(s.Path, "blobs", a.Name())
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			dst := filepath.Join(dir, f.Name())
			if err := os.Link(src, dst); err != nil {
				return err
			}
			var st unix.Stat_t
			if err := unix.Lstat(dst, &st); err != nil {
				return err
			}
			s.Seeded[filepath.Join("blobs", a.Name(), f.Name())] = st.Ino
		}
	}
	return nil
}

const (
	stagingPrefix = ".pullhelper-staging-"
	ownerFile     = "owner"
)

// reclaimStaging removes staging directories in dir whose owner process is
// gone (a pullhelper that was SIGKILLed), and returns their paths.
func reclaimStaging(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), stagingPrefix) {
			continue
		}
		root := filepath.Join(dir, e.Name())
		tag, err := os.ReadFile(filepath.Join(root, ownerFile))
		if err != nil || !proc.Gone(strings.TrimSpace(string(tag))) {
			continue
		}
		if os.RemoveAll(root) == nil {
			out = append(out, root)
		}
	}
	return out
}

// isManifest reports whether a blob is an image manifest or index (a small
// JSON document with "layers" or "manifests").
func isManifest(p string) bool {
	st, err := os.Lstat(p)
	if err != nil || st.Size() > 4<<20 {
		return false
	}
	b, err := os.ReadFile(p)
	if err != nil || len(b) == 0 || b[0] != '{' {
		return false
	}
	var m struct {
		Layers    json.RawMessage `json:"layers"`
		Manifests json.RawMessage `json:"manifests"`
	}
	return json.Unmarshal(b, &m) == nil && (m.Layers != nil || m.Manifests != nil)
}

// reset empties the staging area between attempts.
func (s *Stage) reset() error {
	s.Seeded = nil // the links go with the layout
	if err := os.RemoveAll(s.Path); err != nil {
		return failure.Wrap(failure.Destination, err, "clearing staging %s", s.Path)
	}
	return nil
}

// Remove deletes the staging area and everything in it.
func (s *Stage) Remove() { _ = os.RemoveAll(s.Root) }

// checkExisting refuses a DEST that exists but cannot receive this image.
func (d Destination) checkExisting() error {
	st, err := os.Lstat(d.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return failure.New(failure.Destination, "destination %s: %v", d.Raw, pathErrno(err))
	}
	switch {
	case d.isDir() && !st.IsDir():
		return failure.New(failure.Destination, "destination %s: %s exists and is not a directory", d.Raw, d.Path)
	case !d.isDir() && !st.Mode().IsRegular():
		return failure.New(failure.Destination, "destination %s: %s exists and is not a regular file", d.Raw, d.Path)
	case d.Transport == "oci":
		ents, err := os.ReadDir(d.Path)
		if err != nil {
			return failure.New(failure.Destination, "destination %s: %v", d.Raw, pathErrno(err))
		}
		if len(ents) == 0 {
			return nil
		}
		if _, err := os.Stat(filepath.Join(d.Path, "oci-layout")); err != nil {
			return failure.New(failure.Destination, "destination %s: %s exists and is not an OCI layout (no oci-layout file)", d.Raw, d.Path)
		}
	case d.Transport == "dir":
		ents, err := os.ReadDir(d.Path)
		if err != nil {
			return failure.New(failure.Destination, "destination %s: %v", d.Raw, pathErrno(err))
		}
		if len(ents) == 0 {
			return nil
		}
		if _, err := os.Stat(filepath.Join(d.Path, "version")); err != nil {
			return failure.New(failure.Destination, "destination %s: %s exists, is not empty and is not a dir: image; refusing to replace it", d.Raw, d.Path)
		}
	}
	return nil
}

// Commit moves the staged image into DEST atomically. For oci: into an
// existing layout, blobs are moved in first and index.json is replaced last,
// under an exclusive lock on the layout directory, so a concurrent commit
// never loses a tag. Errors are failure.Destination; DEST is unchanged
// unless commit returns nil (a failed oci: merge may leave extra blobs, which
// no index references).
func (s *Stage) Commit(d Destination) error {
	if err := d.checkExisting(); err != nil {
		return err
	}
	if !d.isDir() {
		return wrapDest(d, os.Rename(s.Path, d.Path))
	}
	if err := os.Chmod(s.Path, 0o755); err != nil {
		return wrapDest(d, err)
	}
	_, err := os.Lstat(d.Path)
	if errors.Is(err, fs.ErrNotExist) || isEmptyDir(d.Path) {
		// rename(2) creates DEST or replaces an empty directory. If a
		// concurrent pull created the layout meanwhile, merge into it.
		err := os.Rename(s.Path, d.Path)
		if err == nil || d.Transport != "oci" || !(errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST)) {
			return wrapDest(d, err)
		}
	}
	if d.Transport == "dir" {
		// Replacing a previous dir: image: swap it out, then drop it.
		old := filepath.Join(s.Root, "old")
		if err := os.Rename(d.Path, old); err != nil {
			return wrapDest(d, err)
		}
		if err := os.Rename(s.Path, d.Path); err != nil {
			_ = os.Rename(old, d.Path)
			return wrapDest(d, err)
		}
		return nil
	}
	return mergeOCILayout(s.Path, d)
}

func isEmptyDir(p string) bool {
	ents, err := os.ReadDir(p)
	return err == nil && len(ents) == 0
}

type ociIndex struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType,omitempty"`
	Manifests     []json.RawMessage `json:"manifests"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

type ociDescriptor struct {
	Digest      string            `json:"digest"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

const refNameAnnotation = "org.opencontainers.image.ref.name"

func mergeOCILayout(staged string, d Destination) error {
	dir, err := os.Open(d.Path)
	if err != nil {
		return wrapDest(d, err)
	}
	defer dir.Close()
	if err := unix.Flock(int(dir.Fd()), unix.LOCK_EX); err != nil {
		return wrapDest(d, err)
	}
	defer func() { _ = unix.Flock(int(dir.Fd()), unix.LOCK_UN) }()

	// Blobs first: content-addressed, so an existing one is identical.
	err = filepath.WalkDir(filepath.Join(staged, "blobs"), func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		if !e.Type().IsRegular() {
			return fmt.Errorf("staged blob %s is not a regular file", p)
		}
		rel, _ := filepath.Rel(staged, p)
		target := filepath.Join(d.Path, rel)
		if _, err := os.Stat(target); err == nil {
			return nil
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		return os.Rename(p, target)
	})
	if err != nil {
		return wrapDest(d, err)
	}
	var newIdx, oldIdx ociIndex
	if err := readJSON(filepath.Join(staged, "index.json"), &newIdx); err != nil {
		return wrapDest(d, err)
	}
	if err := readJSON(filepath.Join(d.Path, "index.json"), &oldIdx); err != nil {
		return wrapDest(d, err)
	}
	for _, m := range newIdx.Manifests {
		var nd ociDescriptor
		if err := json.Unmarshal(m, &nd); err != nil {
			return wrapDest(d, err)
		}
		name := nd.Annotations[refNameAnnotation]
		kept := oldIdx.Manifests[:0]
		dup := false
		for _, om := range oldIdx.Manifests {
			var od ociDescriptor
			_ = json.Unmarshal(om, &od)
			if name != "" && od.Annotations[refNameAnnotation] == name {
				continue // the tag moves to the new image
			}
			if name == "" && od.Digest == nd.Digest && od.Annotations[refNameAnnotation] == "" {
				dup = true
			}
			kept = append(kept, om)
		}
		oldIdx.Manifests = kept
		if !dup {
			oldIdx.Manifests = append(oldIdx.Manifests, m)
		}
	}
	if oldIdx.SchemaVersion == 0 {
		oldIdx.SchemaVersion = 2
	}
	data, err := json.Marshal(oldIdx)
	if err != nil {
		return wrapDest(d, err)
	}
	tmp := filepath.Join(d.Path, ".index.json.pullhelper-tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return wrapDest(d, err)
	}
	if err := os.Rename(tmp, filepath.Join(d.Path, "index.json")); err != nil {
		_ = os.Remove(tmp)
		return wrapDest(d, err)
	}
	return nil
}

func readJSON(p string, v any) error {
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("parsing %s: %w", p, err)
	}
	return nil
}

func wrapDest(d Destination, err error) error {
	if err == nil {
		return nil
	}
	return failure.New(failure.Destination, "committing into %s: %v", d.Raw, pathErrno(err))
}

// pathErrno renders a path error as "PATH: reason" (failure.Reason).
func pathErrno(err error) string { return failure.Reason(err) }
