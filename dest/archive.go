package dest

import (
	"archive/tar"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/safefs"
	"golang.org/x/sys/unix"
)

// archiveBase is shared by the single-file destinations.
type archiveBase struct {
	base
	kind archiveKind
}

// archiveKind is what makes an existing file this kind's archive, so that
// a commit may replace it (as dir: and oci: replace only their own
// layouts): a tar holding the member named member, at most 64 KiB, whose
// content valid accepts.
type archiveKind struct {
	what   string // "an OCI archive (a tar of an OCI layout)"
	member string
	valid  func([]byte) bool
}

// Bounds of reading an existing DEST to recognise it: members looked at,
// bytes read (headers, PAX records, the member's content).
const (
	recogniseMembers = 4096
	recogniseBytes   = 16 << 20
	recogniseContent = 64 << 10
)

func (d *archiveBase) stage(o StageOptions) (*Stage, error) {
	parent, pst, err := d.openParent(o.AllowOtherOwner)
	if err != nil {
		return nil, err
	}
	st, exists, err := d.existing(parent, o.AllowOtherOwner)
	if err == nil && exists {
		err = d.checkReplaceable(parent, st)
	}
	if err != nil {
		parent.Close()
		return nil, err
	}
	s, err := d.newStage(o, parent, parent, pst, "image.tar")
	if err != nil {
		parent.Close()
		return nil, err
	}
	return s, nil
}

// takeBackFile takes work/ back and opens work/image.tar: a regular file
// with one link, given to the owner 0644 through its fd; with fresh, or
// when a write lease cannot be had on it, it is first copied into a new
// root-created inode (the one committed).
func takeBackFile(s *Stage) (*os.File, error) {
	wfd := int(s.Work.Fd())
	if err := safefs.SetOwner(wfd, Identity{}, 0o700); err != nil {
		return nil, err
	}
	st, err := safefs.FstatAt(wfd, s.Name)
	if err != nil {
		return nil, badStaged("%s: %v", s.Name, safefs.ErrnoText(err))
	}
	if !safefs.IsReg(st) {
		return nil, badStaged("%s is not a regular file (mode %o)", s.Name, st.Mode)
	}
	if st.Nlink != 1 {
		return nil, badStaged("%s has %d hard links", s.Name, st.Nlink)
	}
	f, err := safefs.FileAt(wfd, s.Name, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, badStaged("%s: %v", s.Name, safefs.ErrnoText(err))
	}
	if got, err := safefs.Fstat(int(f.Fd())); err != nil || got.Ino != st.Ino {
		f.Close()
		return nil, badStaged("%s changed while it was taken back", s.Name)
	}
	// No write lease (another descriptor is open on it, or leases are not
	// to be had there): only a fresh copy is committed, as with a shared
	// uid (takeBack).
	if !s.opts.FreshCopy && alone(int(f.Fd())) {
		if err := safefs.SetOwner(int(f.Fd()), s.owner, 0o644); err != nil {
			f.Close()
			return nil, err
		}
		return f, f.Sync()
	}
	defer f.Close()
	_ = safefs.SetOwner(int(f.Fd()), Identity{}, 0o600)
	t := &tree{dirs: map[string]int{"": wfd}, files: map[string]*entry{s.Name: {size: st.Size, ino: st.Ino}}, owner: s.owner, fresh: true}
	if _, err := t.freshCopy(s.Name, f, nil); err != nil {
		return nil, err
	}
	return safefs.FileAt(wfd, s.Name, unix.O_RDONLY|unix.O_NONBLOCK, 0)
}

// member is one regular file of a staged archive.
type member struct {
	size    int64
	sums    map[string]string // alg → hex, for content-addressed names
	content []byte            // kept when small (JSON documents)
	used    bool
}

// tarStore is a staged archive read once, as a store for the graph check.
type tarStore struct {
	members  map[string]*member
	symlinks map[string]string
}

const maxKept = 64 << 20 // bytes of small members kept in memory

