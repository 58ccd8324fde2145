package main

import (
	"fmt"
	"os"

	_ "github.com/pullhelper/pullhelper/internal/prefault"
	"github.com/pullhelper/pullhelper/reexec"
)

func main() {
	if isChild, code := reexec.Dispatch(); isChild {
		os.Exit(code)
	}
	fmt.Fprintln(os.Stderr, "pullhelper-child: the pull child of pullhelper, which starts it; it is not run by hand")
	os.Exit(1)
}
