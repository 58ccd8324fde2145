package pipeline

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/netns"
	"github.com/pullhelper/pullhelper/pull"
	"go.podman.io/image/v5/docker/reference"
)

// Options are the caller's hooks: where events, bars and log records go.
// How the pull is isolated is the plan's (Plan.Isolation), not the
// caller's to say again.
type Options struct {
	// Events receives progress events in order (start, the copy's
	// progress, then done or error is the caller's); may be nil.
	Events func(api.Event)
	// Report, when set, receives containers/image's progress bars (only
	// useful on a terminal).
	Report io.Writer
	// Log receives human log records; nil discards them.
	Log *slog.Logger
	// LogFormat ("text" or "json") and Debug are how the child logs too;
	// Quiet: the child writes nothing on its stderr (--quiet).
	LogFormat string
	Debug     bool
	Quiet     bool

	phases phases // for the result's Timings
	// netns is the network namespace Run holds for the child
	// (Plan.openNetns; nil: this one).
	netns *netns.Handle
}

func (o *Options) emit(e api.Event) {
	if o.Events != nil {
		e.TS = time.Now().UTC()
		o.Events(e)
	}
}

// Run carries out a plan: the material, the pull lock, then the one
// sequence of a pull (sequence), with the copy in this process or in the
// isolated child as the plan's isolation says. On every path out the
// staging area is removed, and when isolated every process of the pull is
// dead and its cgroup removed, before Run returns.
func Run(ctx context.Context, p *Plan, o Options) (*api.Result, error) {
	start := time.Now()
	o.phases.start = start
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if p.dst == nil {
		return nil, failure.New(failure.Usage, "no destination: pull takes IMAGE DEST")
	}
	o.emit(api.Event{Type: api.EventStart, Image: p.Reference, Destination: p.Destination.Raw})
	// DEST as the result names it (its absolute path; a store's name for
	// it): the copy's lines cannot, it is never told the path.
	o.Log.Info("pulling", "image", p.Reference, "destination", p.dst.String())
	roots := readSystemRoots()
	m, err := p.LoadMaterial()
	if err != nil {
		return nil, err
	}
	// The network namespace, held from now until the child is forked in
	// it: the one the plan checked, or none.
	ns, err := p.openNetns()
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	o.netns = ns
	// One pull of this image into this DEST at a time: a second waits and
	// then finds the first's blobs in DEST (an oci: layout's are not
	// fetched again).
	lctx, cancel := p.withDeadline(ctx, &o)
	unlock, err := dest.LockPull(lctx, p.Isolation.StateRoot.Locks(), p.Destination, repositoryOf(p.Reference), p.LockTimeout)
	cancel()
	if err != nil {
		return nil, err
	}
	defer unlock()
	s := &pullSteps{p: p, o: &o, m: m, roots: roots}
	if p.Isolation.Enabled {
		s.r = &isolatedRunner{p: p, o: &o}
	} else {
		s.r = &inProcessRunner{p: p, o: &o}
	}
	res, err := sequence(ctx, s)
	if err != nil {
		return nil, err
	}
	res.DurationMS = time.Since(start).Milliseconds()
	res.Timings = o.phases.timings(start, res.DurationMS)
	o.emit(api.Event{Type: api.EventDone, Digest: res.Digest, Bytes: res.Bytes, KeptBytes: res.KeptBytes, Layers: res.Layers})
	return res, nil
}

