package rawsys

// forkRun is in fork_amd64.s. It returns the child's pid, or 0 and the
// errno of clone.
//
//go:noescape
func forkRun(abi ABI, trap, a1, a2, a3 uintptr) (pid, errno uintptr)