// readTar reads every member of the archive: regular files (hashed with
// the algorithm their name implies, kept when at most maxJSON), directory
// entries (ignored), symlinks (recorded; the kind decides). Anything else,
// a duplicate or an unclean name is refused.
func readTar(f *os.File, algOf func(name string) string, max int64) (*tarStore, error) {
	ts := &tarStore{members: map[string]*member{}, symlinks: map[string]string{}}
	tr := tar.NewReader(f)
	var kept, total int64
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, badStaged("reading the archive: %v", err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		name = strings.TrimSuffix(name, "/")
		if name == "" || name == "." {
			continue
		}
		if safefs.CheckRel(name) != nil || path.Clean(name) != name {
			return nil, badStaged("archive member %q has an unclean name", h.Name)
		}
		if _, dup := ts.members[name]; dup {
			return nil, badStaged("archive member %s appears twice", name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			continue
		case tar.TypeSymlink:
			ts.symlinks[name] = h.Linkname
			continue
		case tar.TypeReg:
		default:
			return nil, badStaged("archive member %s is not a regular file (type %q)", name, h.Typeflag)
		}
		total += h.Size
		if max > 0 && total > max {
			return nil, badStaged("the archive holds more than the %d bytes allowed", max)
		}
		m := &member{size: h.Size, sums: map[string]string{}}
		var w []io.Writer
		alg := algOf(name)
		hs := hasher(alg)
		if hs != nil {
			w = append(w, hs)
		}
		var buf *strings.Builder
		if h.Size <= maxJSON && kept+h.Size <= maxKept {
			buf = &strings.Builder{}
			w = append(w, buf)
			kept += h.Size
		}
		n, err := io.Copy(io.MultiWriter(w...), tr)
		if err != nil {
			return nil, badStaged("reading %s in the archive: %v", name, err)
		}
		if n != h.Size {
			return nil, badStaged("archive member %s is truncated", name)
		}
		if hs != nil {
			m.sums[alg] = hex.EncodeToString(hs.Sum(nil))
		}
		if buf != nil {
			m.content = []byte(buf.String())
		}
		ts.members[name] = m
	}
	return ts, nil
}

func (ts *tarStore) has(rel string) (int64, bool) {
	m, ok := ts.members[rel]
	if !ok {
		return 0, false
	}
	return m.size, true
}

func (ts *tarStore) load(rel string, max int64) ([]byte, error) {
	m, ok := ts.members[rel]
	if !ok {
		return nil, badStaged("the archive has no %s", rel)
	}
	if m.size > max || m.content == nil {
		return nil, badStaged("%s in the archive is %d bytes, more than the %d allowed", rel, m.size, max)
	}
	m.used = true
	return m.content, nil
}

func (ts *tarStore) claim(string) bool { return false }

func (ts *tarStore) sum(rel, alg string) (string, error) {
	m, ok := ts.members[rel]
	if !ok {
		return "", badStaged("the archive has no %s", rel)
	}
	s, ok := m.sums[alg]
	if !ok {
		return "", badStaged("%s in the archive is not named by a %s digest", rel, alg)
	}
	m.used = true
	return s, nil
}

func (ts *tarStore) unused(allowed func(string) bool) error {
	for n, m := range ts.members {
		if !m.used && !allowed(n) {
			return badStaged("archive member %s is not named by the image's manifests", n)
		}
	}
	return nil
}

// commitFile renames work/image.tar over DEST beneath the held parent fd
// (a symlink at DEST is replaced, never followed; a directory is refused).
func (d *archiveBase) commitFile(s *Stage) error {
	if s.verified == nil {
		return failure.New(failure.Internal, "committing %s before it was verified", d.spec.Raw)
	}
	st, exists, err := d.existing(s.parent, s.opts.AllowOtherOwner)
	if err != nil {
		return err
	}
	if exists {
		if err := d.checkReplaceable(s.parent, st); err != nil {
			return err
		}
	}
	pfd := int(s.parent.Fd())
	if exists {
		// The new file takes the old one's owner and mode, as
		// containers/image's archive writers truncate DEST in place
		// (os.Create keeps the inode): a private archive stays private.
		if err := keepAttrs(st, int(s.Work.Fd()), s.Name); err != nil {
			return d.commitErr(err)
		}
	}
	if err := unix.Renameat(int(s.Work.Fd()), s.Name, pfd, filepath.Base(d.spec.Path)); err != nil {
		return d.commitErr(&os.PathError{Op: "rename", Path: d.spec.Path, Err: err})
	}
	return d.commitErr(unix.Fsync(pfd))
}

// checkReplaceable refuses an existing DEST (st, beneath parent) that a
// commit must not replace: anything but a regular file, or a regular file
// that is not empty and not this kind's archive (a text file, another
// kind's archive, an archive of something else). It is read, never
// written, within the recognise bounds.
func (d *archiveBase) checkReplaceable(parent *os.File, st unix.Stat_t) error {
	if !safefs.IsReg(st) {
		return d.destErr("%s exists and is not a regular file", d.spec.Path)
	}
	if st.Size == 0 {
		return nil // an empty file, as oci:'s empty directory
	}
	f, err := safefs.FileAt(int(parent.Fd()), filepath.Base(d.spec.Path), unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return d.destErr("%s: %v", d.spec.Path, safefs.ErrnoText(err))
	}
	defer f.Close()
	if got, err := safefs.Fstat(int(f.Fd())); err != nil || got.Ino != st.Ino || !safefs.IsReg(got) {
		return d.destErr("%s changed while it was read; retry", d.spec.Path)
	}
	refuse := func(why string) error {
		return d.destErr("%s exists and is not %s: %s; refusing to replace it", d.spec.Path, d.kind.what, why)
	}
	r := &boundedReader{f: f, left: recogniseBytes}
	tr := tar.NewReader(r)
	for i := 0; i < recogniseMembers; i++ {
		h, err := tr.Next()
		switch {
		case err == io.EOF:
			return refuse("no " + d.kind.member + " member")
		case r.over:
			return refuse(fmt.Sprintf("no %s member within its first %d bytes", d.kind.member, recogniseBytes))
		case err != nil:
			return refuse("not a tar archive")
		}
		if path.Clean(strings.TrimPrefix(h.Name, "./")) != d.kind.member {
			continue
		}
		if h.Typeflag != tar.TypeReg || h.Size > recogniseContent {
			return refuse(d.kind.member + " is not a small regular file")
		}
		b, err := io.ReadAll(tr)
		if err != nil || !d.kind.valid(b) {
			return refuse("its " + d.kind.member + " is not valid")
		}
		return nil
	}
	return refuse(fmt.Sprintf("no %s member among its first %d", d.kind.member, recogniseMembers))
}

// boundedReader reads and seeks f (tar skips member contents by seeking),
// failing once more than left bytes were read.
type boundedReader struct {
	f    *os.File
	left int64
	over bool
}

func (r *boundedReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		r.over = true
		return 0, errors.New("read limit reached")
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.f.Read(p)
	r.left -= int64(n)
	return n, err
}

func (r *boundedReader) Seek(off int64, whence int) (int64, error) { return r.f.Seek(off, whence) }
