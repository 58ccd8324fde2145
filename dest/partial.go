package dest

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The partial-blob cache of a DEST: the bytes of blobs a killed or failed
// pull had already received, kept so that the next pull into the same DEST
// asks the registry only for the rest (a Range request).
//
//	<DEST's parent>/.pullhelper-partial-<name>/   root 0700 at rest; the pull uid's 0700 while a child uses it
//	    sha256-<hex>.partial                        a prefix of that blob (or all of it), as received
//
// Nothing in it is trusted: the copy serves the kept bytes and the rest from
// the network as one stream, whose digest containers/image checks, and the
// parent hashes every staged blob again before commit. A file that is not a
// regular, singly linked file with a blob's name is removed whenever the
// parent takes the directory over; files older than PartialMaxAge are
// removed at the start of a pull; the whole cache is removed when a pull
// into DEST commits, and by `pullhelper gc DEST`.
const (
	partialPrefix = ".pullhelper-partial-"
	// PartialMaxAge: a kept partial blob not touched for this long is
	// removed at the start of the next pull into its DEST.
	PartialMaxAge = 7 * 24 * time.Hour
)

// partialName is the only name a cache entry may have.
var partialName = regexp.MustCompile(`^(sha256-[0-9a-f]{64}|sha512-[0-9a-f]{128})\.partial$`)

// PartialCacheName is the cache's name in DEST's parent for a DEST named
// base.
func PartialCacheName(base string) string { return partialPrefix + shortName(base) }

// Partial is the partial-blob cache of one pull, held open (and flocked, so
// that a concurrent pull into the same DEST and gc leave it alone) from
// OpenPartial until Close or Remove.
type Partial struct {
	// Dir is the O_DIRECTORY descriptor of the cache: the pipeline passes
	// a detached mount of it to the child, which sees it at /tmp/partial.
	Dir *os.File
	// Path is its host path (the in-process copy, and messages).
	Path string
	// Expired lists the entries removed because they were older than
	// PartialMaxAge; Kept counts the bytes found usable.
	Expired []string
	Kept    int64

	parent *os.File // DEST's parent (a dup of the stage's)
	name   string
	stage  *Stage // whose finished blobs Close keeps (nil after Remove)
	log    *slog.Logger
}

