package dest

import (
	"fmt"
	"path"
	"sort"

	"github.com/pullhelper/pullhelper/internal/safefs"
	"golang.org/x/sys/unix"
)

// maxEntries and maxDepth bound the staged tree the parent walks.
const (
	maxEntries = 100000
	maxDepth   = 8
)

// takeBack makes work/ root's again (0700) through the held fd, then walks
// work/NAME beneath it: directories first get owner 0755 (from then on no
// other process can add or rename entries), files are checked to be
// regular with nlink 1 and get owner 0600 through a descriptor opened with
// O_NOFOLLOW, then 0644 once a write lease showed no other descriptor is
// open on them. Anything else is refused (failure.Verification). A file on
// which the kernel refuses a write lease (another descriptor is open on
// it: one kept from an earlier pull, a cache file another user planted),
// then or again when open reads it for the commit, is never committed
// itself: only a fresh root-created copy (entry.fresh).
//
// maxBytes (the image's limit, 0: none) bounds what presum hashes ahead:
// a staged file larger than that, or beyond that in all, is left to the
// graph's checks, which refuse it without reading it.
func takeBack(s *Stage, maxBytes int64) (*tree, error) {
	wfd := int(s.Work.Fd())
	if err := safefs.SetOwner(wfd, Identity{}, 0o700); err != nil {
		return nil, fmt.Errorf("taking back the work directory: %w", err)
	}
	st, err := safefs.FstatAt(wfd, s.Name)
	if err != nil {
		return nil, badStaged("%s: %v", s.Name, safefs.ErrnoText(err))
	}
	if !safefs.IsDir(st) {
		return nil, badStaged("%s is not a directory (mode %o)", s.Name, st.Mode)
	}
	fd, err := safefs.OpenDirAt(wfd, s.Name)
	if err != nil {
		return nil, badStaged("%s: %v", s.Name, safefs.ErrnoText(err))
	}
	t := &tree{dirs: map[string]int{"": fd}, files: map[string]*entry{}, owner: s.owner, fresh: s.opts.FreshCopy, presums: s.presums, noSync: s.NoSync, storeChecks: s.storeChecks}
	if err := t.walk(fd, "", 0); err != nil {
		t.close()
		return nil, err
	}
	t.presum(maxBytes)
	return t, nil
}

func (t *tree) walk(dfd int, rel string, depth int) error {
	if err := safefs.SetOwner(dfd, t.owner, 0o755); err != nil {
		return err
	}
	names, err := safefs.ReadDirNames(dfd)
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, n := range names {
		r := path.Join(rel, n)
		if len(t.files)+len(t.dirs) > maxEntries {
			return badStaged("more than %d entries", maxEntries)
		}
		st, err := safefs.FstatAt(dfd, n)
		if err != nil {
			return err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if depth >= maxDepth {
				return badStaged("%s is nested too deep", r)
			}
			fd, err := safefs.OpenDirAt(dfd, n)
			if err != nil {
				return badStaged("%s: %v", r, safefs.ErrnoText(err))
			}
			t.dirs[r] = fd
			if got, err := safefs.Fstat(fd); err != nil || got.Ino != st.Ino {
				return badStaged("%s changed while it was taken back", r)
			}
			if err := t.walk(fd, r, depth+1); err != nil {
				return err
			}
		case unix.S_IFREG:
			if st.Nlink != 1 {
				return badStaged("%s has %d hard links", r, st.Nlink)
			}
			fd, err := safefs.OpenAt(dfd, n, unix.O_RDONLY|unix.O_NONBLOCK, 0)
			if err != nil {
				return badStaged("%s: %v", r, safefs.ErrnoText(err))
			}
			got, err := safefs.Fstat(fd)
			if err == nil && (got.Ino != st.Ino || !safefs.IsReg(got) || got.Nlink != 1) {
				err = badStaged("%s changed while it was taken back", r)
			}
			// The file is made the committed owner's 0600 first (the
			// child's uid loses its owner's rights on it), then work/
			// being root's 0700 and every process of the pull dead, a
			// write lease, which the kernel grants only while no other
			// descriptor (and no writable mapping) is open on the inode,
			// proves nothing else can ever write it; open checks so
			// again before the file is hashed or read for the commit.
			// Without one (a descriptor kept from an earlier pull, a
			// cache file a local user planted, a filesystem without
			// leases) only a fresh copy is committed.
			e := &entry{size: got.Size, ino: got.Ino, fresh: true}
			if err == nil {
				err = safefs.SetOwner(fd, t.owner, 0o600)
			}
			if err == nil && !t.fresh && alone(fd) {
				e.fresh = false
				err = unix.Fchmod(fd, 0o644)
			}
			unix.Close(fd)
			if err != nil {
				return err
			}
			if ps, ok := t.presums[[2]uint64{got.Dev, got.Ino}]; ok && ps.Size == got.Size && !e.fresh {
				e.sum, e.alg = ps.Sum, ps.Alg
			}
			t.files[r] = e
		case unix.S_IFLNK:
			return badStaged("%s is a symbolic link", r)
		default:
			return badStaged("%s is a special file (mode %o)", r, st.Mode)
		}
	}
	return nil
}
