package dest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pullhelper/pullhelper/internal/proc"
	"github.com/pullhelper/pullhelper/internal/safefs"
	"golang.org/x/sys/unix"
)

const (
	stagingPrefix = ".pullhelper-staging-"
	ownerFile     = "owner"
	workDir       = "work"
	// LockTimeout bounds the wait for a concurrent commit into the same
	// DEST (the flock on DEST for oci:, on DEST's parent for dir:).
	LockTimeout = 2 * time.Minute
	// maxJSON bounds every JSON document the parent reads from staging or
	// DEST (index.json, manifests, configs are not read).
	maxJSON = 4 << 20
)

// Counts are what Verify verified of a staged image: its manifests (an
// index stored whole and each of its instances), its distinct layers
// (every instance's) and blobs (configs and layers), and the declared
// sizes of those blobs, as the verified manifests name them.
type Counts struct {
	Manifests int
	Layers    int
	Blobs     int
	Bytes     int64
}

// Stage is the staging area of one pull:
//
//	<at>/.pullhelper-staging-<name>-<rand>/   root 0700, never handed out
//	    owner                                  tag of this process (reclaim)
//	    work/                                  handed to the copy (HandTo, 0700)
//	        image | image.tar                  what the copy writes (Name)
//
// where <at> is DEST's parent, or DEST itself when DEST is a mount point
// (renames must stay on one filesystem).
type Stage struct {
	// Work is the O_DIRECTORY descriptor of work/. The pipeline passes it
	// to the child, which bind-mounts /proc/self/fd/N over /tmp: the child
	// is told no host path (its mountinfo still shows the mount's source).
	Work *os.File
	// WorkPath is the host path of Work, only for the in-process copy
	// (--no-isolation).
	WorkPath string
	// Name is what the copy writes inside Work: "image" or "image.tar".
	Name string
	// Known are the blobs DEST already has (oci:), handed to the copy.
	Known []KnownBlob
	// NoSync: the pull syncs no staged file or directory (the copy,
	// pull.Stage.NoSync: its partial-blob cache and staged image; hashing
	// ahead; Verify). The stores set it (containerd:,
	// containers-storage:): their Commit reads the staged blobs into the
	// store and the staging area is removed, no staged file is renamed
	// into DEST, and a synced staged blob makes the store no more durable
	// (containerd syncs each blob it ingests itself; containers/storage
	// syncs a layer's files only with its graph driver's
	// sync = "filesystem", and then the whole filesystem). The pipeline
	// clears it where the syncs are what put the pull's writes under its
	// IO limits (cgroup v1). Elsewhere every staged file and directory is
	// synced before the rename that publishes it.
	NoSync bool
	// storeChecks: the store checks each layer's digest itself as it
	// ingests the blob, refusing one that does not hash to its name
	// (containerd's content store): Verify checks a layer's size and
	// leaves its digest to the store, and nothing is hashed ahead.
	storeChecks bool
	// Reclaimed lists stale staging directories (host paths) removed
	// because the pullhelper that made them is gone.
	Reclaimed []string
	// Salvaged counts the complete-looking blobs (and their bytes) that
	// the stale staging directories of this DEST held and that were moved
	// into its partial-blob cache instead of being removed with them.
	Salvaged      int
	SalvagedBytes int64
	// ImageID is the image's ID in the store after a containers-storage
	// Commit, as podman --no-trunc and crictl show it (sha256:<ID>, the
	// config digest for a registry image); "" otherwise.
	ImageID string
	// ServedStored: the Commit stored the manifest the registry served,
	// whatever the staging converted it to (containers-storage:), so the
	// result names no destination digest.
	ServedStored bool
	// Counts are what Verify verified of the staged image (the result's
	// layers and bytes, and the bounds on its endpoints' counts).
	Counts Counts

	parent   *os.File // DEST's parent directory
	at       *os.File // where the staging root is: parent, or dest for a mount point
	root     *os.File // the staging root
	rootName string   // its name in at
	dest     *os.File // DEST when it existed at Stage (directories only)
	owner    Identity // owner of committed files: DEST's parent's owner
	opts     StageOptions
	verified *verified // set by Verify, consumed by Commit
	// cache is DEST's partial-blob cache, opened and flocked by the
	// reclaim that salvaged blobs into it; OpenPartial takes it over.
	cache     *cacheDirs
	cacheName string
	cacheErr  error // the cache could not be used (said once, by the reclaim)

	presums Presums // digests computed ahead (UsePresums)
	// extraOwners are more uids safefs.RemoveTree may find in staging (the
	// owner of a replaced dir: DEST).
	extraOwners []int
}

