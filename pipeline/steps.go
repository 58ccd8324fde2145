package pipeline

import (
	"context"
	"time"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/cgroup"
	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/pull"
)

// runner is what differs between a pull whose copy runs in this process
// (--no-isolation, inProcessRunner) and one whose copy runs in the isolated
// child (isolatedRunner); pullSteps does the rest, the same for both.
type runner interface {
	// prepare reclaims what killed pulls left and chooses who runs the
	// copy: the identity the staging area and the cache are handed to
	// (nil: this process's) and whether that uid is shared with other
	// processes (then staged files are committed as fresh copies and no
	// blob is handed over). release gives the identity back.
	prepare(ctx context.Context) (id *dest.Identity, shared bool, err error)
	release()
	// start readies the copy into st (and part, nil when there is none),
	// told whether it hands whole blobs over and its node share (nil: no
	// node budget); stop undoes it, also after a start that failed.
	start(ctx context.Context, st *dest.Stage, part *dest.Partial, handOver bool, rates <-chan pull.NodeShare) error
	stop()
	// copy runs the copy, passing its progress events to events, and
	// returns its report once every process of the copy is dead and the
	// cache is root's again.
	copy(ctx context.Context, m *pull.Material, events func(api.Event)) (*pull.Report, error)
	// isolation and usage are what the result says of how the copy ran.
	isolation(st *dest.Stage) api.Isolation
	usage() *api.Usage
}

// pullSteps are the steps of one pull of a plan (steps), with r for what
// depends on where the copy runs.
type pullSteps struct {
	p *Plan
	o *Options
	m *pull.Material
	r runner
	// roots waits for the system's trust roots, read while the pull is
	// prepared, for the copy's Material (nil in the sequence's test).
	roots func() []byte

	id        *dest.Identity
	shared    bool
	st        *dest.Stage
	part      *dest.Partial
	pre       *dest.Prehash
	handsOver bool
	stopRates func()
}

func (s *pullSteps) prepare(ctx context.Context) (err error) {
	s.id, s.shared, err = s.r.prepare(ctx)
	return err
}

func (s *pullSteps) release() { s.r.release() }

// stage creates the staging area beside DEST (handed to the copy's uid) and
// logs what it reclaimed. Its waits (a store's locks, containerd) end with
// ctx and the --timeout deadline.
func (s *pullSteps) stage(ctx context.Context) error {
	p, o := s.p, s.o
	ctx, cancel := p.withDeadline(ctx, o)
	defer cancel()
	st, err := p.dst.Stage(dest.StageOptions{HandTo: s.id, FreshCopy: s.shared, AllowOtherOwner: p.AllowOtherOwner,
		LockTimeout: p.LockTimeout, MaxBytes: p.MaxImageBytes, Log: o.Log, Ctx: ctx, Locks: p.Isolation.StateRoot.Locks()})
	if err != nil {
		return err
	}
	for _, r := range st.Reclaimed {
		o.Log.Warn("reclaimed a stale staging directory left by a pullhelper that died", "path", r)
	}
	if st.NoSync && p.Isolation.syncsChargeIO(cgroup.Version()) {
		st.NoSync = false
	}
	s.st = st
	return nil
}

func (s *pullSteps) removeStage() {
	if s.st != nil {
		s.st.Remove()
	}
}

// openPartial opens DEST's partial-blob cache beside the staging area
// (the copy's uid's while it runs). Whole blobs are handed over only by a
// uid of the pull's own (another process of a shared one may hold
// descriptors on them).
func (s *pullSteps) openPartial() {
	s.part = s.p.partial(s.o, s.st, s.id)
	s.handsOver = !s.shared && s.part.CanHandOver(s.st)
}

func (s *pullSteps) closePartial() { s.part.Close() }

// start registers the pull in the node's share (pull.node_bandwidth,
// pull.node_parallel_layers) and starts the runner (within --timeout: the
// cgroup's parents lock is waited for).
func (s *pullSteps) start(ctx context.Context) error {
	p := s.p
	ctx, cancel := p.withDeadline(ctx, s.o)
	defer cancel()
	var rates <-chan pull.NodeShare
	if p.NodeBandwidth > 0 || p.NodeParallelLayers > 0 {
		r, stop, err := nodeShare(p.Isolation.StateRoot.Bandwidth(), p.NodeBandwidth, p.NodeParallelLayers, s.o.Log)
		if err != nil {
			return err
		}
		rates, s.stopRates = r, stop
	}
	return s.r.start(ctx, s.st, s.part, s.handsOver, rates)
}