// steps are a pull's steps, taken in the one order sequence gives them.
// Each undo (release, removeStage, closePartial, stop, abortPrehash) is
// safe to call when its step failed or did nothing. pullSteps is the
// implementation; the sequence's test records the calls of another.
type steps interface {
	// prepare reclaims what killed pulls left and chooses who runs the
	// copy; release gives that back, last of all.
	prepare(ctx context.Context) error
	release()
	// stage creates the staging area beside DEST; removeStage removes it.
	stage(ctx context.Context) error
	removeStage()
	// openPartial opens DEST's partial-blob cache (a pull without one goes
	// on without resume: it cannot fail); closePartial lets it go.
	openPartial()
	closePartial()
	// start readies the copy (its cgroup and child, its node share); stop
	// ends every process of the pull and removes what start made.
	start(ctx context.Context) error
	stop()
	// prehash starts hashing the blobs the copy hands over as each is
	// done; abortPrehash stops it on every path.
	prehash()
	abortPrehash()
	// copy runs the copy to its report, the child's claims, and takes
	// the partial-blob cache back.
	copy(ctx context.Context) (*pull.Report, error)
	// handOver moves the blobs the copy left in the cache into staging.
	handOver(rep *pull.Report) error
	// verify checks the staged image against the report and the plan;
	// commit publishes exactly what was verified.
	verify(ctx context.Context, rep *pull.Report) error
	commit(ctx context.Context) error
	// removePartial removes the cache once its blobs are in DEST.
	removePartial()
	// result is built from the plan and what was verified.
	result(rep *pull.Report) (*api.Result, error)
}

