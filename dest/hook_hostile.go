//go:build pullhelper_hostile

package dest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// This file exists only in the test build bin/pullhelper-hostile (build tag
// pullhelper_hostile, never in the release binary). It lets the system
// tests stop the root parent in the middle of an oci: commit, at a known
// step, to kill it there: $PULLHELPER_HOSTILE_COMMIT=hold-after-blobs:N
// holds the commit after its Nth blob was renamed into DEST (before
// index.json), saying so on stderr.
func init() {
	v, ok := strings.CutPrefix(os.Getenv("PULLHELPER_HOSTILE_COMMIT"), "hold-after-blobs:")
	n, err := strconv.Atoi(v)
	if !ok || err != nil || n <= 0 {
		return
	}
	moved := 0
	commitHook = func(step string) {
		if step != "blob" {
			return
		}
		if moved++; moved == n {
			fmt.Fprintf(os.Stderr, "pullhelper: hostile: holding the commit after %d blobs\n", n)
			time.Sleep(time.Hour) // until the test kills this process
		}
	}
}
