//go:build pullhelper_hostile

package reexec

import (
	"fmt"
	"os"

	"github.com/pullhelper/pullhelper/internal/wire"
)

func init() {
	// other-platform: copy the instance of $PULLHELPER_HOSTILE_ARG's
	// platform (OS/ARCH[/VARIANT]) instead of the one the parent asked
	// for: a valid instance of the index, the wrong platform's.
	registerHostile("other-platform", func(e *hostileEnv) (bool, int) {
		pl, err := wire.ParsePlatform(os.Getenv(hostileArgVar))
		if err != nil {
			fmt.Fprintf(os.Stderr, "pullhelper-child: hostile: other-platform: %v\n", err)
			return true, 101
		}
		e.Req.Copy.Platform = &pl
		return false, 0
	})
	// whole-index: copy every instance of the index and report none, as
	// if the plan had --all-architectures: a pinned index then matches
	// the pin, and the parent must refuse the whole index itself.
	registerHostile("whole-index", func(e *hostileEnv) (bool, int) {
		e.Req.Copy.AllArchitectures = true
		return false, 0
	})
}
