// Package privdrop takes every privilege away from the pull child before it
// touches the network, and proves it did.
//
// Order (Drop): clear the capability bounding set; setgroups([]),
// setresgid, setresuid to the pull uid/gid; clear the effective, permitted,
// inheritable and ambient capability sets; PR_SET_NO_NEW_PRIVS; install a
// seccomp filter (TSYNC). Then Verify reads /proc/self/task/*/status and
// fails if any thread still holds anything.
//
// The seccomp filter (Filter, assembled here with golang.org/x/net/bpf)
// first checks the architecture: a system call through any ABI but the
// native one (on amd64 the i386 `int $0x80` entry and x32) kills the
// process, because a list of native numbers says nothing about the others.
// Then it refuses with EPERM every call in Denied (a superset of what
// Docker's default profile refuses an unprivileged container, io_uring
// included), clone with a namespace flag, socket/socketpair for AF_UNIX
// (no fd passing), AF_ALG and AF_VSOCK, and personality values Docker
// refuses; clone3 gets ENOSYS so callers fall back to clone. No form of
// namespace creation or entry is left. Everything else is allowed.
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
