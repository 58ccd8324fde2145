// Package reexec runs the network-facing part of a pull in a child process
// with argv[0] "pullhelper-child": the child-only binary make build writes
// beside pullhelper (cmd/pullhelper-child, THIS-child), executed by
// descriptor, when its Go build ID is the one make build wrote into this
// binary and it is root's alone (a regular file of root's, writable by
// nobody else, in directories of root's nobody else can write, no link on
// the way, exec allowed: openChildExe), else /proc/self/exe re-executed.
// Both run the same child code; the child-only binary starts faster (it
// links none of the parent's CRI, gRPC and containerd packages, whose inits
// are most of a Go start). Which one ran, and why not the child-only
// binary, is a debug line of the parent.
//
// Protocol. The parent hands the child two inherited pipes: fd 3 carries one
// JSON request (the copy's pull.Request with DEST anonymous, the Material —
// credential, certificates, signature policy —, the staging area as the
// child sees it, the cgroup the child must be in, its identity, DNS and
// seccomp; how it logs, whether it draws bars and whether node-share lines
// follow are derived from StartOptions, never said twice) on one line, the
// system's trust roots raw after it (their length in the request: most of
// the request's bytes, which as JSON cost the child milliseconds to
// decode), then, with a node share, one control line per change; the pipe
// is enlarged to 1 MiB so that the request is written whole before the
// child reads it;
// fd 4 carries JSON Lines messages back: progress events, then exactly one
// report (pull.Report: the child's claims, never the caller's result) or
// error ({code, message, reason}, rebuilt into a failure.Error; a reason
// failure does not know is dropped). Nothing
// travels in argv or the environment; the child reads no policy or secret
// file itself.
//
// Trust. The child is untrusted once it touched the network. Every line
// on fd 4 is bounded (maxLine, and one last line, the report or the error,
// maxMessage; longer is exit 7), and its arrays and nesting are bounded
// before it is decoded (checkShape: decoding cannot amplify it); a line
// that does not decode is exit 7, reported by kind and byte offset, never
// quoted. The first report or error is the child's last word: later lines
// are read and ignored. Only progress events whose every field is
// what it names (pull.CheckEvent: digests, a media type, a host, counts in
// range) are accepted from it (the parent emits start, done and error
// itself), through a queue bounded in events and so in bytes; the report
// is checked (pull.Report.Check) and the pipeline builds the result from
// the plan and what it verified. Every text of the child's the parent
// repeats is escaped (pull.Printable: no terminal control, no line of its
// own); its stderr is relayed escaped, bounded per line and in all
// (maxStderrTotal), labelled (prefixed, or in a JSON log the "line" of a
// parent record "child"), never stopping reading.
// It inherits no fd but the protocol pipes and stdio: the parent marks
// every fd from 3 up close-on-exec at Dispatch, and the child closes any
// inherited one it still finds.
//
// Placement before work. On cgroup v2 the child is born in its cgroup
// (CLONE_INTO_CGROUP). On v1 it is born there too: the forking thread is
// moved into the cgroup for the fork and back right after, and in hybrid
// mode CLONE_INTO_CGROUP puts it in the unified hierarchy's cgroup (Linux
// 5.7 and later). Only the systemd driver on v1, and the hybrid unified
// hierarchy on an older kernel, place the child after fork, before it is
// sent the request. The
// child verifies its own /proc/self/cgroup again before any network I/O
// and aborts (exit 7) if it is not where the parent said.
//
// Lifetime. The child gets Pdeathsig SIGKILL. Pdeathsig fires when the
// *thread* that forked the child exits (go.dev/issue/27505), so the fork
// happens on a goroutine locked to its OS thread that stays alive until the
// child has been reaped. The parent's loop waits only on the child and on
// cancellation; events reach the caller's sink through a queue that never
// blocks it. When the child has been reaped, the parent kills everything
// left in the cgroup (a grandchild cannot outlive the pull or keep its
// pipes open) and then drains the pipes within a bound. On SIGINT, SIGTERM
// or the timeout the parent kills every process in the cgroup, waits for
// them, removes the staging area and the cgroup, and leaves DEST untouched.
//
// main must call Dispatch before anything else; Start panics if it did not,
// because the child would otherwise run the CLI again.
//
// Files: parent.go starts the child (Start, spawn); run.go is the parent's
// side of its life after that (the request, the messages, kill, why it
// died); relay.go passes on its stderr and its events; wire.go and
// shape.go are the protocol's types and bounds; child.go is the child.
package reexec
