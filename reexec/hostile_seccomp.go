//go:build pullhelper_hostile

package reexec

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"unsafe"

	"github.com/pullhelper/pullhelper/internal/rawsys"
	"golang.org/x/sys/unix"
)

// Seccomp actions (issue 10 item 1): a compromised child tries the ABIs a
// native-only filter would not see.
func init() {
	// unshare32: the i386 unshare(CLONE_NEWUSER|CLONE_NEWNS) through
	// `int $0x80`, which before issue 10 gave the child a full capability
	// set in a new user namespace. It runs in a forked single-threaded copy
	// (rawsys.InFork), as an attacker would: the kernel refuses a
	// multithreaded caller a new user namespace whatever the filter says.
	// Succeeded: marker on stderr, exit 0. Refused (EPERM, ENOSYS, or the
	// copy killed by SIGSYS, which is what the filter does): exit 42.
	registerHostile("unshare32", func(*hostileEnv) (bool, int) {
		o, err := rawsys.InFork(rawsys.I386, rawsys.I386Unshare, unix.CLONE_NEWUSER|unix.CLONE_NEWNS, 0, 0)
		if err != nil {
			fmt.Fprintf(os.Stderr, "pullhelper-child: hostile: unshare32 could not run: %v\n", err)
			return true, 101
		}
		if o.Succeeded() {
			fmt.Fprintf(os.Stderr, "pullhelper-child: hostile: unshare32 succeeded\n")
			return true, 0
		}
		fmt.Fprintf(os.Stderr, "pullhelper-child: hostile: unshare32 refused (%v)\n", o)
		return true, 42
	})
}

func init() {
	// i386control (before-drop): whether this kernel runs an i386 system
	// call at all, before the filter; the child goes on. Some kernels
	// never do (rawsys.I386Entry), and there unshare32 proves nothing.
	registerHostile("i386control", func(*hostileEnv) (bool, int) {
		if err := rawsys.I386Entry(); err != nil {
			fmt.Fprintf(os.Stderr, "pullhelper-child: hostile: i386control: no i386 entry: %v\n", err)
		} else {
			fmt.Fprintf(os.Stderr, "pullhelper-child: hostile: i386control: the i386 entry works\n")
		}
		return false, 0
	})
}

func init() {
	// tiocsti: try to push a command into the caller's terminal, through
	// /dev/tty and through the inherited stderr.
	registerHostile("tiocsti", func(*hostileEnv) (bool, int) {
		try := func(fd int) error {
			for _, c := range []byte("echo PULLHELPER-INJECTED\n") {
				b := c
				if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCSTI, uintptr(unsafe.Pointer(&b))); e != 0 {
					return e
				}
			}
			return nil
		}
		var results []string
		if tty, err := unix.Open("/dev/tty", unix.O_RDWR, 0); err != nil {
			results = append(results, "/dev/tty: "+err.Error())
		} else {
			results = append(results, fmt.Sprintf("/dev/tty: %v", try(tty)))
		}
		results = append(results, fmt.Sprintf("stderr: %v", try(2)))
		fmt.Fprintf(os.Stderr, "pullhelper-child: hostile: tiocsti %s\n", strings.Join(results, "; "))
		return false, 0
	})
}

func init() {
	// unlisted: system calls outside the child's allowlist (privdrop.Allowed),
	// harmless ones included, and allowed calls with refused arguments
	// (netlink sock_diag, PR_SET_DUMPABLE, PROT_EXEC), each with arguments
	// that would work (or fail only in the kernel) without the filter. Every one refused with EPERM:
	// exit 42. Any other outcome: listed, exit 0 (execve of /bin/true that
	// succeeds ends the child with true's status 0).
	registerHostile("unlisted", func(*hostileEnv) (bool, int) {
		// Arguments on the heap (addresses passed as uintptr must not move),
		// kept alive until the calls are done.
		si := new(unix.Sysinfo_t)
		cpu := new([2]uint32)
		params := new([120]byte) // struct io_uring_params
		path, _ := unix.BytePtrFromString("/bin/true")
		argv := new([2]*byte)
		argv[0] = path
		calls := []struct {
			name             string
			trap             uintptr
			a, b, c, d, e, f uintptr
		}{
			{"sysinfo", unix.SYS_SYSINFO, uintptr(unsafe.Pointer(si)), 0, 0, 0, 0, 0},
			{"getcpu", unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu[0])), uintptr(unsafe.Pointer(&cpu[1])), 0, 0, 0, 0},
			{"execve", unix.SYS_EXECVE, uintptr(unsafe.Pointer(path)), uintptr(unsafe.Pointer(&argv[0])), 0, 0, 0, 0},
			{"socket(AF_UNIX)", unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0, 0, 0, 0},
			{"socket(AF_NETLINK, NETLINK_SOCK_DIAG)", unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_SOCK_DIAG, 0, 0, 0},
			{"ptrace(PTRACE_TRACEME)", unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0, 0, 0, 0},
			{"keyctl(KEYCTL_GET_KEYRING_ID)", unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, 0xfffffffd, 0, 0, 0, 0},
			{"io_uring_setup", unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(params)), 0, 0, 0, 0},
			{"prctl(PR_SET_DUMPABLE)", unix.SYS_PRCTL, unix.PR_SET_DUMPABLE, 1, 0, 0, 0, 0},
			{"mmap(PROT_READ|PROT_WRITE|PROT_EXEC)", unix.SYS_MMAP, 0, 4096, unix.PROT_READ | unix.PROT_WRITE | unix.PROT_EXEC, unix.MAP_PRIVATE | unix.MAP_ANONYMOUS, ^uintptr(0), 0},
			{"personality(ADDR_NO_RANDOMIZE)", unix.SYS_PERSONALITY, 0x0040000, 0, 0, 0, 0, 0},
		}
		var got []string
		for _, c := range calls {
			r, _, e := unix.Syscall6(c.trap, c.a, c.b, c.c, c.d, c.e, c.f)
			if e == 0 && (c.trap == unix.SYS_SOCKET || c.trap == unix.SYS_IO_URING_SETUP) {
				unix.Close(int(r))
			}
			if e != unix.EPERM {
				got = append(got, fmt.Sprintf("%s: %v", c.name, errnoText(e)))
			}
		}
		runtime.KeepAlive(si)
		runtime.KeepAlive(cpu)
		runtime.KeepAlive(params)
		runtime.KeepAlive(argv)
		if len(got) > 0 {
			fmt.Fprintf(os.Stderr, "pullhelper-child: hostile: unlisted not refused: %s\n", strings.Join(got, "; "))
			return true, 0
		}
		fmt.Fprintf(os.Stderr, "pullhelper-child: hostile: unlisted: every call refused with EPERM (%d calls)\n", len(calls))
		return true, 42
	})
}

func errnoText(e unix.Errno) string {
	if e == 0 {
		return "ok"
	}
	return e.Error()
}
