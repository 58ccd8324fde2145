package privdrop

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Identity is who the child becomes.
type Identity struct {
	UID int `json:"uid"`
	GID int `json:"gid"`
}

// Drop removes every privilege from all threads of this process, in the
// documented order. It must run before any network I/O; it is irreversible.
func Drop(id Identity, withSeccomp bool) error {
	if id.UID <= 0 || id.GID <= 0 || id.UID > MaxID || id.GID > MaxID {
		return fmt.Errorf("refusing to run the pull as uid %d gid %d", id.UID, id.GID)
	}
	// 1. Bounding set, while we still have CAP_SETPCAP.
	last, err := lastCap()
	if err != nil {
		return err
	}
	for c := 0; c <= last; c++ {
		// Only what is still in the set (each is one all-threads call,
		// which stops every thread): a child spawned by a thread that
		// limited its own (LimitBoundingSet) holds a few. Every thread
		// descends from the first and this loop is the only change to
		// the set, so this thread's set is every thread's; Verify reads
		// each thread's CapBnd after the drop all the same.
		if in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err == nil && in == 0 {
			continue
		}
		if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0); e != 0 {
			return fmt.Errorf("dropping capability %d from the bounding set: %v", c, e)
		}
	}
	// 2. Groups, gid, uid (package syscall applies these to every thread).
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(id.GID, id.GID, id.GID); err != nil {
		return fmt.Errorf("setresgid %d: %w", id.GID, err)
	}
	if err := syscall.Setresuid(id.UID, id.UID, id.UID); err != nil {
		return fmt.Errorf("setresuid %d: %w", id.UID, err)
	}
	// 3. Whatever capability sets survived the uid change (inheritable and
	// ambient do): clear all of them on every thread.
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); e != 0 {
		return fmt.Errorf("clearing the ambient capabilities: %v", e)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("clearing the capability sets: %v", e)
	}
	// 4. no_new_privs on every thread.
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); e != 0 {
		return fmt.Errorf("setting no_new_privs: %v", e)
	}
	// 5. seccomp, synchronised to every thread.
	if withSeccomp {
		if err := loadFilter(); err != nil {
			return fmt.Errorf("installing the seccomp filter: %w", err)
		}
	}
	return nil
}

// Denied lists system calls the child must never be allowed (EPERM, like
// every call outside Allowed): nothing a registry client needs, everything
// an attacker who owns the parser wants. The filter is default-deny, so
// this list no longer builds it; Filter refuses to build if Allowed names
// one of these, and the tests call each of them under the filter.
//
// It holds every call Docker's default seccomp profile refuses a container
// without capabilities (moby/profiles seccomp/default.json, checked at
// moby/moby b985e2313a86), plus ptrace, process_vm_readv/writev, adjtimex,
// clock_adjtime and name_to_handle_at, which Docker allows and a pull never
// makes. Docker's conditional rules have their own rules below: clone
// (namespace flags), socket (an allowlist of families) and personality.
var Denied = []string{
	// mounts and namespaces
	"mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "open_tree_attr", "fsopen",
	"fsconfig", "fsmount", "fspick", "mount_setattr", "setns", "unshare", "listns",
	// other processes' memory, file descriptors and kernel objects
	"ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd", "kcmp",
	// kernel attack surface a pull never touches
	"bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
	"keyctl", "add_key", "request_key", "fanotify_init", "rseq_slice_yield",
	// uprobe: listed for Docker parity; kernels that have it exempt it from
	// seccomp (only the kernel's own trampolines may call it)
	"uprobe",
	"lsm_get_self_attr", "lsm_set_self_attr", "lsm_list_modules",
	// NUMA placement (Docker needs CAP_SYS_NICE for these)
	"mbind", "get_mempolicy", "set_mempolicy", "set_mempolicy_home_node", "migrate_pages", "move_pages",
	// the machine: modules, kexec, reboot, swap, clocks, quotas, I/O ports, names
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon",
	"swapoff", "acct", "settimeofday", "clock_settime", "adjtimex", "clock_adjtime", "iopl", "ioperm",
	"quotactl", "quotactl_fd", "lookup_dcookie", "syslog", "vhangup", "setdomainname", "sethostname",
	// files by handle, and inode attributes nobody in a pull sets
	"open_by_handle_at", "name_to_handle_at", "file_getattr", "file_setattr",
	// obsolete or never implemented (ENOSYS already; refused so a kernel
	// that brings one back gets no new surface)
	"_sysctl", "sysfs", "ustat", "uselib", "create_module", "get_kernel_syms", "query_module",
	"nfsservctl", "afs_syscall", "getpmsg", "putpmsg", "security", "tuxcall", "vserver",
}

