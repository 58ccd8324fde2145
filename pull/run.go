package pull

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/dest/target"
	"github.com/pullhelper/pullhelper/internal/failure"
	"go.podman.io/image/v5/copy"
	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/manifest"
	"go.podman.io/image/v5/signature"
	"go.podman.io/image/v5/types"
)

// noCertDir is handed to containers/image when no certificate directory
// applies, so that it does not run a search of its own: a missing
// directory is read as "no extra certificates".
const noCertDir = "/nonexistent/pullhelper-no-cert-dir"

// errStalled cancels an attempt during which no byte arrived for StallTimeout.
var errStalled = errors.New("no data received within the stall timeout")

// Event is the output contract's progress event (package api).
type Event = api.Event

// Copied is what the copy stored, in its report, for the parent's
// verification: the manifest bytes it wrote and, when the reference is an
// index, the index the registry served (whose digest the parent checks
// against the reported one).
type Copied struct {
	Manifest []byte `json:"manifest,omitempty"`
	IndexRaw []byte `json:"index_raw,omitempty"`
	// Served is the manifest as the registry served it for the digest the
	// copy reports (the instance's, for an index): the parent ties the
	// stored manifest to it. Signatures, with a signature policy file, are
	// its signatures, so that the parent can judge it again.
	Served     []byte   `json:"served,omitempty"`
	Signatures [][]byte `json:"signatures,omitempty"`
	// Handed are the blobs the copy left whole in the partial-blob cache
	// instead of writing them into the staged OCI layout: the parent
	// moves them to blobs/<alg>/<hex> there before it verifies
	// (dest.Partial.HandOver). Like every word of the child's, a claim
	// only: the parent hashes each moved file as any staged blob.
	Handed []string `json:"handed,omitempty"`
}

// Options are the caller's hooks; all may be nil.
type Options struct {
	// Events receives progress events in order, from one goroutine.
	Events func(Event)
	// Report, when set, receives containers/image's progress bars (only
	// useful on a terminal).
	Report io.Writer
	// Log receives human log records.
	Log *slog.Logger
	// Node, when set, carries this pull's share of the node's budgets
	// whenever it changes; Request.MaxBandwidth still caps the rate.
	Node <-chan NodeShare

	lim   *limiter // the Copy's bandwidth limiter, shared by its attempts
	slots *slots   // the Copy's layer-download slots (nil: no node limit)
}

// NodeShare is one pull's part of the node's budgets (0: no limit).
type NodeShare struct {
	Rate   int64 `json:"rate"`   // bytes per second
	Layers int   `json:"layers"` // concurrent blob downloads
}

func (o Options) emit(e Event) {
	if o.Events != nil {
		e.TS = time.Now().UTC()
		o.Events(e)
	}
}

// Copy is the network-facing part: it resolves the tag, copies the image
// into st.Path with retries, and syncs it to disk. It reads no file outside
// st.Root: the credential, certificates and signature policy come in m.
func Copy(ctx context.Context, p *Request, m *Material, st *Stage, o Options) (*Report, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	o.lim, o.slots = nodeLimits(p.MaxBandwidth, o.Node)
	if p.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, p.Timeout, fmt.Errorf("pull timed out after %s (--timeout)", p.Timeout))
		defer cancel()
	}
	pc, err := m.policyContext(p)
	if err != nil {
		return nil, err
	}
	defer func() { _ = pc.Destroy() }()
	sys, err := m.systemContext(p, st)
	if err != nil {
		return nil, err
	}
	// Every candidate in order, until the registry accepts one (the
	// kubelet's rule: whatever the refusal looks like); each round gives
	// every host its own candidate, through the auth file, so that a
	// credential reaches only the host it is for. No credential at all is
	// one anonymous round; there is no anonymous retry after refused
	// credentials.
	var (
		rep      *Report
		attempts int
		refused  bool
	)
	n := p.candidates()
	for i := 0; i < n; i++ {
		if err = m.writeAuth(p, sys.AuthFilePath, i); err != nil {
			return nil, err
		}
		var k int
		rep, k, err = p.retrying(ctx, pc, sys, m, i, st, o)
		attempts += k
		if err == nil {
			rep.Credential = p.credentialView(i)
			break
		}
		refused = refused || failure.CodeOf(err) == failure.Unauthorized
		if !nextCandidate(err) || i == n-1 || ctx.Err() != nil {
			break
		}
		if i < len(p.Credentials) {
			c := p.Credentials[i]
			o.Log.Warn("the registry refused a credential; trying the next", "source", c.Source, "file", c.File, "key", c.Key, "username", c.Username, "error", rootCause(err))
		}
		if rerr := st.reset(); rerr != nil {
			return nil, rerr
		}
	}
	if err != nil {
		if refused || failure.CodeOf(err) == failure.Unauthorized {
			return nil, p.refusedAll(err)
		}
		return nil, err
	}
	if err := syncTree(st.path()); err != nil {
		return nil, failure.Wrap(failure.Destination, err, "syncing the staged image")
	}
	rep.Attempts = attempts
	return rep, nil
}

