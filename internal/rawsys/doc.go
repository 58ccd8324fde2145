// Package rawsys makes the system calls a hostile child would make and Go
// cannot: a 32-bit system call through `int $0x80` and an x32 system call
// from a 64-bit process, each in a forked, single-threaded copy of the
// caller that exits at once. The privdrop tests and the test-only hostile
// build (tag pullhelper_hostile) use it to prove the seccomp filter refuses
// every non-native ABI; Start leaves such a copy running (the hostile
// build's grandchild, now that the filter refuses execve). I386Entry says
// whether the kernel runs an i386 call at all (some never do: they answer
// `int $0x80` with a fault), so that the tests skip, saying so, what such a
// kernel cannot show. The copy resets SIGSEGV, SIGBUS and SIGILL to their
// default action before its trap: a fault kills it (the Outcome's Signal)
// instead of running the Go runtime's handler in it.
//
// Invariant: only tests and the hostile build import this package; it is
// never in the release binary (a depcheck-style test in privdrop says so).
// The forked copy runs nothing but assembly (no Go code, no locks, no
// allocation): fork in a multithreaded Go process is only safe that way.
package rawsys