// namespaceFlags are the clone flags that create namespaces; clone with any
// of them is refused (unshare and setns are outside Allowed, clone3 gets
// ENOSYS). Docker's mask is the same without CLONE_NEWTIME.
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
	unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// allowedPersonalities: personality is allowed with these values only
// (Docker's list: PER_LINUX, PER_LINUX32, UNAME26 variants and the query
// 0xffffffff); anything else, e.g. ADDR_NO_RANDOMIZE or READ_IMPLIES_EXEC,
// gets EPERM.
var allowedPersonalities = []uint32{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// allowedPrctls: prctl is allowed with these options only. The child sets
// its parent-death signal after the drop (KeepParentDeathSignal); the Go
// runtime names its anonymous mappings (PR_SET_VMA); the rest only name
// the thread or read. Everything else gets EPERM (PR_SET_DUMPABLE, PR_SET_MM,
// PR_SET_PTRACER, PR_SET_SECCOMP, speculation controls, ...).
var allowedPrctls = []uint32{
	unix.PR_SET_PDEATHSIG, unix.PR_GET_PDEATHSIG, unix.PR_GET_DUMPABLE, unix.PR_SET_NAME, unix.PR_GET_NAME,
	unix.PR_GET_SECCOMP, unix.PR_CAPBSET_READ, unix.PR_GET_NO_NEW_PRIVS, unix.PR_SET_VMA,
}

// allowedIoctls: ioctl is allowed with these requests only. The child
// asks its terminal (stderr, when the caller's is one) whether it is one
// and how wide it is, for the progress bars (TCGETS, TIOCGWINSZ: all the
// suite saw; Go sets descriptor flags with fcntl). Every other request, on
// whatever device the child can open, gets EPERM.
var allowedIoctls = []uint32{unix.TCGETS, unix.TIOCGWINSZ}

// deniedIoctls must never join allowedIoctls (Filter refuses to build):
// TIOCSTI pushes input into a terminal (a child that still held the
// caller's terminal could type commands into the root shell that ran
// pullhelper) and TIOCLINUX has subcommands that do the same on a virtual
// console; a pull needs neither.
var deniedIoctls = []uint32{unix.TIOCSTI, unix.TIOCLINUX}

// Offsets in struct seccomp_data: nr, arch, then args[6] of 64 bits. The
// low 32 bits of an argument are at its offset on both little-endian
// architectures; every argument checked here is an int or unsigned int
// (clone's flags: the kernel uses their low 32 bits; mmap's and mprotect's
// prot), so the high half an attacker could set is ignored by the kernel
// too.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16
	offArg1 = 24
	offArg2 = 32
)

const retKill = unix.SECCOMP_RET_KILL_PROCESS

func retErrno(e syscall.Errno) bpf.RetConstant {
	return bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(e)&unix.SECCOMP_RET_DATA}
}

