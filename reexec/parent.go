package reexec

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/cgroup"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/netns"
	"github.com/pullhelper/pullhelper/privdrop"
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
	// HOME is the private /tmp: per-user containers configuration of the
	// caller (registries.d, …) is not the child's to read; the request
	// carries the configuration that matters.
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

// PID is the child's process id (until Run has reaped it).
func (c *Child) PID() int { return c.c.pid }

// StartOptions say how the child is born; its request's logging, bars and
// node share follow from them (wireRequest).
type StartOptions struct {
	// Netns is the network namespace to fork in, held (nil = this one).
	Netns *netns.Handle
	// Stage is the staging directory the copy writes into, opened by the
	// parent (O_DIRECTORY); the child gets a detached mount of it as fd 5,
	// never its path.
	Stage *os.File
	// Partial is DEST's partial-blob cache (nil: none), passed like Stage
	// as a detached mount, fd 6; the child attaches it at /tmp/partial.
	Partial *os.File
	// LogConfig is how the child logs. With Format "json" the parent logs
	// JSON records and the child's stderr lines are relayed as the "line"
	// of a record of Log's (msg "child"), not as lines of their own.
	LogConfig LogConfig
	Log       *slog.Logger
	// Terminal: the child draws progress bars on stderr.
	Terminal bool
	// Rates, when set, are forwarded to the child (after its request, on
	// fd 3) until the channel closes or the child exits: this pull's share
	// of the node's bandwidth.
	Rates <-chan pull.NodeShare
}

// Start spawns the pull child in g (born in it: CLONE_INTO_CGROUP on v2, a
// forking thread inside the cgroup on v1, both in hybrid mode), from a thread in the network
// namespace when one is given. main must have called Dispatch.
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
	files := []*os.File{treeFile}
	if o.Partial != nil {
		ptree, err := unix.OpenTree(int(o.Partial.Fd()), "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
		if err != nil {
			return nil, failure.Wrap(failure.Isolation, err, "cloning the partial-blob cache's mount (open_tree)")
		}
		ptreeFile := os.NewFile(uintptr(ptree), "partial-tree")
		defer ptreeFile.Close()
		files = append(files, ptreeFile)
	}
	var log *slog.Logger
	if o.LogConfig.Format == "json" {
		log = o.Log
		if log == nil {
			log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
		}
	}
	c, err := spawn(g, o.Netns, o.LogConfig.Debug, o.Terminal, log, files)
	if err != nil {
		return nil, err
	}
	c.rates, c.logConfig, c.terminal = o.Rates, o.LogConfig, o.Terminal
	if o.Log != nil {
		if c.notChildExe == "" {
			o.Log.Debug("started the pull child", "pid", c.pid, "program", c.exe)
		} else {
			o.Log.Debug("started the pull child", "pid", c.pid, "program", c.exe, "why", c.notChildExe)
		}
	}
	return &Child{c: c}, nil
}

// Run sends the request and relays the child's progress events until it
// exits with its report (checked: pull.Report.Check, its endpoints bounded;
// still only the child's claims, for the pipeline to verify). On cancellation, or when the copy's timeout has
// long passed, it kills every process in g. On every path out the child
// has been reaped and everything else in g killed.
func (c *Child) Run(ctx context.Context, g *cgroup.Group, req Request, events func(api.Event), log *slog.Logger) (*pull.Report, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return c.c.run(ctx, g, wireRequest{Request: req, Log: c.c.logConfig, Bars: c.c.terminal, NodeRate: c.c.rates != nil}, events, log)
}

type childProc struct {
	pid    int
	planW  *os.File
	events *os.File
	// stderr is the read end of the relayed stderr and relayDone is closed
	// when the relay has stopped (both nil on a terminal).
	stderr    *os.File
	relayDone chan struct{}
	waited    chan error // the child's wait status, once it is reaped
	// exe is the program the child runs: the child-only binary's path,
	// or selfExe and, in notChildExe, why not the child-only binary.
	exe, notChildExe string
	// From StartOptions, for the request (wireRequest).
	rates     <-chan pull.NodeShare
	logConfig LogConfig
	terminal  bool
}

