// Package pull is the copy: it resolves the tag to a digest and copies
// exactly that digest with go.podman.io/image/v5 into a staging area,
// with retries, progress events and typed errors. Manifests and blobs come
// through pullhelper's own registry client (package registry: per-endpoint
// credentials, trust, headers, paths, connect timeouts, per-request
// fallback, Range resume); containers/image does the copy itself and
// reads signatures when a signature policy file needs them, judging the
// image by the reference as requested (PolicyReference: the tag, or the
// digest it names) while every byte comes by the pinned digest. It is the
// network-facing code, run in the isolated child (or in-process with
// --no-isolation).
//
// Invariants:
//   - The copy knows nothing of isolation or policy: it imports none of
//     cgroup, privdrop, netns, dnsconf, policy, reexec, pipeline (a depcheck
//     test in package pipeline enforces it).
//   - A Request is JSON-representable; secrets and file contents travel in
//     Material, never in a Request, explain, logs or errors.
//   - The copy reads no registry configuration of the host: credentials,
//     certificates, the system's trust roots (read by the parent where Go
//     reads them; only when the parent sent none does x509 load them
//     here), registries.conf, registries.d, the signature policy (its key
//     files inlined) and a file:// lookaside's signatures come
//     in Material, which it writes into its private configuration
//     directory (Stage.Config, in memory: the child's tmpfs, or in process
//     a tmpfs held by descriptor), not into the staging area (Stage.Work,
//     on DEST's filesystem), which holds the image being copied and its
//     temporary files.
//   - Nothing a registry sends is trusted (source.go, realm.go): every read
//     is capped at its declared size, an image at Request.MaxImageBytes
//     (read and written), manifests at 4 MiB; descriptors must be valid
//     sha256; credentials go only to each endpoint and the realm its
//     challenge names (approved for that endpoint alone, never on another
//     endpoint's host at another port), never over plain http while the
//     registry is verified (but to a containerd http:// host tried over
//     https first, TLSFallback, once it answered in plain HTTP, as
//     containerd's httpFallback sends it), and never to its host on
//     another port through a redirect.
//   - Copy returns a Report, its claims, never the caller's result (the
//     pipeline builds api.Result); in the isolated child the parent checks
//     the report and every event (check.go) before it keeps or repeats any
//     of it.
//   - Every error leaving Copy carries a failure.Code; messages name
//     registries, files and directories, never a secret.
package pull