// lockTimeout is the commit lock's bound.
func (s *Stage) lockTimeout() time.Duration {
	if s.opts.LockTimeout > 0 {
		return s.opts.LockTimeout
	}
	return LockTimeout
}

// Remove deletes the staging area and closes every descriptor it holds.
func (s *Stage) Remove() {
	if s == nil {
		return
	}
	if s.verified != nil && s.verified.tree != nil {
		s.verified.tree.close()
	}
	if s.at != nil && s.rootName != "" {
		// The staging root is this process's (root's 0700, held as
		// s.root): removed whoever owns the directory it is in.
		var err error
		if s.root != nil {
			err = safefs.RemoveHeld(int(s.at.Fd()), s.rootName, int(s.root.Fd()), s.handed()...)
		} else {
			err = safefs.RemoveTree(int(s.at.Fd()), s.rootName, s.handed()...)
		}
		if err != nil {
			discard(s.opts.Log).Warn("could not remove the staging directory; pullhelper gc removes it once this pull is gone", "path", filepath.Join(s.at.Name(), s.rootName), "error", safefs.ErrnoText(err))
		}
	}
	if s.cache != nil && s.parent != nil {
		releaseCache(s.parent, s.cache, s.cacheName)
		s.cache = nil
	}
	for _, f := range []*os.File{s.Work, s.root, s.dest, s.parent} {
		if f != nil {
			f.Close()
		}
	}
	if s.at != nil && s.at != s.parent && s.at != s.dest {
		s.at.Close()
	}
	s.Work, s.root, s.dest, s.parent, s.at = nil, nil, nil, nil, nil
}

// Reset empties the work directory between attempts (the copy runs in
// this process: the in-process path only).
func (s *Stage) Reset() error {
	return safefs.RemoveTree(int(s.Work.Fd()), s.Name, s.handed()...)
}

// handed are the uids other than root that may own parts of the staging
// tree: DEST's parent's owner (committed files) and the pull uid.
func (s *Stage) handed() []int {
	h := append([]int{s.owner.UID}, s.extraOwners...)
	if s.opts.HandTo != nil {
		h = append(h, s.opts.HandTo.UID)
	}
	return h
}

// allowedOwner: root or the caller.
func allowedOwner(uid uint32) bool { return uid == 0 || int(uid) == os.Geteuid() }

// openParent opens and checks DEST's parent: a directory, owned by root or
// the caller (unless allowOther), and not writable by group or others
// unless sticky (like /tmp, /var/tmp).
func (b base) openParent(allowOther bool) (*os.File, unix.Stat_t, error) {
	dir := filepath.Dir(b.spec.Path)
	fd, err := openAncestors(dir, allowOther)
	if err != nil {
		return nil, unix.Stat_t{}, b.destWrap(err, "parent directory %s", dir)
	}
	f := os.NewFile(uintptr(fd), dir)
	st, err := safefs.Fstat(fd)
	if err != nil {
		f.Close()
		return nil, st, b.destWrap(err, "parent directory %s", dir)
	}
	if !allowedOwner(st.Uid) && !allowOther {
		f.Close()
		return nil, st, b.destErr("parent directory %s is owned by uid %d, not root; refusing to write there as root (the policy key dest.allow_other_owner = true allows it)", dir, st.Uid)
	}
	if st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
		f.Close()
		return nil, st, b.destErr("parent directory %s is writable by group or others and not sticky (mode %o); refusing (anyone could replace DEST)", dir, st.Mode&0o7777)
	}
	return f, st, nil
}