// drainTimeout bounds how long the parent reads the pipes after the child
// was reaped and its cgroup killed. Nothing of the pull can hold them then
// (every process of the cgroup is dead), so EOF comes at once; the bound is
// for what should not happen.
const drainTimeout = 5 * time.Second

// spawn starts the child from a goroutine locked to its OS thread, which
// stays alive until the child is reaped (Pdeathsig is per thread). The child
// is born in the cgroup: on v2 with CLONE_INTO_CGROUP, on v1 because it is
// forked by a thread that was moved into the cgroup for the fork (and moved
// back right after), and in hybrid mode's unified hierarchy with
// CLONE_INTO_CGROUP as well (cgroup.Group.OpenDir; Linux 5.7), so it never
// runs outside its limits; only the systemd driver on v1, and hybrid mode's
// unified hierarchy on an older kernel, place it after fork, before it
// gets its request.
//
// The caller must then call run (or kill), which reaps the child.
func spawn(g *cgroup.Group, ns *netns.Handle, debug, terminal bool, log *slog.Logger, mounts []*os.File) (*childProc, error) {
	planR, planW, err := os.Pipe()
	if err != nil {
		return nil, failure.Wrap(failure.Internal, err, "creating the plan pipe")
	}
	// The request is written at once, whole, even before the child reads
	// (at most 1 MiB, the default pipe-max-size; a smaller pipe is fine).
	_, _ = unix.FcntlInt(planW.Fd(), unix.F_SETPIPE_SZ, 1<<20)
	evR, evW, err := os.Pipe()
	if err != nil {
		planR.Close()
		planW.Close()
		return nil, failure.Wrap(failure.Internal, err, "creating the event pipe")
	}
	closeAll := func(fs ...*os.File) {
		for _, f := range fs {
			if f != nil {
				f.Close()
			}
		}
	}
	c := &childProc{planW: planW, events: evR, waited: make(chan error, 1)}
	// The child's stdin and stdout: /dev/null, opened here (not by
	// os/exec's Start) so that every descriptor the fork lays out is known
	// before the child-only binary is placed above them (heldAbove).
	devNull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		closeAll(planR, planW, evR, evW)
		return nil, failure.Wrap(failure.Internal, err, "opening %s", os.DevNull)
	}
	defer devNull.Close()
	// On a terminal the child draws progress bars on it directly;
	// otherwise its stderr is relayed, without runtime stack dumps.
	stderr := os.Stderr
	var stderrW *os.File
	if !terminal {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(planR, planW, evR, evW)
			return nil, failure.Wrap(failure.Internal, err, "creating the stderr pipe")
		}
		stderr, stderrW, c.stderr = w, w, r
	}
	extra := append([]*os.File{planR, evW}, mounts...) // fds 3, 4, then 5 (staging) and 6 (partial-blob cache)
	dir, err := g.OpenDir()
	if err != nil {
		closeAll(planR, planW, evR, evW, stderrW, c.stderr)
		return nil, failure.Wrap(failure.Isolation, err, "opening cgroup %s", g.SubPath())
	}
	if dir != nil {
		defer dir.Close()
	}
	// The child-only binary when it is there and trusted, else this one.
	exe, why := openChildExe(childBuildID, append([]*os.File{devNull, devNull, stderr}, extra...))
	c.exe, c.notChildExe = selfExe, why
	if exe != nil {
		defer exe.Close() // the child has it, by then, as its own program
		c.exe = exe.Name()
	}
	newCmd := func(exe *os.File) *exec.Cmd {
		path := selfExe
		if exe != nil {
			path = fmt.Sprintf("/proc/self/fd/%d", exe.Fd())
		}
		return childCmd(path, devNull, stderr, extra, dir)
	}
	cmd := newCmd(exe)
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if ns != nil {
			// The child is forked from this thread, so it is born in the
			// namespace; no other goroutine ever runs on this thread.
			if err := ns.EnterOnThisThread(); err != nil {
				started <- failure.Wrap(failure.Isolation, err, "")
				return
			}
		}
		// The child is granted only the capabilities it uses before it
		// drops them all.
		if err := privdrop.LimitBoundingSet(privdrop.ChildCaps); err != nil {
			started <- failure.Wrap(failure.Isolation, err, "")
			return
		}
		var leave func() error
		if g.BornInside() {
			var err error
			if leave, err = g.EnterThread(); err != nil {
				started <- failure.Wrap(failure.Isolation, err, "")
				return // the thread exits: it may be half inside
			}
		}
		err := cmd.Start()
		if exe != nil && execRefused(err) {
			// The child-only binary could not be executed (a security
			// module's rule for this binary alone, say): this one can.
			c.exe, c.notChildExe = selfExe, "executing "+exe.Name()+": "+err.Error()
			cmd = newCmd(nil)
			if err = cmd.Start(); err != nil {
				err = fmt.Errorf("%w (after %s)", err, c.notChildExe)
			}
		}
		if leave != nil {
			if lerr := leave(); lerr != nil {
				// This thread must not stay in the pull cgroup: end it
				// (and with it, by Pdeathsig, the child).
				if err == nil {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
				}
				started <- failure.Wrap(failure.Isolation, lerr, "")
				return
			}
		}
		if err != nil {
			started <- pidsTooLow(err, g)
			return
		}
		started <- nil
		// cmd.Stderr is an *os.File: Wait returns when the child is reaped,
		// whoever else still holds its pipes.
		c.waited <- cmd.Wait()
	}()
	err = <-started
	// The child has its own copies; the parent keeps only its ends, so EOF
	// means every holder is gone.
	closeAll(planR, evW, stderrW)
	if err != nil {
		closeAll(planW, evR, c.stderr)
		return nil, failure.Wrap(failure.CodeOf(err), err, "starting the pull child")
	}
	c.pid = cmd.Process.Pid
	if c.stderr != nil {
		c.relayDone = make(chan struct{})
		go func() {
			defer close(c.relayDone)
			relayStderr(c.stderr, os.Stderr, log, debug)
		}()
	}
	if dir == nil {
		// The systemd driver on v1, or hybrid mode's unified hierarchy on
		// a kernel without CLONE_INTO_CGROUP (cgroup.Group.OpenDir):
		// placed by pid, before the request. Elsewhere the child was born
		// in every hierarchy.
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

// childCmd is the child's command: the program at path, as ChildName,
// with devNull as stdin and stdout, stderr, the extra files (the protocol
// pipes and the mounts) from fd 3 on, in a session and a mount namespace
// of its own, born in the cgroup of cgroupDir (nil: placed otherwise,
// cgroup.Group.OpenDir).
func childCmd(path string, devNull, stderr *os.File, extra []*os.File, cgroupDir *os.File) *exec.Cmd {
	cmd := &exec.Cmd{
		Dir:        "/",
		Path:       path,
		Args:       []string{ChildName},
		Env:        childEnv(childTmp),
		Stdin:      devNull,
		Stdout:     devNull,
		Stderr:     stderr,
		ExtraFiles: extra,
		SysProcAttr: &syscall.SysProcAttr{
			Pdeathsig: syscall.SIGKILL,
			// A session of its own: the child has no controlling
			// terminal, so it can neither open /dev/tty nor push input
			// into the caller's terminal (TIOCSTI needs it to be the
			// controlling one; seccomp refuses TIOCSTI too).
			Setsid: true,
			// A private mount namespace (Go makes / private in it, so
			// nothing the child mounts propagates to the host).
			Unshareflags: syscall.CLONE_NEWNS,
		},
	}
	if cgroupDir != nil {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(cgroupDir.Fd())
	}
	return cmd
}

// execRefused says err is the exec of the child's program refused (not
// the fork: a cgroup's pids.max, memory): another program may be allowed.
func execRefused(err error) bool {
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Op != "fork/exec" {
		return false
	}
	for _, e := range []error{syscall.EACCES, syscall.EPERM, syscall.ENOEXEC, syscall.ETXTBSY, syscall.ENOENT} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// pidsTooLow explains a fork refused by the pull cgroup's pids.max (the
// forking thread counts while it is inside).
func pidsTooLow(err error, g *cgroup.Group) error {
	if errors.Is(err, syscall.EAGAIN) && g.BornInside() {
		return failure.Wrap(failure.Isolation, err, "cgroup.pids_max is too low: the pull cgroup refused to fork the pull child")
	}
	return failure.Wrap(failure.Isolation, err, "")
}
