//go:build pprof

package main

import (
	"os"
	"runtime/pprof"
)

// startProfile, in a build with -tags pprof only (never make build), writes
// a CPU profile of this process to $PULLHELPER_CPUPROFILE when it is set:
// how the profiles of the parent and of an in-process
// (--no-isolation) pull are taken. The returned func stops it.
func startProfile() func() {
	path := os.Getenv("PULLHELPER_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}
