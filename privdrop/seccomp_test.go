package privdrop_test

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/pullhelper/pullhelper/internal/rawsys"
	"github.com/pullhelper/pullhelper/privdrop"
	"golang.org/x/sys/unix"
)

// probeEnv names one probe: the test binary, re-executed with it, makes the
// probe's system call once before the filter and once after, and prints
// both outcomes as JSON. Each probe runs in its own process; the raw ones
// (other ABIs, namespaces) in a forked single-threaded copy of it, so
// SIGSYS kills the copy, not the report.
const probeEnv = "PULLHELPER_PRIVDROP_PROBE"

// probeUID is the uid (and gid) a probe run as root drops to.
const probeUID = 61999

type probeReport struct {
	Before, After string
	Setup         string // how the filter was installed, or why it was not
}

// outcome texts: "ok", "errno N (text)", "signal NAME".
func fromErrno(e syscall.Errno) string {
	if e == 0 {
		return "ok"
	}
	return fmt.Sprintf("errno %d (%v)", int(e), e)
}

func inFork(abi rawsys.ABI, trap, a1, a2, a3 uintptr) string {
	o, err := rawsys.InFork(abi, trap, a1, a2, a3)
	switch {
	case err != nil:
		return "error " + err.Error()
	case o.Signal != 0:
		return "signal " + unix.SignalName(o.Signal)
	}
	return fromErrno(o.Errno)
}

func raw(trap, a1, a2, a3 uintptr) string {
	r, _, e := unix.RawSyscall(trap, a1, a2, a3)
	if e == 0 && int(r) > 2 && trap != unix.SYS_PERSONALITY {
		unix.Close(int(r)) // a new fd (socket, io_uring)
	}
	return fromErrno(e)
}

const (
	i386SchedYield  = 158
	x32SchedYield   = rawsys.X32Bit | 24
	sigsys          = "signal SIGSYS"
	addrNoRandomize = 0x0040000
	eperm           = "errno 1 (operation not permitted)"
	enosys          = "errno 38 (function not implemented)"
)

