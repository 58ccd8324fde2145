// Package cgroup creates, joins, limits, measures, kills and removes the
// cgroup a pull runs in, on cgroup v1 and v2, with the cgroupfs and systemd
// drivers of github.com/opencontainers/cgroups. No other package imports
// that library. Limits is the output contract's api.Limits (the result
// reports it as it is applied); it is translated to the library's Resources
// in one function (resources, limits.go) and, with the systemd driver on v2,
// its IO limits also to the scope's properties (systemdIOProps).
//
// The files go by job: create.go (Create, the per-pull and the joined
// cgroup), parents.go (the parents pullhelper created), member.go and
// thread.go (placing processes, checking where they are), usage.go (the
// accounting), kill.go (Kill, Remove), reclaim.go (stale cgroups of dead
// owners), limits.go (Config, Limits and their translation), systemd.go
// (the scope's anchor and properties), minimum.go (CheckLimits),
// preflight.go (Preflight: what this host cannot apply, refused at the
// plan, before anything is created).
//
// Two modes:
//   - per-pull: a fresh cgroup PARENT/pull-<pid>-<starttime>-<rand> with the
//     policy's limits, created before the child exists and removed after it
//     is gone. The name records the owning parent process, so a later run can
//     tell a stale cgroup (its owner died, e.g. SIGKILL) from a live one and
//     reclaim it. A PARENT that pullhelper created, and each of its
//     ancestors it created with it, in whichever hierarchies each was
//     missing, is marked with those directories (in Config.StateDir, held
//     open through state.OpenDir: only root can change it) and they are
//     removed by the last pull to leave it; a directory that existed
//     before, in any hierarchy, is never removed. The markers are read and changed
//     under the parents lock (StateDir/.lock, state.LockAt), which a pull
//     making its cgroup waits for at most 10 s and not past its context
//     (--timeout, SIGTERM), and a pull leaving at most 2 s (the parent then
//     stays, marked, for the next pull that leaves it: Remove's error says
//     so). With ParentMustExist (a pod's
//     cgroup, for pullhelper cri) a PARENT missing from any hierarchy is an
//     error, checked under the parents lock: it is never created.
//   - joined: an existing cgroup (e.g. a pod's) is joined through a
//     sub-cgroup of the pull's own, JOINED/pull-<…>, in exactly the
//     hierarchies the joined cgroup exists in, with no controller enabled
//     and no limit written (on v1 the sub-cgroup in the cpuset hierarchy
//     gets the joined cgroup's CPUs and memory nodes, inheritCpuset: a new
//     cpuset cgroup has none and takes no process, and the kubelet's pod
//     cgroups exist there): the joined cgroup's limits and accounting cover
//     the pull, the joined cgroup itself is never changed or removed, and
//     the pull can still be killed as a whole and measured on its own.
//
// With the systemd driver the per-pull cgroup is a transient scope
// pullhelper-pull-<…>.scope in the slice named by PARENT, started over D-Bus
// before the child exists, with its limits as the scope's properties
// (systemd re-applies them whenever it realises the unit) and one anchor
// process (AnchorName, see systemd.go) that holds it: systemd stops a scope
// the moment it is empty, and the usage must still be read after the child
// is gone. Kill spares the anchor; Remove kills it last and stops the scope.
//
// Invariant: every process of the pull's cgroup (the per-pull one or the
// sub-cgroup) is dead and that cgroup is removed on every path out of a
// pull (Kill, then Remove). On v1 the child is born inside (EnterThread: the
// forking thread is in the cgroup for the fork; in hybrid mode the unified
// hierarchy's cgroup by CLONE_INTO_CGROUP, OpenDir, from Linux 5.7, and by
// pid after the fork before it), so pids.max is a ceiling from its first
// instruction; CheckLimits refuses a pids_max below what the
// child needs (MinPidsMax), so the same input gives the same exit code.
package cgroup
