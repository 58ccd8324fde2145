// Package privdrop takes every privilege away from the pull child before it
// touches the network, and proves it did.
//
// Order (Drop): clear the capability bounding set; setgroups([]),
// setresgid, setresuid to the pull uid/gid; clear the effective, permitted,
// inheritable and ambient capability sets; PR_SET_NO_NEW_PRIVS; install a
// seccomp filter (TSYNC) that refuses mount, namespaces, ptrace, bpf,
// keyrings, module and kexec calls and the like. Then Verify reads
// /proc/self/task/*/status and fails if any thread still holds anything.
//
// Invariant: capabilities, the bounding set and no_new_privs are per thread
// in Linux, and a Go process has many threads. Every step therefore runs on
// every thread: the set*id calls of package syscall already do (the build
// has no cgo), prctl and capset go through syscall.AllThreadsSyscall, and
// the seccomp filter is installed with SECCOMP_FILTER_FLAG_TSYNC. Verify
// checks every thread, not only the caller's.
//
// The parent side allocates the pull uid (Allocate): "dynamic" takes a free
// uid/gid from systemd's DynamicUser range 61184–65519 under an flock held
// for the pull, so concurrent pulls never share one; a lock left by a dead
// process is free again because flock dies with its holder.
package privdrop