// probes: what each one does, and what it must give under the filter.
var probes = map[string]struct {
	run         func() string
	prepare     func() // before the first run (and the filter): what run needs that the filter forbids
	want        string
	needsI386   bool // only amd64 has the i386 and x32 entries
	int80       bool // made through the i386 entry, which some kernels never run (rawsys.I386Entry)
	wantControl bool // must succeed before the filter, or the probe proves nothing
}{
	// Still works.
	"native-sched_yield": {run: func() string { return inFork(rawsys.Native, unix.SYS_SCHED_YIELD, 0, 0, 0) }, want: "ok", wantControl: true},
	"socket-inet":        {run: func() string { return raw(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, 0) }, want: "ok", wantControl: true},
	"socket-netlink": {run: func() string {
		return raw(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE)
	}, want: "ok", wantControl: true},
	"personality-query": {run: func() string { return raw(unix.SYS_PERSONALITY, 0xffffffff, 0, 0) }, want: "ok", wantControl: true},
	// Other ABIs: the whole process dies.
	"i386-sched_yield": {run: func() string { return inFork(rawsys.I386, i386SchedYield, 0, 0, 0) }, want: sigsys, needsI386: true, int80: true, wantControl: true},
	"i386-unshare-newuser-newns": {run: func() string {
		return inFork(rawsys.I386, rawsys.I386Unshare, unix.CLONE_NEWUSER|unix.CLONE_NEWNS, 0, 0)
	}, want: sigsys, needsI386: true, int80: true},
	"x32-sched_yield": {run: func() string { return inFork(rawsys.Native, x32SchedYield, 0, 0, 0) }, want: sigsys, needsI386: true},
	// User namespaces in any native form.
	"unshare-newuser": {run: func() string { return inFork(rawsys.Native, unix.SYS_UNSHARE, unix.CLONE_NEWUSER, 0, 0) }, want: eperm},
	"clone-newuser": {run: func() string {
		return inFork(rawsys.Native, unix.SYS_CLONE, unix.CLONE_NEWUSER|uintptr(unix.SIGCHLD), 0, 0)
	}, want: eperm},
	"clone3": {run: func() string { return raw(unix.SYS_CLONE3, 0, 0, 0) }, want: enosys},
	// io_uring.
	"io_uring_setup": {run: func() string {
		var params [120]byte // struct io_uring_params
		return raw(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
	}, want: eperm},
	// Unix sockets (fd passing), AF_ALG; high bits of the int do not help.
	"socket-unix":     {run: func() string { return raw(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0) }, want: eperm, wantControl: true},
	"socket-unix-hi":  {run: func() string { return raw(unix.SYS_SOCKET, unix.AF_UNIX|1<<32, unix.SOCK_STREAM, 0) }, want: eperm},
	"socketpair-unix": {run: func() string { return socketpair(unix.AF_UNIX) }, want: eperm, wantControl: true},
	"socket-alg":      {run: func() string { return raw(unix.SYS_SOCKET, unix.AF_ALG, unix.SOCK_SEQPACKET, 0) }, want: eperm},
	"personality-noaslr": {run: func() string {
		return inFork(rawsys.Native, unix.SYS_PERSONALITY, addrNoRandomize, 0, 0)
	}, want: eperm},
	// Terminal input injection (TIOCSTI, TIOCLINUX) is refused before the
	// fd is even looked at; the allowed ioctls still reach the kernel
	// (EBADF).
	"ioctl-tiocsti":    {run: func() string { return raw(unix.SYS_IOCTL, ^uintptr(0), unix.TIOCSTI, 0) }, want: eperm},
	"ioctl-tiocsti-hi": {run: func() string { return raw(unix.SYS_IOCTL, ^uintptr(0), unix.TIOCSTI|1<<32, 0) }, want: eperm},
	"ioctl-tioclinux":  {run: func() string { return raw(unix.SYS_IOCTL, ^uintptr(0), unix.TIOCLINUX, 0) }, want: eperm},
	"ioctl-tcgets":     {run: func() string { return raw(unix.SYS_IOCTL, ^uintptr(0), unix.TCGETS, 0) }, want: "errno 9 (bad file descriptor)"},
	// Only the listed requests reach the kernel (default deny).
	"ioctl-tunsetiff": {run: func() string { return raw(unix.SYS_IOCTL, ^uintptr(0), unix.TUNSETIFF, 0) }, want: eperm},
	// Every name of Denied, with zero arguments.
	"denied-sweep": {run: sweepDenied, want: "ok"},
	// Default deny: calls in neither list get EPERM too, harmless ones
	// included (they worked under the deny-list filter).
	"unlisted-sysinfo": {run: func() string {
		var si unix.Sysinfo_t
		return raw(unix.SYS_SYSINFO, uintptr(unsafe.Pointer(&si)), 0, 0)
	}, want: eperm, wantControl: true},
	"unlisted-getcpu": {run: func() string {
		var cpu, node uint32
		return raw(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), uintptr(unsafe.Pointer(&node)), 0)
	}, want: eperm, wantControl: true},
	// execve with a NULL path: EFAULT from the kernel, EPERM from the filter.
	"unlisted-execve": {run: func() string { return raw(unix.SYS_EXECVE, 0, 0, 0) }, want: eperm},
	"unlisted-listen": {run: func() string { return raw(unix.SYS_LISTEN, ^uintptr(0), 1, 0) }, want: eperm},
	"socketpair-inet": {run: func() string { return socketpair(unix.AF_INET) }, want: eperm},
	// Other netlink protocols: sock_diag lists every socket of the host.
	"socket-netlink-sockdiag": {run: func() string {
		return raw(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_SOCK_DIAG)
	}, want: eperm, wantControl: true},
	"socket-inet6-dgram": {run: func() string { return raw(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DGRAM, 0) }, want: "ok", wantControl: true},
	// prctl: what the child needs works, the rest is refused.
	"prctl-pdeathsig": {run: func() string { return raw(unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0) }, want: "ok", wantControl: true},
	"prctl-timerslack": {run: func() string {
		return raw(unix.SYS_PRCTL, unix.PR_SET_TIMERSLACK, 50000, 0)
	}, want: eperm, wantControl: true},
	// No new executable memory; other mappings still work.
	"mmap-exec": {run: func() string { return mmapProbe(unix.PROT_READ | unix.PROT_EXEC) }, want: eperm, wantControl: true},
	"mmap-rw":   {run: func() string { return mmapProbe(unix.PROT_READ | unix.PROT_WRITE) }, want: "ok", wantControl: true},
	// fcntl: a SIGKILL through SIGIO (F_SETOWN a victim, F_SETSIG
	// SIGKILL, O_ASYNC, a write) to a process of the caller's uid.
	"fcntl-sigio-kill": {prepare: startVictims, run: sigioKill, want: eperm, wantControl: true},
	// No hard links (nothing in the child makes one): EPERM before the
	// kernel looks at the (empty) names, which would give ENOENT.
	"unlisted-linkat": {run: func() string {
		empty := []byte{0}
		return raw6(unix.SYS_LINKAT, atFdcwd, uintptr(unsafe.Pointer(&empty[0])), atFdcwd, uintptr(unsafe.Pointer(&empty[0])), 0)
	}, want: eperm},
	// No sharing of another service's port.
	"setsockopt-reuseport": {run: func() string { return udpSockopt(unix.SOL_SOCKET, unix.SO_REUSEPORT) }, want: eperm, wantControl: true},
	"setsockopt-reuseaddr": {run: func() string { return udpSockopt(unix.SOL_SOCKET, unix.SO_REUSEADDR) }, want: eperm, wantControl: true},
	"setsockopt-broadcast": {run: func() string { return udpSockopt(unix.SOL_SOCKET, unix.SO_BROADCAST) }, want: "ok", wantControl: true},
	// socket protocols: only TCP and UDP (MPTCP needs no privilege; raw
	// and ICMP sockets the dropped uid could not open anyway).
	"socket-inet-mptcp": {run: func() string { return raw(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP) }, want: eperm, wantControl: true},
	"socket-inet-tcp-cloexec": {run: func() string {
		return raw(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	}, want: "ok", wantControl: true},
	// What the Go runtime and a pull do keep working under the filter.
	"allowed-runtime": {run: runtimeWorks, want: "ok", wantControl: true},
}

// mmapProbe maps one anonymous page with prot, and unmaps it.
func mmapProbe(prot uintptr) string {
	r, _, e := unix.RawSyscall6(unix.SYS_MMAP, 0, 4096, prot, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, ^uintptr(0), 0)
	if e == 0 {
		unix.RawSyscall(unix.SYS_MUNMAP, r, 4096, 0)
	}
	return fromErrno(e)
}

// atFdcwd is AT_FDCWD (-100) as a register value.
var atFdcwd = func() uintptr { n := unix.AT_FDCWD; return uintptr(n) }()

func raw6(trap, a1, a2, a3, a4, a5 uintptr) string {
	_, _, e := unix.RawSyscall6(trap, a1, a2, a3, a4, a5, 0)
	return fromErrno(e)
}

// udpSockopt sets level/opt to 1 on a fresh UDP socket.
func udpSockopt(level, opt int) string {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "socket: " + err.Error()
	}
	defer unix.Close(fd)
	one := int32(1)
	_, _, e := unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(unsafe.Pointer(&one)), 4, 0)
	return fromErrno(e)
}

