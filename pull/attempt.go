package pull

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/dest/target"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/registry"
	"go.podman.io/image/v5/copy"
	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/manifest"
	"go.podman.io/image/v5/pkg/blobinfocache/none"
	"go.podman.io/image/v5/signature"
	"go.podman.io/image/v5/types"
)

// attempt resolves the tag to a digest, then copies exactly that digest into
// the staging area. Every read from the registry and every write into
// staging goes through one guard (source.go): sizes are capped and the
// stall watchdog sees every byte, of manifests, configs and layers alike.
// Its steps: watch (the watchdogs), connect (the registry client),
// resolve (the digest, and the space it needs), refs, copyImage, report.
func (p *Request) attempt(parent context.Context, pc *signature.PolicyContext, sys *types.SystemContext, m *Material, round int, st *Stage, o Options, n int) (*Report, error) {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	g := newGuard(p.Registry, p.maxImageBytes())
	g.ctx, g.lim = ctx, o.lim
	defer p.watch(g, cancel)()
	named, err := reference.ParseNormalizedNamed(p.Reference)
	if err != nil {
		return nil, failure.Wrap(failure.Usage, err, "parsing %s", p.Reference)
	}
	c, err := p.connect(sys, m, round, st, g, o)
	if err != nil {
		return nil, err
	}
	defer c.rc.Close()
	r, err := p.resolve(ctx, c, named, st)
	if err != nil {
		return nil, err
	}
	o.emit(Event{Type: api.EventResolved, Digest: r.top.String(), MediaType: r.mime, InstanceDigest: r.decl.instance.String(),
		Layers: r.decl.layers, Size: r.decl.size, ConfigSize: r.decl.configSize, Attempt: n})
	srcRef, destRef, err := p.refs(c, named, r, st)
	if err != nil {
		return nil, err
	}
	// No destination: the isolated copy knows DEST only as "oci:DEST"
	// (Anonymous); the pipeline's own "pulling" line names it.
	o.Log.Info("pulling", "image", p.Reference, "digest", r.top.String(), "attempt", n)
	copied, tally, err := p.copyImage(ctx, pc, c, srcRef, destRef, st, o)
	if err != nil {
		return nil, p.classify(stallCause(ctx, err))
	}
	return p.report(ctx, c, r, srcRef, copied, tally)
}

// watch starts the attempt's watchdogs, which cancel it with their cause:
// the minimum rate over a window (rate.go) and the stall timeout (no byte
// for StallTimeout). The returned function stops them.
func (p *Request) watch(g *guard, cancel context.CancelCauseFunc) (stop func()) {
	var stops []chan struct{}
	if p.MinRate > 0 && p.StallWindow > 0 {
		done := make(chan struct{})
		stops = append(stops, done)
		go g.watchRates(p.MinRate, p.StallWindow, cancel, done)
	}
	if p.StallTimeout > 0 {
		done := make(chan struct{})
		stops = append(stops, done)
		go func() {
			t := time.NewTicker(max(p.StallTimeout/10, time.Millisecond))
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					if g.idle() > p.StallTimeout {
						cancel(g.stalled(p.StallTimeout))
						return
					}
				}
			}
		}()
	}
	return func() {
		for _, done := range stops {
			close(done)
		}
	}
}

// conn is one attempt's way to the registry: the guard every byte goes
// through, the containers/image settings wrapped around it, the registry
// client (with this round's credentials), the attempt's manifest cache,
// the partial-blob cache, and remote, the image source built on them.
type conn struct {
	g       *guard
	sys     *types.SystemContext
	rc      *registry.Client
	cache   *manifestCache
	partial *partialCache
	remote  func(types.ImageReference) types.ImageSource
}

