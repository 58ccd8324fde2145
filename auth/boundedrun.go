package auth

import (
	"context"
	"errors"
	"io"
	"os/exec"
	"syscall"
	"time"
)

// runBounds bound one run of a child process root starts for the caller
// (a credential helper: runHelper; a kubelet credential provider: cpExec).
type runBounds struct {
	Timeout time.Duration
	// MaxStdout: more is a failure (Overflow); MaxStderr: the rest is
	// dropped.
	MaxStdout, MaxStderr int
	// KillOnOverflow kills the run as soon as stdout passes MaxStdout
	// (otherwise the child blocks on its full pipe until Timeout).
	KillOnOverflow bool
}

// runResult is what a bounded run left: its capped output, and why it was
// ended.
type runResult struct {
	Stdout, Stderr []byte
	// Overflow: stdout passed MaxStdout. TimedOut: Timeout passed and the
	// run was killed (not set when the kill was for Overflow).
	Overflow, TimedOut bool
}

// runBounded runs name with args, stdin and env (nil: this process's) in a
// process group of its own, so that the kill at Timeout (or at Overflow)
// reaches its children too, and gives up on a grandchild that still
// holds the output pipes cpWaitDelay after the child ended. It returns
// cmd.Run's error beside the result.
func runBounded(name string, args []string, stdin io.Reader, env []string, b runBounds) (runResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), b.Timeout)
	defer cancel()
	ctx, kill := context.WithCancelCause(ctx)
	defer kill(nil)
	cmd := exec.CommandContext(ctx, name, args...)
	stdout := &cpCappedBuffer{max: b.MaxStdout, fail: true}
	stderr := &cpCappedBuffer{max: b.MaxStderr}
	cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.Env = stdin, stdout, stderr, env
	if b.KillOnOverflow {
		cmd.Stdout = writerFunc(func(p []byte) (int, error) {
			n, err := stdout.Write(p)
			if err != nil {
				kill(err)
			}
			return n, err
		})
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = cpWaitDelay
	err := cmd.Run()
	return runResult{
		Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), Overflow: stdout.overflow,
		TimedOut: errors.Is(context.Cause(ctx), context.DeadlineExceeded),
	}, err
}

// writerFunc is an io.Writer of a function.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
