package privdrop

import "golang.org/x/sys/unix"

// nativeArch is the only AUDIT_ARCH the filter lets through; rejectX32
// says whether native numbers with __X32_SYSCALL_BIT are another ABI here.
const (
	nativeArch = unix.AUDIT_ARCH_AARCH64
	rejectX32  = false
)

// archSysnum: arm64 has no call of its own that the filter names: its
// calls are sharedSysnum (notOnThisArch lists those amd64 has besides).
var archSysnum = map[string]uint32{}

// notOnThisArch: names of Denied and Allowed that arm64 never had (x86 I/O
// ports, calls removed before arm64 existed, the pre-*at file calls).
var notOnThisArch = map[string]bool{
	"iopl": true, "ioperm": true, "_sysctl": true, "afs_syscall": true, "create_module": true,
	"get_kernel_syms": true, "getpmsg": true, "putpmsg": true, "query_module": true, "security": true,
	"sysfs": true, "tuxcall": true, "uprobe": true, "uselib": true, "ustat": true, "vserver": true,
	// Allowed on amd64 only: the pre-*at twins of file calls, arch_prctl
	"arch_prctl": true, "time": true, "dup2": true, "pipe": true, "epoll_create": true, "epoll_wait": true,
	"eventfd": true, "poll": true, "select": true, "open": true, "stat": true, "lstat": true, "getdents": true,
	"readlink": true, "access": true, "mkdir": true, "unlink": true, "rmdir": true, "rename": true,
}
