package privdrop

import "golang.org/x/sys/unix"

// nativeArch is the only AUDIT_ARCH the filter lets through; rejectX32
// says whether native numbers with __X32_SYSCALL_BIT are another ABI here.
const (
	nativeArch = unix.AUDIT_ARCH_AARCH64
	rejectX32  = false
)

// sysnum: the numbers of the calls the filter names, on arm64 (from
// golang.org/x/sys/unix). A name missing here does not exist on arm64.
var sysnum = map[string]uint32{
	"mount":                   unix.SYS_MOUNT,
	"umount2":                 unix.SYS_UMOUNT2,
	"pivot_root":              unix.SYS_PIVOT_ROOT,
	"chroot":                  unix.SYS_CHROOT,
	"move_mount":              unix.SYS_MOVE_MOUNT,
	"open_tree":               unix.SYS_OPEN_TREE,
	"open_tree_attr":          unix.SYS_OPEN_TREE_ATTR,
	"fsopen":                  unix.SYS_FSOPEN,
	"fsconfig":                unix.SYS_FSCONFIG,
	"fsmount":                 unix.SYS_FSMOUNT,
	"fspick":                  unix.SYS_FSPICK,
	"mount_setattr":           unix.SYS_MOUNT_SETATTR,
	"setns":                   unix.SYS_SETNS,
	"unshare":                 unix.SYS_UNSHARE,
	"ptrace":                  unix.SYS_PTRACE,
	"process_vm_readv":        unix.SYS_PROCESS_VM_READV,
	"process_vm_writev":       unix.SYS_PROCESS_VM_WRITEV,
	"bpf":                     unix.SYS_BPF,
	"perf_event_open":         unix.SYS_PERF_EVENT_OPEN,
	"userfaultfd":             unix.SYS_USERFAULTFD,
	"keyctl":                  unix.SYS_KEYCTL,
	"add_key":                 unix.SYS_ADD_KEY,
	"request_key":             unix.SYS_REQUEST_KEY,
	"kexec_load":              unix.SYS_KEXEC_LOAD,
	"kexec_file_load":         unix.SYS_KEXEC_FILE_LOAD,
	"init_module":             unix.SYS_INIT_MODULE,
	"finit_module":            unix.SYS_FINIT_MODULE,
	"delete_module":           unix.SYS_DELETE_MODULE,
	"reboot":                  unix.SYS_REBOOT,
	"swapon":                  unix.SYS_SWAPON,
	"swapoff":                 unix.SYS_SWAPOFF,
	"open_by_handle_at":       unix.SYS_OPEN_BY_HANDLE_AT,
	"name_to_handle_at":       unix.SYS_NAME_TO_HANDLE_AT,
	"acct":                    unix.SYS_ACCT,
	"settimeofday":            unix.SYS_SETTIMEOFDAY,
	"clock_settime":           unix.SYS_CLOCK_SETTIME,
	"adjtimex":                unix.SYS_ADJTIMEX,
	"clock_adjtime":           unix.SYS_CLOCK_ADJTIME,
	"quotactl":                unix.SYS_QUOTACTL,
	"quotactl_fd":             unix.SYS_QUOTACTL_FD,
	"lookup_dcookie":          unix.SYS_LOOKUP_DCOOKIE,
	"syslog":                  unix.SYS_SYSLOG,
	"vhangup":                 unix.SYS_VHANGUP,
	"kcmp":                    unix.SYS_KCMP,
	"setdomainname":           unix.SYS_SETDOMAINNAME,
	"sethostname":             unix.SYS_SETHOSTNAME,
	"io_uring_setup":          unix.SYS_IO_URING_SETUP,
	"io_uring_enter":          unix.SYS_IO_URING_ENTER,
	"io_uring_register":       unix.SYS_IO_URING_REGISTER,
	"fanotify_init":           unix.SYS_FANOTIFY_INIT,
	"file_getattr":            unix.SYS_FILE_GETATTR,
	"file_setattr":            unix.SYS_FILE_SETATTR,
	"get_mempolicy":           unix.SYS_GET_MEMPOLICY,
	"listns":                  unix.SYS_LISTNS,
	"lsm_get_self_attr":       unix.SYS_LSM_GET_SELF_ATTR,
	"lsm_list_modules":        unix.SYS_LSM_LIST_MODULES,
	"lsm_set_self_attr":       unix.SYS_LSM_SET_SELF_ATTR,
	"mbind":                   unix.SYS_MBIND,
	"migrate_pages":           unix.SYS_MIGRATE_PAGES,
	"move_pages":              unix.SYS_MOVE_PAGES,
	"nfsservctl":              unix.SYS_NFSSERVCTL,
	"pidfd_getfd":             unix.SYS_PIDFD_GETFD,
	"process_madvise":         unix.SYS_PROCESS_MADVISE,
	"rseq_slice_yield":        unix.SYS_RSEQ_SLICE_YIELD,
	"set_mempolicy":           unix.SYS_SET_MEMPOLICY,
	"set_mempolicy_home_node": unix.SYS_SET_MEMPOLICY_HOME_NODE,
	"clone":                   unix.SYS_CLONE,
	"clone3":                  unix.SYS_CLONE3,
	"socket":                  unix.SYS_SOCKET,
	"socketpair":              unix.SYS_SOCKETPAIR,
	"personality":             unix.SYS_PERSONALITY,
	"ioctl":                   unix.SYS_IOCTL,
}

// notOnThisArch: names of Denied that arm64 never had (x86 I/O ports,
// calls removed before arm64 existed).
var notOnThisArch = map[string]bool{
	"iopl": true, "ioperm": true, "_sysctl": true, "afs_syscall": true, "create_module": true,
	"get_kernel_syms": true, "getpmsg": true, "putpmsg": true, "query_module": true, "security": true,
	"sysfs": true, "tuxcall": true, "uprobe": true, "uselib": true, "ustat": true, "vserver": true,
}
