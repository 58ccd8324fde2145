package client

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// proc is a started helper; done is closed once Wait returned.
type proc struct {
	cmd   *exec.Cmd
	done  chan struct{}
	state *os.ProcessState
}

// start starts cmd from a goroutine locked to its OS thread until the
// helper exits: Pdeathsig fires when the forking thread ends (golang/go
// issue 27505), and this thread then ends only with the helper or with
// this process.
func start(cmd *exec.Cmd) (*proc, error) {
	p := &proc{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// wait waits for the helper; when ctx ends first it sends SIGTERM, then
// SIGKILL after the grace period, and still waits. killed says SIGKILL was
// sent.
func (c *Client) wait(ctx context.Context, p *proc) (state *os.ProcessState, killed bool) {
	select {
	case <-p.done:
		return p.state, false
	case <-ctx.Done():
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(c.grace())
	defer t.Stop()
	select {
	case <-p.done:
		return p.state, false
	case <-t.C:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return p.state, true
}

func (c *Client) grace() time.Duration {
	if c.Grace <= 0 {
		return DefaultGrace
	}
	return c.Grace
}

// outcome classifies the exit: nil for success, else an *Error from the
// JSON error object on stdout, or from the exit status and the last line
// of stderr when there is none.
func (c *Client) outcome(state *os.ProcessState, killed bool, stdout *capWriter, stderr *tailWriter) *Error {
	exit := state.ExitCode()
	if exit == 0 {
		return nil
	}
	var out struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(stdout.Bytes(), &out) == nil && out.Error != nil && (out.Error.Code != "" || out.Error.Message != "") {
		return newError(out.Error.Code, exit, out.Error.Message)
	}
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		msg := fmt.Sprintf("ended by signal %d (%v) before it reported a result", ws.Signal(), ws.Signal())
		if killed && ws.Signal() == syscall.SIGKILL {
			msg = fmt.Sprintf("did not exit within %v of SIGTERM and was killed (SIGKILL); its cgroup and staging are left for the next run (or pullhelper gc) to reclaim", c.grace())
		}
		e := newError("", exit, msg)
		// Interrupted only when stopped on purpose: by this client (ctx
		// ended), or by SIGINT/SIGTERM. A crash or the OOM killer is internal.
		if killed || ws.Signal() == syscall.SIGTERM || ws.Signal() == syscall.SIGINT {
			e.sentinel = ErrInterrupted
		}
		return e
	}
	e := newError("", exit, stderr.lastLine())
	if exit == 2 {
		// The binary prints a JSON usage error for every usage failure;
		// a bare exit 2 is the Go runtime's (an unrecovered panic).
		e.sentinel = ErrInternal
	}
	return e
}
