package reexec

import (
	"bufio"
	"bytes"
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

// StartOptions say how the child is born.
type StartOptions struct {
	// Netns is the network namespace to fork in ("" = this one).
	Netns string
	// Stage is the staging directory the copy writes into, opened by the
	// parent (O_DIRECTORY); the child gets a detached mount of it as fd 5,
	// never its path.
	Stage *os.File
	// Partial is DEST's partial-blob cache (nil: none), passed like Stage
	// as a detached mount, fd 6; the child attaches it at /tmp/partial.
	Partial *os.File
	Debug   bool
	// LogJSON: the parent logs JSON records; the child's stderr lines
	// are relayed as the "line" of a record of Log's (msg "child"), not
	// as lines of their own.
	LogJSON bool
	Log     *slog.Logger
	// Terminal: the child draws progress bars on stderr.
	Terminal bool
	// Rates, when set, are forwarded to the child (after its request, on
	// fd 3) until the channel closes or the child exits: this pull's share
	// of the node's bandwidth. Set Request.NodeRate with it.
	Rates <-chan pull.NodeShare
}

// Start spawns the pull child in g (born in it: CLONE_INTO_CGROUP on v2, a
// forking thread inside the cgroup on v1), from a thread in the network
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
	if o.LogJSON {
		log = o.Log
		if log == nil {
			log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
		}
	}
	c, err := spawn(g, o.Netns, o.Debug, o.Terminal, log, files)
	if err != nil {
		return nil, err
	}
	c.rates = o.Rates
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
	return c.c.run(ctx, g, req, events, log)
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
	rates     <-chan pull.NodeShare
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
// back right after), so it never runs outside its limits; only the systemd
// driver places it after fork, before it gets its request.
//
// The caller must then call run (or kill), which reaps the child.
func spawn(g *cgroup.Group, netnsPath string, debug, terminal bool, log *slog.Logger, mounts []*os.File) (*childProc, error) {
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
	closeAll := func(fs ...*os.File) {
		for _, f := range fs {
			if f != nil {
				f.Close()
			}
		}
	}
	cmd := &exec.Cmd{
		Dir:        "/",
		Path:       "/proc/self/exe",
		Args:       []string{ChildName},
		Env:        childEnv(childTmp),
		ExtraFiles: append([]*os.File{planR, evW}, mounts...), // fds 3, 4, then 5 (staging) and 6 (partial-blob cache)
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
	c := &childProc{planW: planW, events: evR, waited: make(chan error, 1)}
	// On a terminal the child draws progress bars on it directly;
	// otherwise its stderr is relayed, without runtime stack dumps.
	cmd.Stderr = os.Stderr
	var stderrW *os.File
	if !terminal {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(planR, planW, evR, evW)
			return nil, failure.Wrap(failure.Internal, err, "creating the stderr pipe")
		}
		cmd.Stderr, stderrW, c.stderr = w, w, r
	}
	dir, err := g.OpenDir()
	if err != nil {
		closeAll(planR, planW, evR, evW, stderrW, c.stderr)
		return nil, failure.Wrap(failure.Isolation, err, "opening cgroup %s", g.SubPath())
	}
	if dir != nil {
		defer dir.Close()
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(dir.Fd())
	}
	started := make(chan error, 1)
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
		var leave func() error
		if g.BornInside() {
			var err error
			if leave, err = g.EnterThread(); err != nil {
				started <- failure.Wrap(failure.Isolation, err, "")
				return // the thread exits: it may be half inside
			}
		}
		err := cmd.Start()
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
		// systemd, or v1's unified hierarchy in hybrid mode (a no-op move
		// for the v1 hierarchies the child was born in).
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

// pidsTooLow explains a fork refused by the pull cgroup's pids.max (the
// forking thread counts while it is inside).
func pidsTooLow(err error, g *cgroup.Group) error {
	if errors.Is(err, syscall.EAGAIN) && g.BornInside() {
		return failure.Wrap(failure.Isolation, err, "cgroup.pids_max is too low: the pull cgroup refused to fork the pull child")
	}
	return failure.Wrap(failure.Isolation, err, "")
}

// forwardRates writes each share from c.rates as a control line on fd 3
// until the channel closes, stop closes, or the child stops reading.
func (c *childProc) forwardRates(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case r, ok := <-c.rates:
			if !ok {
				return
			}
			b, _ := json.Marshal(control(r))
			if _, err := c.planW.Write(append(b, '\n')); err != nil {
				return
			}
		}
	}
}