// victims are processes of the uid the probe drops to (started before the
// drop; one for each run of sigioKill), each reading its stdin until EOF.
var victims []victim

type victim struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func startVictims() {
	for i := 0; i < 2; i++ {
		c := exec.Command("/bin/cat")
		if os.Geteuid() == 0 {
			c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: probeUID, Gid: probeUID}}
		}
		w, err := c.StdinPipe()
		if err == nil {
			err = c.Start()
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "starting a victim: %v\n", err)
			os.Exit(3)
		}
		victims = append(victims, victim{c, w})
	}
}

// sigioKill points a pipe's SIGIO at the next victim as SIGKILL and writes
// to the pipe; then closes the victim's stdin and reaps it. "ok": the
// victim died of SIGKILL (the attack works); otherwise the first error of
// the fcntl calls (or "victim lived").
func sigioKill() string {
	v := victims[0]
	victims = victims[1:]
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return "pipe2: " + err.Error()
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	var first syscall.Errno
	try := func(cmd, arg uintptr) {
		if _, _, e := unix.RawSyscall(unix.SYS_FCNTL, uintptr(p[0]), cmd, arg); e != 0 && first == 0 {
			first = e
		}
	}
	try(unix.F_SETOWN, uintptr(v.cmd.Process.Pid))
	try(unix.F_SETSIG, uintptr(unix.SIGKILL))
	try(unix.F_SETFL, unix.O_ASYNC|unix.O_NONBLOCK)
	_, _ = unix.Write(p[1], []byte("x"))
	// The kernel queued any signal during the write: the victim, dying of
	// SIGKILL already, never sees the EOF.
	v.stdin.Close()
	err := v.cmd.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return "ok"
		}
	}
	if first != 0 {
		return fromErrno(first)
	}
	return fmt.Sprintf("victim lived (%v)", err)
}

