//go:build pullhelper_hostile

package reexec

import (
	"fmt"
	"os"
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
