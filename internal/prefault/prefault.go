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
	// First is that allocation's address, the chunk's is First &^ (Chunk-1).
	First uintptr
	// Err is what madvise returned (nil: the chunk is resident).
	Err error

	keep *[16]byte
)

func init() {
	keep = new([16]byte)
	First = uintptr(unsafe.Pointer(keep))
	if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, First&^(Chunk-1), Chunk, madvPopulateWrite); e != 0 {
		Err = e
	}
}
