package dest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/wire"
	"go.podman.io/image/v5/copy"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/manifest"
	"go.podman.io/image/v5/signature"
	istorage "go.podman.io/image/v5/storage"
	"go.podman.io/image/v5/types"
	"go.podman.io/storage"
	storagetypes "go.podman.io/storage/types"
	"golang.org/x/sys/unix"
)

func init() {
	register("containers-storage", kind{parse: func(raw, rest string, o ParseOptions) (Destination, error) {
		s, so, err := parseStorage(raw, rest, o)
		if err != nil {
			return nil, err
		}
		return newStorage(s, so), nil
	}})
}

// blobInfoCacheDir is where, in the staging root, the import keeps
// containers/image's blob-info cache.
const blobInfoCacheDir = "blob-info-cache"

// storageImportDir names the OCI layout the staging area is made for
// (GRAPHROOT/pullhelper-import, the Spec's Path): never created (Commit
// imports into the store instead), it only places staging and the
// partial-blob cache in GRAPHROOT, on the store's filesystem, root-only,
// where `pullhelper gc DEST` sweeps them as for an oci: DEST of that path.
const storageImportDir = "pullhelper-import"

// importHook, when set (the test build), is told of each blob the import
// has read.
var importHook func(store storage.Store, blob digest.Digest)

func newStorage(s Spec, so *storagetypes.StoreOptions) Destination {
	inner := Spec{Raw: s.Raw, Transport: "oci", Path: s.Path}
	return &storageDest{base: base{s}, opts: so, staged: &ociDest{base{inner}}}
}

// storageDest is containers-storage:[STORE]REF. The copy stages an OCI
// layout exactly as for oci: (the child never opens the store); Verify is
// oci:'s; Commit imports the verified layout into the store with
// containers/image (a local copy under the store's own locks) and names
// it REF. The image keeps the registry's manifest bytes (a Docker one too,
// which the staging converted to OCI), hence its digest, and for one
// platform of an index the index is its top-level manifest, as
// containers/image's copy from the registry stores them.
type storageDest struct {
	base
	opts   *storagetypes.StoreOptions // the store's full settings (parseStorage)
	staged *ociDest
	// manifests are the registry's manifests Verify checked, which the
	// import serves (verifiedSource: top, instance, mem); top is "" when
	// the staged top-level manifest is served (an index staged whole as
	// served, --all-architectures).
	manifests importManifests
	// platform is the platform whose image the import stores from an
	// index (Expect.Platform).
	platform *wire.Platform
	report   *StoreReport // set by Commit
}

// importManifests are the verified manifests an import serves in place of
// the staged ones: the top-level manifest (the registry's, or the index of
// which the pull copied one instance or, converted, every instance), the
// instance (one platform's), and their bytes by digest.
type importManifests struct {
	top, instance string
	raw           map[string][]byte
	// configs are the registry's configs of served Docker schema 2
	// manifests whose staged conversion re-encoded them (servedIsStaged),
	// by digest: served instead of a staged blob.
	configs map[string][]byte
}

// image is the digest of the manifest the stored image must hold: the
// instance of an index, else the top-level one ("" when the staged
// top-level manifest is served).
func (m importManifests) image() string { return cmp.Or(m.instance, m.top) }

// Committed is what Commit reported: the image ID, the store (the driver
// the store runs with, its graph and run roots, the storage.conf) and the
// image's names.
func (d *storageDest) Committed() *StoreReport { return d.report }

func (d *storageDest) store() (storage.Store, error) {
	if d.spec.Store == nil || d.opts == nil {
		return nil, failure.New(failure.Internal, "destination %s: no store settings", d.spec.Raw)
	}
	st, err := storage.GetStore(*d.opts)
	if err != nil {
		return nil, d.destWrap(err, "opening the store %s", d.spec.Store)
	}
	return st, nil
}

