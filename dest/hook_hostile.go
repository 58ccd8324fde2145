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
	if n, err := strconv.Atoi(strings.TrimPrefix(spec, "hold-sent:")); strings.HasPrefix(spec, "hold-sent:") && err == nil && n > 0 {
		sent := 0
		commitHook = func(step string) {
			if step != "sent" {
				return
			}
			if sent++; sent == n {
				fmt.Fprintf(os.Stderr, "pullhelper: hostile: holding the commit with write %d sent, not committed\n", n)
				time.Sleep(time.Hour) // until the test kills this process
			}
		}
		return
	}
	hold, ok := strings.CutPrefix(spec, "hold-after-blobs:")
	pause := false
	if !ok {
		hold, ok = strings.CutPrefix(spec, "pause-after-blobs:")
		pause = ok
	}
	n, err := strconv.Atoi(hold)
	if !ok || err != nil || n <= 0 {
		return
	}
	var resume chan os.Signal
	if pause {
		resume = make(chan os.Signal, 1)
		signal.Notify(resume, syscall.SIGUSR1)
	}
	moved := 0
	commitHook = func(step string) {
		if step != "blob" {
			return
		}
		if moved++; moved != n {
			return
		}
		if !pause {
			fmt.Fprintf(os.Stderr, "pullhelper: hostile: holding the commit after %d blobs\n", n)
			time.Sleep(time.Hour) // until the test kills this process
			return
		}
		fmt.Fprintf(os.Stderr, "pullhelper: hostile: pausing the commit after %d blobs until SIGUSR1\n", n)
		select {
		case <-resume:
		case <-time.After(2 * time.Minute):
		}
	}
}
