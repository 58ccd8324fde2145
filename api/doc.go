// Package api holds the JSON types of pullhelper's output contract: the
// result printed on stdout, the progress events of --progress-fd, the
// views they embed (credential, isolation, usage), and bootc's progress
// protocol (bootc.go), which --progress-format bootc writes, and the
// per-pull cgroup's Limits (package cgroup applies this very type). It
// imports nothing but the standard library, so that agents and the Go
// client (package client) share these types with the binary instead of
// copying them.
//
// Invariant: no type here carries a secret; every field marshals.
package api