// OpenPartial creates (root, 0700) or opens the partial-blob cache beside
// DEST, beneath the stage's held descriptor of DEST's parent, takes its
// flock, removes stale and stray entries and, when handTo is set, gives the
// directory and its entries to that uid (0700, 0600) for the copy. It
// returns nil, nil when another pull into DEST holds the cache.
func (s *Stage) OpenPartial(handTo *Identity, log *slog.Logger) (*Partial, error) {
	if s == nil || s.parent == nil {
		return nil, fmt.Errorf("no staging area")
	}
	pfd, err := unix.FcntlInt(s.parent.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	p := &Partial{parent: os.NewFile(uintptr(pfd), s.parent.Name()), name: PartialCacheName(s.destBase()), log: discard(log)}
	if s.at == s.parent {
		p.stage = s // same filesystem: Close can keep its blobs by rename
	}
	p.Path = filepath.Join(s.parent.Name(), p.name)
	if s.cache != nil && s.cacheName == p.name {
		// The reclaim of stale staging opened (and flocked) it already.
		p.Dir, s.cache = s.cache, nil
	} else {
		if p.Dir, err = openCache(p.parent, p.name); err != nil || p.Dir == nil {
			p.Close()
			return nil, err
		}
	}
	if err := p.tidy(Identity{}, time.Now().Add(-PartialMaxAge)); err != nil {
		p.Close()
		return nil, err
	}
	for _, e := range p.Expired {
		discard(log).Info("removed a stale partial blob", "path", e, "max_age", PartialMaxAge.String())
	}
	if handTo != nil {
		if err := p.give(*handTo); err != nil {
			p.Close()
			return nil, err
		}
	}
	return p, nil
}

// openCache creates (root, 0700) or opens the cache named name beneath
// parent and takes its flock, and makes it root's: from then on only this
// process can change its entries. It returns nil, nil when another pull
// holds the flock.
func openCache(parent *os.File, name string) (*os.File, error) {
	path := filepath.Join(parent.Name(), name)
	pfd := int(parent.Fd())
	if err := unix.Mkdirat(pfd, name, 0o700); err != nil && err != unix.EEXIST {
		return nil, fmt.Errorf("creating the partial-blob cache %s: %s", path, errnoText(err))
	}
	dfd, err := openDirAt(pfd, name)
	if err != nil {
		return nil, fmt.Errorf("opening the partial-blob cache %s: %s", path, errnoText(err))
	}
	dir := os.NewFile(uintptr(dfd), path)
	if err := unix.Flock(dfd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		dir.Close()
		if err == unix.EWOULDBLOCK {
			return nil, nil
		}
		return nil, fmt.Errorf("locking the partial-blob cache %s: %v", path, err)
	}
	// Root's first: from here on only this process can change its entries.
	if err := setOwner(dfd, Identity{}, 0o700); err != nil {
		dir.Close()
		return nil, fmt.Errorf("taking over the partial-blob cache %s: %v", path, err)
	}
	return dir, nil
}

// releaseCache closes a cache opened by openCache, removing it when empty.
func releaseCache(parent, dir *os.File, name string) {
	if names, err := readDirNames(int(dir.Fd())); err == nil && len(names) == 0 {
		_ = unix.Unlinkat(int(parent.Fd()), name, unix.AT_REMOVEDIR)
	}
	dir.Close()
}

// salvage moves the complete-looking blobs of a stale staging root (held
// as rootFd, its owner dead) into the cache held as cacheFd, as
// <alg>-<hex>.partial, and returns how many it moved and their bytes. The
// places a copy leaves finished blobs in work/ are looked at, resolving
// every name beneath the held descriptors without following symlinks:
//
//	image/blobs/<alg>/<hex>                     oci: (containers/image renames a blob there once its digest matched)
//	image/<hex>, image/sha512-<hex>             dir:
//	container_images_oci*/blobs/<alg>/<hex>     oci-archive: (its unpacked layout)
//
// Only regular files with one link move, by rename on the same
// filesystem, made root's 0600 first. Moving does not make them trusted:
// the copy hashes a kept file holding a whole blob before serving it (and
// discards a mismatch or one longer than the blob), containers/image
// checks the stream and the parent hashes the staged blob again.
// docker-archive: streams blobs into its tar, which is not taken apart.
func salvage(rootFd, cacheFd int) (int, int64) {
	wfd, err := openDirAt(rootFd, workDir)
	if err != nil {
		return 0, 0
	}
	defer unix.Close(wfd)
	var n int
	var bytes int64
	add := func(k int, b int64) { n, bytes = n+k, bytes+b }
	layout := func(dirFd int, name string) {
		lfd, err := openDirAt(dirFd, name)
		if err != nil {
			return
		}
		defer unix.Close(lfd)
		for _, alg := range []string{"sha256", "sha512"} {
			if afd, err := openDirAt(lfd, "blobs/"+alg); err == nil {
				add(salvageDir(afd, cacheFd, func(f string) (string, bool) {
					return alg + "-" + f, hexRE[alg].MatchString(f)
				}))
				unix.Close(afd)
			}
		}
	}
	layout(wfd, "image")
	if ifd, err := openDirAt(wfd, "image"); err == nil {
		add(salvageDir(ifd, cacheFd, func(f string) (string, bool) {
			if hexRE["sha256"].MatchString(f) {
				return "sha256-" + f, true
			}
			h, ok := strings.CutPrefix(f, "sha512-")
			return f, ok && hexRE["sha512"].MatchString(h)
		}))
		unix.Close(ifd)
	}
	if names, err := readDirNames(wfd); err == nil {
		for _, d := range names {
			if strings.HasPrefix(d, "container_images_oci") {
				layout(wfd, d)
			}
		}
	}
	return n, bytes
}

// salvageDir moves the entries of dirFd that name accepts (it returns the
// cache name's stem, <alg>-<hex>) into the cache. An entry already kept
// there stays unless the moved one is longer (a whole blob supersedes a
// prefix of it).
func salvageDir(dirFd, cacheFd int, name func(string) (string, bool)) (int, int64) {
	names, err := readDirNames(dirFd)
	if err != nil {
		return 0, 0
	}
	var n int
	var bytes int64
	for _, f := range names {
		stem, ok := name(f)
		if !ok {
			continue
		}
		target := stem + ".partial"
		fd, err := openAt(dirFd, f, unix.O_RDONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			continue
		}
		st, err := fstat(fd)
		now, lerr := fstatAt(dirFd, f)
		ok = err == nil && lerr == nil && isReg(st) && st.Nlink == 1 && st.Size > 0 &&
			now.Dev == st.Dev && now.Ino == st.Ino && setOwner(fd, Identity{}, 0o600) == nil
		unix.Close(fd)
		if !ok {
			continue
		}
		err = unix.Renameat2(dirFd, f, cacheFd, target, unix.RENAME_NOREPLACE)
		if err == unix.EEXIST {
			if k, kerr := fstatAt(cacheFd, target); kerr == nil && isReg(k) && k.Size >= st.Size {
				continue
			}
			err = unix.Renameat(dirFd, f, cacheFd, target)
		}
		if err != nil {
			continue
		}
		// What arrived must be the inode checked (a name swapped in
		// between is not kept).
		if got, err := fstatAt(cacheFd, target); err != nil || got.Dev != st.Dev || got.Ino != st.Ino || !isReg(got) {
			_ = removeAllAt(cacheFd, target)
			continue
		}
		n++
		bytes += st.Size
	}
	return n, bytes
}

// destBase is DEST's name in its parent.
func (s *Stage) destBase() string {
	// The staging root's name is stagingPrefix + shortName(base) + "-" + rand.
	n := strings.TrimPrefix(s.rootName, stagingPrefix)
	if i := strings.LastIndex(n, "-"); i >= 0 {
		n = n[:i]
	}
	return n
}

// give hands the cache and its entries to id (the copy's uid).
func (p *Partial) give(id Identity) error {
	if err := p.tidy(id, time.Time{}); err != nil {
		return err
	}
	if err := setOwner(int(p.Dir.Fd()), id, 0o700); err != nil {
		return fmt.Errorf("handing the partial-blob cache %s to uid %d: %v", p.Path, id.UID, err)
	}
	return nil
}

// TakeBack makes the cache root's again (0700, entries root's 0600) and
// removes whatever the copy left that is not a kept blob. Call it only when
// every process of the pull is dead. Nil-safe.
func (p *Partial) TakeBack() error {
	if p == nil || p.Dir == nil {
		return nil
	}
	if err := setOwner(int(p.Dir.Fd()), Identity{}, 0o700); err != nil {
		return fmt.Errorf("taking back the partial-blob cache %s: %v", p.Path, err)
	}
	return p.tidy(Identity{}, time.Time{})
}

// tidy removes every entry that is not a regular, singly linked file with
// a blob's name (and, when olderThan is set, those last modified before
// it), and gives the others to owner (0600). Kept is recounted.
func (p *Partial) tidy(owner Identity, olderThan time.Time) error {
	dfd := int(p.Dir.Fd())
	names, err := readDirNames(dfd)
	if err != nil {
		return fmt.Errorf("reading the partial-blob cache %s: %v", p.Path, err)
	}
	p.Kept = 0
	for _, n := range names {
		st, err := fstatAt(dfd, n)
		if err != nil {
			continue
		}
		stale := !olderThan.IsZero() && time.Unix(st.Mtim.Unix()).Before(olderThan)
		if !partialName.MatchString(n) || !isReg(st) || st.Nlink != 1 || stale {
			if err := removeAllAt(dfd, n); err != nil {
				return fmt.Errorf("removing %s from the partial-blob cache: %s", filepath.Join(p.Path, n), errnoText(err))
			}
			if stale {
				p.Expired = append(p.Expired, filepath.Join(p.Path, n))
			}
			continue
		}
		fd, err := openAt(dfd, n, unix.O_RDONLY|unix.O_NONBLOCK, 0)
		if err == unix.EAGAIN {
			// Under another process's lease (a shared uid's): never
			// waited for, not kept.
			if err := removeAllAt(dfd, n); err != nil {
				return fmt.Errorf("removing %s from the partial-blob cache: %s", filepath.Join(p.Path, n), errnoText(err))
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("opening %s in the partial-blob cache: %s", n, errnoText(err))
		}
		err = setOwner(fd, owner, 0o600)
		if err == nil {
			var now unix.Stat_t
			if err = unix.Fstat(fd, &now); err == nil && (!isReg(now) || now.Nlink != 1) {
				err = fmt.Errorf("changed while it was checked")
			}
			p.Kept += now.Size
		}
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%s in the partial-blob cache: %v", n, err)
		}
	}
	return nil
}

// Remove deletes the cache (the pull committed: every blob it kept is in
// DEST) and closes it. Nil-safe.
func (p *Partial) Remove() error {
	if p == nil || p.parent == nil {
		return nil
	}
	p.stage = nil
	err := removeAllAt(int(p.parent.Fd()), p.name)
	p.Close()
	if err != nil {
		return fmt.Errorf("removing the partial-blob cache %s: %s", p.Path, errnoText(err))
	}
	return nil
}

// Close releases the cache, keeping its contents, and first keeps in it
// the blobs the pull finished in its staging area (a pull that failed or
// was stopped after some blobs were complete: the next pull into DEST
// does not fetch them again; see salvage). Call it only when every process
// of the pull is dead, before the stage is removed (after Remove, nothing
// is kept). An empty cache is removed (nothing is left behind when nothing
// was kept). Nil-safe.
func (p *Partial) Close() {
	if p == nil {
		return
	}
	if s := p.stage; s != nil && s.root != nil && p.Dir != nil {
		if n, b := salvage(int(s.root.Fd()), int(p.Dir.Fd())); n > 0 {
			p.log.Info("kept the blobs this pull finished in the partial-blob cache", "path", p.Path, "blobs", n, "bytes", b)
		}
	}
	p.stage = nil
	if p.Dir != nil && p.parent != nil {
		if names, err := readDirNames(int(p.Dir.Fd())); err == nil && len(names) == 0 {
			_ = unix.Unlinkat(int(p.parent.Fd()), p.name, unix.AT_REMOVEDIR)
		}
	}
	for _, f := range []*os.File{p.Dir, p.parent} {
		if f != nil {
			f.Close()
		}
	}
	p.Dir, p.parent = nil, nil
}

// sweepPartial removes the partial-blob cache named for DEST base in the
// directory held as dir, unless a live pull holds its flock. It returns
// the removed path, or "".
func sweepPartial(dir *os.File, base string) string {
	name := PartialCacheName(base)
	st, err := fstatAt(int(dir.Fd()), name)
	if err != nil || !isDir(st) {
		return ""
	}
	fd, err := openDirAt(int(dir.Fd()), name)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return "" // a live pull's
	}
	if removeAllAt(int(dir.Fd()), name) != nil {
		return ""
	}
	return filepath.Join(dir.Name(), name)
}

