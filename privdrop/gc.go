package privdrop

import (
	"path/filepath"
	"sort"
	"strings"

	"github.com/pullhelper/pullhelper/internal/safefs"
	"github.com/pullhelper/pullhelper/internal/state"
	"golang.org/x/sys/unix"
)

// maxSweepEntries bounds the entries one sweep looks at (the dynamic range
// has 4336 uids).
const maxSweepEntries = 8192

// Sweep removes the uid lock files in lockDir that no pull holds (a
// pullhelper killed before its Release leaves its file; its flock died with
// it), each under its own flock and only while it is still the file at its
// name, as Release does, and returns their paths. A file held by a live
// pull is never touched, nor anything that is not a lock file of this
// user's (state.RemoveIfUnheld: a regular file with one link, owned by the
// effective uid). lockDir is held open (state.OpenExistingDir: nothing is
// created) and must be a directory only root can change, as must every
// directory above it; otherwise, or when it is missing, nothing is swept.
// Every pull sweeps at its start (pipeline), every dynamic allocation once
// it holds its uid, and `pullhelper gc`, which reports what it removed.
func Sweep(lockDir string) []string { return sweepExcept(lockDir, "") }

// sweepExcept is Sweep leaving the file keep alone (the caller's own).
func sweepExcept(lockDir, keep string) []string {
	dfd, err := state.OpenExistingDir(lockDir)
	if err != nil {
		return nil // missing, or not a lock directory only root can change: nothing in it is ours to remove
	}
	defer unix.Close(dfd)
	return sweepIn(dfd, lockDir, keep)
}

// sweepIn sweeps the lock directory held as dfd (lockDir names it in the
// paths returned), leaving the entry named keep alone.
func sweepIn(dfd int, lockDir, keep string) []string {
	names, _ := safefs.ReadDirNamesAtMost(dfd, maxSweepEntries)
	sort.Strings(names)
	var out []string
	for _, nm := range names {
		if !strings.HasSuffix(nm, ".lock") || nm == keep {
			continue
		}
		if _, removed := state.RemoveIfUnheld(dfd, nm); removed {
			out = append(out, filepath.Join(lockDir, nm))
		}
	}
	return out
}
