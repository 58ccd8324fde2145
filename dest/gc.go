package dest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/pullhelper/pullhelper/dest/target"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/safefs"
	"golang.org/x/sys/unix"
)

// Sweep is one DEST's staging area, opened for a sweep (OpenSweep) before
// anything is removed, so that a bad argument fails a gc run that has not
// changed anything yet.
type Sweep struct {
	dirs []*os.File // DEST's parent, and DEST itself when it is a directory
	base string     // DEST's name (its partial-blob cache's)
	// legacy: a containerd: DEST, whose staging directory may hold the
	// shared cache of older pullhelpers (legacyContainerdBase).
	legacy bool
	// Refused says why a partial-blob cache was left (ReclaimPartial):
	// not root's 0700, or not removable whole.
	Refused []string
}

// OpenSweep opens the directories where a pull into dest (a DEST as pull
// takes it, "oci:PATH[:TAG]" and so on, or DEST's path) keeps its staging:
// DEST's parent, and DEST itself when it is a directory (a DEST that is a
// mount point holds its staging inside). The parent is reached as Stage
// reaches it (openAncestors: no directory on the way that another user could
// swap). A parent that does not exist has nothing to sweep: nil, nil.
// A containerd:REF DEST stages in containerdStaging ("": the default
// /var/lib/pullhelper/containerd) under REF's own name
// (containerdStageName), as a pull with --containerd-staging does.
func OpenSweep(arg, containerdStaging string) (*Sweep, error) {
	path := arg
	legacy := false
	if tr, _, ok := strings.Cut(arg, ":"); ok && tr != "" && !strings.Contains(tr, "/") {
		// A transport before the colon: a DEST as pull takes it, which
		// Parse checks (an unknown transport is exit 2, not a path).
		d, err := Parse(arg)
		if _, known := target.Lookup(tr); err != nil && !known {
			return nil, failure.New(failure.Usage, "gc: %v; a relative path with a colon is written ./%s", err, arg)
		} else if err != nil {
			return nil, err
		}
		if _, legacy, err = ConfigureContainerd(d, ContainerdSettings{Staging: containerdStaging}); err != nil {
			return nil, failure.New(failure.Usage, "gc %s: %v (set --containerd-staging)", arg, err)
		}
		path = d.Spec().Path
	}
	abs, err := filepath.Abs(path)
	if err != nil || abs == "/" {
		return nil, failure.New(failure.Usage, "gc: %q is not a DEST path", arg)
	}
	dir := filepath.Dir(abs)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	fd, err := openAncestors(dir, false)
	if err != nil {
		return nil, failure.Wrap(failure.Destination, err, "gc: DEST's parent directory %s", dir)
	}
	// The parent itself as openParent judges it: a directory that only
	// root (or the caller) can change.
	st, err := safefs.Fstat(fd)
	if err == nil && !allowedOwner(st.Uid) {
		err = fmt.Errorf("owned by uid %d, not root; refusing to remove anything there as root", st.Uid)
	} else if err == nil && st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
		err = fmt.Errorf("writable by group or others and not sticky (mode %o); refusing to remove anything there as root", st.Mode&0o7777)
	}
	if err != nil {
		unix.Close(fd)
		return nil, failure.Wrap(failure.Destination, err, "gc: DEST's parent directory %s", dir)
	}
	s := &Sweep{dirs: []*os.File{os.NewFile(uintptr(fd), dir)}, base: filepath.Base(abs), legacy: legacy}
	if dfd, err := unix.Openat(fd, filepath.Base(abs), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
		s.dirs = append(s.dirs, os.NewFile(uintptr(dfd), abs))
	}
	return s, nil
}

// Reclaim removes the stale staging directories of the sweep (those whose
// owner process, by pid and start time, is gone: the rule every pull applies
// at start) and closes it. It returns their paths.
func (s *Sweep) Reclaim() []string {
	if s == nil {
		return nil
	}
	var out []string
	for _, d := range s.dirs {
		out = append(out, reclaim(d, nil)...)
		d.Close()
	}
	s.dirs = nil
	return out
}

// ReclaimPartial removes DEST's partial-blob cache (beside DEST) unless a
// live pull holds it, and returns its path (none: nil). For a containerd:
// DEST it removes as well the shared cache older pullhelpers kept in the
// staging directory for every image (.pullhelper-partial-image), which no
// pull adopts any more. A cache that is not a root-owned 0700 directory is
// not entered (another user may have planted it): Refused says so. Call it
// before Reclaim, which closes the sweep.
func (s *Sweep) ReclaimPartial() []string {
	if s == nil || len(s.dirs) == 0 {
		return nil
	}
	bases := []string{s.base}
	if s.legacy && s.base != legacyContainerdBase {
		bases = append(bases, legacyContainerdBase)
	}
	var out []string
	for _, b := range bases {
		p, why := sweepPartial(s.dirs[0], b)
		if why != "" {
			s.Refused = append(s.Refused, why)
		}
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Close closes the sweep without removing anything.
func (s *Sweep) Close() {
	if s == nil {
		return
	}
	for _, d := range s.dirs {
		d.Close()
	}
	s.dirs = nil
}

// sweepPartial removes the partial-blob cache named for DEST base in the
// directory held as dir, unless a live pull holds its flock or it is not
// a root-owned 0700 directory (then refused names why: another user's is
// never entered). It returns the removed path, or "".
func sweepPartial(dir *os.File, base string) (removed, refused string) {
	name := PartialCacheName(base)
	path := filepath.Join(dir.Name(), name)
	st, err := safefs.FstatAt(int(dir.Fd()), name)
	if err != nil {
		return "", ""
	}
	if !safefs.IsDir(st) || st.Uid != 0 || st.Mode&0o7777 != 0o700 {
		return "", (&CacheRefused{Path: path, Why: fmt.Sprintf("is owned by uid %d with mode %o", st.Uid, st.Mode&0o7777)}).Error()
	}
	fd, err := safefs.OpenDirAt(int(dir.Fd()), name)
	if err != nil {
		return "", ""
	}
	defer unix.Close(fd)
	if got, err := safefs.Fstat(fd); err != nil || got.Ino != st.Ino || got.Uid != 0 {
		return "", ""
	}
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return "", "" // a live pull's
	}
	// blobs/ may be the uid's of a pull whose parent was killed.
	var handed []int
	if bst, err := safefs.FstatAt(fd, partialBlobs); err == nil && safefs.IsDir(bst) && bst.Uid != 0 {
		handed = append(handed, int(bst.Uid))
	}
	if err := safefs.RemoveHeld(int(dir.Fd()), name, fd, handed...); err != nil {
		return "", fmt.Sprintf("removing the partial-blob cache %s: %s", path, safefs.ErrnoText(err))
	}
	return path, ""
}