// Stage checks every path of the store before containers/storage touches
// any (checkStorePaths: GRAPHROOT, RUNROOT and imagestore, and their
// ancestors, nobody's but root's, created here beneath held descriptors
// when missing; the additional read-only stores checked the same way,
// never created), then lists the store's layers and stages in GRAPHROOT.
// The listing waits for the store's locks at most --lock-timeout, and
// not past o.Ctx (SIGINT, SIGTERM, the --timeout deadline).
func (d *storageDest) Stage(o StageOptions) (*Stage, error) {
	ctx := o.ctx()
	if ss := d.spec.Store; ss != nil {
		if err := checkStorePaths(ss, d.opts); err != nil {
			return nil, d.destErr("%v", err)
		}
	}
	if err := failure.Context(ctx, "opening the store"); err != nil {
		return nil, err
	}
	// Bounded: another process (podman, CRI-O) may hold the store's locks.
	type listed struct {
		known []KnownBlob
		err   error
	}
	done := make(chan listed, 1)
	go func() {
		store, err := d.store()
		if err != nil {
			done <- listed{err: err}
			return
		}
		known, err := storeLayers(store)
		_, _ = store.Shutdown(false)
		if err != nil {
			err = d.destWrap(err, "listing the store's layers")
		}
		done <- listed{known, err}
	}()
	bound := o.LockTimeout
	if bound <= 0 {
		bound = LockTimeout
	}
	t := time.NewTimer(bound)
	defer t.Stop()
	var l listed
	select {
	case l = <-done:
	case <-t.C:
		return nil, d.destErr("the store %s stayed locked by another process for %s; retry the pull (--lock-timeout bounds the wait)", d.spec.Store, bound)
	case <-ctx.Done():
		// The listing goroutine is left waiting for the store's lock
		// (it lists and shuts the store down; the pull ends meanwhile).
		return nil, failure.Context(ctx, "waiting for the store "+d.spec.Store.String()+" (locked by another process)")
	}
	if l.err != nil {
		return nil, l.err
	}
	known := l.known
	st, err := d.staged.Stage(o)
	if err != nil {
		return nil, err
	}
	st.Known, st.NoSync = known, true
	return st, nil
}

// storeLayers lists the store's layers by the digests a registry names
// them with (compressed, and uncompressed for uncompressed blobs): the
// copy skips those, and the import finds them in the store.
func storeLayers(store storage.Store) ([]KnownBlob, error) {
	layers, err := store.Layers()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []KnownBlob
	add := func(d digest.Digest, size int64) {
		if d == "" || size <= 0 || seen[d.String()] || d.Validate() != nil {
			return
		}
		seen[d.String()] = true
		out = append(out, KnownBlob{Digest: d.String(), Size: size})
	}
	for _, l := range layers {
		add(l.CompressedDigest, l.CompressedSize)
		add(l.UncompressedDigest, l.UncompressedSize)
	}
	// The images' configs (their IDs are the configs' digests; the config
	// is the image's big data under that digest): containers/image reads a
	// config from the source even when the store has it.
	configs := map[string]string{} // config digest → image ID
	if images, err := store.Images(); err == nil {
		for _, img := range images {
			cd := digest.NewDigestFromEncoded(digest.SHA256, img.ID)
			if cd.Validate() != nil || seen[cd.String()] {
				continue
			}
			size, err := store.ImageBigDataSize(img.ID, cd.String())
			if err != nil || size <= 0 {
				continue
			}
			seen[cd.String()] = true
			configs[cd.String()] = img.ID
			out = append(out, KnownBlob{Digest: cd.String(), Size: size})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Digest < out[j].Digest })
	withData(out, func(k KnownBlob) ([]byte, error) {
		id, ok := configs[k.Digest]
		if !ok {
			return nil, errNotConfig
		}
		return store.ImageBigData(id, k.Digest)
	})
	return out, nil
}

var errNotConfig = errors.New("not an image config")

func (d *storageDest) Verify(ctx context.Context, s *Stage, e Expect) error {
	if err := d.staged.Verify(ctx, s, e); err != nil {
		return err
	}
	// The parent verifies what it commits: a name with a digest names
	// exactly the image pulled (the top-level manifest, an index's
	// digest when one instance of it was copied), as containers/image's
	// copy (copySingleImage, destIsDigestedReference) and storage
	// destination (CommitWithOptions) refuse a manifest that matches
	// neither.
	if want := RefDigest(d.spec); want != "" && want != e.Digest {
		return failure.New(failure.Verification, "destination %s names digest %s, but the pull fetched %s; name the digest pulled", d.spec.Raw, want, e.Digest)
	}
	d.manifests, d.platform = importManifests{}, e.Platform
	switch {
	case e.IndexRaw != nil && e.Instance != "":
		// One platform of an index: the index is the top-level
		// manifest (its digest the image's, as containers/image's copy
		// from the registry stores it), the registry's instance the
		// only one served.
		d.manifests = importManifests{top: e.Digest, instance: e.Instance,
			raw: map[string][]byte{e.Digest: e.IndexRaw, e.Instance: e.Served}}
	case e.convertedIndex():
		// Every platform of an index the staging converted (a Docker
		// manifest list): the registry's index and instances, each
		// naming the staged blobs of the staged instance in its place.
		raw, configs, err := servedIndex(ctx, s.verified.tree, e)
		if err != nil {
			return verr(err)
		}
		d.manifests = importManifests{top: e.Digest, raw: raw, configs: configs}
		return nil
	case e.IndexRaw == nil:
		d.manifests = importManifests{top: e.Digest, raw: map[string][]byte{e.Digest: e.Served}}
	}
	if d.manifests.top != "" && e.DestDigest != "" {
		configs, err := servedIsStaged(s.verified.tree, e)
		if err != nil {
			return verr(err)
		}
		d.manifests.configs = configs
	}
	return nil
}

