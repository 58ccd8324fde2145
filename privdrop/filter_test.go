package privdrop_test

import (
	"encoding/binary"
	"os"
	"runtime"
	"sort"
	"testing"

	"github.com/pullhelper/pullhelper/privdrop"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// verdict runs the filter in x/net/bpf's interpreter on a seccomp_data for
// (arch, nr, args). The interpreter loads words big-endian, so each field
// (and the low half of each argument, where the kernel's little-endian
// layout puts it) is written big-endian: the program sees the same values.
func verdict(t *testing.T, vm *bpf.VM, arch, nr uint32, args ...uint32) uint32 {
	t.Helper()
	var d [64]byte
	binary.BigEndian.PutUint32(d[0:], nr)
	binary.BigEndian.PutUint32(d[4:], arch)
	for i, a := range args {
		binary.BigEndian.PutUint32(d[16+8*i:], a)
	}
	r, err := vm.Run(d[:])
	if err != nil {
		t.Fatalf("running the filter: %v", err)
	}
	return uint32(r)
}

const (
	allow    = unix.SECCOMP_RET_ALLOW
	kill     = unix.SECCOMP_RET_KILL_PROCESS
	errEPERM = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	errNOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
)

func newVM(t *testing.T) *bpf.VM {
	t.Helper()
	insts, err := privdrop.Filter()
	if err != nil {
		t.Fatalf("Filter: %v", err)
	}
	if len(insts) > unix.BPF_MAXINSNS {
		t.Fatalf("the program has %d instructions, the kernel takes %d", len(insts), unix.BPF_MAXINSNS)
	}
	vm, err := bpf.NewVM(insts)
	if err != nil {
		t.Fatalf("bpf.NewVM: %v", err)
	}
	return vm
}

// TestFilterIsAnAllowlist: with arguments that pass the argument rules,
// every number from 0 to 1023 (and every number the filter names) is
// allowed exactly when its name is in Allowed; all others get EPERM, the
// ones in Denied included. Before the allowlist (a deny list, allow by
// default) sysinfo, getcpu, execve and every unnamed number were allowed.
func TestFilterIsAnAllowlist(t *testing.T) {
	vm := newVM(t)
	allowed := map[uint32]string{}
	for _, name := range privdrop.Allowed {
		if n, ok := privdrop.SyscallNumber(name); ok {
			allowed[n] = name
		} else if !privdrop.NotOnThisArch[name] {
			t.Errorf("Allowed names %s, which has no number on %s", name, runtime.GOARCH)
		}
	}
	names := map[uint32]string{}
	for name, n := range privdrop.SyscallNames() {
		names[n] = name
	}
	nrs := map[uint32]bool{}
	for n := uint32(0); n < 1024; n++ {
		nrs[n] = true
	}
	for n := range names {
		nrs[n] = true
	}
	for n := range nrs {
		// Arguments every rule accepts: clone without namespace flags,
		// socket(AF_INET, SOCK_STREAM, 0), arch_prctl(ARCH_SET_FS), prctl(PR_SET_PDEATHSIG), personality(0),
		// ioctl(fd, TCGETS).
		args := []uint32{0, 0, 0}
		switch names[n] {
		case "socket":
			args[0], args[1] = unix.AF_INET, unix.SOCK_STREAM
		case "arch_prctl":
			args[0] = 0x1002 // ARCH_SET_FS
		case "prctl":
			args[0] = unix.PR_SET_PDEATHSIG
		case "ioctl":
			args[1] = unix.TCGETS
		case "tgkill":
			args[0] = uint32(os.Getpid())
		}
		got := verdict(t, vm, privdrop.NativeArch, n, args...)
		want := uint32(errEPERM)
		if _, ok := allowed[n]; ok {
			want = allow
		}
		if names[n] == "clone3" {
			want = errNOSYS
		}
		if got != want {
			t.Errorf("syscall %d (%s): verdict %#x, want %#x", n, names[n], got, want)
		}
	}
	// Calls in neither list, by their numbers here (the loop above checked
	// them too; this says which ones matter).
	for name, n := range map[string]uint32{"sysinfo": unix.SYS_SYSINFO, "getcpu": unix.SYS_GETCPU,
		"execve": unix.SYS_EXECVE, "execveat": unix.SYS_EXECVEAT, "listen": unix.SYS_LISTEN,
		"accept": unix.SYS_ACCEPT, "accept4": unix.SYS_ACCEPT4, "socketpair": unix.SYS_SOCKETPAIR,
		"setuid": unix.SYS_SETUID, "setsid": unix.SYS_SETSID, "tkill": unix.SYS_TKILL,
		"seccomp": unix.SYS_SECCOMP, "pkey_mprotect": unix.SYS_PKEY_MPROTECT, "memfd_create": unix.SYS_MEMFD_CREATE,
		"pidfd_open": unix.SYS_PIDFD_OPEN, "symlinkat": unix.SYS_SYMLINKAT, "fchownat": unix.SYS_FCHOWNAT,
		"linkat": unix.SYS_LINKAT} {
		if got := verdict(t, vm, privdrop.NativeArch, n); got != errEPERM {
			t.Errorf("%s: verdict %#x, want EPERM", name, got)
		}
	}
	for _, name := range privdrop.Denied {
		if n, ok := privdrop.SyscallNumber(name); ok {
			if got := verdict(t, vm, privdrop.NativeArch, n); got != errEPERM {
				t.Errorf("denied %s: verdict %#x, want EPERM", name, got)
			}
		}
	}
}

// TestFilterArgumentRules: the rules that look at arguments, one case each
// side of each boundary.
func TestFilterArgumentRules(t *testing.T) {
	vm := newVM(t)
	nr := func(name string) uint32 {
		n, ok := privdrop.SyscallNumber(name)
		if !ok {
			t.Fatalf("%s has no number on %s", name, runtime.GOARCH)
		}
		return n
	}
	cases := []struct {
		what string
		nr   uint32
		args []uint32
		want uint32
	}{
		{"clone thread", nr("clone"), []uint32{unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM}, allow},
		{"clone CLONE_NEWUSER", nr("clone"), []uint32{unix.CLONE_NEWUSER | uint32(unix.SIGCHLD)}, errEPERM},
		{"clone CLONE_NEWTIME", nr("clone"), []uint32{unix.CLONE_NEWTIME}, errEPERM},
		{"clone3", nr("clone3"), nil, errNOSYS},
		{"mmap PROT_READ|PROT_WRITE", nr("mmap"), []uint32{0, 4096, unix.PROT_READ | unix.PROT_WRITE}, allow},
		{"mmap PROT_READ|PROT_EXEC", nr("mmap"), []uint32{0, 4096, unix.PROT_READ | unix.PROT_EXEC}, errEPERM},
		{"mprotect PROT_NONE", nr("mprotect"), []uint32{0, 4096, unix.PROT_NONE}, allow},
		{"mprotect PROT_EXEC", nr("mprotect"), []uint32{0, 4096, unix.PROT_EXEC}, errEPERM},
		{"socket AF_INET", nr("socket"), []uint32{unix.AF_INET, unix.SOCK_STREAM}, allow},
		{"socket AF_INET6", nr("socket"), []uint32{unix.AF_INET6, unix.SOCK_DGRAM}, allow},
		{"socket AF_NETLINK ROUTE", nr("socket"), []uint32{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE}, allow},
		{"socket AF_NETLINK SOCK_DIAG", nr("socket"), []uint32{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_SOCK_DIAG}, errEPERM},
		{"socket AF_NETLINK KOBJECT_UEVENT", nr("socket"), []uint32{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_KOBJECT_UEVENT}, errEPERM},
		{"socket AF_INET SOCK_STREAM|NONBLOCK|CLOEXEC TCP", nr("socket"), []uint32{unix.AF_INET, unix.SOCK_STREAM | unix.SOCK_NONBLOCK | unix.SOCK_CLOEXEC, unix.IPPROTO_TCP}, allow},
		{"socket AF_INET6 SOCK_DGRAM|CLOEXEC UDP", nr("socket"), []uint32{unix.AF_INET6, unix.SOCK_DGRAM | unix.SOCK_CLOEXEC, unix.IPPROTO_UDP}, allow},
		{"socket AF_INET SOCK_RAW", nr("socket"), []uint32{unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP}, errEPERM},
		{"socket AF_INET6 SOCK_RAW 0", nr("socket"), []uint32{unix.AF_INET6, unix.SOCK_RAW | unix.SOCK_CLOEXEC, 0}, errEPERM},
		{"socket AF_INET SOCK_DGRAM ICMP (ping)", nr("socket"), []uint32{unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_ICMP}, errEPERM},
		{"socket AF_INET SOCK_SEQPACKET SCTP", nr("socket"), []uint32{unix.AF_INET, unix.SOCK_SEQPACKET, unix.IPPROTO_SCTP}, errEPERM},
		{"socket AF_INET SOCK_STREAM MPTCP", nr("socket"), []uint32{unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP}, errEPERM},
		{"socket AF_INET SOCK_PACKET", nr("socket"), []uint32{unix.AF_INET, unix.SOCK_PACKET}, errEPERM},
		{"socket AF_INET type with an unknown flag", nr("socket"), []uint32{unix.AF_INET, unix.SOCK_STREAM | 0x100}, errEPERM},
		{"socket AF_NETLINK ROUTE SOCK_RAW|CLOEXEC", nr("socket"), []uint32{unix.AF_NETLINK, unix.SOCK_RAW | unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE}, allow},
		{"socket AF_NETLINK ROUTE SOCK_DGRAM", nr("socket"), []uint32{unix.AF_NETLINK, unix.SOCK_DGRAM, unix.NETLINK_ROUTE}, allow},
		{"socket AF_NETLINK ROUTE SOCK_STREAM", nr("socket"), []uint32{unix.AF_NETLINK, unix.SOCK_STREAM, unix.NETLINK_ROUTE}, errEPERM},
		{"socket AF_UNIX", nr("socket"), []uint32{unix.AF_UNIX, unix.SOCK_STREAM}, errEPERM},
		{"socket AF_PACKET", nr("socket"), []uint32{unix.AF_PACKET, unix.SOCK_RAW}, errEPERM},
		{"socket AF_ALG", nr("socket"), []uint32{unix.AF_ALG, unix.SOCK_SEQPACKET}, errEPERM},
		{"socket AF_VSOCK", nr("socket"), []uint32{unix.AF_VSOCK, unix.SOCK_STREAM}, errEPERM},
		{"prctl PR_SET_PDEATHSIG", nr("prctl"), []uint32{unix.PR_SET_PDEATHSIG, uint32(unix.SIGKILL)}, allow},
		{"prctl PR_SET_VMA", nr("prctl"), []uint32{unix.PR_SET_VMA}, allow},
		{"prctl PR_SET_DUMPABLE", nr("prctl"), []uint32{unix.PR_SET_DUMPABLE, 1}, errEPERM},
		{"prctl PR_SET_PTRACER", nr("prctl"), []uint32{unix.PR_SET_PTRACER}, errEPERM},
		{"prctl PR_SET_MM", nr("prctl"), []uint32{unix.PR_SET_MM}, errEPERM},
		{"personality query", nr("personality"), []uint32{0xffffffff}, allow},
		{"personality ADDR_NO_RANDOMIZE", nr("personality"), []uint32{0x0040000}, errEPERM},
		{"ioctl TCGETS", nr("ioctl"), []uint32{0, unix.TCGETS}, allow},
		{"ioctl TIOCSTI", nr("ioctl"), []uint32{0, unix.TIOCSTI}, errEPERM},
		{"ioctl TIOCLINUX", nr("ioctl"), []uint32{0, unix.TIOCLINUX}, errEPERM},
		{"ioctl TIOCGWINSZ", nr("ioctl"), []uint32{2, unix.TIOCGWINSZ}, allow},
		{"ioctl TIOCSCTTY", nr("ioctl"), []uint32{2, unix.TIOCSCTTY}, errEPERM},
		{"ioctl TUNSETIFF", nr("ioctl"), []uint32{3, unix.TUNSETIFF}, errEPERM},
		{"ioctl FICLONE", nr("ioctl"), []uint32{3, unix.FICLONE}, errEPERM},
		{"kill self", nr("kill"), []uint32{uint32(os.Getpid()), uint32(unix.SIGURG)}, allow},
		{"kill own process group", nr("kill"), []uint32{0, uint32(unix.SIGTERM)}, allow},
		{"kill -1 (every process of the uid)", nr("kill"), []uint32{0xffffffff, uint32(unix.SIGKILL)}, errEPERM},
		{"kill pid 1", nr("kill"), []uint32{1, uint32(unix.SIGKILL)}, errEPERM},
		{"kill the parent", nr("kill"), []uint32{uint32(os.Getppid()), uint32(unix.SIGKILL)}, errEPERM},
		{"tgkill own thread", nr("tgkill"), []uint32{uint32(os.Getpid()), uint32(unix.Gettid()), uint32(unix.SIGURG)}, allow},
		{"tgkill another process", nr("tgkill"), []uint32{uint32(os.Getppid()), uint32(os.Getppid()), uint32(unix.SIGKILL)}, errEPERM},
		{"prlimit64 self (0)", nr("prlimit64"), []uint32{0, unix.RLIMIT_NOFILE}, allow},
		{"prlimit64 another process", nr("prlimit64"), []uint32{1, unix.RLIMIT_NOFILE}, errEPERM},
		{"fcntl F_GETFL", nr("fcntl"), []uint32{3, unix.F_GETFL}, allow},
		{"fcntl F_SETFL", nr("fcntl"), []uint32{3, unix.F_SETFL, unix.O_NONBLOCK}, allow},
		{"fcntl F_SETFD", nr("fcntl"), []uint32{3, unix.F_SETFD, unix.FD_CLOEXEC}, allow},
		{"fcntl F_DUPFD_CLOEXEC", nr("fcntl"), []uint32{3, unix.F_DUPFD_CLOEXEC}, allow},
		{"fcntl F_SETPIPE_SZ", nr("fcntl"), []uint32{3, unix.F_SETPIPE_SZ, 1 << 20}, allow},
		{"fcntl F_SETLKW (containers/storage's locks)", nr("fcntl"), []uint32{3, unix.F_SETLKW}, allow},
		{"fcntl F_OFD_SETLK", nr("fcntl"), []uint32{3, unix.F_OFD_SETLK}, allow},
		{"fcntl F_GETOWN", nr("fcntl"), []uint32{3, unix.F_GETOWN}, allow},
		{"fcntl F_SETOWN", nr("fcntl"), []uint32{3, unix.F_SETOWN, 1}, errEPERM},
		{"fcntl F_SETOWN_EX", nr("fcntl"), []uint32{3, unix.F_SETOWN_EX}, errEPERM},
		{"fcntl F_SETSIG", nr("fcntl"), []uint32{3, unix.F_SETSIG, uint32(unix.SIGKILL)}, errEPERM},
		{"fcntl F_SETLEASE", nr("fcntl"), []uint32{3, unix.F_SETLEASE, unix.F_WRLCK}, errEPERM},
		{"setsockopt SO_REUSEPORT", nr("setsockopt"), []uint32{3, unix.SOL_SOCKET, unix.SO_REUSEPORT}, errEPERM},
		{"setsockopt SO_REUSEADDR", nr("setsockopt"), []uint32{3, unix.SOL_SOCKET, unix.SO_REUSEADDR}, errEPERM},
		{"setsockopt SO_ATTACH_REUSEPORT_CBPF", nr("setsockopt"), []uint32{3, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF}, errEPERM},
		{"setsockopt SO_BROADCAST (Go's UDP dial)", nr("setsockopt"), []uint32{3, unix.SOL_SOCKET, unix.SO_BROADCAST}, allow},
		{"setsockopt SO_KEEPALIVE", nr("setsockopt"), []uint32{3, unix.SOL_SOCKET, unix.SO_KEEPALIVE}, allow},
		{"setsockopt IPPROTO_TCP TCP_NODELAY", nr("setsockopt"), []uint32{3, unix.IPPROTO_TCP, unix.TCP_NODELAY}, allow},
		{"setsockopt IPPROTO_IPV6 IPV6_V6ONLY", nr("setsockopt"), []uint32{3, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY}, allow},
		{"setsockopt IPPROTO_IP option 15 (not SO_REUSEPORT)", nr("setsockopt"), []uint32{3, unix.IPPROTO_IP, unix.SO_REUSEPORT}, allow},
		{"read, foreign arch", nr("read"), nil, kill},
	}
	for _, c := range cases {
		arch := uint32(privdrop.NativeArch)
		if c.want == kill {
			arch = unix.AUDIT_ARCH_I386
		}
		if got := verdict(t, vm, arch, c.nr, c.args...); got != c.want {
			t.Errorf("%s: verdict %#x, want %#x", c.what, got, c.want)
		}
	}
	if runtime.GOARCH == "amd64" {
		for _, c := range []struct {
			what string
			op   uint32
			want uint32
		}{{"ARCH_SET_FS", 0x1002, allow}, {"ARCH_GET_FS", 0x1003, allow}, {"ARCH_SET_GS", 0x1001, errEPERM},
			{"ARCH_SET_CPUID", 0x1012, errEPERM}, {"ARCH_MAP_VDSO_64", 0x2003, errEPERM},
			{"ARCH_REQ_XCOMP_PERM", 0x1023, errEPERM}, {"ARCH_SHSTK_ENABLE", 0x5001, errEPERM}} {
			if got := verdict(t, vm, privdrop.NativeArch, nr("arch_prctl"), c.op); got != c.want {
				t.Errorf("arch_prctl %s: verdict %#x, want %#x", c.what, got, c.want)
			}
		}
		if got := verdict(t, vm, privdrop.NativeArch, nr("read")|0x40000000); got != kill {
			t.Errorf("x32 read: verdict %#x, want kill", got)
		}
	}
}

// TestAllowedNamesNoDenied: no call is both allowed and denied, none twice,
// and the list is what the filter uses (a sorted copy for the log).
func TestAllowedNamesNoDenied(t *testing.T) {
	denied := map[string]bool{}
	for _, n := range privdrop.Denied {
		denied[n] = true
	}
	seen := map[string]bool{}
	for _, n := range privdrop.Allowed {
		if denied[n] {
			t.Errorf("%s is both allowed and denied", n)
		}
		if seen[n] {
			t.Errorf("%s is allowed twice", n)
		}
		seen[n] = true
	}
	s := append([]string(nil), privdrop.Allowed...)
	sort.Strings(s)
	t.Logf("%d calls allowed: %v", len(s), s)
}
