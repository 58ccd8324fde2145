// Package auth finds the credential and the TLS trust material for one
// registry, reading each file with the semantics of the tool that owns it.
//
// This version implements the containers side (containers-auth.json(5):
// --authfile / REGISTRY_AUTH_FILE or the default search, credHelpers) and
// containers trust (one flat --cert-dir, or the first existing per-host
// certs.d directory). The kubelet and containerd sources come later.
//
// Invariants: only the parent process calls this package, because the files
// may be readable by root alone. A Credential's secret fields never appear in
// its JSON form, in errors or in logs: errors name the file and key only.
package auth