// maxHanded bounds the list of handed-over blobs the parent acts on (the
// child's word; an image has far fewer blobs).
const maxHanded = 10000

// HandOver moves the blobs the copy left whole in the cache (pull's
// Copied.Handed: digests, the child's claim) into the staged OCI layout,
// as <Name>/blobs/<alg>/<hex>, before Verify takes the stage back and
// hashes every file in it: nothing about a moved file is trusted more than
// about a file the copy wrote there. Call it only when every process of
// the pull is dead and after TakeBack (the cache is root's again). A name
// that is not a digest, a cache entry that is missing or not a regular
// file with one link, or a staged file already in its place is skipped
// (Verify then reports what is missing or wrong). It returns how many it
// moved. Nil-safe.
func (p *Partial) HandOver(s *Stage, digests []string) (int, error) {
	if p == nil || p.Dir == nil || len(digests) == 0 {
		return 0, nil
	}
	if len(digests) > maxHanded {
		return 0, badStaged("the copy handed over %d blobs, more than %d", len(digests), maxHanded)
	}
	img, err := openDirAt(int(s.Work.Fd()), s.Name)
	if err != nil {
		return 0, badStaged("%s: %v", s.Name, errnoText(err))
	}
	defer unix.Close(img)
	blobs := map[string]int{}
	defer func() {
		for _, fd := range blobs {
			unix.Close(fd)
		}
	}()
	cache := int(p.Dir.Fd())
	moved := 0
	for _, d := range digests {
		alg, hex, ok := strings.Cut(d, ":")
		if !ok || hexRE[alg] == nil || !hexRE[alg].MatchString(hex) {
			continue
		}
		name := alg + "-" + hex + ".partial"
		st, err := fstatAt(cache, name)
		if err != nil || !isReg(st) || st.Nlink != 1 {
			continue
		}
		dfd, ok := blobs[alg]
		if !ok {
			if dfd, err = blobDir(img, alg); err != nil {
				return moved, badStaged("%s/blobs/%s: %v", s.Name, alg, errnoText(err))
			}
			blobs[alg] = dfd
		}
		switch err := unix.Renameat2(cache, name, dfd, hex, unix.RENAME_NOREPLACE); err {
		case nil:
			moved++
		case unix.EEXIST:
			// The copy wrote it too: Verify judges the staged one.
		default:
			return moved, fmt.Errorf("moving %s from the partial-blob cache into staging: %v", name, err)
		}
	}
	return moved, nil
}

