//go:build pullhelper_hostile

package reexec

import (
	"fmt"
	"os"
)

// Basic actions that prove the hook itself works.
func init() {
	// exit42: end the child with a recognisable status.
	registerHostile("exit42", func(*hostileEnv) (bool, int) { return true, 42 })
	// whoami: print the child's ids on stderr and go on.
	registerHostile("whoami", func(*hostileEnv) (bool, int) {
		fmt.Fprintf(os.Stderr, "pullhelper-child: hostile: uid=%d euid=%d gid=%d\n", os.Getuid(), os.Geteuid(), os.Getgid())
		return false, 0
	})
}
