package pipeline

import (
	"context"
	"path/filepath"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/cgroup"
	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/privdrop"
	"github.com/pullhelper/pullhelper/pull"
	"github.com/pullhelper/pullhelper/reexec"
)

// reclaimUIDLocks removes the uid lock files of pulls killed before their
// Release (nobody holds them) and logs each.
func reclaimUIDLocks(p *Plan, o *Options) []string {
	out := privdrop.Sweep(p.Isolation.StateRoot.UIDs())
	for _, r := range out {
		o.Log.Warn("reclaimed a stale uid lock left by a pullhelper that died", "path", r)
	}
	return out
}

// inProcessRunner is --no-isolation: the copy runs here, as the caller,
// its auth file and client keys in memory (memconfig.go).
type inProcessRunner struct {
	p *Plan
	o *Options

	reclaimed []string
	config    *memConfig
	pst       *pull.Stage
	rates     <-chan pull.NodeShare
}

func (r *inProcessRunner) prepare(context.Context) (*dest.Identity, bool, error) {
	r.reclaimed = reclaimUIDLocks(r.p, r.o)
	return nil, false, nil
}

func (r *inProcessRunner) release() {}

func (r *inProcessRunner) start(_ context.Context, st *dest.Stage, part *dest.Partial, handOver bool, rates <-chan pull.NodeShare) error {
	config, err := newMemConfig()
	if err != nil {
		return err
	}
	r.config, r.rates = config, rates
	r.pst = &pull.Stage{Work: st.WorkPath, Name: st.Name, Known: st.Known, Config: config.Path(), NoSync: st.NoSync}
	if part != nil {
		r.pst.Partial, r.pst.HandOver = part.Path, handOver
	}
	return nil
}

func (r *inProcessRunner) stop() {
	if r.config != nil {
		r.config.Close()
	}
}

func (r *inProcessRunner) copy(ctx context.Context, m *pull.Material, events func(api.Event)) (*pull.Report, error) {
	return pull.Copy(ctx, &r.p.Request, m, r.pst, pull.Options{Events: events, Report: r.o.Report, Log: r.o.Log, Node: r.rates})
}

func (r *inProcessRunner) isolation(*dest.Stage) api.Isolation {
	iso := r.p.Isolation.report()
	iso.Reclaimed = r.reclaimed
	return iso
}

func (r *inProcessRunner) usage() *api.Usage { return nil }

// isolatedRunner runs the copy in the child: an unprivileged uid, its own
// cgroup, namespaces, all derived from the plan's isolation spec.
type isolatedRunner struct {
	p *Plan
	o *Options

	reclaimedCgroups, reclaimedLocks []string
	lease                            *privdrop.Lease
	cfg                              cgroup.Config
	g                                *cgroup.Group
	child                            *reexec.Child
	st                               *dest.Stage
	part                             *dest.Partial
	handOver                         bool
	childPID                         int
	used                             cgroup.Usage
}

// prepare reclaims the stale cgroups of pulls whose
// parent was killed (what is left in them is killed first: a process of
// that pull could otherwise go on extending its old staging or its
// partial-blob cache mount while they are reclaimed, or hold its uid), then
// the uid locks of pulls killed before their Release (as a dynamic
// allocation does again once it holds its own), and allocates the uid.
func (r *isolatedRunner) prepare(context.Context) (*dest.Identity, bool, error) {
	iso, o := &r.p.Isolation, r.o
	r.cfg = *iso.Cgroup
	r.cfg.AccountPaths = append(append([]string(nil), r.cfg.AccountPaths...), filepath.Dir(r.p.Destination.Path))
	reclaimed, err := cgroup.Reclaim(r.cfg)
	for _, c := range reclaimed {
		o.Log.Warn("reclaimed a stale pull cgroup left by a pullhelper that died", "cgroup", c)
	}
	if err != nil {
		o.Log.Warn("reclaiming stale pull cgroups", "error", err.Error())
	}
	r.reclaimedCgroups, r.reclaimedLocks = reclaimed, reclaimUIDLocks(r.p, o)
	lease, err := privdrop.Allocate(iso.User, iso.StateRoot.UIDs())
	if err != nil {
		return nil, false, failure.Wrap(failure.Isolation, err, "")
	}
	for _, l := range lease.Reclaimed {
		o.Log.Warn("reclaimed a stale uid lock left by a pullhelper that died", "path", l)
	}
	r.reclaimedLocks = append(r.reclaimedLocks, lease.Reclaimed...)
	r.lease = lease
	// A uid shared with other processes (--user NAME|UID) may have
	// descriptors on staged files: commit fresh copies only.
	return &dest.Identity{UID: lease.UID, GID: lease.GID}, lease.Source != "dynamic", nil
}

