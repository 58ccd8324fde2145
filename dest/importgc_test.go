package dest

import (
	"runtime/debug"
	"testing"
)

// Concurrent imports (the CRI service's) share the process's GC target:
// it stays lowered until the last ends, then is what it was before the
// first, whatever order they end in.
func TestImportGCConcurrent(t *testing.T) {
	before := debug.SetGCPercent(150)
	defer debug.SetGCPercent(before)
	a := importGC()
	b := importGC()
	a()
	if got := debug.SetGCPercent(importGCPercent); got != importGCPercent {
		t.Fatalf("one import still running: GC target %d, want %d", got, importGCPercent)
	}
	b()
	if got := debug.SetGCPercent(150); got != 150 {
		t.Fatalf("after the last import: GC target %d, want 150 (as before the first)", got)
	}
}
