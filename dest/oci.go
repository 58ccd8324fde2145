package dest

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/pullhelper/pullhelper/dest/target"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/safefs"
	"golang.org/x/sys/unix"
)

func init() {
	register("oci", kind{new: func(s Spec) (Destination, error) {
		d := &ociDest{base{s}}
		if s.Ref != "" {
			if _, err := target.StagedReference(s, "/", nil); err != nil {
				return nil, err
			}
		}
		return d, nil
	}})
}

// ociDest is oci:PATH[:TAG], an OCI image layout that may hold other
// images: a commit adds blobs and moves (or adds) one index entry.
type ociDest struct{ base }

// verified is what Verify proved, consumed by Commit.
type verified struct {
	tree *tree
	oci  *ociResult
}

func (d *ociDest) Stage(o StageOptions) (*Stage, error) {
	parent, pst, err := d.openParent(o.AllowOtherOwner)
	if err != nil {
		return nil, err
	}
	st, exists, err := d.existing(parent, o.AllowOtherOwner)
	if err != nil {
		parent.Close()
		return nil, err
	}
	at := parent
	var destF *os.File
	var known []KnownBlob
	if exists {
		if !safefs.IsDir(st) {
			parent.Close()
			return nil, d.destErr("%s exists and is not a directory", d.spec.Path)
		}
		destF, known, err = d.openExisting(parent)
		if err != nil {
			parent.Close()
			return nil, err
		}
		if st.Dev != pst.Dev {
			at = destF // a mount point: stage inside it, renames stay on its filesystem
		}
	}
	s, err := d.newStage(o, parent, at, pst, "image")
	if err != nil {
		if destF != nil {
			destF.Close() // *os.File: closing twice (newStage's cleanup) is harmless
		}
		parent.Close()
		return nil, err
	}
	s.dest, s.Known = destF, known
	return s, nil
}

// openExisting opens an existing DEST beneath its parent and lists the
// blobs it has. It must be empty or an OCI layout.
func (d *ociDest) openExisting(parent *os.File) (*os.File, []KnownBlob, error) {
	fd, err := safefs.OpenDirAt(int(parent.Fd()), filepath.Base(d.spec.Path))
	if err != nil {
		return nil, nil, d.destErr("%v", safefs.ErrnoText(err))
	}
	f := os.NewFile(uintptr(fd), d.spec.Path)
	names, err := safefs.ReadDirNames(fd)
	if err != nil {
		f.Close()
		return nil, nil, d.destErr("%v", err)
	}
	empty := true
	for _, n := range names {
		empty = empty && strings.HasPrefix(n, stagingPrefix)
	}
	if empty {
		return f, nil, nil
	}
	if st, err := safefs.FstatAt(fd, "oci-layout"); err != nil || !safefs.IsReg(st) {
		f.Close()
		return nil, nil, d.destErr("%s exists and is not an OCI layout (no oci-layout file)", d.spec.Path)
	}
	if _, err := d.readIndex(fd); err != nil {
		f.Close()
		return nil, nil, err
	}
	known, err := listBlobs(fd)
	if err != nil {
		f.Close()
		return nil, nil, d.destErr("%s: %v", d.spec.Path, safefs.ErrnoText(err))
	}
	return f, known, nil
}

