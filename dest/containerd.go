package dest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/pkg/identifiers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/safefs"
	"github.com/pullhelper/pullhelper/internal/wire"
	"go.podman.io/image/v5/docker/reference"
	"golang.org/x/sys/unix"
)

// Defaults of the containerd: destination (the [dest] policy keys).
const (
	DefaultContainerdAddress     = "/run/containerd/containerd.sock"
	DefaultContainerdNamespace   = "k8s.io"
	DefaultContainerdSnapshotter = "overlayfs" // the CRI plugin's default
	DefaultContainerdStaging     = "/var/lib/pullhelper/containerd"

	// The CRI plugin's labels: every image it manages carries the first;
	// the second keeps an image from the kubelet's image GC.
	criImageLabel  = "io.cri-containerd.image"
	criImageValue  = "managed"
	criPinnedLabel = "io.cri-containerd.pinned"
	criPinnedValue = "pinned"

	// containerdDial bounds the first contact with the socket (Stage).
	containerdDial = 10 * time.Second
	// containerdCleanup bounds what Commit asks of containerd after the
	// pull's context is done (removing the import's lease).
	containerdCleanup = 5 * time.Second
	// containerdLease outlives any import: an import killed mid-way
	// leaves only content that containerd's GC collects once it expires.
	containerdLease = 24 * time.Hour
)

func init() {
	register("containerd", kind{new: newContainerd})
}

// ContainerdSettings say which containerd a containerd: DEST goes to. It
// is what explain shows ("containerd" in the plan).
type ContainerdSettings struct {
	// Address is containerd's gRPC socket.
	Address string `json:"address"`
	// Namespace is the containerd namespace (the CRI's is k8s.io).
	Namespace string `json:"namespace"`
	// Snapshotter unpacks the layers (the CRI's: overlayfs unless its
	// config says otherwise).
	Snapshotter string `json:"snapshotter"`
	// Pin sets io.cri-containerd.pinned=pinned on the image records;
	// without it the pins this tool set on them go (containerd_pin.go).
	Pin bool `json:"pin"`
	// Unpin (an explicit --pin=false) removes every pin of the records
	// written, the CRI's own too.
	Unpin bool `json:"unpin,omitempty"`
	// Source is the image pulled (a normalised reference): every blob
	// gets containerd.io/distribution.source.HOST=REPO from it ("": none).
	Source string `json:"source,omitempty"`
	// Config is the containerd config.toml the defaults of Address,
	// Namespace and Snapshotter came from ("" without one); From says,
	// for each of the three, what set it (a flag, a policy key, the
	// config's key, or "default").
	Config string            `json:"config,omitempty"`
	From   map[string]string `json:"from,omitempty"`
	// Staging is the root-owned directory the image is staged in (an
	// OCI layout, as for oci:) before the parent imports it.
	Staging string `json:"staging"`
}

// containerdDest is containerd:REF, imported through containerd's API
// socket by the root parent after verification. The copy stages an OCI
// layout exactly as for oci: and never opens the socket.
type containerdDest struct {
	base
	set     ContainerdSettings
	pending *ctrdVerified // set by Verify, consumed by Commit
	report  *StoreReport
}

func newContainerd(s Spec) (Destination, error) {
	ref := s.Ref
	if ref == "" { // from Parse: all of DEST after "containerd:" is REF
		ref = strings.TrimPrefix(s.Raw, "containerd:")
	}
	// As the CRI names an image (CRIImageService.PullImage:
	// reference.ParseDockerRef): docker.io's without a host, latest
	// without a tag, and REPO@DIGEST when a digest is given (a tag beside
	// it is dropped).
	named, err := reference.ParseDockerRef(ref)
	if err != nil {
		return nil, fmt.Errorf("containerd:REF: %q is not an image reference: %v", ref, err)
	}
	s.Ref = named.String()
	d := &containerdDest{base: base{s}, set: ContainerdSettings{
		Address: DefaultContainerdAddress, Namespace: DefaultContainerdNamespace,
		Snapshotter: DefaultContainerdSnapshotter, Staging: DefaultContainerdStaging,
	}}
	if s.Path != HiddenPath {
		d.spec.Path = filepath.Join(d.set.Staging, containerdStageName(s.Ref))
	}
	return d, nil
}