// kill ends a child that run will not reap: the cgroup and the child are
// killed, the pipes closed and the child reaped. It never waits for a pipe.
func (c *childProc) kill(g *cgroup.Group) {
	_ = g.Kill(c.pid)
	c.planW.Close()
	c.events.Close()
	<-c.waited
	c.drainStderr(time.Now().Add(drainTimeout))
}

// drainStderr waits, until the deadline, for the relay to reach EOF, then
// stops it.
func (c *childProc) drainStderr(deadline time.Time) {
	if c.relayDone == nil {
		return
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-c.relayDone:
	case <-t.C:
		c.stderr.Close() // unblocks the relay's read
		<-c.relayDone
	}
}

// read decodes the child's messages until EOF or an error (then sent on
// errc, nil at EOF); it closes msgs last. Each line is bounded by maxLine
// but one, the report or the error, bounded by maxMessage; its arrays and
// nesting are bounded before it is decoded (checkShape). The first report
// or error ends the messages: later lines are read and ignored.
func (c *childProc) read(msgs chan<- message, errc chan<- error) {
	defer close(msgs)
	br := bufio.NewReaderSize(c.events, 64<<10)
	long := false // the one long line was read
	for {
		limit := maxMessage
		if long {
			limit = maxLine
		}
		line, err := readLine(br, limit)
		if err != nil {
			// EOF, a last line cut short by the child's death, or the
			// read end closed by the drain bound: the end of messages.
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, os.ErrClosed) {
				err = nil
			}
			errc <- err
			return
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if err := checkShape(line); err != nil {
			errc <- err
			return
		}
		var m message
		if err := json.Unmarshal(line, &m); err != nil {
			errc <- decodeError(err)
			return
		}
		if len(line) > maxLine {
			long = true
			if m.Report == nil && m.Error == nil {
				errc <- errOversized
				return
			}
		}
		msgs <- m
		if m.Report != nil || m.Error != nil {
			// The report or the error is the child's last word:
			// whatever it writes after is read and ignored (so it
			// never blocks on a full pipe), never decoded.
			_, err := io.Copy(io.Discard, br)
			if errors.Is(err, os.ErrClosed) {
				err = nil
			}
			errc <- err
			return
		}
	}
}