// listBlobs lists the regular files under blobs/<alg>/ whose names are
// valid digests. Manifests are listed too: with no hard link into staging,
// nothing the copy does can touch DEST's files, and containers/image only
// asks about config and layer blobs.
func listBlobs(destFd int) ([]KnownBlob, error) {
	bfd, err := safefs.OpenDirAt(destFd, "blobs")
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: "blobs", Err: err}
	}
	defer unix.Close(bfd)
	var out []KnownBlob
	for _, alg := range []string{"sha256", "sha512"} {
		afd, err := safefs.OpenDirAt(bfd, alg)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: "blobs/" + alg, Err: err}
		}
		names, err := safefs.ReadDirNames(afd)
		if err != nil {
			unix.Close(afd)
			return nil, err
		}
		for _, n := range names {
			if !target.IsHex(alg, n) {
				continue
			}
			if st, err := safefs.FstatAt(afd, n); err == nil && safefs.IsReg(st) {
				out = append(out, KnownBlob{Digest: alg + ":" + n, Size: st.Size})
			}
		}
		unix.Close(afd)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Digest < out[j].Digest })
	// The small ones' bytes (configs: containers/image reads a config from
	// the source even when DEST has it), read beneath the held descriptor.
	withData(out, func(k KnownBlob) ([]byte, error) {
		alg, hex, _ := strings.Cut(k.Digest, ":")
		return safefs.ReadAtMost(bfd, alg+"/"+hex, KnownDataMax)
	})
	return out, nil
}

func knownMap(k []KnownBlob) map[string]int64 {
	m := make(map[string]int64, len(k))
	for _, b := range k {
		m[b.Digest] = b.Size
	}
	return m
}

func (d *ociDest) Verify(ctx context.Context, s *Stage, e Expect) error {
	if err := checkExpect(e); err != nil {
		return err
	}
	t, err := takeBack(s, e.MaxBytes)
	if err != nil {
		return verr(err)
	}
	res, err := verifyOCI(ctx, t, e, d.spec.Ref, knownMap(s.Known))
	if err == nil {
		err = refuseUnused(t)
	}
	if err == nil {
		err = t.syncDirs()
	}
	if err != nil {
		t.close()
		return verr(err)
	}
	s.verified = &verified{tree: t, oci: res}
	s.Counts = res.counts
	return nil
}

// refuseUnused: a staged file the manifest graph does not name is never
// committed, and its presence fails the pull. containers/image leaves no
// such file after a successful copy (its temporary files are renamed or
// removed), so one means the copy wrote what it should not have.
func refuseUnused(t *tree) error {
	u := t.unused()
	if len(u) == 0 {
		return nil
	}
	more := ""
	if len(u) > 3 {
		u, more = u[:3], " …"
	}
	return badStaged("%s not named by the image's manifests%s", strings.Join(u, ", "), more)
}

// verr classifies an error of Verify: I/O errors are verification
// failures too (the staged image could not be checked).
func verr(err error) error {
	if failure.CodeOf(err) != failure.Internal {
		return err
	}
	return failure.Wrap(failure.Verification, err, "checking the staged image")
}

func (d *ociDest) Commit(ctx context.Context, s *Stage) error {
	v := s.verified
	if v == nil || v.oci == nil {
		return failure.New(failure.Internal, "committing %s before it was verified", d.spec.Raw)
	}
	name := filepath.Base(d.spec.Path)
	pfd := int(s.parent.Fd())
	if s.dest == nil {
		err := unix.Renameat2(int(s.Work.Fd()), s.Name, pfd, name, unix.RENAME_NOREPLACE)
		if err == nil {
			return d.commitErr(unix.Fsync(pfd))
		}
		if err != unix.EEXIST && err != unix.ENOTEMPTY {
			return d.commitErr(&os.PathError{Op: "rename", Path: d.spec.Path, Err: err})
		}
		// A concurrent pull created DEST meanwhile: merge into it.
		st, _, err := d.existing(s.parent, s.opts.AllowOtherOwner)
		if err != nil {
			return err
		}
		if !safefs.IsDir(st) {
			return d.destErr("%s exists and is not a directory", d.spec.Path)
		}
		fd, err := safefs.OpenDirAt(pfd, name)
		if err != nil {
			return d.destErr("%v", safefs.ErrnoText(err))
		}
		s.dest = os.NewFile(uintptr(fd), d.spec.Path)
	}
	return d.merge(ctx, s, v)
}

