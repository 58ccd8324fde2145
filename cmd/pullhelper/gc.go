package main

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/pullhelper/pullhelper/cgroup"
	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/state"
	"github.com/pullhelper/pullhelper/pipeline"
	"github.com/pullhelper/pullhelper/policy"
	"github.com/pullhelper/pullhelper/privdrop"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
)

// gcResult is what `pullhelper gc` prints: every leftover it removed, by
// kind, as paths (cgroups as cgroup paths). Lists are never null.
type gcResult struct {
	Staging     []string `json:"staging"`
	UIDLocks    []string `json:"uid_locks"`
	CommitLocks []string `json:"commit_locks"`
	Cgroups     []string `json:"cgroups"`
	// Partial lists the partial-blob caches removed (one per DEST given).
	Partial []string `json:"partial"`
}

// gcCommand is `pullhelper gc [DEST...]`.
func gcCommand(c *common, result *any) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gc [options] [DEST...]",
		Short: "Remove what killed pulls left behind; print it as JSON",
		Long: `Remove the leftovers of pulls that were killed (kill -9, a crash, a reboot of the
agent but not of the node) and print what was removed as one JSON object:
  {"staging":[PATH...],"uid_locks":[PATH...],"commit_locks":[PATH...],"cgroups":[CGROUP...],
   "partial":[PATH...]}

  staging       .pullhelper-staging-* directories beside each DEST given (in DEST's
                parent, and inside DEST when DEST is a directory, as for a DEST that is
                a mount point). Staging lives beside DEST and there is no registry of
                DESTs: name every DEST to sweep (oci:PATH[:TAG], dir:PATH, ..., or PATH).
  partial       the partial-blob cache of each DEST given (.pullhelper-partial-NAME in
                DEST's parent: the bytes of blobs a killed pull had received, kept for
                the next pull to resume), unless a live pull holds it; one that is not a
                root-owned 0700 directory (another user may have planted it) is left
                alone, with a warning on stderr. A containerd:REF DEST stages in
                --containerd-staging (dest.containerd_staging) under REF's own name,
                image-<16 hex of sha256(REF)>; gc containerd:REF removes that cache
                and the shared one older pullhelpers kept for every image there
                (.pullhelper-partial-image), which no pull uses any more
  uid_locks     lock files of dynamic pull uids in ` + state.Default.UIDs() + ` that no pull holds
  commit_locks  commit and pull lock files in ` + state.Default.Locks() + ` that no pull holds
  cgroups       per-pull cgroups under the cgroup parent (--cgroup-parent, the policy's
                cgroup.parent; with --cgroup PATH, the sub-cgroups of PATH) whose owner
                is gone; what is left in them is killed first, before any staging or
                cache is swept (a killed pull's process cannot go on adding to them)

Nothing a live pullhelper owns is removed: a staging directory or a cgroup is removed
only when the process recorded as its owner (pid and start time) no longer exists, a
lock file only when nobody holds its flock. Every pull also reclaims these at start
(staging beside its own DEST, cgroups under its own parent, unheld uid locks).

Exit codes: 0 done (the lists may be empty); 2 a bad flag, policy or DEST; 7 the
cgroup sweep failed; 9 a DEST's parent directory, or the uid or commit lock
directory, cannot be opened safely (owned by another user, writable by others, a
symbolic link on the way); nothing is removed before all of them are opened.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := policy.Resolve(c.policyFile, c.profile)
			if err != nil {
				return failure.Wrap(failure.Usage, err, "")
			}
			if err := applySettingFlags(cmd.Flags(), l); err != nil {
				return failure.Wrap(failure.Usage, err, "")
			}
			if err := l.Validate(); err != nil {
				return failure.Wrap(failure.Usage, err, "")
			}
			cfg, err := pipeline.CgroupConfig(l)
			if err != nil {
				return failure.Wrap(failure.Usage, err, "")
			}
			// Open every DEST first: a bad one fails the run before
			// anything is removed.
			var sweeps []*dest.Sweep
			for _, a := range args {
				s, err := dest.OpenSweep(a, l.Dest.ContainerdStaging)
				if err != nil {
					for _, s := range sweeps {
						s.Close()
					}
					return err
				}
				if s != nil { // nil: DEST's parent does not exist, nothing to sweep
					sweeps = append(sweeps, s)
				}
			}
			// The state root's lock directories: one that root alone
			// cannot change fails the run before anything is removed (a
			// missing one has nothing to sweep).
			for _, d := range []string{state.Default.UIDs(), state.Default.Locks()} {
				fd, err := state.OpenExistingDir(d)
				if err == nil {
					unix.Close(fd)
				} else if !errors.Is(err, fs.ErrNotExist) {
					for _, s := range sweeps {
						s.Close()
					}
					return failure.Wrap(failure.Destination, err, "")
				}
			}
			// The stale cgroups first: what is left in them is killed, so
			// that no process of a killed pull still adds to the staging
			// or cache being removed.
			cgs, cgErr := cgroup.Reclaim(cfg)
			res := gcResult{Staging: []string{}, Partial: []string{}, Cgroups: orEmpty(cgs)}
			for _, s := range sweeps {
				res.Partial = append(res.Partial, s.ReclaimPartial()...)
				for _, why := range s.Refused {
					fmt.Fprintln(cmd.ErrOrStderr(), "pullhelper gc: warning:", why)
				}
				res.Staging = append(res.Staging, s.Reclaim()...)
			}
			res.UIDLocks = orEmpty(privdrop.Sweep(state.Default.UIDs()))
			locks, err := dest.SweepLocks(state.Default.Locks())
			if err != nil {
				return failure.Wrap(failure.Destination, err, "sweeping the commit locks")
			}
			res.CommitLocks = orEmpty(locks)
			if err := cgErr; err != nil {
				return failure.Wrap(failure.Isolation, err, "reclaiming stale pull cgroups under %s (removed so far: %v)", cfg.Parent, cgs)
			}
			*result = res
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&c.policyFile, "policy", "", "policy file (default $PULLHELPER_POLICY, else /etc/pullhelper/policy.toml when present)")
	fs.StringVar(&c.profile, "profile", "", "use [profiles.NAME] of the policy file")
	addSettingFlagsNamed(fs, "cgroup-parent", "cgroup", "containerd-staging")
	return cmd
}

// addSettingFlagsNamed adds only the named setting flags.
func addSettingFlagsNamed(fs *pflag.FlagSet, names ...string) {
	for _, f := range settingFlags {
		for _, n := range names {
			if f.name == n {
				fs.Var(&textFlag{typ: f.arg}, f.name, f.usage)
			}
		}
	}
}
