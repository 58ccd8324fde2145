//go:build !pprof

package main

// startProfile is a no-op outside a -tags pprof build (profile_pprof.go).
func startProfile() func() { return func() {} }
