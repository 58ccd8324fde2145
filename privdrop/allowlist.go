package privdrop

// Allowed lists the only system calls the child may make once its filter is
// installed; every other call gets EPERM (so a library that tries one gets a
// clear "operation not permitted", not a SIGSYS kill). Some have argument
// rules on top (Filter): clone, mmap, mprotect, socket, fcntl, setsockopt,
// prctl, personality, ioctl, kill, tgkill, prlimit64 and arch_prctl.
//
// How it was derived (README "Isolation: the process model" says how to
// re-derive it): tests/seccomp-derive.sh runs the bats files that exercise
// the pull paths (oci, dir, archives, containers-storage, containerd,
// credentials, netns, rates, resume) with the parent under `strace -f` and
// keeps the calls the re-executed child made after its seccomp(2) returned.
// Seen there (December 2026, Go 1.26, amd64; 010 060 070 080 112 120 130
// 135 136, and 040 050 085 090 100 105 113 115 141): clone close connect
// epoll_ctl epoll_pwait exit_group faccessat2 fchmod fcntl fstat fsync
// ftruncate futex getdents64 geteuid getpeername getpid getppid getrandom
// getsockname getsockopt gettid getuid getxattr listxattr lseek madvise
// mkdirat mmap nanosleep newfstatat openat prctl (PR_SET_PDEATHSIG) pread64
// pwrite64 read readlinkat renameat rt_sigprocmask rt_sigreturn
// sched_getaffinity sched_yield setsockopt sigaltstack socket (AF_INET)
// statfs tgkill unlinkat write. The rest are what the Go runtime
// (runtime/sys_linux_*.s, os, internal/poll, net) may call on a path the
// suite did not reach (signals, preemption, GC, the netpoller, profiling
// timers, the fallbacks of the vDSO, io.Copy's copy_file_range, sendfile
// and splice), or the legacy amd64 twin of an allowed *at call (Go's
// runtime opens files with open(2) on amd64). Names that do not exist on an
// architecture are in its notOnThisArch.
//
// Not here, on purpose: execve and execveat (the child runs no program),
// fork and vfork (it starts no process; clone without CLONE_THREAD is
// still a fork), setsid and setpgid, tkill (Go signals its threads with
// tgkill, which is checked),
// listen and accept (a pull never serves), socketpair (only AF_UNIX
// has it), link, linkat, symlink and chown calls and every set*id call (the
// child makes no link, containers/image's oci and dir destinations and its
// blob-info caches included, and changes no owner or identity; a hard link
// is how a uid keeps a handle on another's file), setxattr, pkey_mprotect,
// seccomp, and all of Denied.
var Allowed = []string{
	// memory
	"mmap", "munmap", "madvise", "mincore", "mprotect", "brk",
	// threads, scheduling, futexes, the runtime's own signals
	"clone", "futex", "sched_yield", "sched_getaffinity", "gettid", "tgkill", "kill",
	"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "restart_syscall",
	"exit", "exit_group", "arch_prctl", "prctl", "personality",
	// reaping a child of its own (the child starts none, but clone
	// without CLONE_THREAD is a fork; rawsys.InFork waits for one)
	"wait4", "waitid",
	// time (normally the vDSO) and sleeping; the profiling timers
	"clock_gettime", "clock_getres", "clock_nanosleep", "gettimeofday", "time", "nanosleep",
	"setitimer", "getitimer", "timer_create", "timer_settime", "timer_gettime", "timer_delete",
	// identity and limits (read only)
	"getpid", "getppid", "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups",
	"getrlimit", "prlimit64", "getrandom", "uname", "umask",
	// file descriptors and I/O
	"read", "write", "pread64", "pwrite64", "readv", "writev", "preadv", "pwritev", "preadv2", "pwritev2",
	"close", "close_range", "dup", "dup2", "dup3", "fcntl", "ioctl", "lseek", "pipe", "pipe2",
	"copy_file_range", "sendfile", "splice",
	"epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2",
	"poll", "ppoll", "select", "pselect6",
	// files, by path under the child's own directories or by descriptor
	"openat", "openat2", "open", "fstat", "newfstatat", "stat", "lstat", "statx", "statfs", "fstatfs",
	"getdents64", "getdents", "readlinkat", "readlink", "faccessat", "faccessat2", "access", "getcwd",
	"mkdirat", "mkdir", "unlinkat", "unlink", "rmdir", "renameat", "renameat2", "rename",
	"fsync", "fdatasync", "ftruncate", "fallocate", "fadvise64", "fchmod", "utimensat", "flock",
	"getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr",
	// network: TCP and UDP to registries and nameservers, netlink for
	// net.Interfaces and IPv6 zones (socket has a domain rule; Go's
	// netlink RIB binds its socket, and without listen and accept a bound
	// TCP socket serves nothing)
	"socket", "connect", "bind", "getsockname", "getpeername", "getsockopt", "setsockopt", "shutdown",
	"sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg",
}
