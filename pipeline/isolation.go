package pipeline

import (
	"errors"
	"strings"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/cgroup"
	"github.com/pullhelper/pullhelper/dnsconf"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/state"
	"github.com/pullhelper/pullhelper/netns"
	"github.com/pullhelper/pullhelper/policy"
	"github.com/pullhelper/pullhelper/privdrop"
)

// Isolation is the one spec of how a pull's copy is isolated: NewPlan
// builds it from the policy and the flags, explain prints it (the plan's
// "isolation"), and the isolated runner derives everything else from it —
// the cgroup it creates, the uid it allocates, reexec.Start's options and
// the child's request. A new isolation setting is a field here and its use
// in runner.go; nothing else keeps it in step.
type Isolation struct {
	// Enabled: the copy runs in the isolated child (false: --no-isolation,
	// in this process, as the caller).
	Enabled bool   `json:"enabled"`
	Mode    string `json:"mode"`
	Reason  string `json:"reason,omitempty"`
	// User is [privileges] user: dynamic, a name or a uid.
	User string `json:"user,omitempty"`
	// Seccomp is [privileges] seccomp.
	Seccomp bool `json:"seccomp,omitempty"`
	// Cgroup is where the child runs and what it may use (nil when not
	// isolated).
	Cgroup *cgroup.Config `json:"cgroup,omitempty"`
	// Network is where the child's traffic goes.
	Network Network `json:"network"`
	// StateRoot holds what pulls on this node share: the cgroup parents
	// pullhelper made, the uid locks, the bandwidth share, the
	// credential-provider cache.
	StateRoot state.Root `json:"state_root"`
}

// syncsChargeIO reports whether the staged blobs must be synced by the
// pull even where DEST does not need it (dest.Stage.NoSync) so that the
// pull's IO limits hold: on cgroup v1 (version "v1" or "hybrid") blkio
// throttles and weighs a cgroup's synchronous IO only, and a buffered
// write is written back later on no cgroup's account, so the child's
// fsyncs are what put its writes under its limits. That is when its own
// limits have an io_weight or a write throttle, or when it runs in a
// cgroup it joins or below a parent it did not make (pullhelper cri's pod
// cgroups), whose limits it does not know. On v2 io.max and io.weight
// hold for buffered writes too.
func (iso Isolation) syncsChargeIO(version string) bool {
	c := iso.Cgroup
	if !iso.Enabled || c == nil || version == "v2" {
		return false
	}
	if c.Path != "" || c.ParentMustExist || c.Limits.IOWeight > 0 {
		return true
	}
	for _, d := range c.Limits.IO {
		if d.WriteBPS > 0 || d.WriteIOPS > 0 {
			return true
		}
	}
	return false
}

// Network is where the child's network traffic goes.
type Network struct {
	Mode  string `json:"mode"`            // host, netns, cluster-dns
	Netns string `json:"netns,omitempty"` // resolved namespace path
	// NetnsID is the namespace checked at Netns when the plan was made;
	// Run enters it only if it is still the one there (openNetns).
	NetnsID netns.ID        `json:"-"`
	DNS     *dnsconf.Config `json:"dns,omitempty"` // the override, rendered
}

// newIsolation is the spec before the network is resolved: the cgroup
// (resolving IO paths to their devices, checked against this host) and
// the identity. Errors name the policy key; those without a code are
// failure.Usage.
func newIsolation(l *policy.Loaded, in Inputs) (iso Isolation, err error) {
	defer func() {
		var fe *failure.Error
		if err != nil && !errors.As(err, &fe) {
			err = failure.Wrap(failure.Usage, err, "")
		}
	}()
	root := in.stateRoot()
	if in.NoIsolation {
		return Isolation{Mode: "in-process", Reason: "--no-isolation", StateRoot: root}, nil
	}
	iso = Isolation{Enabled: true, Mode: "unprivileged child in cgroup", User: l.Privileges.User, Seccomp: l.Privileges.Seccomp, StateRoot: root}
	if err := knownUser(l); err != nil {
		return iso, err
	}
	cfg, err := CgroupConfig(l)
	if err != nil {
		return iso, err
	}
	// What the cgroup cannot be, on this host, refused at the plan (so
	// by explain too): a pids_max below what the child needs (exit 2),
	// what the host lacks (exit 7).
	if err := cgroup.CheckLimits(cfg.Limits); err != nil {
		return iso, err
	}
	check := cgroup.Preflight
	if in.AtStart {
		check = preflightAtStart
	}
	if err := check(cfg); err != nil {
		return iso, failure.Wrap(failure.Isolation, err, "")
	}
	cfg.StateDir = root.CgroupParents()
	iso.Cgroup = &cfg
	return iso, nil
}

// preflightAtStart is cgroup.Preflight without the joined cgroup's check,
// which CheckSettings makes a warning.
func preflightAtStart(cfg cgroup.Config) error {
	cfg.Path = ""
	return cgroup.Preflight(cfg)
}

// knownUser refuses a [privileges] user the pull cannot run as on this
// host, as Allocate would (exit 2, as a malformed one is; explain too): a
// name the host does not know, a user whose uid or primary group is root's
// or out of range. The pull would fail only as it allocates the uid, after
// the plan.
func knownUser(l *policy.Loaded) error {
	spec := l.Privileges.User
	unknown, err := privdrop.Check(spec)
	if unknown {
		return failure.New(failure.Usage, "%s %q: no such user on this host; give an existing user, a uid or \"dynamic\"", settingName(l, "privileges.user"), spec)
	}
	if err != nil {
		// Allocate's words name the policy key; the flag when it set it.
		return failure.New(failure.Usage, "%s", strings.Replace(err.Error(), "privileges.user", settingName(l, "privileges.user"), 1))
	}
	return nil
}

// report is what the result says of the isolation before the pull ran:
// the spec's words (what ran is the runner's to add).
func (i *Isolation) report() api.Isolation {
	return api.Isolation{Enabled: i.Enabled, Mode: i.Mode, Reason: i.Reason, User: i.User, Seccomp: i.Seccomp && i.Enabled}
}

// stateRoot is the caller's state root, or the node's.
func (in Inputs) stateRoot() state.Root {
	if in.StateRoot == "" {
		return state.Default
	}
	return in.StateRoot
}
