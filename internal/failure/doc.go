// Package failure is pullhelper's error taxonomy: every error that leaves a
// command carries one Code, and each Code maps to exactly one exit status
// (the table under "Exit codes" in the README). Codes are plain strings so that they cross the
// parent/child pipe as JSON ({code, message, reason}) and come back as the
// same typed error. An error may also carry a CRIReason, the CRI's name for
// a refused connection or a signature rejection, which pullhelper cri in
// front of CRI-O puts before its message (CRIReasonOf); the parent keeps
// only the reasons this package knows.
//
// Invariant: a message never contains a secret. Callers build messages from
// file names, keys, registries and usernames only.
package failure