// merge adds the staged image to the existing layout s.dest under its
// commit lock (lockInode): the index read and merged in memory first (one
// that does not parse refuses the commit before DEST changes), blobs
// (content-addressed; an existing one is kept), oci-layout when missing,
// index.json last (an O_EXCL random
// temporary name renamed over it). Every name is resolved beneath DEST
// without following symlinks: a planted symlink is refused, naming it.
func (d *ociDest) merge(ctx context.Context, s *Stage, v *verified) error {
	dfd := int(s.dest.Fd())
	unlock, err := lockInode(ctx, s.opts.Locks, dfd, s.lockTimeout())
	if err != nil {
		if cerr := failure.Context(ctx, "waiting for the commit lock of "+d.spec.Path); cerr != nil {
			return cerr
		}
		return d.destWrap(err, "locking %s", d.spec.Path)
	}
	defer unlock()
	// The held fd must still be DEST (not a directory someone renamed
	// away or removed during the pull).
	now, err := safefs.FstatAt(int(s.parent.Fd()), filepath.Base(d.spec.Path))
	held, herr := safefs.Fstat(dfd)
	if err != nil || herr != nil || now.Dev != held.Dev || now.Ino != held.Ino {
		return d.destErr("%s was removed or replaced during the pull; retry", d.spec.Path)
	}
	refuse := func(entry string, err error) error {
		return d.destErr("%s/%s: %v", d.spec.Path, entry, safefs.ErrnoText(err))
	}
	// The index merged first: one that does not parse (changed since
	// Stage) leaves DEST as it was, no blob moved in.
	old, err := d.readIndex(dfd)
	if err != nil {
		return err
	}
	data, err := mergeIndex(old, v.oci.entry)
	if err != nil {
		return d.destWrap(err, "%s/index.json", d.spec.Path)
	}
	bfd, err := safefs.MkdirAt(dfd, "blobs", s.owner)
	if err != nil {
		return refuse("blobs", err)
	}
	defer unix.Close(bfd)
	t := v.tree
	var rels []string
	for r := range t.files {
		if strings.HasPrefix(r, "blobs/") {
			rels = append(rels, r)
		}
	}
	sort.Strings(rels)
	algFds := map[string]int{}
	defer func() {
		for _, fd := range algFds {
			unix.Close(fd)
		}
	}()
	for _, r := range rels {
		alg, hx := path.Base(path.Dir(r)), path.Base(r)
		afd, ok := algFds[alg]
		if !ok {
			if afd, err = safefs.MkdirAt(bfd, alg, s.owner); err != nil {
				return refuse("blobs/"+alg, err)
			}
			algFds[alg] = afd
		}
		err := unix.Renameat2(t.dirs[dirOf(r)], hx, afd, hx, unix.RENAME_NOREPLACE)
		if err == unix.EEXIST {
			st, serr := safefs.FstatAt(afd, hx)
			if serr != nil || !safefs.IsReg(st) || st.Size != t.files[r].size {
				return d.destErr("%s/%s exists and is not the regular file of that digest; refusing", d.spec.Path, r)
			}
			continue // the same content, by its name
		}
		if err != nil {
			return refuse(r, err)
		}
		if commitHook != nil {
			commitHook("blob")
		}
	}
	for _, k := range v.oci.used {
		alg, hx, _ := splitDigest(k.Digest)
		st, err := safefs.StatBeneath(dfd, "blobs/"+alg+"/"+hx)
		if err != nil || !safefs.IsReg(st) || st.Size != k.Size {
			return d.destErr("blob %s, which the pull reused from %s, is gone or changed; retry the pull", k.Digest, d.spec.Path)
		}
	}
	for _, fd := range append(mapValues(algFds), bfd) {
		if err := unix.Fsync(fd); err != nil {
			return d.commitErr(err)
		}
	}
	switch st, err := safefs.FstatAt(dfd, "oci-layout"); {
	case errors.Is(err, unix.ENOENT):
		if err := safefs.WriteFileAt(dfd, "oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`), s.owner, true); err != nil && !errors.Is(err, unix.EEXIST) {
			return refuse("oci-layout", err)
		}
	case err != nil:
		return refuse("oci-layout", err)
	case !safefs.IsReg(st):
		return d.destErr("%s/oci-layout is not a regular file; refusing", d.spec.Path)
	}
	if err := safefs.WriteFileAt(dfd, "index.json", data, s.owner, false); err != nil {
		return refuse("index.json", err)
	}
	return d.commitErr(unix.Fsync(dfd))
}