// importGCPercent is the garbage collector's target while an import runs.
// The import is the root parent's last and largest heap (the store's
// decompressors and tar-split writer): collected at 25 % growth instead of
// Go's 100 %, the parent's peak RSS on the bench's big image is 41-43 MiB
// instead of 49-51 (issue 26: <= 48 MiB), at no measurable cost in time (3
// interleaved triples of big and medium).
const importGCPercent = 25

var importGCState struct {
	mu      sync.Mutex
	running int // imports in this process (pullhelper cri runs several)
	before  int // the target before the first of them
}

// importGC lowers the process's GC target for an import and returns what
// restores it. The target is the process's: with concurrent imports (the
// CRI service) the first lowers it and the last restores it.
func importGC() (restore func()) {
	st := &importGCState
	st.mu.Lock()
	if st.running == 0 {
		st.before = debug.SetGCPercent(importGCPercent)
	}
	st.running++
	st.mu.Unlock()
	return func() {
		st.mu.Lock()
		defer st.mu.Unlock()
		if st.running--; st.running == 0 {
			debug.SetGCPercent(st.before)
		}
	}
}

// importStopBound bounds the wait for an import to stop once the pull's
// context is done (containers/storage's lock waits and layer writes do not
// watch it): past it Commit returns and the import is left to the store's
// own recovery of an interrupted write, as after a SIGKILL.
var importStopBound = 5 * time.Second

// Commit imports the verified layout into the store. containers/image's
// storage destination creates the image record (with its manifest and
// config) in one write after every layer is in the store, then adds
// REF's name: a kill before leaves layers no image names (no image is
// listed), a kill between the two an unnamed complete image. The source
// is the verified tree itself (verifiedSource: no path, no urls, no
// network). The whole store session (open, import, records) runs on ctx
// in a goroutine of its own: once ctx is done Commit returns within
// importStopBound, whatever the store waits for.
func (d *storageDest) Commit(ctx context.Context, s *Stage) error {
	v := s.verified
	if v == nil || v.oci == nil || v.tree == nil || s.Work == nil {
		return failure.New(failure.Internal, "committing %s before it was verified", d.spec.Raw)
	}
	if err := failure.Context(ctx, "importing into the store"); err != nil {
		return err
	}
	named, err := reference.ParseNormalizedNamed(d.spec.Ref)
	if err != nil {
		return failure.Wrap(failure.Internal, err, "")
	}
	// containers/image's blob-info cache (a SQLite file) goes in the
	// staging root (root's, 0700): removed with staging, or by the next
	// pull's reclaim or gc after a kill (never left in /tmp).
	cache := filepath.Join(s.root.Name(), blobInfoCacheDir)
	if err := unix.Mkdirat(int(s.root.Fd()), blobInfoCacheDir, 0o700); err != nil && err != unix.EEXIST {
		return failure.Wrap(failure.Destination, err, "creating the blob-info cache directory %s", cache)
	}
	defer importGC()()
	done := make(chan storeImport, 1)
	go func() { done <- d.importInto(ctx, v, named, cache) }()
	var r storeImport
	select {
	case r = <-done:
	case <-ctx.Done():
		t := time.NewTimer(importStopBound)
		defer t.Stop()
		select {
		case r = <-done: // stopped (or finished) in time
		case <-t.C:
			return failure.Context(ctx, fmt.Sprintf("importing into the store %s (the import did not stop within %s; the store recovers the interrupted write when next opened)", d.spec.Store, importStopBound))
		}
	}
	if r.err != nil {
		if cerr := failure.Context(ctx, "importing into the store "+d.spec.Store.String()); cerr != nil {
			return cerr
		}
		return r.err
	}
	s.ImageID, d.report = r.imageID, r.report
	s.ServedStored = d.manifests.top != ""
	return nil
}

// storeImport is what importInto reports back to Commit.
type storeImport struct {
	imageID string
	report  *StoreReport
	err     error
}