// CanHandOver reports whether HandOver can move the cache's files into
// s by rename: both on one mount (a DEST that is a mount point stages
// inside it, apart from the cache in its parent). Nil-safe.
func (p *Partial) CanHandOver(s *Stage) bool {
	if p == nil || p.Dir == nil || s == nil || s.Work == nil {
		return false
	}
	var a, b unix.Statx_t
	const mask = unix.STATX_MNT_ID
	if unix.Statx(int(p.Dir.Fd()), "", unix.AT_EMPTY_PATH, mask, &a) != nil ||
		unix.Statx(int(s.Work.Fd()), "", unix.AT_EMPTY_PATH, mask, &b) != nil {
		return false
	}
	if a.Mask&mask == 0 || b.Mask&mask == 0 {
		return false // a kernel without mount IDs: no handover
	}
	return a.Mnt_id == b.Mnt_id && a.Dev_major == b.Dev_major && a.Dev_minor == b.Dev_minor
}

// blobDir opens (making it when missing) blobs/<alg> beneath the staged
// layout held as img, one component at a time, never following a
// symbolic link (mkdirat does not follow one in its last component, and
// each directory is opened beneath the last).
func blobDir(img int, alg string) (int, error) {
	cur := img
	for _, name := range []string{"blobs", alg} {
		if err := unix.Mkdirat(cur, name, 0o755); err != nil && err != unix.EEXIST {
			if cur != img {
				unix.Close(cur)
			}
			return -1, err
		}
		next, err := openDirAt(cur, name)
		if cur != img {
			unix.Close(cur)
		}
		if err != nil {
			return -1, err
		}
		cur = next
	}
	return cur, nil
}