// openAncestors opens dir by resolving it one component at a time from /
// (a chase, like systemd's): every directory crossed before dir itself
// must be one nobody but root or the caller can change (owned by one of
// them unless allowOther, and not writable by group or others without the
// sticky bit), and a symlink is followed only when root or the caller owns
// it (the caller's /var/run → /run works; a link planted by another user,
// or a directory of theirs on the way, is refused). Every step opens with
// O_NOFOLLOW relative to the directory before it, so nothing can be
// swapped between a check and the next step.
func openAncestors(dir string, allowOther bool) (int, error) {
	fd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	at := "/"
	rest := strings.Split(strings.TrimPrefix(filepath.Clean(dir), "/"), "/")
	trusted := func(st unix.Stat_t, what string) error {
		if !allowedOwner(st.Uid) && !allowOther {
			return fmt.Errorf("%s is owned by uid %d, not root; refusing (its owner could swap the path under the root parent)", what, st.Uid)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
			return fmt.Errorf("%s is writable by group or others and not sticky (mode %o); refusing", what, st.Mode&0o7777)
		}
		return nil
	}
	fail := func(err error) (int, error) {
		unix.Close(fd)
		return -1, err
	}
	for links := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			// Only from a symlink's target: go back up by path, from /.
			parent := filepath.Dir(at)
			unix.Close(fd)
			return openAncestors(filepath.Join(append([]string{parent}, rest...)...), allowOther)
		}
		next := filepath.Join(at, c)
		st, err := safefs.FstatAt(fd, c)
		if err != nil {
			return fail(fmt.Errorf("%s: %s", next, safefs.ErrnoText(err)))
		}
		if safefs.IsLink(st) {
			if links++; links > 40 {
				return fail(fmt.Errorf("%s: too many symbolic links", dir))
			}
			if !allowedOwner(st.Uid) && !allowOther {
				return fail(fmt.Errorf("%s is a symbolic link owned by uid %d; refusing to follow it as root", next, st.Uid))
			}
			target, err := readlinkAt(fd, c)
			if err != nil {
				return fail(fmt.Errorf("%s: %s", next, safefs.ErrnoText(err)))
			}
			more := strings.Split(target, "/")
			if filepath.IsAbs(target) {
				unix.Close(fd)
				if fd, err = unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
					return -1, err
				}
				at = "/"
			}
			rest = append(more, rest...)
			continue
		}
		nfd, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("%s: %s", next, safefs.ErrnoText(err))
		}
		fd, at = nfd, next
		if len(rest) == 0 {
			break // DEST's parent itself: openParent checks it, naming it
		}
		if st, err = safefs.Fstat(fd); err != nil {
			return fail(err)
		}
		if err := trusted(st, "its ancestor "+at); err != nil {
			return fail(err)
		}
	}
	return fd, nil
}

