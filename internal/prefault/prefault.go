package prefault

import (
	"syscall"
	"unsafe"
)

const (
	// Chunk is the size in which the Go runtime maps its heap
	// (pallocChunkBytes) and so what is populated: the chunk that holds
	// the first allocation of this package's init.
	Chunk             = 4 << 20
	madvPopulateWrite = 23 // MADV_POPULATE_WRITE, Linux 5.14
)

var (
	// first is that allocation's address, the chunk's is first &^ (Chunk-1).
	first uintptr
	// adviseErr is what madvise returned (nil: the chunk is resident); the test
	// reads it.
	adviseErr error

	keep *[16]byte
)

func init() {
	keep = new([16]byte)
	first = uintptr(unsafe.Pointer(keep))
	if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, first&^(Chunk-1), Chunk, madvPopulateWrite); e != 0 {
		adviseErr = e
	}
}
