// Package cgroup creates, joins, limits, measures, kills and removes the
// cgroup a pull runs in, on cgroup v1 and v2, with the cgroupfs and systemd
// drivers of github.com/opencontainers/cgroups. No other package imports
// that library: Limits is translated to its Resources in exactly one
// function (resources).
//
// Two modes:
//   - per-pull: a fresh cgroup PARENT/pull-<pid>-<starttime>-<rand> with the
//     policy's limits, created before the child exists and removed after it
//     is gone. The name records the owning parent process, so a later run can
//     tell a stale cgroup (its owner died, e.g. SIGKILL) from a live one and
//     reclaim it.
//   - joined: an existing cgroup (e.g. a pod's) used as it is: no limits are
//     written, only the child is killed, and the cgroup is never removed.
//
// Invariant: every process of a per-pull cgroup is dead and the cgroup is
// removed on every path out of a pull (Kill, then Remove).
package cgroup