// Filter assembles the child's seccomp program for the native architecture:
//
//   - a system call of any other ABI kills the process (SIGSYS): on amd64
//     the i386 entry (`int $0x80`, AUDIT_ARCH_I386) and x32 (numbers with
//     __X32_SYSCALL_BIT), on arm64 the 32-bit compat entry. A filter that
//     only lists native numbers would let them through unchecked;
//   - clone3 gets ENOSYS (its flags live in memory a filter cannot read, so
//     glibc and Go fall back to clone, which the filter checks); clone with
//     a namespace flag gets EPERM; mmap and mprotect with PROT_EXEC get
//     EPERM (the Go runtime never maps code: the kernel mapped the binary
//     and the vDSO before the filter, so no new executable memory);
//   - socket outside TCP/UDP over AF_INET and AF_INET6 and
//     AF_NETLINK/NETLINK_ROUTE (SOCK_RAW, SOCK_DGRAM) gets EPERM (socketRule);
//     fcntl with F_SETOWN, F_SETOWN_EX, F_SETSIG or F_SETLEASE (fcntlRule)
//     and setsockopt(SOL_SOCKET, SO_REUSEADDR/SO_REUSEPORT/the reuseport
//     attach options) (sockoptRule) get EPERM; prctl outside allowedPrctls,
//     personality outside allowedPersonalities, arch_prctl outside
//     allowedArchPrctls (amd64) and ioctl outside allowedIoctls (TIOCSTI and
//     TIOCLINUX above all) get EPERM; kill, tgkill and prlimit64 get EPERM
//     unless they name the calling process (the filter is built in the
//     process it is for);
//   - the calls in Allowed are allowed; every other call gets EPERM.
//
// Every jump is local (at most a few instructions), so the program needs no
// long jumps whatever the lists hold. Only the argument rules load an
// argument, so for every other number the verdict depends on the number
// alone and the kernel caches it (no filter run for an allowed call).
func Filter() ([]bpf.Instruction, error) {
	if nativeArch == 0 {
		return nil, fmt.Errorf("no seccomp filter for GOARCH %s: run with seccomp disabled in the policy or add the architecture", runtime.GOARCH)
	}
	need := func(name string) (uint32, error) {
		n, ok := sysnum[name]
		if !ok {
			return 0, fmt.Errorf("seccomp filter: %s has no number on %s", name, runtime.GOARCH)
		}
		return n, nil
	}
	denied := map[string]bool{}
	for _, name := range Denied {
		denied[name] = true
	}
	loadNr := bpf.LoadAbsolute{Off: offNr, Size: 4}
	p := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: nativeArch, SkipTrue: 1},
		bpf.RetConstant{Val: retKill},
		loadNr,
	}
	if rejectX32 {
		p = append(p,
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32SyscallBit, SkipFalse: 1},
			bpf.RetConstant{Val: retKill})
	}
	n, err := need("clone3")
	if err != nil {
		return nil, err
	}
	p = append(p, bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: n, SkipTrue: 1}, retErrno(unix.ENOSYS))
	// EPERM if the argument has one of the bits: clone (arg0, the flags)
	// with a namespace flag; mmap and mprotect (arg2, prot) with PROT_EXEC.
	for _, r := range []struct {
		name string
		off  uint32
		bits uint32
	}{{"clone", offArg0, namespaceFlags}, {"mmap", offArg2, unix.PROT_EXEC}, {"mprotect", offArg2, unix.PROT_EXEC}} {
		if n, err = need(r.name); err != nil {
			return nil, err
		}
		p = append(p,
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: n, SkipTrue: 4},
			bpf.LoadAbsolute{Off: r.off, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: r.bits, SkipFalse: 1},
			retErrno(unix.EPERM),
			loadNr)
	}
	// socket, fcntl, setsockopt: the rules with more than one argument
	// or a refused list (socketRule, fcntlRule, sockoptRule).
	for _, r := range []func(func(string) (uint32, error)) ([]bpf.Instruction, error){socketRule, fcntlRule, sockoptRule} {
		b, err := r(need)
		if err != nil {
			return nil, err
		}
		p = append(p, b...)
	}
	// personality, prctl: EPERM unless arg0 is allowed; ioctl: EPERM
	// unless arg1 (the request; the kernel reads its low 32 bits) is.
	// kill, tgkill and prlimit64: EPERM unless arg0 (the pid) is this
	// process (or 0: its own process group, its own limits), so the child
	// signals and limits nothing else, even where its uid is not its own
	// (--user nobody).
	for _, d := range deniedIoctls {
		for _, a := range allowedIoctls {
			if d == a {
				return nil, fmt.Errorf("seccomp filter: ioctl %#x is both allowed and denied", d)
			}
		}
	}
	pid := uint32(os.Getpid())
	for _, r := range []struct {
		name   string
		off    uint32
		values []uint32
	}{{"personality", offArg0, allowedPersonalities}, {"prctl", offArg0, allowedPrctls},
		{"ioctl", offArg1, allowedIoctls},
		{"kill", offArg0, []uint32{0, pid}}, {"tgkill", offArg0, []uint32{pid}}, {"prlimit64", offArg0, []uint32{0, pid}},
		{"arch_prctl", offArg0, allowedArchPrctls}} {
		if notOnThisArch[r.name] {
			continue // arch_prctl: amd64 only
		}
		if n, err = need(r.name); err != nil {
			return nil, err
		}
		k := len(r.values)
		p = append(p,
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: n, SkipTrue: uint8(k + 3)},
			bpf.LoadAbsolute{Off: r.off, Size: 4})
		for i, v := range r.values {
			p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: v, SkipTrue: uint8(k - i)})
		}
		p = append(p, retErrno(unix.EPERM), loadNr)
	}
	// The allowlist; then EPERM for everything else.
	seen := map[string]bool{}
	for _, name := range Allowed {
		if denied[name] || seen[name] {
			return nil, fmt.Errorf("seccomp filter: %s is listed twice or both allowed and denied", name)
		}
		seen[name] = true
		if notOnThisArch[name] {
			continue
		}
		n, err := need(name)
		if err != nil {
			return nil, err // a name nobody listed as absent: fail closed
		}
		p = append(p, bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: n, SkipTrue: 1}, bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW})
	}
	p = append(p, retErrno(unix.EPERM))
	return p, nil
}

