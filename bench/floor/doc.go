// Command floor is the benchmark's durable floor: the least work any pull of
// an image into a local directory must do. It reads the manifest, then GETs
// every blob in parallel with the registry's credential, hashes each with
// SHA-256 while writing it, checks the digest, fsyncs each blob and then the
// directory. It does nothing else (no policy, no layout validation, no
// isolation), so its wall time is what pullhelper is compared with.
//
// Usage:
//
//	floor -ca CA.crt -authfile auth.json -parallel 6 HOST/REPO:TAG DIR
//
// DIR gets blobs/sha256/HEX for the config and layers, the manifest blob,
// oci-layout and index.json (a minimal OCI layout). The credential is read
// from a containers auth.json file (auths.HOST.auth) and sent as HTTP Basic,
// or exchanged for a bearer token when the registry asks for one.
//
// Invariant: every byte of every blob is written, hashed and checked against
// its digest, and fsynced (each blob, then the directories) before exit 0.
package main
