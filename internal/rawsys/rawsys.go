package rawsys

import (
	"errors"
	"fmt"
	"syscall"
)

// ABI selects how the forked copy enters the kernel.
type ABI int

const (
	Native ABI = iota // the native `syscall` instruction
	I386              // `int $0x80`: the i386 ABI (AUDIT_ARCH_I386)
)

// X32Bit marks a system call number as x32 (__X32_SYSCALL_BIT).
const X32Bit = 0x40000000

// Numbers of the i386 ABI (arch/x86/entry/syscalls/syscall_32.tbl).
const (
	I386Getpid  = 20
	I386Unshare = 310
)

// ErrUnsupported is returned where the ABI does not exist (not amd64).
var ErrUnsupported = errors.New("rawsys: only amd64 can make i386 and x32 system calls")

// Outcome is what happened to the forked copy that made one system call.
type Outcome struct {
	Errno  syscall.Errno  // the call's error; 0 when it succeeded
	Signal syscall.Signal // the signal that killed the copy (SIGSYS: seccomp killed it); 0 if it exited
}

// Succeeded reports whether the call returned without an error.
func (o Outcome) Succeeded() bool { return o.Signal == 0 && o.Errno == 0 }

func (o Outcome) String() string {
	switch {
	case o.Signal != 0:
		return "killed by " + o.Signal.String()
	case o.Errno != 0:
		return fmt.Sprintf("refused: %v (errno %d)", o.Errno, int(o.Errno))
	}
	return "succeeded"
}

// InFork forks a single-threaded copy of this process (clone with only
// SIGCHLD), which makes system call trap with a1..a3 through abi and exits
// with the call's errno (0 on success; a positive result counts as
// success, so use calls that return 0). InFork waits for it and says what
// happened. A single thread matters: unshare(CLONE_NEWUSER) refuses a
// multithreaded caller with EINVAL whatever the filter says. A fault in the
// trap (SIGSEGV, SIGBUS, SIGILL, at their default action in the copy) is
// the Outcome's Signal, as seccomp's SIGSYS is.
func InFork(abi ABI, trap, a1, a2, a3 uintptr) (Outcome, error) {
	pid, errno := forkRun(abi, trap, a1, a2, a3)
	if pid == 0 {
		if errno == 0 {
			return Outcome{}, ErrUnsupported
		}
		return Outcome{}, fmt.Errorf("forking the probe: %w", syscall.Errno(errno))
	}
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(int(pid), &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return Outcome{}, fmt.Errorf("waiting for the probe %d: %w", pid, err)
		}
		break
	}
	if ws.Signaled() {
		return Outcome{Signal: ws.Signal()}, nil
	}
	return Outcome{Errno: syscall.Errno(ws.ExitStatus())}, nil
}

// Start forks a copy like InFork, which makes the one system call and
// exits, but does not wait for it: the caller gets its pid (a grandchild
// that lives as long as the call blocks, e.g. nanosleep).
func Start(abi ABI, trap, a1, a2, a3 uintptr) (int, error) {
	pid, errno := forkRun(abi, trap, a1, a2, a3)
	if pid == 0 {
		if errno == 0 {
			return 0, ErrUnsupported
		}
		return 0, fmt.Errorf("forking: %w", syscall.Errno(errno))
	}
	return int(pid), nil
}

// I386Entry is nil when this kernel runs an i386 system call made through
// `int $0x80` (getpid, from a copy under no seccomp filter); otherwise it
// says what happened instead. Some kernels never run one: a paravirtual
// guest kernel (6.18) answered every `int $0x80` with a general protection
// fault (SIGSEGV), before any filter and under one, so that what a filter
// does with the i386 ABI cannot be seen there (and the ABI is no way around
// it either). Call it before any filter is loaded.
func I386Entry() error {
	o, err := InFork(I386, I386Getpid, 0, 0, 0)
	if err != nil {
		return err
	}
	if !o.Succeeded() {
		return fmt.Errorf("an i386 getpid through int $0x80 was %v with no filter loaded", o)
	}
	return nil
}