// x32SyscallBit is __X32_SYSCALL_BIT: an x32 call is the native `syscall`
// instruction with this bit in the number, and the same AUDIT_ARCH.
const x32SyscallBit = 0x40000000

// loadFilter installs Filter on every thread (SECCOMP_FILTER_FLAG_TSYNC).
// no_new_privs must already be set (Drop sets it on every thread first).
func loadFilter() error {
	insts, err := Filter()
	if err != nil {
		return err
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return fmt.Errorf("assembling the seccomp filter: %w", err)
	}
	sf := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		sf[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	prog := unix.SockFprog{Len: uint16(len(sf)), Filter: &sf[0]}
	r, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(sf)
	if e != 0 {
		return fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER, TSYNC): %w", e)
	}
	if r != 0 {
		// With TSYNC the kernel returns the id of a thread it could not
		// synchronise (one with a diverging filter); nothing was installed.
		return fmt.Errorf("seccomp: thread %d could not take the filter", r)
	}
	return nil
}

// ChildCaps are the capabilities the pull child uses before Drop, as root
// in its own mount namespace: mounting its private /tmp, the staging and
// cache trees and the DNS files (SYS_ADMIN), giving its configuration
// directory to the pull uid (CHOWN, FOWNER, FSETID, DAC_OVERRIDE,
// DAC_READ_SEARCH), and the drop itself (SETGID, SETUID, SETPCAP).
var ChildCaps = []uintptr{unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_DAC_READ_SEARCH, unix.CAP_FOWNER,
	unix.CAP_FSETID, unix.CAP_SETGID, unix.CAP_SETUID, unix.CAP_SETPCAP, unix.CAP_SYS_ADMIN}

// LimitBoundingSet removes from the calling OS thread's capability
// bounding set every capability but keep. The caller has locked its
// goroutine to the thread for good (runtime.LockOSThread, never unlocked:
// the thread ends with the goroutine). A program the thread then forks and
// executes as root is granted only keep (the bounding set caps what an
// execve grants), so the pull child never holds the others, even before
// it drops, and its Drop has fewer capabilities to remove on every
// thread. The thread's own effective capabilities are unchanged.
func LimitBoundingSet(keep []uintptr) error {
	last, err := lastCap()
	if err != nil {
		return err
	}
	for c := 0; c <= last; c++ {
		if slices.Contains(keep, uintptr(c)) {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("limiting the bounding set of the thread that starts the pull child (capability %d): %w", c, err)
		}
	}
	return nil
}

