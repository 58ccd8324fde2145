package privdrop

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
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
	if id.UID <= 0 || id.GID <= 0 {
		return fmt.Errorf("refusing to run the pull as uid %d gid %d", id.UID, id.GID)
	}
	// 1. Bounding set, while we still have CAP_SETPCAP.
	last, err := lastCap()
	if err != nil {
		return err
	}
	for c := 0; c <= last; c++ {
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
		if err := seccomp.LoadFilter(Filter()); err != nil {
			return fmt.Errorf("installing the seccomp filter: %w", err)
		}
	}
	return nil
}

// Denied lists the system calls the child may never make: nothing a
// registry client needs, everything an attacker who owns the parser wants.
var Denied = []string{
	"mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
	"fspick", "mount_setattr", "setns", "unshare", "ptrace", "process_vm_readv", "process_vm_writev",
	"bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key", "kexec_load",
	"kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon", "swapoff",
	"open_by_handle_at", "name_to_handle_at", "acct", "settimeofday", "clock_settime", "adjtimex",
	"clock_adjtime", "iopl", "ioperm", "quotactl", "lookup_dcookie", "syslog", "vhangup", "kcmp",
	"setdomainname", "sethostname",
}

// namespaceFlags are the clone flags that create namespaces; clone with any
// of them is refused (unshare and setns are refused outright).
var namespaceFlags = []uint64{unix.CLONE_NEWNS, unix.CLONE_NEWUSER, unix.CLONE_NEWPID, unix.CLONE_NEWNET,
	unix.CLONE_NEWUTS, unix.CLONE_NEWIPC, unix.CLONE_NEWCGROUP, unix.CLONE_NEWTIME}

// Filter is the child's seccomp filter: allow by default, refuse Denied with
// EPERM, refuse clone with namespace flags, and answer clone3 with ENOSYS
// (its flags live in memory a filter cannot read; callers fall back to
// clone, which the filter can check).
func Filter() seccomp.Filter {
	var clone []seccomp.NameWithConditions
	for _, f := range namespaceFlags {
		clone = append(clone, seccomp.NameWithConditions{Name: "clone",
			Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: f}}})
	}
	return seccomp.Filter{
		NoNewPrivs: true,
		Flag:       seccomp.FilterFlagTSync,
		Policy: seccomp.Policy{
			DefaultAction: seccomp.ActionAllow,
			Syscalls: []seccomp.SyscallGroup{
				{Action: seccomp.ActionErrno, Names: Denied},
				{Action: seccomp.ActionErrno, NamesWithCondtions: clone},
				{Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS), Names: []string{"clone3"}},
			},
		},
	}
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