// containerdStageName is the name a containerd:REF DEST stages under in
// the staging directory: "image-" and 16 hex digits of the SHA-256 of
// REF. Its staging directories and its partial-blob cache
// (.pullhelper-partial-image-…) are then REF's own, so that concurrent
// pulls of different images into one staging directory (pullhelper cri)
// each keep their received bytes across a kill, instead of one of them
// holding a cache the others go without, and a later pull of another
// image dropping them.
//
// Before, every containerd: DEST staged under legacyContainerdBase, and
// its cache .pullhelper-partial-image is no image's now: the pull's sweep
// (sweepOtherCaches) and `pullhelper gc containerd:REF` remove it.
func containerdStageName(ref string) string {
	h := sha256.Sum256([]byte(ref))
	return "image-" + hex.EncodeToString(h[:8])
}

// legacyContainerdBase is the name every containerd: DEST staged under
// before the per-image names (containerdStageName).
const legacyContainerdBase = "image"

// sweepOtherCaches removes, from the containerd staging directory held as
// dir, the partial-blob caches of other images (.pullhelper-partial-image-…,
// not mine) whose blobs/ has not changed for PartialMaxAge and that no pull
// holds (sweepPartial: root's 0700 only, flock, removal beneath held
// descriptors), and the shared cache of older pullhelpers
// (.pullhelper-partial-image, legacyContainerdBase) at any age unless a
// pull holds it. With a cache per image, one whose image is never pulled
// again would otherwise stay until `pullhelper gc containerd:REF`; the old
// shared one, which nothing adopts any more, forever. It returns the
// removed paths.
func sweepOtherCaches(dir *os.File, mine string, now time.Time) []string {
	names, err := safefs.ReadDirNames(int(dir.Fd()))
	if err != nil {
		return nil
	}
	var out []string
	for _, n := range names {
		base, ok := strings.CutPrefix(n, partialPrefix)
		legacy := base == legacyContainerdBase
		if !ok || base == mine || !legacy && !strings.HasPrefix(base, "image-") {
			continue
		}
		// The old shared cache is no image's: nothing adopts it, so it
		// goes whatever its age (unless an older pullhelper's pull
		// still holds it).
		if !legacy && !staleCache(dir, n, now) {
			continue
		}
		if p, _ := sweepPartial(dir, base); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// staleCache: the cache n in dir has a blobs/ (or, without one, is
// itself) unchanged for PartialMaxAge.
func staleCache(dir *os.File, n string, now time.Time) bool {
	fd, err := safefs.OpenDirAt(int(dir.Fd()), n)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	st, err := safefs.FstatAt(fd, partialBlobs)
	if err != nil {
		st, err = safefs.Fstat(fd)
	}
	return err == nil && now.Sub(time.Unix(st.Mtim.Unix())) >= PartialMaxAge
}

// ConfigureContainerd applies the settings to a containerd: DEST (a no-op
// for any other kind: false). Empty fields keep their defaults. Errors are
// failure.Usage-worthy (the caller wraps them).
func ConfigureContainerd(d Destination, s ContainerdSettings) (ContainerdSettings, bool, error) {
	c, ok := d.(*containerdDest)
	if !ok {
		return s, false, nil
	}
	if s.Address != "" {
		c.set.Address = s.Address
	}
	if s.Namespace != "" {
		c.set.Namespace = s.Namespace
	}
	if s.Snapshotter != "" {
		c.set.Snapshotter = s.Snapshotter
	}
	if s.Staging != "" {
		c.set.Staging = s.Staging
	}
	c.set.Pin, c.set.Unpin = s.Pin, s.Unpin && !s.Pin
	c.set.Source, c.set.Config, c.set.From = s.Source, s.Config, s.From
	if err := identifiers.Validate(c.set.Namespace); err != nil {
		return c.set, true, fmt.Errorf("containerd namespace %q: %v", c.set.Namespace, err)
	}
	if !filepath.IsAbs(c.set.Staging) || filepath.Clean(c.set.Staging) == "/" {
		return c.set, true, fmt.Errorf("containerd staging directory %q: give an absolute path other than /", c.set.Staging)
	}
	if !filepath.IsAbs(c.set.Address) {
		return c.set, true, fmt.Errorf("containerd address %q: give the absolute path of its socket", c.set.Address)
	}
	c.set.Staging = filepath.Clean(c.set.Staging)
	c.spec.Path = filepath.Join(c.set.Staging, containerdStageName(c.spec.Ref))
	return c.set, true, nil
}

func (d *containerdDest) String() string { return "containerd:" + d.spec.Ref }

func (d *containerdDest) Committed() *StoreReport { return d.report }

// Stage checks the socket (before any network byte), lists the content
// store's blobs (Known: the copy skips them) and stages in Staging. Its
// calls are bounded by containerdDial and end with o.Ctx (SIGINT,
// SIGTERM, the --timeout deadline: that error, not containerd's).
func (d *containerdDest) Stage(o StageOptions) (*Stage, error) {
	c, err := d.connect()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	pctx := o.ctx()
	ctx, cancel := context.WithTimeout(namespaces.WithNamespace(pctx, d.set.Namespace), containerdDial)
	defer cancel()
	var known []KnownBlob
	err = c.ContentStore().Walk(ctx, func(i content.Info) error {
		if i.Digest.Algorithm() == digest.SHA256 && i.Digest.Validate() == nil {
			known = append(known, KnownBlob{Digest: i.Digest.String(), Size: i.Size})
		}
		return nil
	})
	if err != nil {
		if cerr := failure.Context(pctx, "listing containerd's content store"); cerr != nil {
			return nil, cerr
		}
		return nil, d.ctrdErr(err, "listing the content store")
	}
	if _, err := c.SnapshotService(d.set.Snapshotter).Stat(ctx, "pullhelper-probe-nonexistent"); err != nil && !errdefs.IsNotFound(err) {
		if cerr := failure.Context(pctx, "probing containerd's snapshotter"); cerr != nil {
			return nil, cerr
		}
		return nil, d.ctrdErr(err, "snapshotter "+d.set.Snapshotter+" (set --containerd-snapshotter)")
	}
	if err := prepareRoot(d.set.Staging, "containerd staging directory", false, true); err != nil {
		return nil, d.destErr("%v (set --containerd-staging)", err)
	}
	parent, pst, err := d.openParent(o.AllowOtherOwner)
	if err != nil {
		return nil, err
	}
	s, err := d.newStage(o, parent, parent, pst, "image")
	if err != nil {
		parent.Close()
		return nil, err
	}
	for _, p := range sweepOtherCaches(parent, filepath.Base(d.spec.Path), time.Now()) {
		discard(o.Log).Info("removed a partial-blob cache held by no pull: another image's, unchanged for 7 days, or the shared one of an older pullhelper", "path", p)
	}
	s.Known, s.NoSync, s.storeChecks = known, true, true
	return s, nil
}

func (d *containerdDest) Verify(ctx context.Context, s *Stage, e Expect) error {
	if err := checkExpect(e); err != nil {
		return err
	}
	// REPO@DIGEST names exactly the image pulled (its record is that
	// digest's, as a CRI pull by digest fetches it).
	if want := RefDigest(d.spec); want != "" && want != e.Digest {
		return failure.New(failure.Verification, "destination %s names digest %s, but the pull fetched %s; name the digest pulled", d.spec.Raw, want, e.Digest)
	}
	t, err := takeBack(s, e.MaxBytes)
	if err != nil {
		return verr(err)
	}
	res, err := verifyOCI(ctx, t, e, "", knownMap(s.Known))
	if err == nil {
		err = refuseUnused(t)
	}
	if err != nil {
		t.close()
		return verr(err)
	}
	cv := &ctrdVerified{digest: e.Digest, indexRaw: e.IndexRaw, platform: e.Platform}
	if cv.served, cv.configs, err = ctrdServed(t, e); err == nil && e.convertedIndex() {
		cv.instances, cv.configs, err = servedIndex(ctx, t, e)
	}
	if err != nil {
		t.close()
		return verr(err)
	}
	s.verified = &verified{tree: t, oci: res}
	s.Counts = res.counts
	d.pending = cv
	return nil
}

// ctrdVerified is what the containerd import needs beyond the OCI graph.
type ctrdVerified struct {
	digest   string // the registry's top-level digest (REF@digest)
	indexRaw []byte // the registry's index when digest is one
	// platform is the platform unpacked (nil: this machine's).
	platform *wire.Platform
	// served is the image manifest the registry served (nil with
	// --all-architectures of an index: the whole index goes in).
	served *servedManifest
	// instances, with --all-architectures of an index the staging
	// converted (a Docker manifest list, an OCI index with Docker or zstd
	// instances), are the registry's index and
	// instances by digest (servedIndex), which go in instead of the
	// staged conversions; nil: the staged index is the registry's.
	instances map[string][]byte
	// configs are the registry's configs of served Docker schema 2
	// manifests whose staged conversion re-encoded them (servedIsStaged),
	// by digest: written instead of a staged blob.
	configs map[string][]byte
}

// indexDesc is the descriptor of the registry's index (indexRaw, parsed as
// idx): its own media type, else an OCI index's (the registry's
// Content-Type for one without).
func (cv *ctrdVerified) indexDesc(idx *ocispec.Index) ocispec.Descriptor {
	mt := idx.MediaType
	if mt == "" {
		mt = ocispec.MediaTypeImageIndex
	}
	return ocispec.Descriptor{MediaType: mt, Digest: digest.Digest(cv.digest), Size: int64(len(cv.indexRaw))}
}

// servedManifest is an image manifest as the registry served it: what
// containerd's own pull writes (remotes.FetchHandler stores each manifest
// as fetched, its media type the served one).
type servedManifest struct {
	desc ocispec.Descriptor
	raw  []byte
}

// ctrdServed is the image manifest the import writes: the one the registry
// served (Expect.Served, checked against Instance or Digest by checkExpect),
// not the staging's conversion of it (an oci: layout stores a Docker schema
// 2 manifest as OCI: DestDigest). A converted manifest must name exactly
// the staged config and layers, which Verify checked (servedIsStaged), as
// the served one's blobs are the ones imported. nil when the registry
// served an index and every instance was staged (--all-architectures).
func ctrdServed(t *tree, e Expect) (*servedManifest, map[string][]byte, error) {
	if e.Instance == "" && e.IndexRaw != nil && e.AllArchitectures {
		return nil, nil, nil
	}
	m, err := parseManifest("the served manifest", e.Served)
	if err != nil {
		return nil, nil, err
	}
	if m.isIndex() {
		if e.Instance == "" && e.AllArchitectures {
			return nil, nil, nil
		}
		return nil, nil, badStaged("the served manifest %s is an index, not the image copied", e.source())
	}
	mt := m.MediaType
	switch mt {
	case "":
		mt = ocispec.MediaTypeImageManifest // the registry's Content-Type for one without
	case ocispec.MediaTypeImageManifest, images.MediaTypeDockerSchema2Manifest:
	default:
		return nil, nil, badStaged("the served manifest %s has a media type that is neither an OCI nor a Docker schema 2 image manifest's", e.source())
	}
	var configs map[string][]byte
	if e.DestDigest != "" {
		if configs, err = servedIsStaged(t, e); err != nil {
			return nil, nil, err
		}
	}
	return &servedManifest{
		desc: ocispec.Descriptor{MediaType: mt, Digest: digest.Digest(e.source()), Size: int64(len(e.Served))},
		raw:  e.Served,
	}, configs, nil
}

// ctrdBlob reads a verified blob: staged (the inode taken back), or known
// (already in the content store: nil).
func (t *tree) ctrdBlob(dg string) (*os.File, bool, error) {
	alg, hx, err := splitDigest(dg)
	if err != nil {
		return nil, false, err
	}
	rel := "blobs/" + alg + "/" + hx
	if _, ok := t.files[rel]; !ok {
		return nil, false, nil
	}
	f, _, err := t.open(rel)
	return f, true, err
}

// Commit imports the verified layout: every staged blob into the content
// store under a lease (GC keeps nothing it cannot reach once the lease
// goes), with the gc.ref labels from index and manifest to their
// children; the layers unpacked for the snapshotter; the image records
// REF, REPO@DIGEST and the image ID last, so the CRI (which follows image
// events) lists the image only once it is complete.
//
// Every call runs on ctx (the pull's deadline and signals): once it is
// done the import stops, and the lease is let go within containerdCleanup.
func (d *containerdDest) Commit(ctx context.Context, s *Stage) (err error) {
	v, cv := s.verified, d.pending
	if v == nil || v.oci == nil || v.tree == nil || cv == nil {
		return failure.New(failure.Internal, "committing %s before it was verified", d.spec.Raw)
	}
	defer func() {
		if err != nil {
			if cerr := failure.Context(ctx, "importing into containerd at "+d.set.Address); cerr != nil {
				err = cerr
			}
		}
	}()
	if err := failure.Context(ctx, "importing into containerd"); err != nil {
		return err
	}
	var top descriptor
	if err := json.Unmarshal(v.oci.entry, &top); err != nil {
		return d.destErr("%v", err)
	}
	c, err := d.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx = namespaces.WithNamespace(ctx, d.set.Namespace)
	ctx, done, err := c.WithLease(ctx, leases.WithExpiration(containerdLease))
	if err != nil {
		return d.ctrdErr(err, "creating a lease")
	}
	defer func() {
		// Bounded: containerd may be what stopped answering (the
		// lease expires by itself anyway).
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), containerdCleanup)
		defer cancel()
		_ = done(cctx)
	}()
	lease, _ := leases.FromContext(ctx)
	cs := c.ContentStore()
	t := v.tree
	// Every blob written or reused gets the CRI's distribution source
	// label (containerd's own handler: docker.AppendDistributionSourceLabel,
	// as client.Pull and the transfer service's pull run it on each
	// descriptor they fetch).
	var srcLabel images.HandlerFunc
	if d.set.Source != "" {
		if srcLabel, err = docker.AppendDistributionSourceLabel(cs, d.set.Source); err != nil {
			return d.destErr("distribution source %s: %v", d.set.Source, err)
		}
	}

	// put writes one blob (staged) or checks it is still in the store
	// (known), then sets labels; either way the lease holds it.
	put := func(desc ocispec.Descriptor, raw []byte, labels map[string]string) error {
		dg := desc.Digest.String()
		if err := c.LeasesService().AddResource(ctx, leases.Lease{ID: lease}, leases.Resource{ID: dg, Type: "content"}); err != nil {
			return d.ctrdErr(err, "leasing "+dg)
		}
		switch f, staged, err := t.ctrdBlob(dg); {
		case err != nil:
			return verr(err)
		case raw != nil:
			if f != nil {
				f.Close()
			}
			if err := writeFresh(ctx, cs, "pullhelper-"+dg, strings.NewReader(string(raw)), desc); err != nil {
				return d.ctrdErr(err, "writing "+dg)
			}
		case staged:
			err := writeFresh(ctx, cs, "pullhelper-"+dg, f, desc)
			f.Close()
			if errdefs.IsFailedPrecondition(err) {
				// The content store's digest or size check: Verify left
				// each layer's digest to it (Stage.storeChecks).
				return badStaged("blob %s is not what its digest names: containerd's check refused it (%s)", dg, strings.ReplaceAll(err.Error(), "\n", " "))
			}
			if err != nil {
				return d.ctrdErr(err, "writing "+dg)
			}
			hook("blob")
		default:
			info, err := cs.Info(ctx, desc.Digest)
			if err != nil || info.Size != desc.Size {
				return d.destErr("blob %s, which the pull reused from the content store, is gone or changed; retry the pull", dg)
			}
		}
		if len(labels) > 0 {
			var paths []string
			for k := range labels {
				paths = append(paths, "labels."+k)
			}
			if _, err := cs.Update(ctx, content.Info{Digest: desc.Digest, Labels: labels}, paths...); err != nil {
				return d.ctrdErr(err, "labelling "+dg)
			}
		}
		if srcLabel != nil {
			if _, err := srcLabel(ctx, desc); err != nil {
				return d.ctrdErr(err, "labelling "+dg+" with its distribution source")
			}
		}
		return nil
	}

	// putManifest imports one image manifest, raw (verified): its config
	// and layers, then the manifest labelled to them (ChildGCLabels).
	// With ahead (the manifest img.Unpack unpacks below: unpackAhead),
	// each layer is applied for the snapshotter as soon as it and the
	// layers before it are in the content store, while the next ones are
	// written.
	putManifest := func(desc ocispec.Descriptor, raw []byte, ahead bool) (*ocispec.Manifest, error) {
		var m ocispec.Manifest
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, verr(err)
		}
		if m.Config.Digest == "" {
			return nil, verr(fmt.Errorf("the verified manifest %s names no config", desc.Digest))
		}
		all := append([]ocispec.Descriptor{m.Config}, m.Layers...)
		children := all
		var ua *unpackAhead // nil: Unpack applies every layer after the writes
		if ahead {
			// The config first (the layers' diff IDs), then each layer
			// applied while the next ones are written.
			if err := put(m.Config, cv.configs[m.Config.Digest.String()], nil); err != nil {
				return nil, err
			}
			ua = d.startUnpack(ctx, c.Client, &m)
			children = m.Layers
		}
		err = putAll(children, ua.parallel(), func(b ocispec.Descriptor) error {
			if ua.stopped() {
				return errUnpackStopped
			}
			err := put(b, cv.configs[b.Digest.String()], nil) // the registry's config when the staging re-encoded it
			ua.written(b.Digest, err)
			return err
		})
		if err == nil {
			err = put(desc, raw, childGCLabels(all))
		}
		if uerr := ua.wait(err); uerr != nil && (err == nil || errors.Is(err, errUnpackStopped)) {
			return nil, d.ctrdErr(uerr, "unpacking for snapshotter "+d.set.Snapshotter)
		}
		if err != nil {
			return nil, err
		}
		return &m, nil
	}

	// The platform Unpack picks and unpacks: --platform's, else this
	// machine's (what containerd.NewImage's client default is).
	matcher := platforms.Default()
	if cv.platform != nil {
		matcher = ctrdPlatform(cv.platform)
	}
	mdesc := ocispec.Descriptor{MediaType: top.MediaType, Digest: digest.Digest(top.Digest), Size: top.Size}
	var imageID string
	target := mdesc
	if images.IsIndexType(top.MediaType) != (cv.served == nil) {
		return verr(fmt.Errorf("the staged top %s and the served manifest disagree on whether the image is an index", top.Digest))
	}
	if cv.served == nil {
		// --all-architectures: every instance is staged (verifyOCI
		// checked each). All of them go in, the index is the target,
		// labelled to every child. The staged top is the index itself,
		// unless the staging converted it (a Docker manifest list, an OCI
		// index with Docker or zstd instances): the
		// registry's index and instances go in then, as containerd's
		// own pull stores them, each naming the staged blobs.
		idxRaw := cv.indexRaw
		if cv.instances == nil {
			if idxRaw, err = stagedRaw(t, top.Digest); err != nil {
				return err
			}
		}
		var idx ocispec.Index
		if err := json.Unmarshal(idxRaw, &idx); err != nil {
			return verr(err)
		}
		if cv.instances != nil {
			mdesc = cv.indexDesc(&idx)
			target = mdesc
		}
		for _, e := range idx.Manifests {
			if images.IsIndexType(e.MediaType) {
				return verr(fmt.Errorf("index %s names index %s (nested indexes are refused)", mdesc.Digest, e.Digest))
			}
			raw, ok := cv.instances[e.Digest.String()]
			switch {
			case cv.instances == nil:
				if raw, err = stagedRaw(t, e.Digest.String()); err != nil {
					return err
				}
			case !ok:
				return verr(fmt.Errorf("instance %s of index %s was not verified", e.Digest, mdesc.Digest))
			}
			if _, err := putManifest(e, raw, false); err != nil {
				return err
			}
		}
		if err := put(mdesc, idxRaw, childGCLabels(idx.Manifests)); err != nil {
			return err
		}
	} else {
		// The manifest the registry served, as containerd's pull stores
		// it (a Docker one too, which the staging converted to OCI): the
		// target without an index, else the index's child.
		mdesc = cv.served.desc
		target = mdesc
		// The registry's index (verified against the digest), when it is
		// the records' target.
		var idx *ocispec.Index
		if cv.digest != mdesc.Digest.String() && len(cv.indexRaw) > 0 {
			idx = &ocispec.Index{}
			if err := json.Unmarshal(cv.indexRaw, idx); err != nil {
				return verr(err)
			}
		}
		// Unpacked ahead if it is the manifest Unpack will pick: the
		// target itself, or the registry's index's pick for the matcher.
		ahead := idx == nil || unpackPicks(idx.Manifests, mdesc.Digest, matcher)
		m, err := putManifest(mdesc, cv.served.raw, ahead)
		if err != nil {
			return err
		}
		imageID = m.Config.Digest.String()
		if idx != nil {
			// Labelled to every child as containerd's own pull labels it
			// (SetChildrenMappedLabels runs before FilterPlatforms): only
			// the instance copied is in the store.
			target = cv.indexDesc(idx)
			if err := put(target, cv.indexRaw, childGCLabels(idx.Manifests)); err != nil {
				return err
			}
		}
	}

	img := containerd.NewImageWithPlatform(c.Client, images.Image{Name: d.spec.Ref, Target: target}, matcher)
	// The layers of a single manifest are unpacked already (putManifest):
	// Unpack finds each snapshot and labels the config to the top one.
	if err := img.Unpack(ctx, d.set.Snapshotter); err != nil {
		return d.ctrdErr(err, "unpacking for snapshotter "+d.set.Snapshotter)
	}
	if imageID == "" {
		// This platform's config, as the CRI names the image
		// (image.Config: the platform matcher picks the instance).
		cfg, err := img.Config(ctx)
		if err != nil {
			return d.ctrdErr(err, "finding this platform's image in "+top.Digest)
		}
		imageID = cfg.Digest.String()
	}

	names, err := d.names(cv.digest, imageID)
	if err != nil {
		return err
	}
	if err := d.writeRecords(ctx, c.ImageService(), names, target); err != nil {
		return err
	}
	d.report = &StoreReport{ImageID: imageID, Store: api.Store{
		Type: "containerd", Address: d.set.Address, Namespace: d.set.Namespace, Snapshotter: d.set.Snapshotter,
		Pinned: d.set.Pin, Names: names,
	}}
	// The served manifest is what the store holds, not the staging's
	// conversion of it: the result names no destination digest.
	s.ServedStored = cv.served != nil || cv.instances != nil
	return nil
}

