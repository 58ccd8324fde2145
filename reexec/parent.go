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
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/pullhelper/pullhelper/cgroup"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/netns"
	"github.com/pullhelper/pullhelper/privdrop"
	"github.com/pullhelper/pullhelper/pull"
)

// Options configure an isolated pull.
type Options struct {
	pull.Options
	Cgroup    cgroup.Config
	User      string // [privileges] user: dynamic, a name or a uid
	Seccomp   bool   // [privileges] seccomp
	LockDir   string // dynamic uid locks (default privdrop.DefaultLockDir)
	LogFormat string
	Debug     bool
}

// envAllow lists the environment variables the child inherits: what the
// network code legitimately reads (proxies, registries.conf location,
// locale). Everything else, and so any secret a caller left in its
// environment, stays behind.
var envAllow = []string{"PATH", "LANG", "LC_ALL", "TZ", "TMPDIR",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
	"CONTAINERS_REGISTRIES_CONF"}

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

// Pull runs the plan's copy in a child inside its cgroup, then verifies and
// commits in this (privileged) process. On every path out the child and
// everything in its cgroup are dead, and the cgroup and staging are removed.
func Pull(ctx context.Context, p *pull.Plan, o Options) (*pull.Result, error) {
	if !dispatched {
		panic("reexec: main did not call reexec.Dispatch; the child would run the CLI")
	}
	start := time.Now()
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := p.LoadMaterial()
	if err != nil {
		return nil, err
	}
	st, err := pull.Prepare(p)
	if err != nil {
		return nil, err
	}
	defer st.Remove()
	for _, r := range p.Reclaimed {
		log.Warn("reclaimed a stale staging directory left by a pullhelper that died", "path", r)
	}

	lockDir := o.LockDir
	if lockDir == "" {
		lockDir = privdrop.DefaultLockDir
	}
	lease, err := privdrop.Allocate(o.User, lockDir)
	if err != nil {
		return nil, failure.Wrap(failure.Isolation, err, "")
	}
	defer lease.Release() // after the cgroup is empty and removed (defers run last-first)
	if err := st.Handover(lease.UID, lease.GID); err != nil {
		return nil, err
	}

	reclaimed, err := cgroup.Reclaim(o.Cgroup)
	for _, r := range reclaimed {
		log.Warn("reclaimed a stale pull cgroup left by a pullhelper that died", "cgroup", r)
	}
	if err != nil {
		log.Warn("reclaiming stale pull cgroups", "error", err.Error())
	}
	o.Cgroup.AccountPaths = append(o.Cgroup.AccountPaths, st.Root)
	g, err := cgroup.Create(o.Cgroup)
	if err != nil {
		return nil, failure.Wrap(failure.Isolation, err, "")
	}
	defer func() {
		if err := g.Remove(); err != nil {
			log.Error("removing the pull cgroup", "error", err.Error())
		}
	}()
	iso := p.Isolation
	iso.Cgroup, iso.CgroupVersion, iso.CgroupDriver, iso.CgroupJoined = g.Path(), cgroup.Version(), o.Cgroup.Driver, g.Joined()
	iso.Reclaimed = append(reclaimed, p.Reclaimed...)
	iso.UID, iso.GID, iso.User, iso.Seccomp = lease.UID, lease.GID, lease.Source, o.Seccomp
	iso.Netns = p.Network.Netns
	if p.Network.DNS != nil {
		iso.DNS = p.Network.DNS.Nameservers
	}
	if !g.Joined() && o.Cgroup.Limits.Any() {
		iso.Limits = o.Cgroup.Limits
	}

	c, err := spawn(g, p.Network.Netns, o.Debug, o.Report != nil)
	if err != nil {
		return nil, err
	}
	iso.ChildPID = c.pid
	// From here on the child exists: every return path kills and reaps it.
	res, err := c.run(ctx, g, p, request{
		Plan: p, Material: m, Stage: stageInChild(st), StageDir: st.Root, Cgroup: g.Expected(), DNS: p.Network.DNS, Identity: lease.Identity, Seccomp: o.Seccomp,
		Log: logConfig{Format: o.LogFormat, Debug: o.Debug}, Bars: o.Report != nil,
	}, o.Options, log)
	usage := g.Usage()
	if err != nil {
		return nil, explainDeath(err, usage, o.Cgroup.Limits)
	}
	// Nothing running as the pull uid may outlive the child: kill what is
	// left in the cgroup before the staging area is taken back.
	if err := g.Kill(c.pid); err != nil {
		return nil, failure.Wrap(failure.Isolation, err, "")
	}
	owner := ownerOf(p.Destination.Path)
	if err := st.TakeBack(p.Destination, res, owner.UID, owner.GID); err != nil {
		return nil, err
	}
	if err := st.Commit(p.Destination); err != nil {
		return nil, err
	}
	res.Isolation = iso
	if !g.Joined() {
		// A joined cgroup's counters are its other members' too.
		res.Usage = usage
	}
	res.DurationMS = time.Since(start).Milliseconds()
	o.Done(res)
	return res, nil
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
func spawn(g *cgroup.Group, netnsPath string, debug, terminal bool) (*childProc, error) {
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
		Env:        childEnv(childStageDir),
		ExtraFiles: []*os.File{planR, evW}, // fds 3 and 4
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
func (c *childProc) run(ctx context.Context, g *cgroup.Group, p *pull.Plan, req request, o pull.Options, log *slog.Logger) (*pull.Result, error) {
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
		return nil, failure.Wrap(failure.Internal, err, "sending the plan to the child")
	}
	c.planW.Close()

	// The parent's own deadline, a little after the child's, in case the
	// child stops responding.
	var deadline <-chan time.Time
	if p.Timeout > 0 {
		t := time.NewTimer(p.Timeout + 5*time.Second)
		defer t.Stop()
		deadline = t.C
	}
	var (
		res     *pull.Result
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
			case m.Event != nil && o.Events != nil:
				o.Events(*m.Event)
			case m.Result != nil:
				res = m.Result
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
				stopErr = failure.New(failure.Network, "pull timed out after %s (--timeout); the child did not stop by itself", p.Timeout)
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
		return nil, stopErr
	case childE != nil:
		return nil, childE
	case res != nil && werr == nil:
		return res, nil
	case rerr != nil:
		return nil, failure.Wrap(failure.Internal, rerr, "reading the child's messages")
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

// explainDeath turns a child that died without a result into the limit that
// killed it, when the cgroup says so.
func explainDeath(err error, u cgroup.Usage, l cgroup.Limits) error {
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

// ownerOf is the owner of DEST's parent directory: committed files become
// its, as if its owner had written them (root for the usual /var paths).
func ownerOf(path string) privdrop.Identity {
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Dir(path), &st); err != nil {
		return privdrop.Identity{}
	}
	return privdrop.Identity{UID: int(st.Uid), GID: int(st.Gid)}
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
