//go:build !amd64

package rawsys

func forkRun(ABI, uintptr, uintptr, uintptr, uintptr) (pid, errno uintptr) { return 0, 0 }
