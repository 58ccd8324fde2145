//go:build pullhelper_hostile

package reexec

import (
	"fmt"
	"os"
	"strings"
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
	// crash-image: a child that crashes (an unrecovered panic: exit 2
	// with its stack on stderr) when its image contains
	// $PULLHELPER_HOSTILE_ARG, and pulls as usual otherwise: in one
	// long-lived service (pullhelper cri) only that request's pull
	// crashes.
	registerHostile("crash-image", func(env *hostileEnv) (bool, int) {
		arg := os.Getenv(hostileArgVar)
		if arg == "" || env.Req.Copy == nil || !strings.Contains(env.Req.Copy.Image, arg) {
			return false, 0
		}
		panic("hostile: crash-image: the child crashes mid-pull")
	})
}
