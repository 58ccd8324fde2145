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
//   - Nothing a registry sends is trusted (source.go, realm.go): every read
//     is capped at its declared size, an image at Plan.MaxImageBytes (read
//     and written), manifests at 4 MiB; descriptors must be valid sha256;
//     credentials go only to the registry's endpoints and the realm its
//     /v2/ names, never over plain http while the registry is verified, and
//     never to its host on another port through a redirect.
//   - Every error leaving Run carries a failure.Code; messages name
//     registries, files and directories, never a secret.
package pull
