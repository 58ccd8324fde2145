//go:build !amd64 && !arm64

package privdrop

// No filter for this architecture yet: Filter fails, so Drop with seccomp
// fails closed rather than running the pull unfiltered.
const (
	nativeArch = 0
	rejectX32  = false
)

var sysnum = map[string]uint32{}

// notOnThisArch: names of Denied and Allowed this architecture does not have.
var notOnThisArch = map[string]bool{}
