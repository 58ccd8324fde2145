package dest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/safefs"
	"go.podman.io/storage/pkg/regexp"
	"golang.org/x/sys/unix"
)

func init() {
	register("dir", kind{new: func(s Spec) (Destination, error) { return &dirDest{base{s}}, nil }})
}

// dirDest is dir:PATH, one image per directory: a commit replaces DEST
// whole.
type dirDest struct{ base }

// commitHook, when set by a test (or the test build, hook_hostile.go),
// runs between the steps of a commit: dir: after the exchange and after the
// old tree is removed; oci: after each blob is renamed into DEST ("blob");
// containerd: after each staged blob is written ("blob") and, before that,
// once its bytes are sent and before containerd commits them ("sent").
var commitHook func(step string)

func (d *dirDest) Stage(o StageOptions) (*Stage, error) {
	parent, pst, err := d.openParent(o.AllowOtherOwner)
	if err != nil {
		return nil, err
	}
	if _, err := d.checkExisting(parent, pst, o.AllowOtherOwner); err != nil {
		parent.Close()
		return nil, err
	}
	s, err := d.newStage(o, parent, parent, pst, "image")
	if err != nil {
		parent.Close()
		return nil, err
	}
	return s, nil
}

// checkExisting refuses a DEST that cannot be replaced: not a directory, a
// mount point (a rename cannot replace it), or a non-empty directory that
// is not a dir: image (no version file containers/image accepts). It
// returns DEST's stat (a zero one when there is no DEST).
func (d *dirDest) checkExisting(parent *os.File, pst unix.Stat_t, allowOther bool) (unix.Stat_t, error) {
	st, exists, err := d.existing(parent, allowOther)
	if err != nil || !exists {
		return st, err
	}
	if !safefs.IsDir(st) {
		return st, d.destErr("%s exists and is not a directory", d.spec.Path)
	}
	if st.Dev != pst.Dev {
		return st, d.destErr("%s is a mount point; dir: replaces DEST with one rename, which cannot replace a mount point: use a directory inside it", d.spec.Path)
	}
	fd, err := safefs.OpenDirAt(int(parent.Fd()), filepath.Base(d.spec.Path))
	if err != nil {
		return st, d.destErr("%v", safefs.ErrnoText(err))
	}
	defer unix.Close(fd)
	names, err := safefs.ReadDirNames(fd)
	if err != nil {
		return st, d.destErr("%v", err)
	}
	if len(names) == 0 {
		return st, nil
	}
	// containers/image's directory destination: a non-empty DEST is
	// replaced only when its version file says it is one of its images
	// (parseVersion: "Directory Transport Version: M.N\n", at most 1.2);
	// anything else may be someone's data.
	if v, err := safefs.ReadAtMost(fd, "version", 64); err != nil || !dirVersionRE.Match(v) {
		return st, d.destErr("%s exists, is not empty and is not a dir: image (no version file saying \"Directory Transport Version: M.N\", M.N at most 1.2); refusing to replace it", d.spec.Path)
	}
	return st, nil
}

