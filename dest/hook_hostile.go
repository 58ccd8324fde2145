//go:build pullhelper_hostile

package dest

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// This file exists only in the test build bin/pullhelper-hostile (build tag
// pullhelper_hostile, never in the release binary). It lets the system
// tests stop the root parent in the middle of an oci: commit, at a known
// step, to kill it there: $PULLHELPER_HOSTILE_COMMIT=hold-after-blobs:N
// holds the commit after its Nth blob was renamed into DEST (before
// index.json; for containerd: written to its content store), saying so
// on stderr; pause-after-blobs:N holds it there until SIGUSR1 (at most 2
// minutes), then lets it go on; hold-sent:N (containerd:) holds it once the
// Nth write into the content store has sent its bytes, before containerd
// commits them (an ingest in the middle, for the test to kill the pull at).
func init() {
	spec := os.Getenv("PULLHELPER_HOSTILE_COMMIT")
	var (
		arg, at, held string // N, the step counted, what stderr says while held
		pause, ok     bool
	)
	for _, m := range []struct {
		prefix, step, held string
		pause              bool
	}{
		{"hold-after-blobs:", "blob", "holding the commit after %d blobs", false},
		{"pause-after-blobs:", "blob", "pausing the commit after %d blobs until SIGUSR1", true},
		{"hold-sent:", "sent", "holding the commit with write %d sent, not committed", false},
	} {
		if arg, ok = strings.CutPrefix(spec, m.prefix); ok {
			at, held, pause = m.step, m.held, m.pause
			break
		}
	}
	n, err := strconv.Atoi(arg)
	if !ok || err != nil || n <= 0 {
		return
	}
	var resume chan os.Signal
	if pause {
		resume = make(chan os.Signal, 1)
		signal.Notify(resume, syscall.SIGUSR1)
	}
	seen := 0
	commitHook = func(step string) {
		if step != at {
			return
		}
		if seen++; seen != n {
			return
		}
		fmt.Fprintf(os.Stderr, "pullhelper: hostile: "+held+"\n", n)
		if !pause {
			time.Sleep(time.Hour) // until the test kills this process
			return
		}
		select {
		case <-resume:
		case <-time.After(2 * time.Minute):
		}
	}
}