// loopback is a TCP listener made before the filter (listen and accept are
// not allowed after it); the kernel completes connections to it unaccepted.
var loopback net.Listener

// runtimeWorks exercises what a pull needs from the runtime and the kernel:
// new threads (clone), the GC, timers, pipes and the netpoller, files,
// randomness, a TCP connection and a UDP "connection" (Go's resolver).
func runtimeWorks() string {
	if loopback == nil {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "listen: " + err.Error()
		}
		loopback = l
	}
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() {
			runtime.LockOSThread() // a thread of its own: clone
			b := make([]byte, 1<<20)
			_, err := rand.Read(b)
			errs <- err
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			return "getrandom: " + err.Error()
		}
	}
	runtime.GC()
	<-time.After(time.Millisecond)
	r, w, err := os.Pipe()
	if err != nil {
		return "pipe: " + err.Error()
	}
	go func() { _, _ = w.Write([]byte("x")); w.Close() }()
	if b, err := io.ReadAll(r); err != nil || string(b) != "x" {
		return fmt.Sprintf("pipe read %q: %v", b, err)
	}
	r.Close()
	if b, err := os.ReadFile("/proc/self/status"); err != nil || !strings.Contains(string(b), "Seccomp:") {
		return fmt.Sprintf("reading /proc/self/status: %v", err)
	}
	if _, err := os.ReadDir("/proc/self/task"); err != nil {
		return "getdents: " + err.Error()
	}
	c, err := net.Dial("tcp", loopback.Addr().String())
	if err != nil {
		return "tcp: " + err.Error()
	}
	_, err = c.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
	c.Close()
	if err != nil {
		return "tcp write: " + err.Error()
	}
	u, err := net.Dial("udp", "127.0.0.1:53")
	if err != nil {
		return "udp: " + err.Error()
	}
	u.Close()
	if _, err := net.Interfaces(); err != nil {
		return "netlink: " + err.Error()
	}
	return "ok"
}

func socketpair(domain uintptr) string {
	var fds [2]int32
	_, _, e := unix.RawSyscall6(unix.SYS_SOCKETPAIR, domain, unix.SOCK_STREAM, 0, uintptr(unsafe.Pointer(&fds[0])), 0, 0)
	if e == 0 {
		unix.Close(int(fds[0]))
		unix.Close(int(fds[1]))
	}
	return fromErrno(e)
}

// sweepDenied calls every Denied system call with zero arguments (after
// the drop, so even an unfiltered one could do nothing) and says "ok" only
// if every one got EPERM.
func sweepDenied() string {
	var bad []string
	for _, name := range privdrop.Denied {
		n, ok := privdrop.SyscallNumber(name)
		if !ok || name == "uprobe" {
			// uprobe: the kernel runs it before seccomp (it is called by
			// its own uprobe trampolines, and fails with ENXIO or SIGILL
			// anywhere else), so no filter can answer it.
			continue
		}
		r := inFork(rawsys.Native, uintptr(n), 0, 0, 0)
		if runtime.GOARCH != "amd64" {
			_, _, e := unix.RawSyscall(uintptr(n), 0, 0, 0)
			r = fromErrno(e)
		}
		if r != eperm {
			bad = append(bad, name+": "+r)
		}
	}
	if len(bad) > 0 {
		return strings.Join(bad, "; ")
	}
	return "ok"
}

// probeHelper runs in the re-executed test binary.
func probeHelper(name string) int {
	p, ok := probes[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "no probe %q\n", name)
		return 2
	}
	var r probeReport
	if p.prepare != nil {
		p.prepare()
	}
	if name != "denied-sweep" {
		r.Before = p.run()
	}
	if os.Geteuid() == 0 {
		// The real thing: the whole drop, as the child does it.
		id := privdrop.Identity{UID: probeUID, GID: probeUID}
		if err := privdrop.Drop(id, true); err != nil {
			r.Setup = "drop: " + err.Error()
		} else if err := privdrop.Verify(id, true); err != nil {
			r.Setup = "verify: " + err.Error()
		} else {
			r.Setup = "drop"
		}
	} else {
		// Unprivileged: no_new_privs and the filter are all it takes.
		if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); e != 0 {
			r.Setup = "no_new_privs: " + e.Error()
		} else if err := privdrop.LoadFilter(); err != nil {
			r.Setup = "filter: " + err.Error()
		} else {
			r.Setup = "filter"
		}
	}
	if r.Setup == "drop" || r.Setup == "filter" {
		r.After = p.run()
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
	return 0
}