// release gives the uid back, after the cgroup is empty and removed.
func (r *isolatedRunner) release() {
	if r.lease != nil {
		r.lease.Release()
	}
}

// start creates the pull's cgroup and starts the child in it (and in the
// network namespace). The child is told no host path: the staging area and
// the cache are mounts it gets by fd.
func (r *isolatedRunner) start(ctx context.Context, st *dest.Stage, part *dest.Partial, handOver bool, rates <-chan pull.NodeShare) error {
	o := r.o
	r.st, r.part, r.handOver = st, part, handOver
	g, err := cgroup.Create(ctx, r.cfg)
	if err != nil {
		if cerr := failure.Context(ctx, "creating the pull cgroup"); cerr != nil {
			return cerr
		}
		return failure.Wrap(failure.Isolation, err, "")
	}
	r.g = g
	so := reexec.StartOptions{Netns: o.netns, Stage: st.Work, Terminal: o.Report != nil,
		LogConfig: reexec.LogConfig{Format: o.LogFormat, Debug: o.Debug, Quiet: o.Quiet}, Log: o.Log, Rates: rates}
	if part != nil {
		so.Partial = part.Dir
	}
	c, err := reexec.Start(g, so)
	if err != nil {
		// The cache is root's again before anything else happens.
		if terr := part.TakeBack(); terr != nil {
			o.Log.Warn("taking back the partial-blob cache", "error", terr.Error())
		}
		return err
	}
	r.child, r.childPID = c, c.PID()
	return nil
}

// stop removes the cgroup (its processes were killed when the child was
// reaped: Run kills and reaps on every path once the child exists).
func (r *isolatedRunner) stop() {
	if r.g == nil {
		return
	}
	if err := r.g.Remove(); err != nil {
		r.o.Log.Error("removing the pull cgroup", "error", err.Error())
	}
}

// copy sends the child its request and relays its events until it exits.
// Then the cache is root's again, keeping only the blobs of the manifest
// when its bytes are the pinned digest's, and nothing running as the pull
// uid is left.
func (r *isolatedRunner) copy(ctx context.Context, m *pull.Material, events func(api.Event)) (*pull.Report, error) {
	p, o, g, part := r.p, r.o, r.g, r.part
	// DEST stands anonymous in the child's copy of the request.
	copyReq := p.Request
	copyReq.Destination = p.Destination.Anonymous()
	rep, err := r.child.Run(ctx, g, reexec.Request{
		Copy: &copyReq, Material: m, Stage: reexec.StageInChild(r.st.Name, r.st.Known, part != nil, r.handOver, r.st.NoSync),
		Cgroup: g.Expected(), DNS: p.Isolation.Network.DNS, Identity: r.lease.Identity, Seccomp: p.Isolation.Seccomp,
	}, wanting(part, events), o.Log)
	r.used = g.Usage()
	if err == nil && rep != nil {
		part.Restrict(p.pinned(), rep.Copied.IndexRaw, rep.Copied.Manifest)
	}
	if terr := part.TakeBack(); terr != nil {
		o.Log.Warn("taking back the partial-blob cache", "error", terr.Error())
	}
	if err != nil {
		return nil, reexec.ExplainDeath(err, r.used, r.cfg.Limits)
	}
	// Run killed what was left in the cgroup after reaping the child;
	// make sure it is empty before the staging area is taken back (no
	// pid: it may be another process's by now).
	if err := g.Kill(); err != nil {
		return nil, failure.Wrap(failure.Isolation, err, "")
	}
	return rep, nil
}

// isolation is the spec's words with what ran: the cgroup, the uid, the
// child, what was reclaimed.
func (r *isolatedRunner) isolation(st *dest.Stage) api.Isolation {
	iso := r.p.Isolation.report()
	g := r.g
	iso.Cgroup, iso.CgroupVersion, iso.CgroupDriver, iso.CgroupJoined = g.Path(), cgroup.Version(), g.Driver(), g.Joined()
	// Stale cgroups first, then stale staging, then uid locks.
	iso.Reclaimed = append(append(append([]string(nil), r.reclaimedCgroups...), st.Reclaimed...), r.reclaimedLocks...)
	iso.UID, iso.GID, iso.User = r.lease.UID, r.lease.GID, r.lease.Source
	iso.ChildPID = r.childPID
	iso.Netns = r.p.Isolation.Network.Netns
	if dns := r.p.Isolation.Network.DNS; dns != nil {
		iso.DNS = dns.Nameservers
	}
	if !g.Joined() && r.cfg.Limits.Any() {
		l := r.cfg.Limits
		iso.Limits = &l
	}
	return iso
}

// usage is the pull's alone: in a joined cgroup it runs in a sub-cgroup of
// its own.
func (r *isolatedRunner) usage() *api.Usage {
	u := r.used
	return &u
}