// connect builds the attempt's conn; the caller closes c.rc.
func (p *Request) connect(sys *types.SystemContext, m *Material, round int, st *Stage, g *guard, o Options) (*conn, error) {
	ep := newEndpoints()
	ep.lookaside = lookasideBases(m.RegistriesD)
	c := &conn{g: g, sys: g.hosts.wrap(p.guardedSystemContext(sys, ep)), cache: &manifestCache{}}
	rc, err := p.remoteClient(m, c.sys, round, p.endpointProxy(ep, g.hosts), p.realmHook(ep), g.discarded, o.Log)
	if err != nil {
		return nil, err
	}
	c.rc = rc
	// Signatures are read only when the signature policy has a
	// requirement that needs them.
	signatures := NeedsSignatures(m.SignaturePolicy)
	c.partial = openPartialCache(st, o.Log)
	c.remote = func(ref types.ImageReference) types.ImageSource {
		return &remoteSource{ref: ref, named: ref.DockerReference(), sys: c.sys, rc: rc, cache: c.cache, signature: signatures, partial: c.partial, slots: o.slots, known: knownData(st)}
	}
	return c, nil
}

// resolved is what an attempt pins: the manifest the registry served for
// the reference (top, raw, mime), the reference by that digest, and what
// its manifests declare (checkSpace).
type resolved struct {
	top    digest.Digest
	raw    []byte
	mime   string
	pinned reference.Canonical
	decl   *declared
}

// resolve resolves the reference to a digest, checks that DEST's
// filesystem has room for the image, and lets the partial-blob cache use
// what is left.
func (p *Request) resolve(ctx context.Context, c *conn, named reference.Named, st *Stage) (*resolved, error) {
	r := &resolved{}
	var err error
	if r.top, r.raw, r.mime, err = p.resolveDigest(ctx, c.sys, named, c.g, c.remote); err != nil {
		return nil, p.classify(stallCause(ctx, err))
	}
	c.cache.put(r.top, r.raw, r.mime)
	if p.AllArchitectures && manifest.MIMETypeIsMultiImage(r.mime) && p.Destination.Transport == "docker-archive" {
		// containers/image's docker-archive destination takes one image:
		// refused before any blob is fetched, as skopeo's copy --all
		// refuses it before its first.
		return nil, failure.New(failure.Usage, "--all-architectures: %s is a multi-arch index, and a docker-archive: DEST holds one image; pull without --all-architectures (this platform's image), or into oci: or oci-archive:", reference.FamiliarString(named))
	}
	if err := p.checkAllArchitectures(named, r.raw, r.mime); err != nil {
		return nil, err
	}
	if r.decl, err = p.checkSpace(ctx, c.sys, named, r.top, r.raw, r.mime, c.g, c.remote, st); err != nil {
		return nil, p.classify(stallCause(ctx, err))
	}
	c.partial.allow(st.spare)
	if r.pinned, err = reference.WithDigest(reference.TrimNamed(named), r.top); err != nil {
		return nil, failure.Wrap(failure.Internal, err, "")
	}
	return r, nil
}

// refs are the copy's guarded source (the pinned digest, judged by the
// signature policy as requested: PolicyReference) and destination (DEST's
// staged reference in the work directory).
func (p *Request) refs(c *conn, named reference.Named, r *resolved, st *Stage) (src, dst guardedRef, err error) {
	dockerRef, err := docker.NewReference(r.pinned)
	if err != nil {
		return src, dst, failure.Wrap(failure.Internal, err, "")
	}
	idRef, err := docker.NewReference(PolicyReference(named))
	if err != nil {
		return src, dst, failure.Wrap(failure.Internal, err, "")
	}
	src = guardedRef{ImageReference: dockerRef, identity: idRef, g: c.g, remote: c.remote}
	stageRef, err := target.StagedReference(p.Destination, st.Work, st.Known)
	if err != nil {
		return src, dst, failure.Wrap(failure.Usage, err, "destination %s", p.Destination.Raw)
	}
	dst = guardedRef{ImageReference: stageRef, g: c.g}
	if c.partial != nil && st.HandOver && st.Name == "image" && stageRef.Transport().Name() == "oci" {
		// An OCI layout in staging: whole blobs the cache keeps are
		// handed over rather than written twice (Copied.Handed).
		dst.partial = c.partial
	}
	return src, dst, nil
}