func (s *pullSteps) stop() {
	s.r.stop()
	if s.stopRates != nil {
		s.stopRates()
	}
}

// prehash hashes the handed-over blobs as each is done, while the copy
// goes on (dest.Prehash).
func (s *pullSteps) prehash() {
	if s.handsOver {
		s.pre = prehash(s.part, s.p.MaxImageBytes)
	}
}

// abortPrehash: hashing stops, leases are let go, descriptors closed.
func (s *pullSteps) abortPrehash() { s.pre.Abort() }

func (s *pullSteps) copy(ctx context.Context) (*pull.Report, error) {
	if s.roots != nil {
		s.m.SystemRoots = s.roots()
	}
	s.o.phases.copyStart = time.Now()
	rep, err := s.r.copy(ctx, s.m, prehashing(s.pre, progressOnly(s.o.Events)))
	s.o.phases.copyEnd = time.Now() // waiting for the hashes ahead is verification
	return rep, err
}

// handOver takes the digests whose leases held (every process of the copy
// is dead), then moves the whole blobs the copy left in the partial-blob
// cache into the staged layout (pull.Copied.Handed), where Verify hashes
// them like every staged file.
func (s *pullSteps) handOver(rep *pull.Report) error {
	s.st.UsePresums(s.pre.Finish())
	handed := rep.Copied.Handed
	if len(handed) == 0 {
		return nil
	}
	if s.part == nil {
		return failure.New(failure.Verification, "the copy handed over %d blobs but this pull has no partial-blob cache", len(handed))
	}
	n, err := s.part.HandOver(s.st, handed)
	if err != nil {
		return failure.Wrap(failure.Verification, err, "taking the copy's blobs from the partial-blob cache")
	}
	s.o.Log.Debug("took whole blobs from the partial-blob cache into staging", "blobs", n)
	return nil
}

// verify checks the staged image against what the copy reported and what
// the plan pinned, and judges it again with the signature policy. It runs
// on ctx (SIGINT, SIGTERM) with the pull's --timeout deadline, counted from
// Run's start.
func (s *pullSteps) verify(ctx context.Context, rep *pull.Report) error {
	p, o := s.p, s.o
	ctx, cancel := p.withDeadline(ctx, o)
	defer cancel()
	if _, err := p.credentialView(rep.Credential); err != nil {
		return err
	}
	if _, err := p.byDigest(rep.Digest); err != nil {
		return err
	}
	c := &rep.Copied
	e := dest.Expect{Digest: rep.Digest, Instance: rep.InstanceDigest, DestDigest: rep.DestinationDigest,
		Pinned: p.pinned(), MaxBytes: p.MaxImageBytes, IndexRaw: c.IndexRaw, Manifest: c.Manifest, Served: c.Served,
		Platform: p.Platform, AllArchitectures: p.AllArchitectures, ServedInstances: c.ServedInstances, ServedConfigs: c.ServedConfigs}
	if err := p.dst.Verify(ctx, s.st, e); err != nil {
		return err
	}
	if err := p.recheckSignature(ctx, s.m, rep); err != nil {
		return err
	}
	o.phases.verifyEnd = time.Now()
	return nil
}

// commit publishes exactly the verified files, on ctx with the --timeout
// deadline.
func (s *pullSteps) commit(ctx context.Context) error {
	ctx, cancel := s.p.withDeadline(ctx, s.o)
	defer cancel()
	if err := s.p.dst.Commit(ctx, s.st); err != nil {
		return err
	}
	s.o.phases.commitEnd = time.Now()
	return nil
}

// removePartial removes the cache after a commit: every blob it kept is in
// DEST now.
func (s *pullSteps) removePartial() {
	if err := s.part.Remove(); err != nil {
		s.o.Log.Warn("removing the partial-blob cache", "error", err.Error())
	}
}

// result is built from the plan and what the parent verified (the child's
// report is its claims), with how the copy ran.
func (s *pullSteps) result(rep *pull.Report) (*api.Result, error) {
	res, err := s.p.result(rep, s.st)
	if err != nil {
		return nil, err
	}
	res.Isolation = s.r.isolation(s.st)
	res.Usage = s.r.usage()
	return res, nil
}
