package pipeline

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/cgroup"
	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/state"
	"github.com/pullhelper/pullhelper/privdrop"
	"github.com/pullhelper/pullhelper/pull"
	"github.com/pullhelper/pullhelper/reexec"
	"go.podman.io/image/v5/docker/reference"
)

// Options are the caller's hooks and the isolation settings of a pull.
type Options struct {
	// Events receives progress events in order (start, the copy's
	// progress, then done or error is the caller's); may be nil.
	Events func(api.Event)
	// Report, when set, receives containers/image's progress bars (only
	// useful on a terminal).
	Report io.Writer
	// Log receives human log records; nil discards them.
	Log *slog.Logger
	// Cgroup is where the isolated child runs and what it may use.
	Cgroup cgroup.Config
	// User is [privileges] user: dynamic, a name or a uid.
	User string
	// Seccomp is [privileges] seccomp.
	Seccomp bool
	// LockDir holds the dynamic uid locks (default state.Default.UIDs()).
	LockDir   string
	LogFormat string
	Debug     bool

	phases phases // for the result's Timings
}

func (o *Options) emit(e api.Event) {
	if o.Events != nil {
		e.TS = time.Now().UTC()
		o.Events(e)
	}
}

// Run carries out a plan, the one place that sequences a pull:
// material → staging → copy (in this process, or in the isolated child) →
// take back → verify → commit → result. On every path out the staging
// area is removed, and when isolated every process of the pull is dead and
// its cgroup removed, before Run returns.
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
	m, err := p.LoadMaterial()
	if err != nil {
		return nil, err
	}
	// One pull of this image into this DEST at a time: a second waits and
	// then finds the first's blobs in DEST (an oci: layout's are not
	// fetched again).
	lctx, cancel := p.withDeadline(ctx, &o)
	unlock, err := dest.LockPull(lctx, p.Destination, repositoryOf(p.Reference), p.LockTimeout)
	cancel()
	if err != nil {
		return nil, err
	}
	defer unlock()
	var res *api.Result
	if p.Isolation.Enabled {
		res, err = isolated(ctx, p, m, &o)
	} else {
		res, err = inProcess(ctx, p, m, &o)
	}
	if err != nil {
		return nil, err
	}
	res.DurationMS = time.Since(start).Milliseconds()
	res.Timings = o.phases.timings(start, res.DurationMS)
	o.emit(api.Event{Type: api.EventDone, Digest: res.Digest, Bytes: res.Bytes, Layers: res.Layers})
	return res, nil
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

// stage creates the staging area beside DEST (handed to id when the copy
// runs as another uid) and logs what it reclaimed. Its waits (a store's
// locks, containerd) end with ctx and the --timeout deadline.
func (p *Plan) stage(ctx context.Context, o *Options, id *dest.Identity, shared bool) (*dest.Stage, error) {
	ctx, cancel := p.withDeadline(ctx, o)
	defer cancel()
	st, err := p.dst.Stage(dest.StageOptions{HandTo: id, FreshCopy: shared, AllowOtherOwner: p.AllowOtherOwner, LockTimeout: p.LockTimeout, MaxBytes: p.MaxImageBytes, Log: o.Log, Ctx: ctx})
	if err != nil {
		return nil, err
	}
	for _, r := range st.Reclaimed {
		o.Log.Warn("reclaimed a stale staging directory left by a pullhelper that died", "path", r)
	}
	return st, nil
}

