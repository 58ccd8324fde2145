#include "textflag.h"

// func forkRun(abi ABI, trap, a1, a2, a3 uintptr) (pid, errno uintptr)
//
// Parent: clone(SIGCHLD, 0, 0, 0, 0) — a fork — and return the pid.
// Child: no Go code at all. Make the system call through `syscall`
// (abi 0) or `int $0x80` (abi 1), then exit_group with -result & 0xff
// (0 when the call returned 0, the errno when it failed).
TEXT ·forkRun(SB),NOSPLIT,$0-56
	MOVQ	$17, DI		// SIGCHLD
	MOVQ	$0, SI
	MOVQ	$0, DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	MOVQ	$56, AX		// SYS_clone
	SYSCALL
	CMPQ	AX, $0
	JEQ	child
	CMPQ	AX, $0xfffffffffffff001
	JLS	parent
	NEGQ	AX
	MOVQ	$0, pid+40(FP)
	MOVQ	AX, errno+48(FP)
	RET
parent:
	MOVQ	AX, pid+40(FP)
	MOVQ	$0, errno+48(FP)
	RET
child:
	// The faults a trap can raise kill the copy (SIG_DFL) instead of
	// running the Go runtime's handler in it, which would print a
	// traceback and exit 2, read as errno 2: a kernel without the i386
	// entry answers `int $0x80` with a general protection fault (SIGSEGV).
	MOVQ	$11, DI		// SIGSEGV
	CALL	dfl<>(SB)
	MOVQ	$7, DI		// SIGBUS
	CALL	dfl<>(SB)
	MOVQ	$4, DI		// SIGILL
	CALL	dfl<>(SB)
	// The stack is a copy of the parent's, so the arguments are still here.
	MOVQ	abi+0(FP), R12
	MOVQ	trap+8(FP), AX
	CMPQ	R12, $1
	JEQ	compat
	MOVQ	a1+16(FP), DI
	MOVQ	a2+24(FP), SI
	MOVQ	a3+32(FP), DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	MOVQ	$0, R9
	SYSCALL
	JMP	done
compat:
	MOVQ	a1+16(FP), BX
	MOVQ	a2+24(FP), CX
	MOVQ	a3+32(FP), DX
	MOVQ	$0, SI
	MOVQ	$0, DI
	MOVQ	$0, BP
	INT	$0x80
	MOVLQSX	AX, AX		// the i386 result is 32 bits
done:
	CMPQ	AX, $0
	JGE	ok
	NEGQ	AX
	MOVQ	AX, DI
	JMP	exit
ok:
	MOVQ	$0, DI
exit:
	ANDQ	$0xff, DI
	MOVQ	$231, AX	// SYS_exit_group
	SYSCALL
	HLT			// not reached

// dfl: rt_sigaction(DI, {SIG_DFL}, NULL, 8) in the forked copy; the struct
// sigaction is 32 zero bytes on the stack (handler SIG_DFL, no flags, empty
// mask).
TEXT dfl<>(SB),NOSPLIT|NOFRAME,$0-0
	SUBQ	$32, SP
	MOVQ	$0, 0(SP)
	MOVQ	$0, 8(SP)
	MOVQ	$0, 16(SP)
	MOVQ	$0, 24(SP)
	MOVQ	SP, SI
	MOVQ	$0, DX
	MOVQ	$8, R10
	MOVQ	$13, AX		// SYS_rt_sigaction
	SYSCALL
	ADDQ	$32, SP
	RET