// retrying runs attempts with one credential, retrying network failures
// with a doubling back-off.
func (p *Request) retrying(ctx context.Context, pc *signature.PolicyContext, sys *types.SystemContext, m *Material, round int, st *Stage, o Options) (*Report, int, error) {
	delay := p.RetryDelay
	for attempt := 1; ; attempt++ {
		rep, err := p.attempt(ctx, pc, sys, m, round, st, o, attempt)
		if err == nil || !retryable(err) || attempt > p.Retries || ctx.Err() != nil {
			if err != nil {
				if cause := context.Cause(ctx); cause != nil && ctx.Err() == context.DeadlineExceeded {
					err = failure.Wrap(failure.Network, err, "%v", cause)
				}
			}
			return rep, attempt, err
		}
		o.Log.Warn("pull attempt failed; retrying", "attempt", attempt, "of", p.Retries+1, "in", delay, "error", err.Error())
		select {
		case <-time.After(delay):
		case <-ctx.Done():
		}
		if delay < math.MaxInt64/2 { // a huge retry_delay must not wrap around
			delay *= 2
		}
		if rerr := st.reset(); rerr != nil {
			return nil, attempt, rerr
		}
	}
}

// nextCandidate reports whether another credential may fare better after
// err: a refusal of any shape (401/403, a bare UNAUTHORIZED, a 404 that a
// registry returns for a repository the credential cannot see, an
// unclassified answer). A network, TLS, verification or destination failure
// is not about the credential.
func nextCandidate(err error) bool {
	switch failure.CodeOf(err) {
	case failure.Unauthorized, failure.NotFound, failure.Internal:
		return true
	}
	return false
}

// credentialView is the credential block of the result: the accepted
// candidate of the primary endpoint, or anonymous.
func (p *Request) credentialView(i int) *api.Credential {
	if len(p.Credentials) > 0 {
		c := p.Credentials[min(i, len(p.Credentials)-1)]
		return &api.Credential{Source: c.Source, File: c.File, Key: c.Key, Username: c.Username}
	}
	return &api.Credential{Source: "anonymous"}
}

// refusedAll names every source the registry refused (file and key, never
// the secret).
func (p *Request) refusedAll(err error) error {
	cause := err
	var fe *failure.Error
	if errors.As(err, &fe) && fe.Err != nil {
		cause = fe.Err
	}
	if len(p.Credentials) == 0 {
		return &failure.Error{Code: failure.Unauthorized, Err: err, Message: fmt.Sprintf(
			"registry %s refused anonymous access to %s (no credential matched; auth files searched: %s): %v",
			p.Registry, p.Reference, p.authFileList(), rootCause(cause))}
	}
	var tried []string
	for i, c := range p.Credentials {
		tried = append(tried, fmt.Sprintf("[%d] %s %s key %q user %q", i+1, c.Source, c.File, c.Key, c.Username))
	}
	return &failure.Error{Code: failure.Unauthorized, Err: err, Message: fmt.Sprintf(
		"registry %s refused every matching credential for %s: %s: %v",
		p.Registry, p.Reference, strings.Join(tried, "; "), rootCause(cause))}
}

