// Package netns resolves and checks the network namespace a pull child runs
// in, holds it (Handle: the descriptor the checks ran on, with the
// namespace's ID), and enters it through that descriptor on the thread that
// forks the child, never by its path again.
//
// Thread rules (CNI pkg/ns): a namespace is entered at fork, never inside the
// running child — containers/image spreads goroutines over many OS threads,
// and a setns in the child would leave most of them outside. The parent
// locks a goroutine to its OS thread, calls Handle.EnterOnThisThread, forks the
// child, and never unlocks that thread: the goroutine stays alive until the
// child is reaped (Pdeathsig fires when the forking thread exits,
// go.dev/issue/27505) and the thread then ends with it, so no other
// goroutine ever runs in the target namespace.
package netns