// TestSeccompProbes runs every probe in its own process and checks what the
// filter answered. With the filter of go-seccomp-bpf (before issue 10) the
// i386 calls succeeded, x32 got ENOSYS, io_uring_setup and Unix sockets
// worked: those probes fail there.
func TestSeccompProbes(t *testing.T) {
	for name, p := range probes {
		t.Run(name, func(t *testing.T) {
			if p.needsI386 && runtime.GOARCH != "amd64" {
				t.Skipf("the i386 and x32 entries exist on amd64 only (GOARCH=%s)", runtime.GOARCH)
			}
			if p.int80 {
				if err := rawsys.I386Entry(); err != nil {
					t.Skipf("this kernel runs no i386 system call, so the filter's answer to one cannot be seen: %v", err)
				}
			}
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), probeEnv+"="+name)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("probe process: %v\n%s", err, out)
			}
			var r probeReport
			if err := json.Unmarshal(out, &r); err != nil {
				t.Fatalf("probe output %q: %v", out, err)
			}
			t.Logf("%s: before the filter %q, after %q (%s)", name, r.Before, r.After, r.Setup)
			if r.Setup != "drop" && r.Setup != "filter" {
				t.Fatalf("installing the filter: %s", r.Setup)
			}
			if p.wantControl && r.Before != "ok" {
				t.Fatalf("before the filter the probe gave %q, want ok: it would prove nothing", r.Before)
			}
			if r.After != p.want {
				t.Errorf("under the filter: %s, want %s", r.After, p.want)
			}
		})
	}
}

// TestFilterCoversDockerDefault: every system call Docker's default profile
// refuses an unprivileged amd64 container (moby/moby b985e2313a86,
// vendor/github.com/moby/profiles/seccomp/default.json: not in the allow
// list, or allowed only with a capability) is refused by ours too; the
// conditional ones (clone, clone3, socket, personality) have their own
// rules and probes above.
func TestFilterCoversDockerDefault(t *testing.T) {
	docker := strings.Fields(`_sysctl acct add_key afs_syscall bpf chroot clock_adjtime clock_settime
		create_module delete_module fanotify_init file_getattr file_setattr finit_module fsconfig fsmount
		fsopen fspick get_kernel_syms get_mempolicy getpmsg init_module io_uring_enter io_uring_register
		io_uring_setup ioperm iopl kcmp kexec_file_load kexec_load keyctl listns lookup_dcookie
		lsm_get_self_attr lsm_list_modules lsm_set_self_attr mbind migrate_pages mount mount_setattr
		move_mount move_pages nfsservctl open_by_handle_at open_tree open_tree_attr perf_event_open
		pidfd_getfd pivot_root process_madvise putpmsg query_module quotactl quotactl_fd reboot request_key
		rseq_slice_yield security set_mempolicy set_mempolicy_home_node setdomainname sethostname setns
		settimeofday swapoff swapon syslog sysfs tuxcall umount2 unshare uprobe uselib userfaultfd ustat
		vhangup vserver`)
	have := map[string]bool{}
	for _, n := range privdrop.Denied {
		if have[n] {
			t.Errorf("%s is listed twice", n)
		}
		have[n] = true
	}
	for _, n := range docker {
		if !have[n] {
			t.Errorf("Docker's default profile refuses %s; ours allows it", n)
		}
	}
	// Every name resolves on this architecture, or is known to be absent:
	// a typo must not silently leave a call allowed.
	for _, n := range privdrop.Denied {
		if _, ok := privdrop.SyscallNumber(n); !ok && !privdrop.NotOnThisArch[n] {
			t.Errorf("%s has no number on %s", n, runtime.GOARCH)
		}
	}
}

// TestRawsysNotInTheReleaseBinary: the hostile helpers never reach the
// release build.
func TestRawsysNotInTheReleaseBinary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/pullhelper/pullhelper/cmd/pullhelper").CombinedOutput()
	if err != nil {
		t.Skipf("go list is not available here (%v): %s", err, out)
	}
	for _, bad := range []string{"github.com/pullhelper/pullhelper/internal/rawsys", "github.com/elastic/go-seccomp-bpf"} {
		if strings.Contains(string(out), bad+"\n") {
			t.Errorf("the release binary imports %s", bad)
		}
	}
}
