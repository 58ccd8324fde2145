package reexec

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/cgroup"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/netns"
	"github.com/pullhelper/pullhelper/pull"
	"golang.org/x/sys/unix"
)

// envAllow lists the environment variables the child inherits: what the
// network code legitimately reads (proxies, locale). Everything else, and
// so any secret a caller left in its environment or a path to a host
// configuration file, stays behind: the copy gets its configuration in the
// request.
var envAllow = []string{"PATH", "LANG", "LC_ALL", "TZ",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"}

func childEnv(home string) []string {
	// HOME is the private staging root: per-user containers configuration
	// of the caller (registries.d, …) is not the child's to read; the plan
	// pins the files that matter.
	env := append([]string{"HOME=" + home}, hostileChildEnv()...)
	for _, k := range envAllow {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// Child is a started pull child, already in its cgroup (and network
// namespace), waiting for its request.
type Child struct{ c *childProc }

// PID is the child's process id.
func (c *Child) PID() int { return c.c.pid }

// StartOptions say how the child is born.
type StartOptions struct {
	// Netns is the network namespace to fork in ("" = this one).
	Netns string
	// Stage is the staging directory the copy writes into, opened by the
	// parent (O_DIRECTORY); the child gets it as fd 5, never its path.
	Stage *os.File
	Debug bool
	// Terminal: the child draws progress bars on stderr.
	Terminal bool
}

// Start spawns the pull child in g (born in it on cgroup v2; placed before
// it gets its request on v1), from a thread in the network namespace when
// one is given. main must have called Dispatch.
func Start(g *cgroup.Group, o StartOptions) (*Child, error) {
	if !dispatched {
		panic("reexec: main did not call reexec.Dispatch; the child would run the CLI")
	}
	if o.Stage == nil {
		return nil, failure.New(failure.Internal, "reexec: no staging directory for the child")
	}
	// A detached bind mount of the staging directory, made here in this
	// namespace (a mount of another namespace cannot be bind-mounted from
	// the child's new one); the child attaches it by fd.
	tree, err := unix.OpenTree(int(o.Stage.Fd()), "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return nil, failure.Wrap(failure.Isolation, err, "cloning the staging directory's mount (open_tree)")
	}
	treeFile := os.NewFile(uintptr(tree), "staging-tree")
	defer treeFile.Close() // the child holds its own copy
	c, err := spawn(g, o.Netns, o.Debug, o.Terminal, treeFile)
	if err != nil {
		return nil, err
	}
	return &Child{c: c}, nil
}

// Run sends the request and relays the child's progress events until it
// exits with its result. On cancellation or when the copy's timeout has
// long passed, it kills every process in g. On every path out the child
// has been reaped.
func (c *Child) Run(ctx context.Context, g *cgroup.Group, req Request, events func(api.Event), log *slog.Logger) (*api.Result, *pull.Copied, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return c.c.run(ctx, g, req, events, log)
}

type childProc struct {
	pid    int
	planW  *os.File
	events *os.File
	waited chan error
}

// spawn starts the child from a goroutine locked to its OS thread, which
// stays alive until the child is reaped (Pdeathsig is per thread). On
// cgroup v2 the child is born in the cgroup; on v1 it is placed before it
// gets its request.
func spawn(g *cgroup.Group, netnsPath string, debug, terminal bool, stage *os.File) (*childProc, error) {
	planR, planW, err := os.Pipe()
	if err != nil {
		return nil, failure.Wrap(failure.Internal, err, "creating the plan pipe")
	}
	evR, evW, err := os.Pipe()
	if err != nil {
		planR.Close()
		planW.Close()
		return nil, failure.Wrap(failure.Internal, err, "creating the event pipe")
	}
	cmd := &exec.Cmd{
		Dir:        "/",
		Path:       "/proc/self/exe",
		Args:       []string{ChildName},
		Env:        childEnv(childTmp),
		ExtraFiles: []*os.File{planR, evW, stage}, // fds 3, 4 and 5
		SysProcAttr: &syscall.SysProcAttr{
			Pdeathsig: syscall.SIGKILL,
			// A private mount namespace (Go makes / private in it, so
			// nothing the child mounts propagates to the host).
			Unshareflags: syscall.CLONE_NEWNS,
		},
	}
	// On a terminal the child draws progress bars on it directly;
	// otherwise its stderr is relayed, without runtime stack dumps.
	cmd.Stderr = os.Stderr
	var relayDone chan struct{}
	if !terminal {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, failure.Wrap(failure.Internal, err, "creating the stderr pipe")
		}
		cmd.Stderr = w
		relayDone = make(chan struct{})
		go func() {
			defer close(relayDone)
			relayStderr(r, os.Stderr, debug)
		}()
		defer w.Close() // the child holds its own copy
	}
	dir, err := g.OpenDir()
	if err != nil {
		return nil, failure.Wrap(failure.Isolation, err, "opening cgroup %s", g.Path())
	}
	if dir != nil {
		defer dir.Close()
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(dir.Fd())
	}
	started := make(chan error, 1)
	c := &childProc{planW: planW, events: evR, waited: make(chan error, 1)}
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if netnsPath != "" {
			// The child is forked from this thread, so it is born in the
			// namespace; no other goroutine ever runs on this thread.
			if err := netns.EnterOnThisThread(netnsPath); err != nil {
				started <- failure.Wrap(failure.Isolation, err, "")
				return
			}
		}
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		werr := cmd.Wait()
		if relayDone != nil {
			<-relayDone
		}
		c.waited <- werr
	}()
	err = <-started
	planR.Close()
	evW.Close()
	if err != nil {
		planW.Close()
		evR.Close()
		return nil, failure.Wrap(failure.Isolation, err, "starting the pull child")
	}
	c.pid = cmd.Process.Pid
	if dir == nil {
		if err := g.Place(c.pid); err != nil {
			c.kill(g)
			return nil, failure.Wrap(failure.Isolation, err, "")
		}
	}
	if err := g.Contains(c.pid); err != nil {
		c.kill(g)
		return nil, failure.Wrap(failure.Isolation, err, "the pull child is not in its cgroup")
	}
	return c, nil
}

func (c *childProc) kill(g *cgroup.Group) {
	_ = g.Kill(c.pid)
	_ = syscall.Kill(c.pid, syscall.SIGKILL)
	c.planW.Close()
	c.events.Close()
	<-c.waited
}

// run sends the request, relays events and returns the child's result. On
// cancellation it kills the cgroup and waits for the child.
func (c *childProc) run(ctx context.Context, g *cgroup.Group, req Request, events func(api.Event), log *slog.Logger) (*api.Result, *pull.Copied, error) {
	msgs := make(chan message)
	readErr := make(chan error, 1)
	go func() {
		dec := json.NewDecoder(c.events)
		for {
			var m message
			if err := dec.Decode(&m); err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				readErr <- err
				close(msgs)
				return
			}
			msgs <- m
		}
	}()
	if err := json.NewEncoder(c.planW).Encode(req); err != nil {
		c.kill(g)
		return nil, nil, failure.Wrap(failure.Internal, err, "sending the plan to the child")
	}
	c.planW.Close()

	// The parent's own deadline, a little after the child's, in case the
	// child stops responding.
	var deadline <-chan time.Time
	if timeout := req.Copy.Timeout; timeout > 0 {
		t := time.NewTimer(timeout + 5*time.Second)
		defer t.Stop()
		deadline = t.C
	}
	var (
		res     *api.Result
		copied  *pull.Copied
		childE  error
		stopErr error
		done    = ctx.Done()
	)
	for msgs != nil {
		select {
		case m, ok := <-msgs:
			if !ok {
				msgs = nil
				continue
			}
			switch {
			case m.Event != nil:
				// Only progress: start, done and error are the
				// pipeline's to say, never the child's.
				if events != nil && api.IsProgress(m.Event.Type) {
					events(*m.Event)
				}
			case m.Result != nil:
				res, copied = m.Result, m.Copied
			case m.Error != nil:
				childE = m.Error.err()
			}
		case <-done:
			done = nil // once: the loop now only drains until the child is gone
			if stopErr == nil {
				stopErr = failure.Wrap(failure.Interrupted, context.Cause(ctx), "")
				log.Warn("stopping: killing every process in the pull cgroup", "cgroup", g.Path())
				if err := g.Kill(c.pid); err != nil {
					log.Error("killing the pull cgroup", "error", err.Error())
				}
			}
		case <-deadline:
			deadline = nil
			if stopErr == nil {
				stopErr = failure.New(failure.Network, "pull timed out after %s (--timeout); the child did not stop by itself", req.Copy.Timeout)
				if err := g.Kill(c.pid); err != nil {
					log.Error("killing the pull cgroup", "error", err.Error())
				}
			}
		}
	}
	rerr := <-readErr
	werr := <-c.waited
	c.events.Close()
	switch {
	case stopErr != nil:
		return nil, nil, stopErr
	case childE != nil:
		return nil, nil, childE
	case res != nil && werr == nil:
		return res, copied, nil
	case rerr != nil:
		return nil, nil, failure.Wrap(failure.Internal, rerr, "reading the child's messages")
	}
	return nil, nil, &childDied{status: werr}
}

