package reexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"github.com/pullhelper/pullhelper/cgroup"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/privdrop"
	"github.com/pullhelper/pullhelper/pull"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

var dispatched bool

// Dispatch must be the first call in main. In the child it runs the child's
// life and returns (true, exit status); in the parent it returns (false, 0).
//
// In both it first makes sure no file descriptor the caller let this
// process inherit reaches the child: the parent marks every fd from 3 up
// close-on-exec (it keeps using them; only exec drops them), and the child
// closes any inherited fd above its protocol pipes that it finds anyway.
func Dispatch() (bool, int) {
	dispatched = true
	if filepath.Base(os.Args[0]) != ChildName {
		markInheritedCloexec()
		return false, 0
	}
	closeInherited()
	return true, child()
}

// markInheritedCloexec sets FD_CLOEXEC on every fd from 3 up (the caller's
// --progress-fd, whatever a node agent leaked): the child gets its
// protocol pipes and stdio, nothing else.
func markInheritedCloexec() {
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return
	}
	for _, fd := range openFDs() { // kernels before 5.11
		if fd >= 3 {
			_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
		}
	}
}

// closeInherited closes, in the child, every fd above the protocol pipes
// that came through exec: those are the ones without FD_CLOEXEC (the Go
// runtime opens all of its own with O_CLOEXEC).
func closeInherited() {
	for _, fd := range openFDs() {
		if fd <= eventsFD {
			continue
		}
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && fl&unix.FD_CLOEXEC == 0 {
			_ = unix.Close(fd)
		}
	}
}

func openFDs() []int {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	var fds []int
	for _, n := range names {
		if fd, err := strconv.Atoi(n); err == nil && fd != int(d.Fd()) {
			fds = append(fds, fd)
		}
	}
	return fds
}

// child is the whole life of the network-facing process, top to bottom:
// read the request → verify the cgroup → private mounts → drop privileges
// and verify the drop → pull into staging → report.
func child() int {
	// The parent owns signals: it kills the whole cgroup. Ignore terminal
	// SIGINT so that ^C reaches only the parent, which cleans up.
	signal.Ignore(syscall.SIGINT)

	parent := os.Getppid()
	in := os.NewFile(planFD, "plan")
	out := os.NewFile(eventsFD, "events")
	if in == nil || out == nil {
		fmt.Fprintln(os.Stderr, "pullhelper-child: started without its protocol pipes; it is run only by pullhelper")
		return 1
	}
	var mu sync.Mutex
	enc := json.NewEncoder(out)
	send := func(m message) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(m)
	}
	fail := func(err error) int {
		send(message{Error: toWire(err)})
		return failure.CodeOf(err).Exit()
	}

	// 1. The request. On cgroup v1 this blocks until the parent has placed
	// us in the cgroup.
	var req request
	if err := json.NewDecoder(in).Decode(&req); err != nil {
		return fail(failure.New(failure.Internal, "child: reading the plan: %v", err))
	}
	_ = in.Close()

	// 2. Verify placement before any work.
	if err := cgroup.Verify("/proc/self/cgroup", req.Cgroup); err != nil {
		return fail(failure.Wrap(failure.Isolation, err, "child: not in the pull cgroup"))
	}

	// 3. Private mounts, while still root: the staging directory over /tmp.
	if err := unix.Mount(req.StageDir, childStageDir, "", unix.MS_BIND, ""); err != nil {
		return fail(failure.Wrap(failure.Isolation, err, "child: mounting the staging directory on %s", childStageDir))
	}
	if req.DNS != nil {
		if err := bindFile(req.DNS.ResolvConf, "/etc/resolv.conf"); err != nil {
			return fail(err)
		}
		if req.DNS.Hosts != "" {
			if err := bindFile(req.DNS.Hosts, "/etc/hosts"); err != nil {
				return fail(err)
			}
		}
	}

	if req.MaterialDir != "" {
		if err := mountPrivateTmpfs(req.MaterialDir, req.Identity); err != nil {
			return fail(err)
		}
	}

	// 4. Drop every privilege, on every thread, and prove it.
	if err := privdrop.Drop(req.Identity, req.Seccomp); err != nil {
		return fail(failure.Wrap(failure.Isolation, err, "child: dropping privileges"))
	}
	if err := privdrop.KeepParentDeathSignal(syscall.SIGKILL, parent); err != nil {
		return fail(failure.Wrap(failure.Isolation, err, "child"))
	}
	if err := privdrop.Verify(req.Identity, req.Seccomp); err != nil {
		return fail(failure.Wrap(failure.Isolation, err, "child: privileges left after the drop"))
	}
	henv := &hostileEnv{Req: &req, Send: send}
	if handled, code := hostile("after-drop", henv); handled {
		return code
	}

	// 5. Pull into the staging area; the parent verifies and commits.
	log := newLogger(req.Log)
	logrus.SetOutput(os.Stderr)
	logrus.SetLevel(logrus.WarnLevel)
	// Only progress crosses the pipe: the parent emits start, done and
	// error itself (and drops any other type).
	opts := pull.Options{Log: log, Events: func(e pull.Event) {
		if childEventTypes[e.Type] {
			send(message{Event: &e})
		}
	}}
	if req.Bars {
		opts.Report = os.Stderr
	}
	res, err := pull.Copy(context.Background(), req.Plan, req.Material, req.Stage, opts)
	if err != nil {
		return fail(err)
	}
	if handled, code := hostile("after-copy", henv); handled {
		return code
	}
	send(message{Result: res})
	return 0
}

// mountPrivateTmpfs mounts a small tmpfs (1 MiB, mode 0700, owned by the
// pull's identity) at dir, creating dir (root-owned, 0700) if needed. It is
// called while still root, in the child's private mount namespace: nothing
// written there touches a disk, other processes of the host cannot see it,
// and it is gone when the child and its descendants are.
func mountPrivateTmpfs(dir string, id privdrop.Identity) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return failure.Wrap(failure.Isolation, err, "child: creating the key material directory %s", dir)
	}
	opts := fmt.Sprintf("size=1m,nr_inodes=64,mode=0700,uid=%d,gid=%d", id.UID, id.GID)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return failure.Wrap(failure.Isolation, err, "child: mounting a private tmpfs on %s", dir)
	}
	return nil
}

// bindFile writes content to a root-owned file in the (private) staging
// root and bind-mounts it read-only over target, in this process's private
// mount namespace only.
func bindFile(content, target string) error {
	src := filepath.Join(childStageDir, ".pullhelper-"+filepath.Base(target))
	if err := os.WriteFile(src, []byte(content), 0o644); err != nil {
		return failure.Wrap(failure.Isolation, err, "child: writing %s", target)
	}
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return failure.Wrap(failure.Isolation, err, "child: mounting over %s", target)
	}
	if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		return failure.Wrap(failure.Isolation, err, "child: making %s read-only", target)
	}
	return nil
}

func newLogger(c logConfig) *slog.Logger {
	o := &slog.HandlerOptions{Level: slog.LevelInfo}
	if c.Debug {
		o.Level = slog.LevelDebug
	}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, o))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, o))
}