// copyImage runs containers/image's copy from src to dst, turning its
// progress into events (each also touches the stall watchdog) and totals.
// It returns the manifest the copy wrote.
func (p *Request) copyImage(ctx context.Context, pc *signature.PolicyContext, c *conn, src, dst guardedRef, st *Stage, o Options) ([]byte, *tally, error) {
	progress := make(chan types.ProgressProperties, 64)
	var (
		wg    sync.WaitGroup
		tally = newTally()
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for pp := range progress {
			c.g.touch()
			if e, ok := tally.event(pp); ok {
				e.Host = c.g.hosts.blobHost(pp.Artifact.Digest)
				e.KeptBytes = min(c.g.hosts.keptOf(pp.Artifact.Digest), e.Bytes)
				o.emit(e)
			}
		}
	}()
	opts := &copy.Options{
		SourceCtx: c.sys,
		// Temporary files of an archive destination go to the staging
		// area (DEST's filesystem, counted by the space check), never to
		// the host's /var/tmp. The blob-info cache copy.Image opens is the
		// destination context's: with the source's, in the copy's private
		// configuration, never root's default /var/lib/containers/cache
		// (which it would create on the host under --no-isolation).
		//
		// An uncompressed layer is staged as the registry serves it (an
		// OCI layout destination would gzip it: another blob, another
		// manifest digest): every DEST keeps the registry's layers, as
		// the runtimes' stores and ctr keep them (skopeo copy to an oci:
		// layout compresses them unless --dest-oci-accept-uncompressed-
		// layers).
		DestinationCtx: &types.SystemContext{BigFilesTemporaryDir: st.Work, BlobInfoCacheDir: c.sys.BlobInfoCacheDir,
			OCIAcceptUncompressedLayers: true},
		ReportWriter:         o.Report,
		Progress:             progress,
		ProgressInterval:     250 * time.Millisecond,
		MaxParallelDownloads: uint(p.ParallelLayers),
		// The signatures the policy read are judged on the source (and
		// handed to the parent for its re-check, Copied.Signatures); no
		// DEST keeps them (the parent cannot verify a stored one: dir:
		// commits none), and an oci: layout cannot hold them at all
		// (containers/image refuses the copy, as skopeo does without
		// --remove-signatures).
		RemoveSignatures: true,
	}
	if o.Report == nil {
		opts.ReportWriter = io.Discard
	}
	if p.AllArchitectures {
		opts.ImageListSelection = copy.CopyAllImages
	}
	copied, err := copy.Image(ctx, pc, dst, src, opts)
	close(progress)
	wg.Wait()
	return copied, tally, err
}