// childDied is a child that exited without a result.
type childDied struct{ status error }

func (c *childDied) Error() string {
	if c.status == nil {
		return "the pull child exited without a result"
	}
	return "the pull child exited without a result: " + c.status.Error()
}

// ExplainDeath turns a child that died without a result into the limit that
// killed it, when the cgroup says so.
func ExplainDeath(err error, u cgroup.Usage, l cgroup.Limits) error {
	var cd *childDied
	if !errors.As(err, &cd) {
		return err
	}
	switch {
	case u.OOMKills != nil && *u.OOMKills > 0:
		return failure.New(failure.Isolation, "the pull was killed by the OOM killer in its cgroup: cgroup.memory_max=%d bytes is too low for this pull (%s)", l.MemoryMax, cd.Error())
	case u.PidsMaxHits != nil && *u.PidsMaxHits > 0:
		return failure.New(failure.Isolation, "cgroup.pids_max=%d is too low: the pull child could not create the threads the Go runtime needs (%d refused forks; %s)", l.PidsMax, *u.PidsMaxHits, cd.Error())
	}
	return failure.New(failure.Internal, "%s", strings.TrimSpace(cd.Error()))
}

// relayStderr copies the child's stderr line by line. Unless debug, it
// drops a Go runtime stack dump (a child killed by pids_max cannot create a
// thread and dumps every goroutine); the parent explains such deaths.
func relayStderr(r io.ReadCloser, w io.Writer, debug bool) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	dropping := false
	for sc.Scan() {
		line := sc.Text()
		if !debug && !dropping && (line == "runtime stack:" || strings.HasPrefix(line, "goroutine ")) {
			dropping = true
			fmt.Fprintln(w, "pullhelper-child: (Go stack trace omitted; --debug shows it)")
		}
		if !dropping {
			fmt.Fprintln(w, line)
		}
	}
}