// freshBufs are writeFresh's copy buffers (containerd's own copy uses 1 MiB).
var freshBufs = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// writeFresh is content.WriteBlob that never resumes an ingest: what an
// earlier import left under ref (one killed mid-write, or one whose commit
// containerd refused because its child's bytes did not hash to the
// digest: Verify leaves the layers' digests to containerd) is truncated,
// and the whole of r is sent. containerd commits the blob only if what it
// was sent has desc's digest and size; a blob already in the store is not
// written again.
func writeFresh(ctx context.Context, cs content.Ingester, ref string, r io.Reader, desc ocispec.Descriptor) error {
	cw, err := content.OpenWriter(ctx, cs, content.WithRef(ref), content.WithDescriptor(desc))
	if err != nil {
		if errdefs.IsAlreadyExists(err) {
			return nil
		}
		return fmt.Errorf("failed to open writer: %w", err)
	}
	defer cw.Close()
	st, err := cw.Status()
	if err != nil {
		return err
	}
	if st.Offset != 0 {
		// The next write (or the commit) goes to offset 0, which
		// truncates the ingest and restarts its digest.
		if err := cw.Truncate(0); err != nil {
			return err
		}
	}
	bp := freshBufs.Get().(*[]byte)
	n, err := io.CopyBuffer(cw, io.LimitReader(r, desc.Size), *bp)
	freshBufs.Put(bp)
	if err != nil {
		return err
	}
	if n != desc.Size {
		return fmt.Errorf("%s ended at %d of %d bytes: %w", ref, n, desc.Size, io.ErrUnexpectedEOF)
	}
	hook("sent")
	if err := cw.Commit(ctx, desc.Size, desc.Digest); err != nil && !errdefs.IsAlreadyExists(err) {
		return fmt.Errorf("failed commit on ref %q: %w", ref, err)
	}
	return nil
}

