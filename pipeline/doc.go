// Package pipeline owns a pull from end to end; it is the only place that
// sequences the stages:
//
//	policy + flags → Plan (NewPlan: resolved, validated, its cgroup
//	  checked against this host; explain prints it)
//	→ material (secrets, certificates, configuration files, read here by
//	  the parent, which may be the only one allowed to)
//	→ the pull lock → sequence (run.go): prepare (reclaim, the uid) →
//	  staging beside DEST → the partial-blob cache → start → hash ahead →
//	  copy → hand over → verify → commit → result, each undo deferred as
//	  its step is taken.
//
// Where the copy runs is a runner (steps.go): inProcessRunner
// (--no-isolation) or isolatedRunner (runner.go: cgroup, uid, the child of
// package reexec). Both take everything from the plan's one isolation spec
// (isolation.go: cgroup, user, seccomp, network namespace, DNS, state
// root), which explain prints; a new isolation setting is a field there and
// its use in runner.go.
//
// Invariants:
//   - cmd/pullhelper parses flags and prints; it calls NewPlan and Run
//     (explain: NewPlan and LoadMaterial, which it drops, so that it
//     refuses what pull refuses before its first step; cri at start:
//     CheckSettings, what every plan of its settings would refuse) and
//     nothing else of a pull. Options are its hooks (events, bars, logs),
//     not isolation settings.
//   - The copy (package pull) gets everything it needs, the version
//     included, in its Request and Material; it reads no host
//     configuration.
//   - Run emits start and done itself; from the copy it passes on only
//     progress events.
//   - api.Result is built here only (result.go), from the plan and what the
//     parent verified, field by field; the copy's pull.Report is its claims
//     (the isolated child's, checked by reexec first).
//   - On every path out of Run the staging area is removed and, when
//     isolated, every process of the pull is dead and its cgroup removed
//     (sequence_test.go checks the order and every failure path's undo).
//   - Every directory shared by the node's pulls is under the plan's state
//     root (internal/state), passed down; pipeline declares none.
//   - registries.conf and its drop-ins are read once a pull, by NewPlan, through
//     safefile; every containers/image call of the parent reads a snapshot
//     of those bytes (snapshot.go, internal/memfs), which the Plan holds
//     until Close (the caller closes it when the pull or explain ends);
//     Close also drops containers/image's parsed copies, so a long-lived
//     process (pullhelper cri) keeps none of its finished pulls'.
//   - Building a Plan sends no network byte of its own; it may run the
//     kubelet's credential-provider plugins (never for explain), which
//     may.
package pipeline
