package cgroup

// KernelAtLeast is kernelAtLeast.
var KernelAtLeast = kernelAtLeast

// CloneIntoCgroup reports what OpenDir assumes of this kernel.
func CloneIntoCgroup() bool { return cloneIntoCgroup() }

// NoCloneIntoCgroup makes OpenDir treat this kernel as one without
// CLONE_INTO_CGROUP (hybrid mode places the child by pid), until restore.
func NoCloneIntoCgroup() (restore func()) {
	old := cloneIntoCgroup
	cloneIntoCgroup = func() bool { return false }
	return func() { cloneIntoCgroup = old }
}

// Freezes is how many times Kill has frozen a cgroup in this process.
func Freezes() int64 { return freezes.Load() }

// NoIOWeight is noIOWeight of a host laid out under unified (v2) or blkio
// (v1) and block.
func NoIOWeight(unified, blkio, block string) string {
	return noIOWeight(ioHost{unified: unified, blkio: blkio, block: block})
}

// MarkerName is markerName.
var MarkerName = markerName
