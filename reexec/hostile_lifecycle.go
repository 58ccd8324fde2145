//go:build pullhelper_hostile

package reexec

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/pullhelper/pullhelper/internal/rawsys"
	"github.com/pullhelper/pullhelper/pull"
	"golang.org/x/sys/unix"
)

// Actions against the parent↔child lifecycle (issue 10 items 4, 6, 7, 10).
func init() {
	// grandchild: start /bin/sleep in a session of its own, holding the
	// child's stderr and event pipe, and go on: it must neither outlive the
	// pull nor hang the parent. Under the seccomp filter execve (and
	// setsid) get EPERM, so the grandchild is what an attacker is left
	// with: a forked copy of the child, holding all its fds, asleep in
	// nanosleep for 1000 s.
	registerHostile("grandchild", func(*hostileEnv) (bool, int) {
		pid, err := syscall.ForkExec("/bin/sleep", []string{"sleep", "1000"}, &syscall.ProcAttr{
			Dir:   "/",
			Files: []uintptr{0, 1, 2, eventsFD},
			Sys:   &syscall.SysProcAttr{Setsid: true},
		})
		how := "/bin/sleep"
		if err == syscall.EPERM {
			ts := &syscall.Timespec{Sec: 1000}
			pid, err = rawsys.Start(rawsys.Native, syscall.SYS_NANOSLEEP, uintptr(unsafe.Pointer(ts)), 0, 0)
			runtime.KeepAlive(ts)
			how = "a forked copy (execve refused)"
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "pullhelper-child: hostile: forking a grandchild: %v\n", err)
			return true, 102
		}
		fmt.Fprintf(os.Stderr, "pullhelper-child: hostile: grandchild pid %d, %s\n", pid, how)
		return false, 0
	})
	// inherited-fds: list the fds above the protocol pipes that came through
	// exec (no FD_CLOEXEC) and write into each.
	registerHostile("inherited-fds", func(*hostileEnv) (bool, int) {
		var found []string
		for _, fd := range openFDs() {
			if fd <= eventsFD {
				continue
			}
			fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
			if err != nil || fl&unix.FD_CLOEXEC != 0 {
				continue
			}
			target, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
			_, werr := unix.Write(fd, []byte("written by a hostile pull child\n"))
			found = append(found, fmt.Sprintf("%d=%s(write:%v)", fd, target, werr))
		}
		if len(found) == 0 {
			fmt.Fprintln(os.Stderr, "pullhelper-child: hostile: no inherited fd")
		} else {
			fmt.Fprintf(os.Stderr, "pullhelper-child: hostile: inherited fds %s\n", strings.Join(found, " "))
		}
		return false, 0
	})
	// forge-events: send the events only the parent may emit.
	registerHostile("forge-events", func(e *hostileEnv) (bool, int) {
		for _, t := range []string{"start", "done", "error"} {
			e.Send(message{Event: &pull.Event{Type: t, Digest: "sha256:" + strings.Repeat("f", 64), Code: "forged", Message: "forged by the child"}})
		}
		return false, 0
	})
	// huge-line: one 64 MiB message on the event pipe, then go on.
	registerHostile("huge-line", func(*hostileEnv) (bool, int) {
		out := os.NewFile(eventsFD, "events")
		chunk := []byte(strings.Repeat("A", 1<<20))
		if _, err := out.Write([]byte(`{"event":{"type":"layer_progress","digest":"`)); err != nil {
			return true, 103
		}
		for range 64 {
			if _, err := out.Write(chunk); err != nil {
				return true, 103
			}
		}
		_, _ = out.Write([]byte("\"}}\n"))
		return false, 0
	})
	// long-stderr: one 2 MiB line on stderr (a registry's error body), then
	// go on.
	registerHostile("long-stderr", func(*hostileEnv) (bool, int) {
		fmt.Fprintln(os.Stderr, "pullhelper-child: hostile: long line follows"+strings.Repeat(" x", 1<<20))
		return false, 0
	})
}
