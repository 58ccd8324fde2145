// Package privdrop takes every privilege away from the pull child before it
// touches the network, and proves it did.
//
// Before it: the parent's thread that forks the child limits its own
// bounding set to ChildCaps (LimitBoundingSet), so the child, executed as
// root, is granted only what it uses before the drop (its mounts, the
// chown of its configuration directory, the drop itself).
//
// Order (Drop): clear what is left of the capability bounding set; setgroups([]),
// setresgid, setresuid to the pull uid/gid; clear the effective, permitted,
// inheritable and ambient capability sets; PR_SET_NO_NEW_PRIVS; install a
// seccomp filter (TSYNC). Then Verify reads /proc/self/task/*/status and
// fails if any thread still holds anything.
//
// The seccomp filter (Filter, assembled here with golang.org/x/net/bpf)
// first checks the architecture: a system call through any ABI but the
// native one (on amd64 the i386 `int $0x80` entry and x32) kills the
// process, because a list of native numbers says nothing about the others.
// Then it is default-deny: only the calls in Allowed (allowlist.go: what
// the child was seen to call across the test suite, tests/seccomp-derive.sh,
// plus what the Go runtime may call) are allowed; every other call gets
// EPERM, Denied (a superset of what Docker's default profile refuses an
// unprivileged container, io_uring included) among them, and Filter will
// not build if the two lists meet. Argument rules on allowed calls: clone
// with a namespace flag gets EPERM and clone3 ENOSYS, so callers fall back
// to clone; socket only for TCP and UDP over AF_INET and AF_INET6 and for
// AF_NETLINK with NETLINK_ROUTE, SOCK_RAW or SOCK_DGRAM (no AF_UNIX: no fd
// passing; no raw, ICMP, SCTP or MPTCP sockets); prctl only for the options
// in allowedPrctls; mmap and mprotect without PROT_EXEC; kill, tgkill and
// prlimit64 only on the calling process; fcntl never F_SETOWN, F_SETOWN_EX,
// F_SETSIG or F_SETLEASE (no signal to another process through SIGIO);
// setsockopt never SO_REUSEADDR, SO_REUSEPORT or the reuseport attach
// options (no share of another service's port); arch_prctl (amd64) only
// ARCH_SET_FS and ARCH_GET_FS; ioctl only for allowedIoctls (TIOCSTI and
// TIOCLINUX never); personality values Docker refuses get EPERM (rules.go
// has the rules with several arguments). No form of namespace creation
// or entry, and no execve, is left.
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
// process is free again because flock dies with its holder. The lock
// directory is opened with state.OpenDir (only root can change it or
// anything above it) and held by the lease: the lock file is made, checked
// and removed through it, and Sweep goes through its own descriptor.
package privdrop