// run sends the request, relays progress events and returns the child's
// result. Its loop waits only on the child (its messages, its exit) and on
// cancellation (ctx, the timeout): events go to sink through a queue that
// never blocks the loop. After the child is reaped it kills whatever is
// left in the cgroup, then drains the pipes within drainTimeout: a
// grandchild holding them can neither hang the parent nor outlive the pull.
// The pipeline, not the child, says that the pull started and is done.
func (c *childProc) run(ctx context.Context, g *cgroup.Group, req Request, sink func(api.Event), log *slog.Logger) (*pull.Report, error) {
	events := newEventQueue(sink, log)
	defer events.close(time.Second)

	msgs := make(chan message)
	readErr := make(chan error, 1)
	go c.read(msgs, readErr)
	sent := make(chan error, 1)
	stopRates := make(chan struct{})
	defer func() {
		close(stopRates)
		c.planW.Close() // also ends a forward blocked on a child that stopped reading
	}()
	go func() {
		b, err := json.Marshal(req)
		if err == nil {
			_, err = c.planW.Write(append(b, '\n'))
		}
		sent <- err
		if err == nil && req.NodeRate && c.rates != nil {
			c.forwardRates(stopRates)
		}
		c.planW.Close()
	}()

	// The parent's own deadline, a little after the child's, in case the
	// child stops responding.
	var deadline <-chan time.Time
	if timeout := req.Copy.Timeout; timeout > 0 {
		t := time.NewTimer(timeout + 5*time.Second)
		defer t.Stop()
		deadline = t.C
	}
	var (
		rep     *pull.Report
		childE  error
		stopErr error
		werr    error
		exited  bool
		refused int // events dropped by progressOnly
		done    = ctx.Done()
	)
	stop := func(err error, why string) {
		if stopErr != nil {
			return
		}
		stopErr = err
		log.Warn(why+": killing every process in the pull cgroup", "cgroup", g.SubPath())
		if err := g.Kill(c.pid); err != nil {
			log.Error("killing the pull cgroup", "error", err.Error())
		}
	}
	handle := func(m message) {
		switch {
		case m.Event != nil:
			e, err := progressOnly(*m.Event)
			if err == nil {
				events.emit(e)
				break
			}
			if refused++; refused == 1 {
				log.Warn("dropped an event of the pull child: only well-formed progress events are accepted from it", "reason", err.Error())
			}
		case m.Report != nil:
			if rep != nil {
				break
			}
			if err := m.Report.Check(); err != nil {
				stop(failure.New(failure.Isolation, "the pull child sent an invalid report: %v", err), "the pull child broke the protocol")
				break
			}
			rep = m.Report
			rep.Endpoints = pull.BoundEndpoints(rep.Endpoints)
		case m.Error != nil:
			if childE == nil {
				childE = m.Error.err()
			}
		}
	}
	readEnd := func() {
		msgs = nil
		if err := <-readErr; err != nil {
			stop(failure.Wrap(failure.Isolation, err, ""), "the pull child broke the protocol")
		}
	}
	for !exited {
		select {
		case m, ok := <-msgs:
			if !ok {
				readEnd()
				continue
			}
			handle(m)
		case err := <-sent:
			sent = nil
			if err != nil {
				log.Debug("sending the request to the child", "error", err.Error()) // it died; its status says why
			}
		case werr = <-c.waited:
			exited = true
		case <-done:
			done = nil // once
			stop(failure.Wrap(failure.Interrupted, context.Cause(ctx), ""), "stopping")
		case <-deadline:
			deadline = nil
			stop(failure.New(failure.Network, "pull timed out after %s (--timeout); the child did not stop by itself", req.Copy.Timeout), "timed out")
		}
	}
	// The child is reaped. Nothing of the pull may outlive it or hold its
	// pipes: kill the rest of the cgroup, then drain with a bound.
	if err := g.Kill(); err != nil && stopErr == nil {
		stopErr = failure.Wrap(failure.Isolation, err, "")
	}
	bound := time.Now().Add(drainTimeout)
	t := time.NewTimer(drainTimeout)
	defer t.Stop()
	for msgs != nil {
		select {
		case m, ok := <-msgs:
			if !ok {
				readEnd()
				continue
			}
			handle(m)
		case <-t.C:
			log.Warn("the pull child's event pipe is still open after every process of the pull is dead; closing it")
			c.events.Close() // the reader returns at its next read
		}
	}
	c.events.Close()
	c.drainStderr(bound)
	if refused > 1 {
		log.Warn("dropped events of the pull child that were not well-formed progress events", "dropped", refused)
	}
	switch {
	case stopErr != nil:
		return nil, stopErr
	case childE != nil:
		return nil, childE
	case rep != nil && werr == nil:
		return rep, nil
	}
	return nil, &childDied{status: werr}
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

// maxStderrLine bounds one relayed line of the child's stderr; the rest of
// a longer line (a registry's error body, say) is dropped, and reading goes
// on, so the child never blocks on, or dies writing to, its stderr.
// maxStderrTotal bounds what is relayed of one pull's stderr in all: past
// it, one line says so and the rest is read and dropped.
const (
	maxStderrLine  = 64 << 10
	maxStderrTotal = 1 << 20
)

// childPrefix starts every relayed line in the text log format: what
// follows is the child's, not the parent's.
const childPrefix = "pullhelper-child: "

// relayStderr copies the child's stderr line by line until EOF (or until r
// is closed), truncating lines over maxStderrLine and stopping after
// maxStderrTotal bytes. Every line is the child's text, so it is escaped
// (pull.Printable: no terminal control, no line of its own) and labelled:
// with a JSON log (log non-nil) it is the "line" attribute of a parent
// record with msg "child", so the child cannot forge a record of the
// parent's; otherwise it is written to w prefixed with childPrefix. Unless
// debug, it drops a Go runtime stack dump (a child killed by pids_max
// cannot create a thread and dumps every goroutine); the parent explains
// such deaths.
func relayStderr(r io.ReadCloser, w io.Writer, log *slog.Logger, debug bool) {
	defer r.Close()
	br := bufio.NewReaderSize(r, maxStderrLine)
	emit := func(line string) {
		line = pull.Printable(line)
		if log != nil {
			log.Info("child", "line", line)
			return
		}
		if !strings.HasPrefix(line, childPrefix) {
			line = childPrefix + line
		}
		fmt.Fprintln(w, line)
	}
	dropping := false
	total := 0
	for {
		chunk, err := br.ReadSlice('\n')
		line := string(bytes.TrimSuffix(chunk, []byte("\n")))
		if errors.Is(err, bufio.ErrBufferFull) {
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n') // the rest of the line
			}
			line += fmt.Sprintf(" [line truncated: over %d KiB]", maxStderrLine>>10)
		}
		if (line != "" || err == nil) && total <= maxStderrTotal {
			if total += len(line) + 1; total > maxStderrTotal {
				emit(fmt.Sprintf("(child output truncated: over %d KiB; the rest is dropped)", maxStderrTotal>>10))
			} else {
				if !debug && !dropping && (line == "runtime stack:" || strings.HasPrefix(line, "goroutine ")) {
					dropping = true
					emit("(Go stack trace omitted; --debug shows it)")
				}
				if !dropping {
					emit(line)
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// eventQueue hands events to the caller's sink from a goroutine of its own,
// so a sink that blocks (a progress reader that never reads) never holds up
// the parent's loop, and so SIGTERM and --timeout. When the queue is full
// events are dropped (and counted) rather than waited for. It is bounded
// in bytes as well as in events: an event that passed progressOnly has
// fields of bounded length (pull.CheckEvent), at most maxEventBytes in all,
// so the queue holds at most eventQueueLen × maxEventBytes (about 4 MiB).
type eventQueue struct {
	q       chan api.Event
	done    chan struct{}
	dropped int
	log     *slog.Logger
}

const eventQueueLen = 4096

// maxEventBytes bounds an event that passed pull.CheckEvent: its strings
// (type, digest, media type, host) and the struct itself.
const maxEventBytes = len(api.EventConfigProg) + len("sha512:") + 128 + pull.MaxMediaType + pull.MaxHost + 256

func newEventQueue(sink func(api.Event), log *slog.Logger) *eventQueue {
	e := &eventQueue{q: make(chan api.Event, eventQueueLen), done: make(chan struct{}), log: log}
	go func() {
		defer close(e.done)
		for ev := range e.q {
			if sink != nil {
				sink(ev)
			}
		}
	}()
	return e
}

func (e *eventQueue) emit(ev api.Event) {
	select {
	case e.q <- ev:
	default:
		e.dropped++
	}
}

// close lets the queue deliver what it holds, waiting at most wait, so the
// caller's next event (done or error) comes after these.
func (e *eventQueue) close(wait time.Duration) {
	close(e.q)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-e.done:
	case <-t.C:
		e.log.Warn("the progress sink is not taking events; not waiting for it")
	}
	if e.dropped > 0 {
		e.log.Warn("dropped progress events: the progress sink did not keep up", "dropped", e.dropped)
	}
}