// verifyAndCommit checks the staged image against what the copy reported
// and what the plan pinned, judges it again with the signature policy,
// commits exactly the verified files, and builds the result from the plan
// and what it verified (result). Verify and Commit run on ctx (SIGINT,
// SIGTERM) with the pull's --timeout deadline, counted from Run's start.
func (p *Plan) verifyAndCommit(ctx context.Context, o *Options, m *pull.Material, st *dest.Stage, rep *pull.Report) (*api.Result, error) {
	ctx, cancel := p.withDeadline(ctx, o)
	defer cancel()
	if _, err := p.credentialView(rep.Credential); err != nil {
		return nil, err
	}
	if _, err := p.byDigest(rep.Digest); err != nil {
		return nil, err
	}
	c := &rep.Copied
	e := dest.Expect{Digest: rep.Digest, Instance: rep.InstanceDigest, DestDigest: rep.DestinationDigest,
		Pinned: p.pinned(), MaxBytes: p.MaxImageBytes, IndexRaw: c.IndexRaw, Manifest: c.Manifest, Served: c.Served}
	if err := p.dst.Verify(ctx, st, e); err != nil {
		return nil, err
	}
	if err := p.recheckSignature(ctx, m, rep, func(w string) { o.Log.Warn(w) }); err != nil {
		return nil, err
	}
	o.phases.verifyEnd = time.Now()
	if err := p.dst.Commit(ctx, st); err != nil {
		return nil, err
	}
	o.phases.commitEnd = time.Now()
	return p.result(rep, st)
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

// lockDir is where the dynamic uid locks are.
func (o *Options) lockDir() string {
	if o.LockDir == "" {
		return state.Default.UIDs()
	}
	return o.LockDir
}

// reclaimUIDLocks removes the uid lock files of pulls killed before their
// Release (nobody holds them) and logs each.
func (o *Options) reclaimUIDLocks() []string {
	out := privdrop.Sweep(o.lockDir())
	for _, r := range out {
		o.Log.Warn("reclaimed a stale uid lock left by a pullhelper that died", "path", r)
	}
	return out
}

// inProcess is --no-isolation: the copy runs here, as the caller.
func inProcess(ctx context.Context, p *Plan, m *pull.Material, o *Options) (*api.Result, error) {
	reclaimedLocks := o.reclaimUIDLocks()
	st, err := p.stage(ctx, o, nil, false)
	if err != nil {
		return nil, err
	}
	defer st.Remove()
	// The auth file and the client keys stay in memory (memconfig.go).
	config, err := newMemConfig()
	if err != nil {
		return nil, err
	}
	defer config.Close()
	part := p.partial(o, st, nil)
	defer part.Close()
	pst := &pull.Stage{Work: st.WorkPath, Name: st.Name, Known: st.Known, Config: config.Path()}
	if part != nil {
		pst.Partial, pst.HandOver = part.Path, part.CanHandOver(st)
	}
	var pre *dest.Prehash // as in isolated: handed blobs hashed as each is done
	if pst.HandOver {
		pre = part.Prehash(p.MaxImageBytes)
	}
	defer pre.Abort()
	po := pull.Options{Events: prehashing(pre, progressOnly(o.Events)), Report: o.Report, Log: o.Log}
	if p.NodeBandwidth > 0 || p.NodeParallelLayers > 0 {
		rates, stop, err := nodeShare(p.NodeBandwidth, p.NodeParallelLayers, o.Log)
		if err != nil {
			return nil, err
		}
		defer stop()
		po.Node = rates
	}
	o.phases.copyStart = time.Now()
	rep, err := pull.Copy(ctx, &p.Request, m, pst, po)
	if err != nil {
		return nil, err
	}
	o.phases.copyEnd = time.Now()
	st.UsePresums(pre.Finish())
	if err := handOver(o, part, st, rep.Copied.Handed); err != nil {
		return nil, err
	}
	res, err := p.verifyAndCommit(ctx, o, m, st, rep)
	if err != nil {
		return nil, err
	}
	removePartial(o, part)
	res.Isolation = p.Isolation
	if len(reclaimedLocks) > 0 {
		res.Isolation.Reclaimed = reclaimedLocks
	}
	return res, nil
}

// isolated runs the copy in the child: an unprivileged uid, its own
// cgroup, namespaces; then takes the staging area back, verifies and
// commits it here.
func isolated(ctx context.Context, p *Plan, m *pull.Material, o *Options) (*api.Result, error) {
	// A limit the child cannot live with (pids_max below what the Go
	// runtime needs) is a usage error, before anything is created.
	if err := cgroup.CheckLimits(o.Cgroup.Limits); err != nil {
		return nil, err
	}
	// The stale cgroups of pulls whose parent was killed are reclaimed
	// first: what is left in them is killed (a process of that pull could
	// otherwise go on extending its old staging or its partial-blob cache
	// mount while they are reclaimed below, or hold its uid).
	reclaimed, err := cgroup.Reclaim(o.Cgroup)
	for _, r := range reclaimed {
		o.Log.Warn("reclaimed a stale pull cgroup left by a pullhelper that died", "cgroup", r)
	}
	if err != nil {
		o.Log.Warn("reclaiming stale pull cgroups", "error", err.Error())
	}
	// The uid locks of pulls killed before their Release are reclaimed at
	// every pull's start, as the cgroups are (and again by a dynamic
	// allocation once it holds its own).
	lockDir := o.lockDir()
	reclaimedLocks := o.reclaimUIDLocks()
	lease, err := privdrop.Allocate(o.User, lockDir)
	if err != nil {
		return nil, failure.Wrap(failure.Isolation, err, "")
	}
	for _, r := range lease.Reclaimed {
		o.Log.Warn("reclaimed a stale uid lock left by a pullhelper that died", "path", r)
	}
	reclaimedLocks = append(reclaimedLocks, lease.Reclaimed...)
	defer lease.Release() // after the cgroup is empty and removed (defers run last-first)
	// A uid shared with other processes (--user NAME|UID) may have
	// descriptors on staged files: commit fresh copies only.
	st, err := p.stage(ctx, o, &dest.Identity{UID: lease.UID, GID: lease.GID}, lease.Source != "dynamic")
	if err != nil {
		return nil, err
	}
	defer st.Remove()
	// The partial-blob cache is the pull uid's while the child runs, and
	// root's again (TakeBack) once every process of the pull is dead.
	part := p.partial(o, st, &dest.Identity{UID: lease.UID, GID: lease.GID})
	defer part.Close()

	cfg := o.Cgroup
	cfg.AccountPaths = append(cfg.AccountPaths, filepath.Dir(p.Destination.Path))
	g, err := cgroup.Create(cfg)
	if err != nil {
		return nil, failure.Wrap(failure.Isolation, err, "")
	}
	defer func() {
		if err := g.Remove(); err != nil {
			o.Log.Error("removing the pull cgroup", "error", err.Error())
		}
	}()
	iso := p.Isolation
	iso.Cgroup, iso.CgroupVersion, iso.CgroupDriver, iso.CgroupJoined = g.Path(), cgroup.Version(), g.Driver(), g.Joined()
	iso.Reclaimed = append(append(reclaimed, st.Reclaimed...), reclaimedLocks...)
	iso.UID, iso.GID, iso.User, iso.Seccomp = lease.UID, lease.GID, lease.Source, o.Seccomp
	iso.Netns = p.Network.Netns
	if p.Network.DNS != nil {
		iso.DNS = p.Network.DNS.Nameservers
	}
	if !g.Joined() && cfg.Limits.Any() {
		iso.Limits = apiLimits(cfg.Limits)
	}

	so := reexec.StartOptions{Netns: p.Network.Netns, Stage: st.Work, Debug: o.Debug, Terminal: o.Report != nil,
		LogJSON: o.LogFormat == "json", Log: o.Log}
	if p.NodeBandwidth > 0 || p.NodeParallelLayers > 0 {
		rates, stop, err := nodeShare(p.NodeBandwidth, p.NodeParallelLayers, o.Log)
		if err != nil {
			return nil, err
		}
		defer stop()
		so.Rates = rates
	}
	if part != nil {
		so.Partial = part.Dir
	}
	c, err := reexec.Start(g, so)
	if err != nil {
		if terr := part.TakeBack(); terr != nil {
			o.Log.Warn("taking back the partial-blob cache", "error", terr.Error())
		}
		return nil, err
	}
	// Whole blobs the child hands over (only with a uid of the pull's
	// own: another process of a shared one may hold descriptors on them)
	// are hashed as each is done, while it goes on (dest.Prehash).
	handOverOK := lease.Source == "dynamic" && part.CanHandOver(st)
	var pre *dest.Prehash
	if handOverOK {
		pre = part.Prehash(p.MaxImageBytes)
	}
	defer pre.Abort() // every other path: hashing stops, leases let go, descriptors closed
	iso.ChildPID = c.PID()
	o.phases.copyStart = time.Now()
	// From here on the child exists: Run kills and reaps it on every path.
	// The child is told no host path: DEST stands anonymous in its copy of
	// the request, and the staging area is a mount it gets by fd.
	copyReq := p.Request
	copyReq.Destination = p.Destination.Anonymous()
	rep, err := c.Run(ctx, g, reexec.Request{
		Copy: &copyReq, Material: m, Stage: reexec.StageInChild(st.Name, st.Known, part != nil, handOverOK), Cgroup: g.Expected(),
		DNS: p.Network.DNS, Identity: lease.Identity, Seccomp: o.Seccomp,
		Log: reexec.LogConfig{Format: o.LogFormat, Debug: o.Debug}, Bars: o.Report != nil,
		NodeRate: so.Rates != nil,
	}, wanting(part, prehashing(pre, progressOnly(o.Events))), o.Log)
	o.phases.copyEnd = time.Now() // waiting for the hashes ahead is verification
	usage := g.Usage()
	// Run reaped the child and killed what was left in the cgroup: the
	// cache is root's again before anything else happens, keeping only
	// the blobs of the manifest when its bytes are the pinned digest's.
	if err == nil && rep != nil {
		part.Restrict(p.pinned(), rep.Copied.IndexRaw, rep.Copied.Manifest)
	}
	if terr := part.TakeBack(); terr != nil {
		o.Log.Warn("taking back the partial-blob cache", "error", terr.Error())
	}
	if err != nil {
		return nil, reexec.ExplainDeath(err, usage, cfg.Limits)
	}
	// Nothing running as the pull uid may outlive the child: Run killed
	// what was left in the cgroup after reaping the child; make sure it is
	// empty before the staging area is taken back (no pid: it may be
	// another process's by now).
	if err := g.Kill(); err != nil {
		return nil, failure.Wrap(failure.Isolation, err, "")
	}
	// Every process of the pull is dead: the digests whose leases held
	// are good (before HandOver moves the files).
	st.UsePresums(pre.Finish())
	// The child's report is its claims: the result is built from the plan
	// and what the parent verified (verifyAndCommit, result).
	if err := handOver(o, part, st, rep.Copied.Handed); err != nil {
		return nil, err
	}
	res, err := p.verifyAndCommit(ctx, o, m, st, rep)
	if err != nil {
		return nil, err
	}
	removePartial(o, part)
	res.Isolation = iso
	// In a joined cgroup the pull runs in a sub-cgroup of its own: the
	// usage is the pull's alone either way.
	res.Usage = &usage
	return res, nil
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

// handOver moves the whole blobs the copy left in the partial-blob cache
// into the staged layout (pull.Copied.Handed), where Verify hashes them
// like every staged file.
func handOver(o *Options, part *dest.Partial, st *dest.Stage, handed []string) error {
	if len(handed) == 0 {
		return nil
	}
	if part == nil {
		return failure.New(failure.Verification, "the copy handed over %d blobs but this pull has no partial-blob cache", len(handed))
	}
	n, err := part.HandOver(st, handed)
	if err != nil {
		return failure.Wrap(failure.Verification, err, "taking the copy's blobs from the partial-blob cache")
	}
	o.Log.Debug("took whole blobs from the partial-blob cache into staging", "blobs", n)
	return nil
}

// removePartial removes the cache after a commit: every blob it kept is in
// DEST now.
func removePartial(o *Options, part *dest.Partial) {
	if err := part.Remove(); err != nil {
		o.Log.Warn("removing the partial-blob cache", "error", err.Error())
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

// apiLimits is the result's view of the cgroup's limits: the same type
// (cgroup.Limits is api.Limits), a copy that shares the IO list and SwapMax
// with the configuration (nothing changes them once CgroupConfig made them).
func apiLimits(l cgroup.Limits) *api.Limits { return &l }

// repositoryOf is the repository name of a reference (no tag or digest).
func repositoryOf(ref string) string {
	if named, err := reference.ParseNormalizedNamed(ref); err == nil {
		return named.Name()
	}
	return ref
}
