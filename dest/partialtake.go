package dest

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/dest/target"
	"github.com/pullhelper/pullhelper/internal/safefs"
	"golang.org/x/sys/unix"
)

// Taking the partial-blob cache back from the copy and keeping only what
// the image asked for (Want, Restrict, TakeBack), and the age and size
// bounds of what is kept (tidy, prune).

// give hands blobs/ and its entries to id (the copy's uid): the entries
// first, while blobs/ is still root's 0700.
func (p *Partial) give(id Identity) error {
	dfd := int(p.Dir.Fd())
	names, err := safefs.ReadDirNames(dfd)
	if err != nil {
		return fmt.Errorf("reading the partial-blob cache %s: %v", p.Path, err)
	}
	for _, n := range names {
		fd, err := safefs.OpenAt(dfd, n, unix.O_RDONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			return fmt.Errorf("opening %s in the partial-blob cache: %s", n, safefs.ErrnoText(err))
		}
		st, err := safefs.Fstat(fd)
		if err == nil && (!safefs.IsReg(st) || st.Nlink != 1 || st.Uid != 0) {
			err = fmt.Errorf("changed while it was checked")
		}
		if err == nil {
			err = safefs.SetOwner(fd, id, 0o600)
		}
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%s in the partial-blob cache: %v", n, err)
		}
	}
	if err := safefs.SetOwner(dfd, id, 0o700); err != nil {
		return fmt.Errorf("handing the partial-blob cache %s to uid %d: %v", p.Path, id.UID, err)
	}
	return nil
}

// Want records a blob the image asks for (a digest "alg:hex" and its
// declared size, as the copy announced it): when the cache is taken back
// from a child, only such blobs are kept, each at most its declared size.
// What is not a digest, has no positive size or a size beyond the image's
// limit is ignored, as are announcements beyond maxPrehash; the smaller of
// two sizes for one digest wins. Safe for concurrent use; nil-safe.
func (p *Partial) Want(d string, size int64) {
	if p == nil {
		return
	}
	alg, hx, ok := strings.Cut(d, ":")
	if !ok || !target.IsHex(alg, hx) || size <= 0 || size > p.maxBytes {
		return
	}
	name := target.PartialEntry(alg, hx)
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.want[name]; ok {
		p.want[name] = min(old, size)
	} else if len(p.want) < maxPrehash {
		p.want[name] = size
	}
}

// Restrict limits what the cache keeps when it is taken back to the blobs
// of a manifest the parent checked itself: manifest (the copy's report)
// when its digest is pinned (IMAGE@digest), or, when index's digest is
// pinned, manifest when index lists its digest. Then only the manifest's
// config and layers are kept, each at most the size the manifest declares
// (instead of what the copy announced: Want). It reports whether it did;
// without a pinned digest, or with bytes that do not match it, nothing
// changes. Nil-safe.
func (p *Partial) Restrict(pinned string, index, manifest []byte) bool {
	if p == nil || pinned == "" || len(manifest) == 0 {
		return false
	}
	pd, err := digest.Parse(pinned)
	if err != nil || !pd.Algorithm().Available() {
		return false
	}
	md := pd.Algorithm().FromBytes(manifest)
	if md != pd {
		if len(index) == 0 || pd.Algorithm().FromBytes(index) != pd {
			return false
		}
		var idx struct {
			Manifests []struct {
				Digest digest.Digest `json:"digest"`
			} `json:"manifests"`
		}
		if json.Unmarshal(index, &idx) != nil {
			return false
		}
		listed := false
		for _, m := range idx.Manifests {
			if m.Digest.Validate() == nil && m.Digest.Algorithm().Available() && m.Digest.Algorithm().FromBytes(manifest) == m.Digest {
				listed = true
				break
			}
		}
		if !listed {
			return false
		}
	}
	type desc struct {
		Digest string `json:"digest"`
		Size   int64  `json:"size"`
	}
	var m struct {
		Config *desc  `json:"config"`
		Layers []desc `json:"layers"`
	}
	if json.Unmarshal(manifest, &m) != nil || m.Config == nil {
		return false // not an image manifest (schema 1, an index): Want stays
	}
	only := map[string]int64{}
	for _, d := range append([]desc{*m.Config}, m.Layers...) {
		alg, hx, ok := strings.Cut(d.Digest, ":")
		if !ok || !target.IsHex(alg, hx) || d.Size <= 0 || d.Size > p.maxBytes || len(only) >= maxPrehash {
			continue
		}
		name := target.PartialEntry(alg, hx)
		if old, ok := only[name]; ok {
			d.Size = min(old, d.Size)
		}
		only[name] = d.Size
	}
	p.mu.Lock()
	p.only = only
	p.mu.Unlock()
	return true
}

// TakeBack makes blobs/ root's again (0700, entries root's 0600), removes
// whatever the copy left that is not a kept blob and keeps only what the
// image asked for (Want). Call it only when every process of the pull is
// dead. Nil-safe.
func (p *Partial) TakeBack() error {
	if p == nil || p.Dir == nil {
		return nil
	}
	if err := safefs.SetOwner(int(p.Dir.Fd()), Identity{}, 0o700); err != nil {
		return fmt.Errorf("taking back the partial-blob cache %s: %v", p.Path, err)
	}
	if err := p.tidy(time.Time{}, false); err != nil {
		return err
	}
	return p.prune()
}

