//go:build !pullhelper_hostile

package reexec

import "github.com/pullhelper/pullhelper/pull"

// The release binary has no hostile hooks: see hostile.go (build tag
// pullhelper_hostile), which only the tests' bin/pullhelper-hostile has.

func hostile(string, *hostileEnv) (bool, int) { return false, 0 }

func hostileChildEnv() []string { return nil }

type hostileEnv struct {
	Req    *Request
	Send   func(message)
	Report *pull.Report
}
