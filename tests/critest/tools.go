//go:build tools

// Package critest pins sigs.k8s.io/cri-tools for make deps, which builds its
// critest (a Go test binary: go test -c sigs.k8s.io/cri-tools/cmd/critest)
// from this module, apart from pullhelper's own go.mod.
package critest

import _ "sigs.k8s.io/cri-tools/cmd/critest"
