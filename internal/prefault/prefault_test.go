package prefault

import (
	"errors"
	"syscall"
	"testing"
	"unsafe"
)

// The whole chunk that holds the heap's start is resident once the package
// is initialised, its last page too, which a test binary's small heap has
// not reached by itself.
func TestChunkResident(t *testing.T) {
	if errors.Is(adviseErr, syscall.EINVAL) {
		t.Skipf("this kernel has no MADV_POPULATE_WRITE (Linux 5.14): %v", adviseErr)
	}
	if adviseErr != nil {
		t.Fatalf("madvise(MADV_POPULATE_WRITE): %v", adviseErr)
	}
	base := first &^ (Chunk - 1)
	vec := make([]byte, Chunk/syscall.Getpagesize())
	if _, _, e := syscall.Syscall(syscall.SYS_MINCORE, base, Chunk, uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatalf("mincore: %v", e)
	}
	missing := 0
	for _, v := range vec {
		if v&1 == 0 {
			missing++
		}
	}
	if missing != 0 || vec[len(vec)-1]&1 == 0 {
		t.Fatalf("%d of the chunk's %d pages are not resident (the last one: %v)", missing, len(vec), vec[len(vec)-1]&1 == 1)
	}
}
