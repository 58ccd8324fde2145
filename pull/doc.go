// Package pull turns a policy and two command-line words (IMAGE, DEST) into a
// Plan, and carries the Plan out: the copy itself with go.podman.io/image/v5,
// progress events, typed errors, and the staged, atomic commit into DEST.
//
// Invariants:
//   - A Plan is fully resolved and JSON-representable: it is what explain
//     prints (secrets omitted) and what later crosses the parent/child pipe.
//   - Building a Plan touches no network; Run is the only network-facing code.
//   - DEST is either untouched or fully committed. The copy writes into a
//     staging directory on DEST's filesystem; only a verified image is moved
//     into place, by rename, and every staging path is removed on every path
//     out of Run.
//   - Every error leaving Run carries a failure.Code; messages name
//     registries, files and directories, never a secret.
package pull