// report is the attempt's Report: the digests (the instance chosen from an
// index, the stored manifest's when it differs), the totals, what the
// parent verifies against (Copied) and the endpoints that served.
func (p *Request) report(ctx context.Context, c *conn, r *resolved, src guardedRef, copied []byte, tally *tally) (*Report, error) {
	rep := &Report{Digest: r.top.String(), MediaType: r.mime}
	rep.Layers, rep.Bytes = tally.totals()
	want := r.top
	if manifest.MIMETypeIsMultiImage(r.mime) && !p.AllArchitectures {
		list, err := manifest.ListFromBlob(r.raw, r.mime)
		if err != nil {
			return nil, failure.Wrap(failure.Verification, err, "parsing the index of %s", r.pinned)
		}
		if want, err = list.ChooseInstance(c.sys); err != nil {
			return nil, failure.Wrap(failure.NotFound, err, "choosing the instance of %s for %s", r.pinned, p.platformName())
		}
		rep.InstanceDigest = want.String()
	}
	// The destination may store a converted manifest (docker-archive
	// writes Docker schema 2); report its digest when it differs.
	if d, err := manifest.Digest(copied); err == nil && d != want {
		rep.DestinationDigest = d.String()
	}
	out := &rep.Copied
	out.Manifest, out.Handed = copied, c.partial.handedOver()
	if manifest.MIMETypeIsMultiImage(r.mime) {
		out.IndexRaw = r.raw
	}
	// The parent ties what was stored to the manifest as served (and
	// re-checks the signature policy on it): hand that over, with its
	// signatures when a policy file judges them.
	if err := served(ctx, c.sys, src, r.top, want, r.raw, p.Signature.File != "", out); err != nil {
		return nil, p.classify(stallCause(ctx, err))
	}
	// Every instance copied, the index stored converted (an oci: layout
	// stores a Docker manifest list as an OCI index, and marks an OCI
	// index's zstd instances): the parent ties
	// each stored instance to the registry's, and a store keeps those.
	if p.AllArchitectures && manifest.MIMETypeIsMultiImage(r.mime) && rep.DestinationDigest != "" {
		var err error
		if out.ServedInstances, err = servedInstances(ctx, c.sys, src, r.pinned, r.raw, r.mime); err != nil {
			return nil, p.classify(stallCause(ctx, err))
		}
	}
	// A Docker schema 2 manifest stored as OCI has its config rewritten
	// (containers/image re-encodes it as an OCI config): the parent checks
	// the stored config is that re-encoding of the registry's, and a store
	// keeps the registry's.
	if rep.DestinationDigest != "" && p.Destination.Transport != "docker-archive" && p.Destination.Transport != "dir" {
		var err error
		if out.ServedConfigs, err = servedConfigs(ctx, c.sys, src, r.pinned, out); err != nil {
			return nil, p.classify(stallCause(ctx, err))
		}
	}
	rep.Endpoints, rep.KeptBytes = c.g.hosts.endpoints(), c.g.hosts.keptTotal()
	return rep, nil
}

// knownData are the bytes of DEST's small known blobs, by digest.
func knownData(st *Stage) map[digest.Digest][]byte {
	var m map[digest.Digest][]byte
	for _, k := range st.Known {
		if len(k.Data) > 0 {
			if m == nil {
				m = map[digest.Digest][]byte{}
			}
			m[digest.Digest(k.Digest)] = k.Data
		}
	}
	return m
}

// served fills in the manifest the registry served for want (the instance,
// or top itself) and, with sigs, its signatures: the parent ties the stored
// image to it and re-checks the signature policy on it.
func served(ctx context.Context, sys *types.SystemContext, ref types.ImageReference, top, want digest.Digest, topRaw []byte, sigs bool, out *Copied) error {
	out.Served = topRaw
	if want == top && !sigs {
		return nil
	}
	src, err := ref.NewImageSource(ctx, sys)
	if err != nil {
		return err
	}
	defer src.Close()
	var instance *digest.Digest
	if want != top {
		instance = &want
		if out.Served, _, err = src.GetManifest(ctx, instance); err != nil {
			return err
		}
	}
	if sigs {
		if out.Signatures, err = src.GetSignatures(ctx, instance); err != nil {
			return err
		}
		return checkSignatures(out.Signatures)
	}
	return nil
}

// MaxServedInstances bounds the instances of an index copied with
// --all-architectures, and so those handed over as served
// (Copied.ServedInstances).
const MaxServedInstances = 1024

