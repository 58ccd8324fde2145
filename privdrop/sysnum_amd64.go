package privdrop

import "golang.org/x/sys/unix"

// nativeArch is the only AUDIT_ARCH the filter lets through; rejectX32
// says whether native numbers with __X32_SYSCALL_BIT are another ABI here.
const (
	nativeArch = unix.AUDIT_ARCH_X86_64
	rejectX32  = true
)

// archSysnum: the numbers of the calls the filter names that amd64 has and
// arm64 does not (x86 I/O ports, calls removed before arm64 existed, the
// pre-*at file calls), beside sharedSysnum.
var archSysnum = map[string]uint32{
	"iopl":            unix.SYS_IOPL,
	"ioperm":          unix.SYS_IOPERM,
	"_sysctl":         unix.SYS__SYSCTL,
	"afs_syscall":     unix.SYS_AFS_SYSCALL,
	"create_module":   unix.SYS_CREATE_MODULE,
	"get_kernel_syms": unix.SYS_GET_KERNEL_SYMS,
	"getpmsg":         unix.SYS_GETPMSG,
	"putpmsg":         unix.SYS_PUTPMSG,
	"query_module":    unix.SYS_QUERY_MODULE,
	"security":        unix.SYS_SECURITY,
	"sysfs":           unix.SYS_SYSFS,
	"tuxcall":         unix.SYS_TUXCALL,
	"uprobe":          unix.SYS_UPROBE,
	"uselib":          unix.SYS_USELIB,
	"ustat":           unix.SYS_USTAT,
	"vserver":         unix.SYS_VSERVER,
	// Allowed
	"arch_prctl":   unix.SYS_ARCH_PRCTL,
	"time":         unix.SYS_TIME,
	"dup2":         unix.SYS_DUP2,
	"pipe":         unix.SYS_PIPE,
	"epoll_create": unix.SYS_EPOLL_CREATE,
	"epoll_wait":   unix.SYS_EPOLL_WAIT,
	"eventfd":      unix.SYS_EVENTFD,
	"poll":         unix.SYS_POLL,
	"select":       unix.SYS_SELECT,
	"open":         unix.SYS_OPEN,
	"stat":         unix.SYS_STAT,
	"lstat":        unix.SYS_LSTAT,
	"getdents":     unix.SYS_GETDENTS,
	"readlink":     unix.SYS_READLINK,
	"access":       unix.SYS_ACCESS,
	"mkdir":        unix.SYS_MKDIR,
	"unlink":       unix.SYS_UNLINK,
	"rmdir":        unix.SYS_RMDIR,
	"rename":       unix.SYS_RENAME,
	"link":         unix.SYS_LINK,
}

// notOnThisArch: names of Denied and Allowed this architecture does not have.
var notOnThisArch = map[string]bool{}
