package privdrop

// Allowed lists the only system calls the child may make once its filter is
// installed; every other call gets EPERM (so a library that tries one gets a
// clear "operation not permitted", not a SIGSYS kill). Some have argument
// rules on top (Filter): clone, socket, prctl, personality and ioctl.
//
// How it was derived (README "Isolation: the process model" says how to
// re-derive it): tests/seccomp-derive.sh runs the bats files that exercise
// the pull paths (oci, dir, archives, containers-storage, containerd,
// credentials, netns, rates, resume) with the parent under `strace -f` and
// keeps the calls the re-executed child made after its seccomp(2) returned.
// Those are marked "seen" below; the rest are what the Go runtime
// (runtime/sys_linux_*.s, os, internal/poll, net) may call on a path the
// suite did not reach (signals, preemption, GC, the netpoller, profiling
// timers, the fallbacks of the vDSO, io.Copy's copy_file_range, sendfile
// and splice), or the legacy amd64 twin of an allowed *at call (Go's
// runtime opens files with open(2) on amd64). Names that do not exist on an
// architecture are in its notOnThisArch.
//
// Not here, on purpose: execve and execveat (the child runs no program),
// fork and vfork (it starts no process: clone is allowed for threads),
// listen and accept (a pull never serves), socketpair (only AF_UNIX
// has it), symlink and chown calls and every set*id call (the child makes
// no link and changes no owner or identity), setxattr, mprotect (the Go
// runtime never changes a mapping's protection), seccomp, and all of
// Denied.
var Allowed = []string{
	// memory
	"mmap", "munmap", "madvise", "mincore", // seen: mmap, madvise
	// threads, scheduling, futexes, the runtime's own signals
	"clone", "futex", "sched_yield", "sched_getaffinity", "gettid", "tgkill", "tkill", "kill", // seen: all but tkill, kill
	"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "restart_syscall", // seen: rt_sigprocmask, rt_sigreturn, sigaltstack
	"exit", "exit_group", "arch_prctl", "prctl", "personality", // seen: exit_group, prctl
	// reaping a child of its own (the child starts none, but clone
	// without CLONE_THREAD is a fork; rawsys.InFork waits for one)
	"wait4", "waitid",
	// time (normally the vDSO) and sleeping; the profiling timers
	"clock_gettime", "clock_getres", "clock_nanosleep", "gettimeofday", "time", "nanosleep", // seen: nanosleep
	"setitimer", "getitimer", "timer_create", "timer_settime", "timer_gettime", "timer_delete",
	// identity and limits (read only)
	"getpid", "getppid", "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups", // seen: getpid, getppid, getuid, geteuid
	"getrlimit", "prlimit64", "getrandom", "uname", "umask", // seen: getrandom
	// file descriptors and I/O
	"read", "write", "pread64", "pwrite64", "readv", "writev", "preadv", "pwritev", "preadv2", "pwritev2", // seen: read, write, pread64, pwrite64
	"close", "close_range", "dup", "dup2", "dup3", "fcntl", "ioctl", "lseek", "pipe", "pipe2", // seen: close, fcntl, lseek
	"copy_file_range", "sendfile", "splice",
	"epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", // seen: epoll_ctl, epoll_pwait
	"poll", "ppoll", "select", "pselect6",
	// files, by path under the child's own directories or by descriptor
	"openat", "openat2", "open", "fstat", "newfstatat", "stat", "lstat", "statx", "statfs", "fstatfs", // seen: openat, fstat, newfstatat, statfs
	"getdents64", "getdents", "readlinkat", "readlink", "faccessat", "faccessat2", "access", "getcwd", // seen: getdents64, readlinkat, faccessat2
	"mkdirat", "mkdir", "unlinkat", "unlink", "rmdir", "renameat", "renameat2", "rename", "linkat", "link", // seen: mkdirat, unlinkat, renameat
	"fsync", "fdatasync", "ftruncate", "fallocate", "fadvise64", "fchmod", "utimensat", "flock", // seen: fsync, fchmod
	"getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr", // seen: getxattr, listxattr
	// network: TCP and UDP to registries and nameservers, netlink for
	// net.Interfaces and IPv6 zones (socket has a domain rule; Go's
	// netlink RIB binds its socket, and without listen and accept a bound
	// TCP socket serves nothing)
	"socket", "connect", "bind", "getsockname", "getpeername", "getsockopt", "setsockopt", "shutdown", // seen: socket, connect, getsockname, getpeername, getsockopt, setsockopt
	"sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg",
}
