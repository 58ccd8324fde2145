// Package memfs is a private in-memory filesystem: a tmpfs created with
// fsopen and fsmount, detached (mounted in no mount namespace's tree), held
// by one close-on-exec descriptor of this process and reached through
// /proc/self/fd/N. No other process can name it; it vanishes when the
// descriptor is closed, by Close or by the kernel when this process dies
// (SIGKILL included), so nothing is left behind.
//
// The parent keeps two things there: --no-isolation's copy material (the
// auth file, client keys; pipeline/memconfig.go) and the snapshots of the
// caller's configuration files it checked (registries.conf and its
// drop-ins, storage.conf): containers/image and containers/storage open
// their configuration by path, and are pointed at the snapshot, whose bytes
// are the ones checked, instead of the caller's path, which another user
// may have swapped for a FIFO meanwhile.
package memfs