// importInto is Commit's store session: it opens the store, imports the
// verified tree (containers/image's blob-info cache in cache, a directory
// of the staging root) and reads the image back.
// It touches nothing of Commit's (Commit may have stopped waiting).
func (d *storageDest) importInto(ctx context.Context, v *verified, named reference.Named, cache string) storeImport {
	fail := func(err error) storeImport { return storeImport{err: err} }
	store, err := d.store()
	if err != nil {
		return fail(err)
	}
	defer func() { _, _ = store.Shutdown(false) }()
	// The registry's manifests (the index first when one platform of it
	// was pulled): containers/image stores them as its copy from the
	// registry would, the top-level one giving the image its digest, and
	// accepts REF@INDEX as it does there.
	m := d.manifests
	vs := &verifiedSource{t: v.tree, top: m.top, instance: m.instance, mem: m.raw, configs: m.configs}
	if m.top == "" {
		vs.top, _ = v.oci.manifestDigest()
	}
	src := verifiedRef{vs}
	dst, err := istorage.Transport.NewStoreReference(store, named, "")
	if err != nil {
		return fail(failure.Wrap(failure.Internal, err, ""))
	}
	// The parent judged the image with the signature policy already.
	pc, err := signature.NewPolicyContext(&signature.Policy{Default: signature.PolicyRequirements{signature.NewPRInsecureAcceptAnything()}})
	if err != nil {
		return fail(failure.Wrap(failure.Internal, err, ""))
	}
	defer func() { _ = pc.Destroy() }()
	sys := platformContext(d.platform, &types.SystemContext{BlobInfoCacheDir: cache})
	var resolved types.ImageReference
	co := &copy.Options{SourceCtx: sys, DestinationCtx: sys, PreserveDigests: true, ReportResolvedReference: &resolved}
	if importHook != nil { // the test build only (hook_hostile_storage.go)
		progress := make(chan types.ProgressProperties)
		co.Progress, co.ProgressInterval = progress, time.Hour
		defer close(progress)
		go func() {
			for p := range progress {
				if p.Event == types.ProgressEventDone {
					importHook(store, p.Artifact.Digest)
				}
			}
		}()
	}
	created, err := preApply(ctx, store, src.src)
	if err != nil {
		removeLayers(store, created)
		return fail(d.destErr("importing into the store %s: %v", d.spec.Store, err))
	}
	man, err := copy.Image(ctx, pc, dst, src, co)
	if err != nil {
		removeLayers(store, created)
		var nf *os.PathError
		if errors.As(err, &nf) && errors.Is(err, os.ErrNotExist) {
			return fail(d.destErr("a layer the pull reused from the store is gone from it; retry the pull (%v)", err))
		}
		return fail(d.destErr("importing into the store %s: %v", d.spec.Store, err))
	}
	got, err := manifest.Digest(man)
	if err != nil {
		return fail(d.destErr("importing into the store: %v", err))
	}
	// The image the import stored is the pulled one (the instance of an
	// index: the platform containers/image chose must be the pull's).
	want, isIndex := m.image(), m.instance == "" && manifest.MIMETypeIsMultiImage(manifest.GuessMIMEType(m.raw[m.top]))
	if want == "" {
		want, isIndex = v.oci.manifestDigest()
	}
	if !isIndex && got.String() != want {
		return fail(d.destErr("the store holds manifest %s, not the verified %s", got, want))
	}
	var img *storage.Image
	if resolved != nil {
		//lint:ignore SA1019 resolved names the image by the name this import just wrote, without an ID, where GetStoreImage's caveat (an ID ignored) does not arise
		img, _ = istorage.Transport.GetStoreImage(store, resolved)
	}
	if img == nil {
		img, _ = store.Image(named.String())
	}
	if img == nil {
		return storeImport{}
	}
	// As podman --no-trunc and crictl show it: sha256:<ID>.
	id := img.ID
	if digest.NewDigestFromEncoded(digest.SHA256, img.ID).Validate() == nil {
		id = "sha256:" + img.ID
	}
	return storeImport{imageID: id, report: &StoreReport{ImageID: id, Store: api.Store{
		Type: "containers-storage", Driver: store.GraphDriverName(),
		GraphRoot: store.GraphRoot(), RunRoot: store.RunRoot(), StorageConf: d.spec.Store.Conf, Names: img.Names,
	}}}
}

// manifestDigest is the staged index.json entry's digest, and whether it
// is an index (the import then stores this platform's image from it).
func (r *ociResult) manifestDigest() (string, bool) {
	var d descriptor
	_ = json.Unmarshal(r.entry, &d)
	return d.Digest, manifest.MIMETypeIsMultiImage(d.MediaType)
}
