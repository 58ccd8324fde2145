// Command pullhelper-child is the pull child of pullhelper alone: the
// network-facing process of an isolated pull (reexec's child), built
// without the packages only the parent uses (the CRI service, gRPC,
// containerd's client, containers/storage's drivers, Prometheus), so that
// it starts in about two thirds of the time the whole binary takes: its
// package inits are most of a Go process's start.
//
// make build writes it beside pullhelper as bin/pullhelper-child and
// writes its Go build ID into pullhelper, which runs it as the pull child
// only when it is that build and root's alone (reexec/childexe.go); without
// it pullhelper re-executes itself as the child, the same code. Run by
// hand (without the parent's protocol pipes) it says so and exits 1.
package main
