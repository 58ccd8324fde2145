package dest

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/pullhelper/pullhelper/dest/target"
	"github.com/pullhelper/pullhelper/internal/safefs"
	"golang.org/x/sys/unix"
)

// The partial-blob cache of a DEST: the bytes of blobs a killed or failed
// pull had already received, kept so that the next pull into the same DEST
// asks the registry only for the rest (a Range request).
//
//	<DEST's parent>/.pullhelper-partial-<name>/   root 0700, always (made by root with mkdirat; flocked by its pull)
//	    blobs/                                      root 0700 at rest; the pull uid's 0700 while a child uses it
//	        sha256-<hex>.partial                    a prefix of that blob (or all of it), as received
//
// The outer directory is never anyone else's: one that exists and is not a
// root-owned 0700 directory (planted by another user in a sticky /tmp, or
// left by an older pullhelper) is not used, not entered and not removed —
// resume is off for that pull, which says so. So no other uid, a later
// holder of the same dynamic uid included, can reach the blobs by path; the
// child gets blobs/ as a detached mount only. A blobs/ that is not root's
// (a pull whose parent was killed left it to its uid) is not adopted: the
// parent copies its kept files into a fresh root-owned blobs/ and removes
// the old one.
//
// Nothing in it is trusted: the copy serves the kept bytes and the rest from
// the network as one stream, whose digest containers/image checks, and the
// parent hashes every staged blob again before commit (containerd: leaves
// a layer's digest to containerd, which hashes what the commit writes:
// Stage.storeChecks), and commits an inode only once a write lease proved
// no one else holds it: takeBack. Entries the parent adopts are root's,
// regular, singly linked, with a blob's name and held by no one (a write
// lease); anything else is removed. When the
// parent takes the cache back from a child it keeps only blobs the image
// asked for, each at most its declared size, in all at most the image's
// size limit: those of the manifest when the parent checked it itself
// (Restrict: its bytes' digest is the pinned IMAGE@digest), otherwise the
// digests and sizes the copy announced (Want) — the child's word, so a
// compromised child can keep at most the image's size limit
// (max_image_size) of bytes of its own choosing, under this root 0700
// directory, for at most PartialMaxAge. Every kept file's times are set to
// the moment the parent took it back (and a time in the future found at
// the start of a pull is brought back to now), so the age limit counts on
// the parent's clock, not on times the child set. Files older than
// PartialMaxAge are removed at the start of a pull; the whole cache is
// removed when a pull into DEST commits, and by `pullhelper gc DEST`.
const (
	partialPrefix = ".pullhelper-partial-"
	partialBlobs  = "blobs"
	// PartialMaxAge: a kept partial blob not touched for this long is
	// removed at the start of the next pull into its DEST.
	PartialMaxAge = 7 * 24 * time.Hour
	// partialDefaultMax bounds what is kept when no image size limit is
	// given (pull.DefaultMaxImageBytes).
	partialDefaultMax = 64 << 30
)

// PartialCacheName is the cache's name in DEST's parent for a DEST named
// base.
func PartialCacheName(base string) string { return partialPrefix + shortName(base) }

// CacheRefused is the error of a cache directory that is not root's 0700:
// it is left as it is and the pull goes on without resume.
type CacheRefused struct {
	Path string
	Why  string
}

func (e *CacheRefused) Error() string {
	return fmt.Sprintf("the partial-blob cache %s %s, not a root-owned 0700 directory: not used (resume is off for this pull) and not removed; check who made it, then remove it (rm -rf %s)", e.Path, e.Why, e.Path)
}

// Partial is the partial-blob cache of one pull, held open (and flocked, so
// that a concurrent pull into the same DEST and gc leave it alone) from
// OpenPartial until Close or Remove.
type Partial struct {
	// Dir is the O_DIRECTORY descriptor of blobs/: the pipeline passes a
	// detached mount of it to the child, which sees it at /tmp/partial.
	Dir *os.File
	// Path is its host path (the in-process copy, and messages).
	Path string
	// Expired lists the entries removed because they were older than
	// PartialMaxAge; Kept counts the bytes found usable.
	Expired []string
	Kept    int64

	parent   *os.File // DEST's parent (a dup of the stage's)
	outer    *os.File // the cache directory itself (flocked)
	name     string
	stage    *Stage // whose finished blobs Close keeps (nil after Remove)
	log      *slog.Logger
	handTo   *Identity // the copy's uid, while blobs/ is handed to it
	maxBytes int64

	mu   sync.Mutex
	want map[string]int64 // cache names the image asked for → declared size (Want)
	only map[string]int64 // the checked manifest's blobs → size (Restrict); nil: none
}

// cacheDirs are a cache's held directories.
type cacheDirs struct{ outer, inner *os.File }