// putParallel is how many blobs of one manifest are written into
// containerd's content store at once: each writer streams a staged file
// while containerd hashes and syncs another (the four layers of the
// bench's big image: 470 ms one after the other).
const putParallel = 3

// hookMu serialises the test build's commitHook across putAll's writers.
var hookMu sync.Mutex

// hook runs commitHook, if set, for one step of the import (serialised:
// putAll's writers call it at once).
func hook(step string) {
	if commitHook == nil {
		return
	}
	hookMu.Lock()
	defer hookMu.Unlock()
	commitHook(step)
}

// putAll runs put on every descriptor, in order, at most parallel at a time, and
// returns the first error once every started put has returned (the
// content of a failed Commit goes with its lease).
func putAll(descs []ocispec.Descriptor, parallel int, put func(ocispec.Descriptor) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		slots = make(chan struct{}, parallel)
	)
	for _, b := range descs {
		slots <- struct{}{}
		// After the slot: a put that failed while this one waited
		// stops the rest.
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed {
			<-slots
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := put(b); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}

// stagedRaw reads a staged, verified JSON blob (a manifest, an index or a
// config).
func stagedRaw(t *tree, dg string) ([]byte, error) {
	f, _, err := t.ctrdBlob(dg)
	if err != nil || f == nil {
		return nil, verr(fmt.Errorf("the verified manifest %s is not staged", dg))
	}
	defer f.Close()
	raw, err := readAll(f, maxJSON)
	if err != nil {
		return nil, verr(err)
	}
	return raw, nil
}

// childGCLabels are the labels containerd's pull sets on a manifest or
// index for its children (images.SetChildrenMappedLabels with the default
// images.ChildGCLabels): one key per child, numbered per key
// (gc.ref.content.config, gc.ref.content.l.0, …, gc.ref.content.m.0, …).
func childGCLabels(children []ocispec.Descriptor) map[string]string {
	out := map[string]string{}
	n := map[string]int{}
	for _, ch := range children {
		for _, key := range images.ChildGCLabels(ch) {
			i := n[key]
			n[key] = i + 1
			if strings.HasSuffix(key, ".sha256.") {
				continue // referrers: none in a pulled image's graph
			}
			if i > 0 || key[len(key)-1] == '.' {
				key += strconv.Itoa(i)
			}
			out[key] = ch.Digest.String()
		}
	}
	return out
}

// names are the image records the CRI makes for a pull: REF, its
// repository at the registry's digest, and the image ID.
func (d *containerdDest) names(dg, imageID string) ([]string, error) {
	named, err := reference.ParseNormalizedNamed(d.spec.Ref)
	if err != nil {
		return nil, d.destErr("%v", err)
	}
	byDigest, err := reference.WithDigest(reference.TrimNamed(named), digest.Digest(dg))
	if err != nil {
		return nil, d.destErr("%v", err)
	}
	out := []string{d.spec.Ref}
	if byDigest.String() != d.spec.Ref {
		out = append(out, byDigest.String())
	}
	return append(out, imageID), nil
}

func readAll(f *os.File, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		err = fmt.Errorf("%s is larger than %d bytes", f.Name(), max)
	}
	return b, err
}
