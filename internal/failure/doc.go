// Package failure is pullhelper's error taxonomy: every error that leaves a
// command carries one Code, and each Code maps to exactly one exit status
// (the table under "Exit codes" in the README). Codes are plain strings so that they cross the
// parent/child pipe as JSON ({code, message}) and come back as the same typed
// error.
//
// Invariant: a message never contains a secret. Callers build messages from
// file names, keys, registries and usernames only.
package failure