// keepAttrs gives the staged entry (name beneath wfd, root's) the owner and
// mode (permission, setgid and sticky bits) of old, the existing DEST it is
// about to replace (as stat'd beneath its parent, never through a link).
func keepAttrs(old unix.Stat_t, wfd int, name string) error {
	if !safefs.IsReg(old) && !safefs.IsDir(old) {
		return nil // a link or anything else: nothing of it is kept
	}
	if err := unix.Fchownat(wfd, name, int(old.Uid), int(old.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	return unix.Fchmodat(wfd, name, old.Mode&0o7777, 0)
}

// Compiled when a dir: DEST first needs them, not at every process's start
// (the hex repetitions make large programs).
var (
	dirSignatureRE = regexp.Delayed(`^(?:(?:sha512-[0-9a-f]{128}|[0-9a-f]{64})\.)?signature-[0-9]+$`)
	// dirVersionRE is a version file containers/image's directory
	// transport accepts (parseVersion: the canonical "M.N", not above its
	// maxSupportedVersion 1.2).
	dirVersionRE = regexp.Delayed(`\ADirectory Transport Version: (?:0\.(?:0|[1-9][0-9]*)|1\.[012])\n\z`)
)

func dirName(alg, hx string) string {
	if alg == "sha256" {
		return hx
	}
	return alg + "-" + hx
}

func (d *dirDest) Verify(ctx context.Context, s *Stage, e Expect) error {
	if err := checkExpect(e); err != nil {
		return err
	}
	t, err := takeBack(s, e.MaxBytes)
	if err != nil {
		return verr(err)
	}
	if err := d.verifyTree(ctx, s, t, e); err != nil {
		t.close()
		return verr(err)
	}
	s.verified = &verified{tree: t}
	return nil
}

func (d *dirDest) verifyTree(ctx context.Context, s *Stage, t *tree, e Expect) error {
	v, err := t.load("version", 64)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(string(v), "Directory Transport Version: 1.") {
		return badStaged("version is not a dir: transport version file")
	}
	g := &graph{ctx: ctx, st: t, blobs: map[string]descriptor{}, path: func(alg, hx string, manifest bool) string {
		if manifest {
			return dirName(alg, hx) + ".manifest.json"
		}
		return dirName(alg, hx)
	}}
	want := e.want()
	if e.convertedIndex() {
		// The copy marked an index's zstd instances (dir: converts no
		// manifest type): checked before the graph walks it.
		raw, err := t.load("manifest.json", maxJSON)
		if err != nil {
			return err
		}
		if err := checkConvertedIndex(e, descriptor{Digest: want, Size: int64(len(raw))}, raw, false); err != nil {
			return err
		}
	}
	m, err := g.manifest(descriptor{Digest: want, Size: -1}, want == e.Digest || e.convertedIndex(), "manifest.json")
	if err != nil {
		return err
	}
	if err := g.check(e.MaxBytes); err != nil {
		return err
	}
	s.Counts = g.counts()
	if e.convertedIndex() {
		// dir: converts no manifest: only the index changes (its zstd
		// marks), every instance is stored as served.
		err = instancesAsServed(e, m)
	} else {
		err = tieToServed(e, m, func(c descriptor) ([]byte, error) {
			calg, chx, _ := splitDigest(c.Digest)
			return t.load(g.path(calg, chx, false), maxJSON)
		})
	}
	if err != nil {
		return err
	}
	// Signatures are not content-addressed and the parent cannot verify
	// them: they are not committed (the child's signature policy already
	// judged them).
	for _, r := range t.unused() {
		if dirSignatureRE.MatchString(r) {
			discard(s.opts.Log).Warn("not committing a signature the parent cannot verify", "file", r)
			if err := t.drop(r); err != nil {
				return err
			}
		}
	}
	if err := refuseUnused(t); err != nil {
		return err
	}
	return t.syncDirs()
}

// Commit puts the staged image at DEST under the commit lock of DEST's
// parent (lockInode, bounded by LockTimeout): renameat2(RENAME_NOREPLACE) when DEST does not
// exist; otherwise one renameat2(RENAME_EXCHANGE), so DEST is the old or
// the new image at every instant, then the old tree is removed from
// staging. Two pulls into one new DEST both succeed (the second exchanges).
func (d *dirDest) Commit(ctx context.Context, s *Stage) error {
	if s.verified == nil || s.verified.tree == nil {
		return failure.New(failure.Internal, "committing %s before it was verified", d.spec.Raw)
	}
	pfd := int(s.parent.Fd())
	unlock, err := lockInode(ctx, s.opts.Locks, pfd, s.lockTimeout())
	if err != nil {
		if cerr := failure.Context(ctx, "waiting for the commit lock of "+filepath.Dir(d.spec.Path)); cerr != nil {
			return cerr
		}
		return d.destErr("locking %s: %v", filepath.Dir(d.spec.Path), err)
	}
	defer unlock()
	name, wfd := filepath.Base(d.spec.Path), int(s.Work.Fd())
	err = unix.Renameat2(wfd, s.Name, pfd, name, unix.RENAME_NOREPLACE)
	if err == nil {
		return d.commitErr(unix.Fsync(pfd))
	}
	if err != unix.EEXIST {
		return d.commitErr(&os.PathError{Op: "rename", Path: d.spec.Path, Err: err})
	}
	pst, err := safefs.Fstat(pfd)
	if err != nil {
		return d.commitErr(err)
	}
	old, err := d.checkExisting(s.parent, pst, s.opts.AllowOtherOwner)
	if err != nil {
		return err
	}
	// The new DEST takes the old one's owner and mode, as containers/image
	// keeps DEST's inode (removeDirContents): a DEST restricted to a group
	// stays so.
	if err := keepAttrs(old, wfd, s.Name); err != nil {
		return d.commitErr(err)
	}
	if err := unix.Renameat2(wfd, s.Name, pfd, name, unix.RENAME_EXCHANGE); err != nil {
		return d.commitErr(&os.PathError{Op: "exchange", Path: d.spec.Path, Err: err})
	}
	if commitHook != nil {
		commitHook("exchanged")
	}
	if err := unix.Fsync(pfd); err != nil {
		return d.commitErr(err)
	}
	// The old image is now work/image: drop it (a failure here leaves it
	// to Stage.Remove; DEST is already the new image).
	// Its owner (DEST's, which allow_other_owner may let be another
	// user's) may own what is in it.
	if ost, err := safefs.FstatAt(wfd, s.Name); err == nil {
		s.extraOwners = append(s.extraOwners, int(ost.Uid))
	}
	if err := safefs.RemoveTreeCtx(ctx, wfd, s.Name, s.handed()...); err != nil && !errors.Is(err, unix.ENOENT) {
		discard(s.opts.Log).Warn("removing the replaced dir: image", "error", err.Error())
	}
	if commitHook != nil {
		commitHook("removed")
	}
	return nil
}

// instancesAsServed: every entry of the stored index m is the registry's
// entry in its place (digest, size, media type): dir: converts no
// manifest, so only the index may change (its zstd marks,
// checkConvertedIndex).
func instancesAsServed(e Expect, m *manifestDoc) error {
	served, err := parseManifest("the resolved index", e.IndexRaw)
	if err != nil {
		return err
	}
	if len(served.Manifests) != len(m.Manifests) {
		return badStaged("the stored index has %d manifests, the registry's %s %d", len(m.Manifests), e.Digest, len(served.Manifests))
	}
	for i, sv := range served.Manifests {
		if st := m.Manifests[i]; st.Digest != sv.Digest || st.Size != sv.Size || st.MediaType != sv.MediaType {
			return badStaged("the copy stored instance %d of %s as %s (%s), but dir: stores every instance as served", i+1, e.Digest, st.Digest, st.MediaType)
		}
	}
	return nil
}