// checkAllArchitectures refuses, before any blob is fetched, an index with
// more instances than --all-architectures copies (MaxServedInstances), or
// declaring more than MaxManifestBytes of them in all (what the child may
// hand over as served when the copy converts the index).
func (p *Request) checkAllArchitectures(named reference.Named, raw []byte, mime string) error {
	if !p.AllArchitectures || !manifest.MIMETypeIsMultiImage(mime) {
		return nil
	}
	list, err := manifest.ListFromBlob(raw, mime)
	if err != nil {
		return failure.Wrap(failure.Verification, err, "parsing the index of %s", reference.FamiliarString(named))
	}
	ds := list.Instances()
	if len(ds) > MaxServedInstances {
		return failure.New(failure.Verification, "the index of %s has %d instances, more than the %d pullhelper copies with --all-architectures", reference.FamiliarString(named), len(ds), MaxServedInstances)
	}
	var total int64
	for _, d := range ds {
		in, err := list.Instance(d)
		if err != nil {
			return failure.Wrap(failure.Verification, err, "reading the index of %s", reference.FamiliarString(named))
		}
		if total += in.Size; in.Size < 0 || total > MaxManifestBytes {
			return failure.New(failure.Verification, "the index of %s declares more than %d bytes of instance manifests, more than pullhelper copies with --all-architectures", reference.FamiliarString(named), MaxManifestBytes)
		}
	}
	return nil
}

// servedInstances fetches each instance of the index raw (mime) as the
// registry serves it, in the index's order, each checked against its
// digest (the parent checks each against the index again, with its size).
func servedInstances(ctx context.Context, sys *types.SystemContext, ref types.ImageReference, pinned reference.Named, raw []byte, mime string) ([][]byte, error) {
	list, err := manifest.ListFromBlob(raw, mime)
	if err != nil {
		return nil, failure.Wrap(failure.Verification, err, "parsing the index of %s", pinned)
	}
	ds := list.Instances()
	if len(ds) > MaxServedInstances { // checkAllArchitectures refused it before the copy
		return nil, failure.New(failure.Verification, "the index of %s has %d instances, more than %d", pinned, len(ds), MaxServedInstances)
	}
	src, err := ref.NewImageSource(ctx, sys)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	out := make([][]byte, 0, len(ds))
	total := 0
	for _, d := range ds {
		m, _, err := src.GetManifest(ctx, &d)
		if err != nil {
			return nil, err
		}
		if d.Algorithm().FromBytes(m) != d {
			return nil, failure.New(failure.Verification, "manifest digest mismatch: %s serves %s for instance %s of %s", pinned.Name(), d.Algorithm().FromBytes(m), d, pinned)
		}
		if total += len(m); total > MaxManifestBytes {
			return nil, failure.New(failure.Verification, "the instances of the index of %s are more than %d bytes of manifests in all", pinned, MaxManifestBytes)
		}
		out = append(out, m)
	}
	return out, nil
}

// MaxServedConfigBytes bounds the configs handed over as served
// (Copied.ServedConfigs), in all: containers/image reads one config of at
// most this size.
const MaxServedConfigBytes = 4 << 20