// readlinkAt reads the symlink name in dirfd.
func readlinkAt(dirfd int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// existing looks DEST up beneath its parent without following a symlink.
// It returns (nil stat, false) when DEST does not exist.
func (b base) existing(parent *os.File, allowOther bool) (unix.Stat_t, bool, error) {
	name := filepath.Base(b.spec.Path)
	st, err := safefs.FstatAt(int(parent.Fd()), name)
	if errors.Is(err, unix.ENOENT) {
		return st, false, nil
	}
	if err != nil {
		return st, false, b.destErr("%v", err)
	}
	if safefs.IsLink(st) {
		return st, true, b.destErr("%s is a symbolic link; refusing to write through it (name the real path)", b.spec.Path)
	}
	if !allowedOwner(st.Uid) && !allowOther {
		return st, true, b.destErr("%s exists and is owned by uid %d, not root; refusing (remove it, or set the policy key dest.allow_other_owner = true)", b.spec.Path, st.Uid)
	}
	return st, true, nil
}

// newStage creates the staging root in at (DEST's parent, or DEST), its
// owner tag and the work directory, reclaiming stale staging first: the
// complete-looking blobs of this DEST's stale staging directories go to
// DEST's partial-blob cache (salvage), the rest is removed.
func (b base) newStage(o StageOptions, parent, at *os.File, pst unix.Stat_t, name string) (*Stage, error) {
	s := &Stage{parent: parent, at: at, Name: name, opts: o, owner: Identity{UID: int(pst.Uid), GID: int(pst.Gid)}}
	mine := stagingPrefix + shortName(filepath.Base(b.spec.Path)) + "-"
	tried := false
	s.Reclaimed = reclaim(at, func(n string, rootFd int) {
		// Only this DEST's, and only when the cache is on the same
		// filesystem (a DEST that is a mount point stages inside it).
		if !ownStaging(n, mine) || at != parent {
			return
		}
		if !tried {
			tried = true
			s.cacheName = PartialCacheName(filepath.Base(b.spec.Path))
			c, err := openCache(parent, s.cacheName, o.MaxBytes, o.Log)
			var refused *CacheRefused
			if err != nil {
				s.cacheErr = err // OpenPartial returns it: a refused cache is warned of there, once
			}
			if err != nil && !errors.As(err, &refused) {
				discard(o.Log).Warn("no partial-blob cache: the complete blobs of a stale staging directory are removed with it", "error", err.Error())
			}
			s.cache = c // nil when another pull holds it: nothing is moved
		}
		if s.cache == nil {
			return
		}
		k, kb := salvage(rootFd, int(s.cache.inner.Fd()))
		s.Salvaged += k
		s.SalvagedBytes += kb
	})
	for _, r := range s.Reclaimed {
		discard(o.Log).Warn("reclaimed a stale staging directory left by a pullhelper that died", "path", r)
	}
	if s.Salvaged > 0 {
		discard(o.Log).Info("kept the complete blobs of stale staging in the partial-blob cache", "blobs", s.Salvaged, "bytes", s.SalvagedBytes)
	}
	afd := int(at.Fd())
	var err error
	for range 16 {
		s.rootName = mine + safefs.RandSuffix()
		if err = unix.Mkdirat(afd, s.rootName, 0o700); err != unix.EEXIST {
			break
		}
	}
	if err != nil {
		s.rootName = ""
		return nil, b.destWrap(err, "cannot write in %s", at.Name())
	}
	fail := func(err error) (*Stage, error) {
		s.Remove()
		return nil, b.destErr("creating the staging directory in %s: %v", at.Name(), safefs.ErrnoText(err))
	}
	rfd, err := safefs.OpenDirAt(afd, s.rootName)
	if err != nil {
		return fail(err)
	}
	s.root = os.NewFile(uintptr(rfd), filepath.Join(at.Name(), s.rootName))
	if err := safefs.SetOwner(rfd, Identity{}, 0o700); err != nil {
		return fail(err)
	}
	if tag, err := proc.SelfTag(); err == nil {
		f, err := safefs.FileAt(rfd, ownerFile, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
		if err != nil {
			return fail(err)
		}
		_, err = f.WriteString(tag)
		f.Close()
		if err != nil {
			return fail(err)
		}
	}
	if err := unix.Mkdirat(rfd, workDir, 0o700); err != nil {
		return fail(err)
	}
	wfd, err := safefs.OpenDirAt(rfd, workDir)
	if err != nil {
		return fail(err)
	}
	s.WorkPath = filepath.Join(s.root.Name(), workDir)
	s.Work = os.NewFile(uintptr(wfd), s.WorkPath)
	if o.HandTo != nil {
		if err := safefs.SetOwner(wfd, *o.HandTo, 0o700); err != nil {
			return fail(err)
		}
	}
	return s, nil
}

// reclaim removes staging directories in at whose owner process is gone
// (a pullhelper that was SIGKILLed) and returns their paths. Only root-owned
// directories (never symlinks) with a readable owner tag are touched. When
// keep is set it is called, before the removal, with each stale
// directory's name and its held descriptor.
func reclaim(at *os.File, keep func(name string, rootFd int)) []string {
	names, err := safefs.ReadDirNames(int(at.Fd()))
	if err != nil {
		return nil
	}
	var out []string
	for _, n := range names {
		if !strings.HasPrefix(n, stagingPrefix) {
			continue
		}
		st, err := safefs.FstatAt(int(at.Fd()), n)
		if err != nil || !safefs.IsDir(st) || st.Uid != 0 {
			continue
		}
		fd, err := safefs.OpenDirAt(int(at.Fd()), n)
		if err != nil {
			continue
		}
		tag, err := safefs.ReadAtMost(fd, ownerFile, 64)
		if err != nil || !proc.Gone(strings.TrimSpace(string(tag))) {
			unix.Close(fd)
			continue
		}
		if keep != nil {
			keep(n, fd)
		}
		// Its work directory was the dead pull's uid's (or root's again),
		// what is below it that uid's or DEST's parent's owner's.
		handed := []int{}
		if ast, err := safefs.Fstat(int(at.Fd())); err == nil {
			handed = append(handed, int(ast.Uid))
		}
		if wst, err := safefs.FstatAt(fd, workDir); err == nil && safefs.IsDir(wst) {
			handed = append(handed, int(wst.Uid))
		}
		// Root's and checked by the descriptor held (a staging root has
		// an owner tag only pullhelper writes): removed whoever owns at.
		err = safefs.RemoveHeld(int(at.Fd()), n, fd, handed...)
		unix.Close(fd)
		if err == nil {
			out = append(out, filepath.Join(at.Name(), n))
		}
	}
	return out
}

// ownStaging: n is a staging root of the DEST whose roots start with mine
// (mine and exactly a safefs.RandSuffix, so DEST "a" never takes "a-b"'s).
func ownStaging(n, mine string) bool {
	r, ok := strings.CutPrefix(n, mine)
	return ok && len(r) == 16 && strings.Trim(r, "0123456789abcdef") == ""
}

// shortName keeps staging names under NAME_MAX whatever DEST is called.
func shortName(n string) string {
	if len(n) > 128 {
		return n[:128]
	}
	return n
}
