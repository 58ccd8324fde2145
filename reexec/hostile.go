//go:build pullhelper_hostile

package reexec

import (
	"fmt"
	"os"
	"strings"

	"github.com/pullhelper/pullhelper/pull"
)

// This file exists only in the test build bin/pullhelper-hostile (build tag
// pullhelper_hostile, never in the release binary). It lets the system tests
// play a compromised child: $PULLHELPER_HOSTILE names actions as
// "POINT:ACTION[,POINT:ACTION…]"; the child runs each at its point:
//
//	before-drop in the child's namespaces and cgroup, still privileged, no filter yet
//	after-drop  after the privilege drop was verified, before the pull
//	after-copy  after the copy into staging, before the result is sent
//
// An action returns handled=true to end the child with its exit code, or
// false to let the child go on as usual. Actions are registered by the
// files reexec/hostile_*.go (same build tag), one file per topic.

// hostileVar is the environment variable naming the actions; the parent
// passes it to the child (the hostile build only).
const hostileVar = "PULLHELPER_HOSTILE"

// hostileEnv is what an action may use: the child's own view of things.
type hostileEnv struct {
	Req  *Request
	Send func(message) // writes one protocol message on fd 4
	// Report is the copy's report, from after-copy on: an action may
	// change what the child claims.
	Report *pull.Report
}

var hostileActions = map[string]func(*hostileEnv) (bool, int){}

func registerHostile(name string, f func(*hostileEnv) (bool, int)) {
	if _, dup := hostileActions[name]; dup {
		panic("hostile action registered twice: " + name)
	}
	hostileActions[name] = f
}

func hostile(point string, env *hostileEnv) (bool, int) {
	spec := os.Getenv(hostileVar)
	if spec == "" {
		return false, 0
	}
	for _, item := range strings.Split(spec, ",") {
		p, name, ok := strings.Cut(item, ":")
		if !ok || p != point {
			continue
		}
		f, ok := hostileActions[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "pullhelper-child: hostile: unknown action %q\n", name)
			return true, 101
		}
		fmt.Fprintf(os.Stderr, "pullhelper-child: hostile: running %s at %s\n", name, point)
		if handled, code := f(env); handled {
			return true, code
		}
	}
	return false, 0
}

// hostileArgVar gives actions an argument (a victim path, say).
const hostileArgVar = "PULLHELPER_HOSTILE_ARG"

func hostileChildEnv() []string {
	var env []string
	for _, k := range []string{hostileVar, hostileArgVar} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}
