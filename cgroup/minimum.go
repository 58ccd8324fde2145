package cgroup

import (
	"runtime"

	"github.com/pullhelper/pullhelper/internal/failure"
)

// MinPidsMax is the smallest cgroup.pids_max a pull accepts on this host.
// The child is a Go program: its threads are the runtime's (about one per
// CPU plus sysmon and the GC's) and one per goroutine blocked in a system
// call (parallel layer downloads write and fsync). Measured peaks on a
// 2-CPU host: 4-5 (tiny image), 6-8 (a 100 MB, several-layer image); below
// that, whether the runtime gets its threads in time is a race, so a low
// value gave a different exit code from run to run. 16 + 2 per CPU leaves
// more than twice the measured peak.
func MinPidsMax() int64 { return 16 + 2*int64(runtime.NumCPU()) }

// CheckLimits refuses limits a pull cannot run under, deterministically
// (exit 2), before anything is created.
func CheckLimits(l Limits) error {
	if min := MinPidsMax(); l.PidsMax > 0 && l.PidsMax < min {
		return failure.New(failure.Usage, "cgroup.pids_max=%d (--pids-max) is too low: the pull child needs at least %d on this host (16 + 2 per CPU); raise it or leave it unset", l.PidsMax, min)
	}
	return nil
}