// tidy removes every entry of blobs/ that is not a regular, singly linked
// file with a blob's name, owned by root or (after a child) by the pull
// uid (and, when olderThan is set, those last modified before it), and
// makes the others root's 0600; with adopting (kept from an earlier pull)
// also every file another descriptor is open on: a write lease, which the
// kernel grants only then, is taken and let go on each. Taking the cache
// back from a child (not adopting) sets each kept file's times to now;
// adopting brings a time in the future back to now: PartialMaxAge counts
// from when the parent last took a file back, whatever times the child
// set. Kept is recounted.
func (p *Partial) tidy(olderThan time.Time, adopting bool) error {
	dfd := int(p.Dir.Fd())
	names, err := safefs.ReadDirNames(dfd)
	if err != nil {
		return fmt.Errorf("reading the partial-blob cache %s: %v", p.Path, err)
	}
	handed := -1
	if p.handTo != nil && !adopting {
		handed = p.handTo.UID
	}
	remove := func(n string, st unix.Stat_t) error {
		if err := safefs.RemoveTree(dfd, n, int(st.Uid)); err != nil {
			return fmt.Errorf("removing %s from the partial-blob cache: %s", filepath.Join(p.Path, n), safefs.ErrnoText(err))
		}
		return nil
	}
	p.Kept = 0
	for _, n := range names {
		st, err := safefs.FstatAt(dfd, n)
		if err != nil {
			continue
		}
		stale := !olderThan.IsZero() && time.Unix(st.Mtim.Unix()).Before(olderThan)
		owned := st.Uid == 0 || (handed >= 0 && st.Uid == uint32(handed))
		if !target.IsPartialEntry(n) || !safefs.IsReg(st) || st.Nlink != 1 || stale || !owned {
			if err := remove(n, st); err != nil {
				return err
			}
			if stale {
				p.Expired = append(p.Expired, filepath.Join(p.Path, n))
			}
			continue
		}
		fd, err := safefs.OpenAt(dfd, n, unix.O_RDONLY|unix.O_NONBLOCK, 0)
		if err == unix.EAGAIN {
			// Under another process's lease: never waited for, not kept.
			if err := remove(n, st); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("opening %s in the partial-blob cache: %s", n, safefs.ErrnoText(err))
		}
		now, err := safefs.Fstat(fd)
		if err == nil && (!safefs.IsReg(now) || now.Nlink != 1 || now.Ino != st.Ino) {
			err = fmt.Errorf("changed while it was checked")
		}
		if err == nil && adopting && !alone(fd) {
			unix.Close(fd)
			p.log.Warn("discarding a kept partial blob another process holds open", "path", filepath.Join(p.Path, n))
			if err := remove(n, st); err != nil {
				return err
			}
			continue
		}
		if err == nil {
			err = safefs.SetOwner(fd, Identity{}, 0o600)
		}
		if t := time.Now().UnixNano(); err == nil && (!adopting || now.Mtim.Nano() > t || now.Atim.Nano() > t) {
			err = setTimes(fd, t, t)
		}
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%s in the partial-blob cache: %v", n, err)
		}
		p.Kept += now.Size
	}
	return nil
}

// setTimes sets the access and modification times (ns since the epoch) of
// the file held as fd.
func setTimes(fd int, atime, mtime int64) error {
	return unix.Futimes(fd, []unix.Timeval{unix.NsecToTimeval(atime), unix.NsecToTimeval(mtime)})
}

// alone reports whether no descriptor but fd (this process's, O_RDONLY)
// is open on its file and no writable mapping of it exists: the kernel
// grants a write lease only then. The lease is let go at once.
func alone(fd int) bool {
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_WRLCK); err != nil {
		return false
	}
	_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_UNLCK)
	return true
}

// prune keeps in blobs/ only the blobs the image asked for (Restrict's
// when the parent checked the manifest, else Want's), each at
// most its declared size, in all at most the image's size limit; the rest
// is removed. Only a cache handed to a child is pruned (in this process,
// the copy is the parent's own). Kept is recounted.
func (p *Partial) prune() error {
	if p == nil || p.Dir == nil || p.handTo == nil {
		return nil
	}
	dfd := int(p.Dir.Fd())
	names, err := safefs.ReadDirNames(dfd)
	if err != nil {
		return fmt.Errorf("reading the partial-blob cache %s: %v", p.Path, err)
	}
	sort.Strings(names)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.Kept = 0
	for _, n := range names {
		st, err := safefs.FstatAt(dfd, n)
		if err != nil {
			continue
		}
		want := p.want
		if p.only != nil {
			want = p.only
		}
		size, asked := want[n]
		if asked && safefs.IsReg(st) && st.Size <= size && st.Size <= p.maxBytes-p.Kept {
			p.Kept += st.Size
			continue
		}
		if err := safefs.RemoveTree(dfd, n); err != nil {
			return fmt.Errorf("removing %s from the partial-blob cache: %s", filepath.Join(p.Path, n), safefs.ErrnoText(err))
		}
		if !asked {
			p.log.Info("removed a partial blob the image did not ask for", "path", filepath.Join(p.Path, n), "bytes", st.Size)
		} else {
			p.log.Info("removed a partial blob beyond its declared size or the image's limit", "path", filepath.Join(p.Path, n), "bytes", st.Size)
		}
	}
	return nil
}

// adopt is tidy at the start of a pull.
func (p *Partial) adopt(olderThan time.Time) error { return p.tidy(olderThan, true) }