func (c *cacheDirs) close() {
	for _, f := range []*os.File{c.inner, c.outer} {
		if f != nil {
			f.Close()
		}
	}
}

// OpenPartial creates (root, 0700) or opens the partial-blob cache beside
// DEST, beneath the stage's held descriptor of DEST's parent, takes its
// flock, removes stale, stray and unadoptable entries and, when handTo is
// set, gives blobs/ and its entries to that uid (0700, 0600) for the copy.
// It returns nil, nil when another pull into DEST holds the cache, and a
// *CacheRefused when the cache directory is not root's 0700.
func (s *Stage) OpenPartial(handTo *Identity, log *slog.Logger) (*Partial, error) {
	if s == nil || s.parent == nil {
		return nil, fmt.Errorf("no staging area")
	}
	if s.cacheErr != nil {
		return nil, s.cacheErr // the reclaim tried already (and said so)
	}
	pfd, err := unix.FcntlInt(s.parent.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	p := &Partial{parent: os.NewFile(uintptr(pfd), s.parent.Name()), name: PartialCacheName(s.destBase()), log: discard(log),
		handTo: handTo, maxBytes: s.opts.MaxBytes, want: map[string]int64{}}
	if p.maxBytes <= 0 {
		p.maxBytes = partialDefaultMax
	}
	if s.at == s.parent {
		p.stage = s // same filesystem: Close can keep its blobs by rename
	}
	p.Path = filepath.Join(s.parent.Name(), p.name, partialBlobs)
	var c *cacheDirs
	if s.cache != nil && s.cacheName == p.name {
		// The reclaim of stale staging opened (and flocked) it already.
		c, s.cache = s.cache, nil
	} else if c, err = openCache(p.parent, p.name, p.maxBytes, p.log); err != nil || c == nil {
		p.Close()
		return nil, err
	}
	p.outer, p.Dir = c.outer, c.inner
	if err := p.adopt(time.Now().Add(-PartialMaxAge)); err != nil {
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
// parent, takes its flock and opens (or makes) its blobs/ directory. An
// existing cache directory is used only when it is a root-owned 0700
// directory (never through a symlink): from then on only this process can
// change its entries. Anything else is a *CacheRefused, left untouched.
// It returns nil, nil when another pull holds the flock.
func openCache(parent *os.File, name string, maxBytes int64, log *slog.Logger) (*cacheDirs, error) {
	path := filepath.Join(parent.Name(), name)
	pfd := int(parent.Fd())
	created := true
	if err := unix.Mkdirat(pfd, name, 0o700); err == unix.EEXIST {
		created = false
	} else if err != nil {
		return nil, fmt.Errorf("creating the partial-blob cache %s: %s", path, safefs.ErrnoText(err))
	}
	dfd, err := safefs.OpenDirAt(pfd, name)
	if err == unix.ELOOP || err == unix.ENOTDIR {
		return nil, &CacheRefused{Path: path, Why: "is a symbolic link or not a directory"}
	}
	if err != nil {
		return nil, fmt.Errorf("opening the partial-blob cache %s: %s", path, safefs.ErrnoText(err))
	}
	outer := os.NewFile(uintptr(dfd), path)
	if created {
		// Made by root just now, in a directory where no one else can
		// rename it (root's, or sticky): root:root 0700 whatever the
		// umask and a setgid parent made it.
		err = safefs.SetOwner(dfd, Identity{}, 0o700)
	} else if st, serr := safefs.Fstat(dfd); serr != nil {
		err = serr
	} else if !safefs.IsDir(st) || st.Uid != 0 || st.Mode&0o7777 != 0o700 {
		outer.Close()
		return nil, &CacheRefused{Path: path, Why: fmt.Sprintf("is owned by uid %d with mode %o", st.Uid, st.Mode&0o7777)}
	}
	if err != nil {
		outer.Close()
		return nil, fmt.Errorf("making the partial-blob cache %s root's: %v", path, err)
	}
	if err := unix.Flock(dfd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		outer.Close()
		if err == unix.EWOULDBLOCK {
			return nil, nil
		}
		return nil, fmt.Errorf("locking the partial-blob cache %s: %v", path, err)
	}
	inner, err := openBlobs(outer, maxBytes, discard(log))
	if err != nil {
		outer.Close()
		return nil, err
	}
	return &cacheDirs{outer: outer, inner: inner}, nil
}

// openBlobs opens the cache's blobs/ (held as outer, root's 0700 and
// flocked), making it root's 0700 when missing, and removes every other
// entry of outer. A blobs/ that is not a root-owned 0700 directory (a
// pull whose parent was killed left it to its uid, which a later pull may
// hold again) is not adopted: it is moved aside, its kept files that are
// that uid's, regular and singly linked are copied (at most maxBytes in
// all) into a new root-owned blobs/ — fresh inodes, so no descriptor
// opened before can write them — and the old one is removed.
func openBlobs(outer *os.File, maxBytes int64, log *slog.Logger) (*os.File, error) {
	ofd := int(outer.Fd())
	names, err := safefs.ReadDirNames(ofd)
	if err != nil {
		return nil, fmt.Errorf("reading the partial-blob cache %s: %v", outer.Name(), err)
	}
	for _, n := range names {
		if n == partialBlobs {
			continue
		}
		// A stray (an older layout's file, a directory moved aside by
		// a pull that was killed): only root could put it in here, or a
		// uid the directory was handed to by an older pullhelper.
		st, err := safefs.FstatAt(ofd, n)
		if err == nil {
			err = safefs.RemoveTree(ofd, n, int(st.Uid))
		}
		if err != nil && err != unix.ENOENT {
			log.Warn("could not remove a stray entry of the partial-blob cache", "path", filepath.Join(outer.Name(), n), "error", safefs.ErrnoText(err))
		}
	}
	path := filepath.Join(outer.Name(), partialBlobs)
	st, err := safefs.FstatAt(ofd, partialBlobs)
	if err == nil && safefs.IsDir(st) && st.Uid == 0 && st.Mode&0o7777 == 0o700 {
		fd, err := safefs.OpenDirAt(ofd, partialBlobs)
		if err != nil {
			return nil, fmt.Errorf("opening %s: %s", path, safefs.ErrnoText(err))
		}
		if got, err := safefs.Fstat(fd); err != nil || got.Ino != st.Ino || got.Uid != 0 {
			unix.Close(fd)
			return nil, fmt.Errorf("%s changed while it was opened", path)
		}
		return os.NewFile(uintptr(fd), path), nil
	}
	if err != nil && err != unix.ENOENT {
		return nil, fmt.Errorf("%s: %s", path, safefs.ErrnoText(err))
	}
	aside := ""
	if err == nil {
		aside = ".pullhelper-rm-" + safefs.RandSuffix()
		if err := unix.Renameat2(ofd, partialBlobs, ofd, aside, unix.RENAME_NOREPLACE); err != nil {
			return nil, fmt.Errorf("moving aside %s: %v", path, err)
		}
	}
	if err := unix.Mkdirat(ofd, partialBlobs, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %v", path, err)
	}
	fd, err := safefs.OpenDirAt(ofd, partialBlobs)
	if err == nil {
		if err = safefs.SetOwner(fd, Identity{}, 0o700); err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("creating %s: %s", path, safefs.ErrnoText(err))
	}
	inner := os.NewFile(uintptr(fd), path)
	if aside != "" {
		if safefs.IsDir(st) && st.Uid != 0 {
			n, b := copyKept(ofd, aside, st, fd, maxBytes)
			log.Info("copied the kept blobs a killed pull left to its uid into a fresh root-owned partial-blob cache", "path", path, "uid", st.Uid, "blobs", n, "bytes", b)
		}
		if err := safefs.RemoveTree(ofd, aside, int(st.Uid)); err != nil {
			log.Warn("could not remove the old partial-blob cache", "path", filepath.Join(outer.Name(), aside), "error", safefs.ErrnoText(err))
		}
	}
	return inner, nil
}

// copyKept copies the kept files of the directory aside (beneath ofd,
// which was st when looked at: another uid's) into the cache's blobs/
// held as dst: only regular, singly linked files of that uid with a
// blob's name, each and in all at most maxBytes; the copies are root's
// 0600 with the original's times (the age limit still applies), a time in
// the future brought back to now. Every
// file is opened O_PATH first and reopened for reading only once it is a
// regular file. It returns how many it copied and their bytes.
func copyKept(ofd int, aside string, st unix.Stat_t, dst int, maxBytes int64) (int, int64) {
	afd, err := safefs.OpenDirAt(ofd, aside)
	if err != nil {
		return 0, 0
	}
	defer unix.Close(afd)
	if got, err := safefs.Fstat(afd); err != nil || got.Ino != st.Ino || got.Uid != st.Uid {
		return 0, 0
	}
	names, err := safefs.ReadDirNames(afd)
	if err != nil {
		return 0, 0
	}
	sort.Strings(names)
	n, total := 0, int64(0)
	buf := make([]byte, 1<<20)
	for _, name := range names {
		if !target.IsPartialEntry(name) {
			continue
		}
		pfd, err := safefs.OpenAt(afd, name, unix.O_PATH, 0)
		if err != nil {
			continue
		}
		fst, err := safefs.Fstat(pfd)
		if err != nil || !safefs.IsReg(fst) || fst.Nlink != 1 || fst.Uid != st.Uid || fst.Size <= 0 || fst.Size > maxBytes-total {
			unix.Close(pfd)
			continue
		}
		rfd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", pfd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		unix.Close(pfd)
		if err != nil {
			continue
		}
		in := os.NewFile(uintptr(rfd), name)
		if got, err := safefs.Fstat(rfd); err != nil || got.Ino != fst.Ino {
			in.Close()
			continue
		}
		out, err := safefs.FileAt(dst, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
		if err != nil {
			in.Close()
			continue
		}
		w, err := io.CopyBuffer(out, io.LimitReader(in, fst.Size), buf)
		in.Close()
		ok := err == nil && w > 0 && safefs.SetOwner(int(out.Fd()), Identity{}, 0o600) == nil && out.Sync() == nil &&
			setTimes(int(out.Fd()), min(fst.Atim.Nano(), time.Now().UnixNano()), min(fst.Mtim.Nano(), time.Now().UnixNano())) == nil
		out.Close()
		if !ok {
			_ = unix.Unlinkat(dst, name, 0)
			continue
		}
		n++
		total += w
	}
	return n, total
}

// copyAs copies size bytes of the file held as fd into a new root-owned
// 0600 file of dir (an O_EXCL temporary name, synced, then renamed to
// name, replacing what is there).
func copyAs(fd int, size int64, dir int, name string) error {
	in, err := unix.Dup(fd)
	if err != nil {
		return err
	}
	src := os.NewFile(uintptr(in), name)
	defer src.Close()
	out, tmp, err := safefs.CreateTemp(dir, ".pullhelper-copy-")
	if err != nil {
		return err
	}
	defer out.Close()
	w, err := io.CopyBuffer(out, io.NewSectionReader(src, 0, size), make([]byte, 1<<20))
	if err == nil && w != size {
		err = io.ErrUnexpectedEOF
	}
	if err == nil {
		err = safefs.SetOwner(int(out.Fd()), Identity{}, 0o600)
	}
	if err == nil {
		err = out.Sync()
	}
	if err == nil {
		err = unix.Renameat(dir, tmp, dir, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dir, tmp, 0)
	}
	return err
}

// releaseCache closes a cache opened by openCache, removing it when empty.
func releaseCache(parent *os.File, c *cacheDirs, name string) {
	if names, err := safefs.ReadDirNames(int(c.inner.Fd())); err == nil && len(names) == 0 {
		_ = unix.Unlinkat(int(c.outer.Fd()), partialBlobs, unix.AT_REMOVEDIR)
	}
	if names, err := safefs.ReadDirNames(int(c.outer.Fd())); err == nil && len(names) == 0 {
		_ = unix.Unlinkat(int(parent.Fd()), name, unix.AT_REMOVEDIR)
	}
	c.close()
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

// Remove deletes the cache (the pull committed: every blob it kept is in
// DEST) and closes it. Nil-safe.
func (p *Partial) Remove() error {
	if p == nil || p.parent == nil {
		return nil
	}
	p.stage = nil
	var handed []int
	if p.handTo != nil {
		handed = append(handed, p.handTo.UID)
	}
	var err error
	if p.outer != nil {
		// The cache directory is root's 0700, held (and checked) as
		// p.outer: removed whoever owns DEST's parent.
		err = safefs.RemoveHeld(int(p.parent.Fd()), p.name, int(p.outer.Fd()), handed...)
	} else {
		err = safefs.RemoveTree(int(p.parent.Fd()), p.name, handed...)
	}
	p.Close()
	if err != nil {
		return fmt.Errorf("removing the partial-blob cache %s: %s", p.Path, safefs.ErrnoText(err))
	}
	return nil
}

// Close releases the cache, keeping its contents, and first keeps in it
// the blobs the pull finished in its staging area (a pull that failed or
// was stopped after some blobs were complete: the next pull into DEST
// does not fetch them again; see salvage) — only those the image asked
// for when a child made them (prune). Call it only when every process
// of the pull is dead, before the stage is removed (after Remove, nothing
// is kept). An empty cache is removed (nothing is left behind when
// nothing was kept). Nil-safe.
func (p *Partial) Close() {
	if p == nil {
		return
	}
	if s := p.stage; s != nil && s.root != nil && p.Dir != nil {
		if n, b := salvage(int(s.root.Fd()), int(p.Dir.Fd())); n > 0 {
			if err := p.prune(); err != nil {
				p.log.Warn("pruning the partial-blob cache", "error", err.Error())
			}
			p.log.Info("kept the blobs this pull finished in the partial-blob cache", "path", p.Path, "blobs", n, "bytes", b)
		}
	}
	p.stage = nil
	if p.Dir != nil && p.outer != nil && p.parent != nil {
		releaseCache(p.parent, &cacheDirs{outer: p.outer, inner: p.Dir}, p.name)
	} else {
		(&cacheDirs{outer: p.outer, inner: p.Dir}).close()
	}
	if p.parent != nil {
		p.parent.Close()
	}
	p.Dir, p.outer, p.parent = nil, nil, nil
}