// attempt resolves the tag to a digest, then copies exactly that digest into
// the staging area. Every read from the registry and every write into
// staging goes through one guard (source.go): sizes are capped and the
// stall watchdog sees every byte, of manifests, configs and layers alike.
func (p *Request) attempt(parent context.Context, pc *signature.PolicyContext, sys *types.SystemContext, m *Material, round int, st *Stage, o Options, n int) (*Report, error) {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	g := newGuard(p.Registry, p.maxImageBytes())
	g.ctx, g.lim = ctx, o.lim
	if p.MinRate > 0 && p.StallWindow > 0 {
		done := make(chan struct{})
		defer close(done)
		go g.watchRates(p.MinRate, p.StallWindow, cancel, done)
	}
	if p.StallTimeout > 0 {
		done := make(chan struct{})
		defer close(done)
		go func() {
			t := time.NewTicker(p.StallTimeout / 10)
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
	ep := newEndpoints()
	sys = g.hosts.wrap(p.guardedSystemContext(sys, ep))
	named, err := reference.ParseNormalizedNamed(p.Reference)
	if err != nil {
		return nil, failure.Wrap(failure.Usage, err, "parsing %s", p.Reference)
	}
	rc, err := p.remoteClient(m, sys, round, p.endpointProxy(ep, g.hosts), p.realmHook(ep), g.discarded, o.Log)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	cache := &manifestCache{}
	// Signatures are read only when the signature policy has a
	// requirement that needs them.
	signatures := needsSignatures(m.SignaturePolicy)
	partial := openPartialCache(st.Partial, o.Log)
	remote := func(ref types.ImageReference) types.ImageSource {
		return &remoteSource{ref: ref, named: ref.DockerReference(), sys: sys, rc: rc, cache: cache, signature: signatures, partial: partial, slots: o.slots, known: knownData(st)}
	}
	top, raw, mime, err := p.resolveDigest(ctx, sys, named, g, remote)
	if err != nil {
		return nil, p.classify(stallCause(ctx, err))
	}
	cache.put(top, raw, mime)
	if err := p.checkSpace(ctx, sys, named, top, raw, mime, g, remote, st); err != nil {
		return nil, p.classify(stallCause(ctx, err))
	}
	partial.allow(st.spare)
	pinned, err := reference.WithDigest(reference.TrimNamed(named), top)
	if err != nil {
		return nil, failure.Wrap(failure.Internal, err, "")
	}
	dockerRef, err := docker.NewReference(pinned)
	if err != nil {
		return nil, failure.Wrap(failure.Internal, err, "")
	}
	srcRef := guardedRef{ImageReference: dockerRef, g: g, remote: remote}
	stageRef, err := target.StagedReference(p.Destination, st.Work, st.Known)
	if err != nil {
		return nil, failure.Wrap(failure.Usage, err, "destination %s", p.Destination.Raw)
	}
	destRef := guardedRef{ImageReference: stageRef, g: g}
	if partial != nil && st.HandOver && st.Name == "image" && stageRef.Transport().Name() == "oci" {
		// An OCI layout in staging: whole blobs the cache keeps are
		// handed over rather than written twice (Copied.Handed).
		destRef.partial = partial
	}
	progress := make(chan types.ProgressProperties, 64)
	var (
		wg    sync.WaitGroup
		tally = newTally()
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for pp := range progress {
			g.touch()
			if e, ok := tally.event(pp); ok {
				e.Host = g.hosts.blobHost(pp.Artifact.Digest)
				o.emit(e)
			}
		}
	}()
	opts := &copy.Options{
		SourceCtx: sys,
		// Temporary files of an archive destination go to the staging
		// area (DEST's filesystem, counted by the space check), never to
		// the host's /var/tmp.
		DestinationCtx:       &types.SystemContext{BigFilesTemporaryDir: st.Work},
		ReportWriter:         o.Report,
		Progress:             progress,
		ProgressInterval:     250 * time.Millisecond,
		MaxParallelDownloads: uint(p.ParallelLayers),
	}
	if o.Report == nil {
		opts.ReportWriter = io.Discard
	}
	if p.AllArchitectures {
		opts.ImageListSelection = copy.CopyAllImages
	}
	o.Log.Info("pulling", "image", p.Reference, "digest", top.String(), "destination", p.Destination.Raw, "attempt", n)
	copied, err := copy.Image(ctx, pc, destRef, srcRef, opts)
	close(progress)
	wg.Wait()
	if err != nil {
		return nil, p.classify(stallCause(ctx, err))
	}
	rep := &Report{Digest: top.String(), MediaType: mime}
	rep.Layers, rep.Bytes = tally.totals()
	want := top
	if manifest.MIMETypeIsMultiImage(mime) && !p.AllArchitectures {
		list, err := manifest.ListFromBlob(raw, mime)
		if err != nil {
			return nil, failure.Wrap(failure.Verification, err, "parsing the index of %s", pinned)
		}
		if want, err = list.ChooseInstance(sys); err != nil {
			return nil, failure.Wrap(failure.NotFound, err, "choosing the instance of %s for this platform", pinned)
		}
		rep.InstanceDigest = want.String()
	}
	// The destination may store a converted manifest (docker-archive
	// writes Docker schema 2); report its digest when it differs.
	if d, err := manifest.Digest(copied); err == nil && d != want {
		rep.DestinationDigest = d.String()
	}
	out := &rep.Copied
	out.Manifest, out.Handed = copied, partial.handedOver()
	if manifest.MIMETypeIsMultiImage(mime) {
		out.IndexRaw = raw
	}
	// The parent ties what was stored to the manifest as served (and
	// re-checks the signature policy on it): hand that over, with its
	// signatures when a policy file judges them.
	if err := served(ctx, sys, srcRef, top, want, raw, p.Signature.File != "", out); err != nil {
		return nil, p.classify(stallCause(ctx, err))
	}
	rep.Endpoints = g.hosts.endpoints()
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

// tally turns containers/image progress into events and totals.
type tally struct {
	mu     sync.Mutex
	blobs  map[digest.Digest]int64
	layers map[digest.Digest]bool
}

func newTally() *tally {
	return &tally{blobs: map[digest.Digest]int64{}, layers: map[digest.Digest]bool{}}
}

func (t *tally) event(pp types.ProgressProperties) (Event, bool) {
	a := pp.Artifact
	e := Event{Digest: a.Digest.String(), MediaType: a.MediaType, Size: a.Size}
	if e.Size < 0 {
		e.Size = 0
	}
	isLayer := !isConfigMediaType(a.MediaType)
	t.mu.Lock()
	defer t.mu.Unlock()
	switch pp.Event {
	case types.ProgressEventNewArtifact:
		e.Type = "layer_start"
	case types.ProgressEventRead:
		e.Type, e.Bytes = "layer_progress", int64(pp.Offset)
	case types.ProgressEventDone, types.ProgressEventSkipped:
		e.Type, e.Bytes = "layer_done", int64(pp.Offset)
		e.Skipped = pp.Event == types.ProgressEventSkipped
		size := a.Size
		if size <= 0 {
			size = int64(pp.Offset)
		}
		t.blobs[a.Digest] = size
		if isLayer {
			t.layers[a.Digest] = true
		}
	default:
		return e, false
	}
	if !isLayer {
		e.Type = "config" + e.Type[len("layer"):]
	}
	return e, true
}

func (t *tally) totals() (layers int, bytes int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range t.blobs {
		bytes += n
	}
	return len(t.layers), bytes
}

func isConfigMediaType(mt string) bool {
	switch mt {
	case manifest.DockerV2Schema2ConfigMediaType, "application/vnd.oci.image.config.v1+json":
		return true
	}
	return false
}

// IsTerminal reports whether f is a terminal (for progress bars).
func IsTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