func mapValues(m map[string]int) []int {
	var out []int
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

type ociIndex struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType,omitempty"`
	Manifests     []json.RawMessage `json:"manifests"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

// mergeIndex adds entry to DEST's index.json as containers/image's OCI
// layout destination does (ociImageDestination.addManifest): a tagged entry
// first takes its name from the first entry that has it (that entry stays,
// untagged); then the first untagged entry of the same digest is replaced
// by it, else it is appended. Every other field of every entry is kept.
func mergeIndex(old []byte, entry json.RawMessage) ([]byte, error) {
	idx, err := parseIndex(old)
	if err != nil {
		return nil, err
	}
	var nd descriptor
	if err := json.Unmarshal(entry, &nd); err != nil {
		return nil, err
	}
	descs := make([]descriptor, len(idx.Manifests))
	for i, om := range idx.Manifests {
		_ = json.Unmarshal(om, &descs[i])
	}
	if name := nd.Annotations[refNameAnnot]; name != "" {
		for i := range descs {
			if descs[i].Annotations[refNameAnnot] != name {
				continue
			}
			untagged, err := withoutRefName(idx.Manifests[i])
			if err != nil {
				return nil, err
			}
			idx.Manifests[i] = untagged
			delete(descs[i].Annotations, refNameAnnot)
			break
		}
	}
	replaced := false
	for i := range descs {
		if descs[i].Digest == nd.Digest && descs[i].Annotations[refNameAnnot] == "" {
			idx.Manifests[i], replaced = entry, true
			break
		}
	}
	if !replaced {
		idx.Manifests = append(idx.Manifests, entry)
	}
	if idx.SchemaVersion == 0 {
		idx.SchemaVersion = 2
	}
	if idx.Manifests == nil {
		idx.Manifests = []json.RawMessage{}
	}
	return json.Marshal(idx)
}

// parseIndex parses DEST's index.json (empty: none yet).
func parseIndex(old []byte) (ociIndex, error) {
	var idx ociIndex
	if len(old) > 0 {
		if err := json.Unmarshal(old, &idx); err != nil {
			return idx, err
		}
	}
	return idx, nil
}

// readIndex reads DEST's index.json (nil when there is none) and checks
// that it parses: Stage refuses a layout whose index the commit could not
// merge into before anything is fetched, and merge reads it before it
// moves any blob into DEST.
func (d *ociDest) readIndex(dfd int) ([]byte, error) {
	old, err := safefs.ReadAtMost(dfd, "index.json", maxJSON)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, d.destErr("%s/index.json: %v", d.spec.Path, safefs.ErrnoText(err))
	}
	if _, err := parseIndex(old); err != nil {
		return nil, d.destWrap(err, "%s/index.json does not parse; repair or remove the layout", d.spec.Path)
	}
	return old, nil
}

// withoutRefName is the index entry raw without its ref.name annotation
// (the annotations object dropped when nothing else is left in it), every
// other field as it was.
func withoutRefName(raw json.RawMessage) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	var ann map[string]json.RawMessage
	if a, ok := m["annotations"]; ok {
		if err := json.Unmarshal(a, &ann); err != nil {
			return nil, err
		}
	}
	delete(ann, refNameAnnot)
	if len(ann) == 0 {
		delete(m, "annotations")
	} else {
		b, err := json.Marshal(ann)
		if err != nil {
			return nil, err
		}
		m["annotations"] = b
	}
	return json.Marshal(m)
}