// servedConfigs fetches the config of each Docker schema 2 manifest the
// registry served of what the copy stored converted to OCI (out.Served, or
// every instance of out.ServedInstances), once each, checked against its
// digest, and keeps those whose re-encoding (as
// manifestSchema2.convertToManifestOCI1 does it: unmarshalled into an OCI
// image config, marshalled again, named by its sha256) is not named by the
// served digest, once each by content.
func servedConfigs(ctx context.Context, sys *types.SystemContext, ref types.ImageReference, pinned reference.Named, out *Copied) ([][]byte, error) {
	mans := out.ServedInstances
	if mans == nil {
		mans = [][]byte{out.Served}
	}
	var want []types.BlobInfo
	seen := map[digest.Digest]bool{}
	for _, m := range mans {
		if manifest.GuessMIMEType(m) != manifest.DockerV2Schema2MediaType {
			continue
		}
		s2, err := manifest.Schema2FromManifest(m)
		if err != nil {
			return nil, failure.Wrap(failure.Verification, err, "parsing a manifest of %s", pinned)
		}
		if d := s2.ConfigDescriptor.Digest; !seen[d] {
			seen[d] = true
			want = append(want, types.BlobInfo{Digest: d, Size: s2.ConfigDescriptor.Size})
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	src, err := ref.NewImageSource(ctx, sys)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	var cfgs [][]byte
	total := int64(0)
	sent := map[digest.Digest]bool{} // by content: two digests may name one config
	for _, bi := range want {
		if err := bi.Digest.Validate(); err != nil {
			return nil, failure.Wrap(failure.Verification, err, "a config of %s", pinned)
		}
		if total += bi.Size; bi.Size < 0 || total > MaxServedConfigBytes {
			return nil, failure.New(failure.Verification, "the configs of %s are more than %d bytes in all", pinned, MaxServedConfigBytes)
		}
		bi.MediaType = manifest.DockerV2Schema2ConfigMediaType
		rc, _, err := src.GetBlob(ctx, bi, none.NoCache)
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(io.LimitReader(rc, bi.Size+1))
		rc.Close()
		if err != nil {
			return nil, err
		}
		if int64(len(b)) != bi.Size || bi.Digest.Algorithm().FromBytes(b) != bi.Digest {
			return nil, failure.New(failure.Verification, "config %s of %s: the registry served %d bytes hashing to %s", bi.Digest, pinned, len(b), bi.Digest.Algorithm().FromBytes(b))
		}
		if !needsConfig(b, bi.Digest) {
			continue
		}
		if c := digest.Canonical.FromBytes(b); !sent[c] {
			sent[c] = true
			cfgs = append(cfgs, b)
		}
	}
	return cfgs, nil
}

// needsConfig: the parent needs the registry's config b (named d) to check
// the stored one, which is its OCI re-encoding named by that re-encoding's
// sha256, unless that is d itself (the same bytes, by sha256).
func needsConfig(b []byte, d digest.Digest) bool {
	var oci imgspecv1.Image
	if json.Unmarshal(b, &oci) != nil {
		return true
	}
	conv, err := json.Marshal(&oci)
	return err != nil || digest.Canonical.FromBytes(conv) != d
}

// resolveDigest fetches the manifest the registry serves for the reference
// (through the guard: size-capped, checked, seen by the stall watchdog) and
// returns its digest, so the copy pins exactly what was resolved.
func (p *Request) resolveDigest(ctx context.Context, sys *types.SystemContext, named reference.Named, g *guard, remote func(types.ImageReference) types.ImageSource) (digest.Digest, []byte, string, error) {
	ref := named
	if d, ok := named.(reference.Digested); ok {
		if err := checkDigest(d.Digest(), "the pinned reference"); err != nil {
			return "", nil, "", err
		}
		ref, _ = reference.WithDigest(reference.TrimNamed(named), d.Digest())
	}
	dockerRef, err := docker.NewReference(ref)
	if err != nil {
		return "", nil, "", err
	}
	src, err := guardedRef{ImageReference: dockerRef, g: g, remote: remote}.NewImageSource(ctx, sys)
	if err != nil {
		return "", nil, "", err
	}
	defer src.Close()
	raw, mime, err := src.GetManifest(ctx, nil)
	if err != nil {
		return "", nil, "", err
	}
	got, err := manifest.Digest(raw)
	if err != nil {
		return "", nil, "", err
	}
	if d, ok := named.(reference.Digested); ok && d.Digest() != got {
		return "", nil, "", failure.New(failure.Verification, "manifest digest mismatch: %s serves %s for %s", p.Registry, got, d.Digest())
	}
	return got, raw, mime, nil
}

// stallCause turns the cancellation caused by the stall watchdog into a
// network error that names what stalled and where.
func stallCause(ctx context.Context, err error) error {
	cause := context.Cause(ctx)
	if errors.Is(cause, errStalled) || errors.Is(cause, errTooSlow) {
		return &failure.Error{Code: failure.Network, Message: cause.Error(), Err: cause}
	}
	return err
}
