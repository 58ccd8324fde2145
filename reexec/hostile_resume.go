//go:build pullhelper_hostile

package reexec

import (
	"fmt"
	"os"
	"time"
)

// Resume trials (tests/120-resume.bats): "hold" stops the child where it
// stands (after-copy: every blob staged, no result sent) until the test
// kills it or its parent.
func init() {
	registerHostile("hold", func(*hostileEnv) (bool, int) {
		fmt.Fprintln(os.Stderr, "pullhelper-child: hostile: holding")
		time.Sleep(time.Hour)
		return true, 1
	})
}
