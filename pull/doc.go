// Package pull is the copy: it resolves the tag to a digest and copies
// exactly that digest with go.podman.io/image/v5 into a staging area,
// with retries, progress events and typed errors. It is the network-facing
// code, run in the isolated child (or in-process with --no-isolation).
//
// Invariants:
//   - The copy knows nothing of isolation or policy: it imports none of
//     cgroup, privdrop, netns, dnsconf, policy, reexec, pipeline (a depcheck
//     test in package pipeline enforces it).
//   - A Request is JSON-representable; secrets and file contents travel in
//     Material, never in a Request, explain, logs or errors.
//   - The copy reads no file outside its staging area: credentials,
//     certificates, registries.conf, registries.d and the signature policy
//     come in Material.
//   - Every error leaving Copy carries a failure.Code; messages name
//     registries, files and directories, never a secret.
package pull