func lastCap() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("reading cap_last_cap: %w", err)
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// ThreadState is what /proc/PID/task/TID/status says about one thread.
type ThreadState struct {
	TID        string
	Uid, Gid   [4]int
	Caps       map[string]uint64 // CapInh, CapPrm, CapEff, CapBnd, CapAmb
	NoNewPrivs int
	Seccomp    int
	Groups     string
}

// ReadThreads reads every thread's status of pid ("self" for this process).
func ReadThreads(pid string) ([]ThreadState, error) {
	dirs, err := filepath.Glob(filepath.Join("/proc", pid, "task", "*", "status"))
	if err != nil || len(dirs) == 0 {
		return nil, fmt.Errorf("listing the threads of %s: %v", pid, err)
	}
	var out []ThreadState
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			if os.IsNotExist(err) {
				continue // the thread exited
			}
			return nil, err
		}
		t := ThreadState{TID: filepath.Base(filepath.Dir(f)), Caps: map[string]uint64{}, NoNewPrivs: -1, Seccomp: -1}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			v = strings.TrimSpace(v)
			switch k {
			case "Uid", "Gid":
				f := strings.Fields(v)
				for i := 0; i < 4 && i < len(f); i++ {
					n, _ := strconv.Atoi(f[i])
					if k == "Uid" {
						t.Uid[i] = n
					} else {
						t.Gid[i] = n
					}
				}
			case "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb":
				n, _ := strconv.ParseUint(v, 16, 64)
				t.Caps[k] = n
			case "NoNewPrivs":
				t.NoNewPrivs, _ = strconv.Atoi(v)
			case "Seccomp":
				t.Seccomp, _ = strconv.Atoi(v)
			case "Groups":
				t.Groups = v
			}
		}
		out = append(out, t)
	}
	return out, nil
}

// Verify checks every thread of this process: uid and gid (real, effective,
// saved, fs) are id's, no supplementary groups, every capability set empty,
// no_new_privs set and (when wanted) seccomp in filter mode (2).
func Verify(id Identity, withSeccomp bool) error {
	ts, err := ReadThreads("self")
	if err != nil {
		return err
	}
	for _, t := range ts {
		if err := t.check(id, withSeccomp); err != nil {
			return err
		}
	}
	return nil
}

func (t ThreadState) check(id Identity, withSeccomp bool) error {
	for i := 0; i < 4; i++ {
		if t.Uid[i] != id.UID || t.Gid[i] != id.GID {
			return fmt.Errorf("thread %s: Uid %v Gid %v, want %d/%d", t.TID, t.Uid, t.Gid, id.UID, id.GID)
		}
	}
	if t.Groups != "" {
		return fmt.Errorf("thread %s: supplementary groups %q left", t.TID, t.Groups)
	}
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		v, ok := t.Caps[k]
		if !ok || v != 0 {
			return fmt.Errorf("thread %s: %s = %016x, want 0", t.TID, k, v)
		}
	}
	if t.NoNewPrivs != 1 {
		return fmt.Errorf("thread %s: NoNewPrivs = %d, want 1", t.TID, t.NoNewPrivs)
	}
	if withSeccomp && t.Seccomp != 2 {
		return fmt.Errorf("thread %s: Seccomp = %d, want 2 (filter)", t.TID, t.Seccomp)
	}
	return nil
}

// KeepParentDeathSignal re-arms PR_SET_PDEATHSIG on every thread. The kernel
// clears it when the credentials change (the setresuid of Drop), so a child
// that drops privileges must set it again; if the parent already died in
// between (the process was re-parented), it fails.
func KeepParentDeathSignal(sig syscall.Signal, parent int) error {
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(sig), 0); e != 0 {
		return fmt.Errorf("setting the parent-death signal: %v", e)
	}
	if os.Getppid() != parent {
		return fmt.Errorf("the parent (pid %d) exited during the privilege drop", parent)
	}
	return nil
}
