// Package pipeline owns a pull from end to end; it is the only place that
// sequences the stages:
//
//	policy + flags → Plan (NewPlan: resolved, validated; explain prints it)
//	→ material (secrets, certificates, configuration files, read here by
//	  the parent, which may be the only one allowed to)
//	→ staging beside DEST
//	→ copy: in this process (--no-isolation) or in the isolated child
//	  (package reexec: cgroup, namespaces, privilege drop)
//	→ take back → verify → commit → result.
//
// Invariants:
//   - cmd/pullhelper parses flags and prints. Of a pull it calls NewPlan
//     and Run; it also builds part of the isolation itself: Run's Options
//     carry the policy's cgroup (CgroupConfig, which explain prints beside
//     the plan, not in it, and gc reclaims by), user and seccomp settings,
//     and no cgroup with --no-isolation.
//   - The copy (package pull) gets everything it needs, the version
//     included, in its Request and Material; it reads no host
//     configuration.
//   - Run emits start and done itself; from the copy it passes on only
//     progress events.
//   - api.Result is built here only (result.go), from the plan and what the
//     parent verified, field by field; the copy's pull.Report is its claims
//     (the isolated child's, checked by reexec first).
//   - On every path out of Run the staging area is removed and, when
//     isolated, every process of the pull is dead and its cgroup removed.
//   - registries.conf and its drop-ins are read once, by NewPlan, through
//     safefile; every containers/image call of the parent reads a snapshot
//     of those bytes (snapshot.go, internal/memfs), which the Plan holds
//     until Close (the caller closes it when the pull or explain ends).
//   - Building a Plan sends no network byte of its own; it may run the
//     kubelet's credential-provider plugins (never for explain), which
//     may.
package pipeline