// sequence is the one order of a pull, whatever runs the copy:
// prepare → stage → partial → start → prehash → copy → hand over → verify
// → commit → remove the cache → result, each step's undo deferred as soon
// as the step is taken, so that every path out undoes what was done, last
// first.
func sequence(ctx context.Context, s steps) (*api.Result, error) {
	if err := s.prepare(ctx); err != nil {
		return nil, err
	}
	defer s.release()
	if err := s.stage(ctx); err != nil {
		return nil, err
	}
	defer s.removeStage()
	s.openPartial()
	defer s.closePartial()
	defer s.stop()
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	s.prehash()
	defer s.abortPrehash()
	rep, err := s.copy(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.handOver(rep); err != nil {
		return nil, err
	}
	if err := s.verify(ctx, rep); err != nil {
		return nil, err
	}
	if err := s.commit(ctx); err != nil {
		return nil, err
	}
	s.removePartial()
	return s.result(rep)
}

// openNetns holds the network namespace the plan checked (nil without
// one), so that the child is forked into that namespace and no other: the
// path is opened once more, and what is there now must be the namespace
// the plan checked (a pid that exited, a link another user swapped, a
// namespace the pod's process unshared since, refused). The pull lock and
// the staging come before the fork, and may wait.
func (p *Plan) openNetns() (*netns.Handle, error) {
	n := p.Isolation.Network
	if !p.Isolation.Enabled || n.Netns == "" {
		return nil, nil
	}
	h, err := netns.Open(n.Netns)
	if err != nil {
		return nil, failure.New(failure.Isolation, "network namespace %s: %v", n.Netns, err)
	}
	if h.ID != n.NetnsID {
		h.Close()
		return nil, failure.New(failure.Isolation, "network namespace %s is no longer the one checked when the pull was planned; retry with the namespace that is there now", n.Netns)
	}
	return h, nil
}

// withDeadline is ctx with the pull's --timeout deadline, counted from
// Run's start (the waits outside the copy: the pull lock, Stage, Verify,
// Commit; the copy bounds itself).
func (p *Plan) withDeadline(ctx context.Context, o *Options) (context.Context, context.CancelFunc) {
	if p.Timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithDeadlineCause(ctx, o.phases.start.Add(p.Timeout),
		failure.New(failure.Network, "pull timed out after %s (--timeout)", p.Timeout))
}

// byDigest is the plan's repository pinned to d.
func (p *Plan) byDigest(d string) (string, error) {
	named, err := reference.ParseNormalizedNamed(p.Reference)
	if err != nil {
		return "", failure.Wrap(failure.Internal, err, "")
	}
	dg, err := digest.Parse(d)
	if err != nil {
		return "", failure.New(failure.Verification, "the copy reported an invalid digest %q", d)
	}
	pinned, err := reference.WithDigest(reference.TrimNamed(named), dg)
	if err != nil {
		return "", failure.Wrap(failure.Internal, err, "")
	}
	return pinned.String(), nil
}

// pinned is the digest of IMAGE@sha256:… ("" for a tag).
func (p *Plan) pinned() string {
	if _, d, ok := strings.Cut(p.Reference, "@"); ok {
		return d
	}
	return ""
}

// partial opens DEST's partial-blob cache beside the staging area (handed
// to id when the copy runs as another uid). Without one (another pull into
// DEST holds it, or it cannot be made) the pull goes on without resume.
func (p *Plan) partial(o *Options, st *dest.Stage, id *dest.Identity) *dest.Partial {
	part, err := st.OpenPartial(id, o.Log)
	var refused *dest.CacheRefused
	switch {
	case errors.As(err, &refused):
		o.Log.Warn(refused.Error())
	case err != nil:
		o.Log.Warn("no partial-blob cache: a pull killed now starts its blobs over", "error", err.Error())
	case part == nil:
		o.Log.Info("another pull into this DEST holds its partial-blob cache; pulling without it")
	case part.Kept > 0:
		o.Log.Info("resuming from the partial-blob cache", "path", part.Path, "kept_bytes", part.Kept)
	}
	return part
}

// phases are the moments Timings is made of (zero: not reached).
type phases struct {
	start                                    time.Time // Run's (the --timeout deadline counts from it)
	copyStart, copyEnd, verifyEnd, commitEnd time.Time
}

// timings splits total (the result's DurationMS, from start): each phase
// is the milliseconds from start to its end less those before it, so that
// they add up to total.
func (p phases) timings(start time.Time, total int64) *api.Timings {
	if p.copyStart.IsZero() || p.copyEnd.IsZero() || p.verifyEnd.IsZero() || p.commitEnd.IsZero() {
		return nil
	}
	at := func(t time.Time) int64 { return min(t.Sub(start).Milliseconds(), total) }
	s, c, v, m := at(p.copyStart), at(p.copyEnd), at(p.verifyEnd), at(p.commitEnd)
	return &api.Timings{SetupMS: s, CopyMS: c - s, VerifyMS: v - c, CommitMS: m - v, CleanupMS: total - m}
}

// prehashing passes events on, and starts hashing each blob that is done
// ahead (dest.Prehash).
func prehashing(pre *dest.Prehash, events func(api.Event)) func(api.Event) {
	if pre == nil {
		return events
	}
	return func(e api.Event) {
		if e.Type == api.EventLayerDone {
			pre.Blob(e.Digest)
		}
		if events != nil {
			events(e)
		}
	}
}

// progressOnly passes on the copy's progress events and nothing else:
// start, done and error are the pipeline's to emit. A blob's layer_progress
// is passed at most once every progressInterval by this process's clock and
// stamped as it is passed, so the rate the caller sees (at most 4 a second
// a layer) does not depend on how the events were queued on their way
// here (a busy machine can deliver the child's events in bursts).
func progressOnly(events func(api.Event)) func(api.Event) { return progressGate(events, time.Now) }

// progressGate is progressOnly on the clock now.
func progressGate(events func(api.Event), now func() time.Time) func(api.Event) {
	if events == nil {
		return nil
	}
	var mu sync.Mutex
	last := map[string]time.Time{} // digest → when its last layer_progress was passed
	return func(e api.Event) {
		if !api.IsProgress(e.Type) {
			return
		}
		t := now()
		mu.Lock()
		switch e.Type {
		case api.EventLayerProgress:
			if prev, ok := last[e.Digest]; ok && t.Sub(prev) < progressInterval {
				mu.Unlock()
				return
			}
			if len(last) >= maxProgressBlobs {
				clear(last)
			}
			last[e.Digest] = t
		case api.EventLayerDone:
			delete(last, e.Digest)
		}
		mu.Unlock()
		e.TS = t.UTC()
		events(e)
	}
}

// progressInterval is the least time between two layer_progress events of
// one blob; maxProgressBlobs bounds the blobs remembered for it (an image
// has far fewer; past it, the memory starts again).
const (
	progressInterval = 250 * time.Millisecond
	maxProgressBlobs = 4096
)

// repositoryOf is the repository name of a reference (no tag or digest).
func repositoryOf(ref string) string {
	if named, err := reference.ParseNormalizedNamed(ref); err == nil {
		return named.Name()
	}
	return ref
}
