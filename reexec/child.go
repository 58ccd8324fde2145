package reexec

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"github.com/pullhelper/pullhelper/api"
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
	if filepath.Base(os.Args[0]) == cgroup.AnchorName {
		cgroup.RunAnchor() // the process holding a systemd scope open; never returns
	}
	if filepath.Base(os.Args[0]) != ChildName {
		markInheritedCloexec()
		return false, 0
	}
	closeInherited()
	nameProcess()
	return true, child()
}

// nameProcess sets the child's name (the main thread's comm, what ps and
// top show; at most 15 bytes) to ChildName's first 15 bytes: the kernel
// named it after the path it was executed by ("exe" for /proc/self/exe, a
// number for /proc/self/fd/N). Through /proc/self/comm, which is the
// thread group leader's: prctl(PR_SET_NAME) would name whichever thread
// the goroutine runs on.
func nameProcess() {
	_ = os.WriteFile("/proc/self/comm", []byte(ChildName[:min(len(ChildName), 15)]), 0)
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
// and the staging and partial-cache mounts (fds 3–6) that came through exec: those are the ones without FD_CLOEXEC (the Go
// runtime opens all of its own with O_CLOEXEC).
func closeInherited() {
	for _, fd := range openFDs() {
		if fd <= partialFD {
			continue
		}
		if inherited(fd) {
			_ = unix.Close(fd)
		}
	}
}

// inherited says fd came through exec (open, without FD_CLOEXEC): the
// parent's pipes, not a descriptor the Go runtime opened at a free number.
func inherited(fd int) bool {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return err == nil && fl&unix.FD_CLOEXEC == 0
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
// and verify the drop → pull into staging → report (pull.Report: the
// child's claims, which the parent checks and verifies).
func child() int {
	// The parent owns signals: it kills the whole cgroup. Ignore terminal
	// SIGINT so that ^C reaches only the parent, which cleans up.
	signal.Ignore(syscall.SIGINT)

	parent := os.Getppid()
	in := os.NewFile(planFD, "plan")
	out := os.NewFile(eventsFD, "events")
	if !inherited(planFD) || !inherited(eventsFD) {
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
	req, dec, err := readRequest(in)
	if err != nil {
		return fail(failure.New(failure.Internal, "child: reading the plan: %v", err))
	}
	// The roots' pool is built while the child mounts and drops.
	req.Material.WarmRoots()
	var rates chan pull.NodeShare
	if req.NodeRate {
		// The node's share follows, a line whenever it changes, until the
		// parent closes the pipe.
		rates = make(chan pull.NodeShare, 1)
		go func() {
			defer close(rates)
			defer in.Close()
			for {
				var c control
				if err := dec.Decode(&c); err != nil {
					return
				}
				select { // only the latest share matters
				case <-rates:
				default:
				}
				rates <- c
			}
		}()
	} else {
		_ = in.Close()
	}

	// 2. Verify placement before any work.
	if err := cgroup.Verify("/proc/self/cgroup", req.Cgroup); err != nil {
		return fail(failure.Wrap(failure.Isolation, err, "child: not in the pull cgroup"))
	}

	// 3. Private mounts, while still root (none of them is visible outside
	// this process's mount namespace): a small tmpfs over /tmp for the
	// copy's configuration and key material, which so never touches a disk
	// and vanishes with the child; the staging directory, handed over as
	// an fd (its request names no host path), at /tmp/stage.
	if err := privateTmp(stageFD, req.Identity); err != nil {
		return fail(err)
	}
	if req.Stage != nil && req.Stage.Partial == partialInChild {
		if err := attach(partialFD, partialInChild, "the partial-blob cache"); err != nil {
			return fail(err)
		}
	} else {
		_ = unix.Close(partialFD) // none was passed; nothing else may sit there
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

	// 4. Drop every privilege, on every thread, and prove it.
	henv := &hostileEnv{Req: &req.Request, Send: send}
	if handled, code := hostile("before-drop", henv); handled {
		return code
	}
	if err := privdrop.Drop(req.Identity, req.Seccomp); err != nil {
		return fail(failure.Wrap(failure.Isolation, err, "child: dropping privileges"))
	}
	if err := privdrop.KeepParentDeathSignal(syscall.SIGKILL, parent); err != nil {
		return fail(failure.Wrap(failure.Isolation, err, "child"))
	}
	if err := privdrop.Verify(req.Identity, req.Seccomp); err != nil {
		return fail(failure.Wrap(failure.Isolation, err, "child: privileges left after the drop"))
	}
	if handled, code := hostile("after-drop", henv); handled {
		return code
	}

	// 5. Pull into the staging area; the parent verifies and commits.
	log := newLogger(req.Log)
	logrus.SetOutput(os.Stderr)
	if req.Log.Quiet {
		logrus.SetOutput(io.Discard)
	}
	logrus.SetLevel(logrus.WarnLevel)
	// Only progress crosses the pipe: the parent emits start, done and
	// error itself (and drops any other type).
	opts := pull.Options{Log: log, Events: func(e api.Event) {
		if api.IsProgress(e.Type) {
			send(message{Event: &e})
		}
	}}
	if req.Bars {
		opts.Report = os.Stderr
	}
	if rates != nil {
		opts.Node = rates
	}
	rep, err := pull.Copy(context.Background(), req.Copy, req.Material, req.Stage, opts)
	if err != nil {
		return fail(err)
	}
	henv.Report = rep
	if handled, code := hostile("after-copy", henv); handled {
		return code
	}
	send(message{Report: rep})
	return 0
}

// readRequest reads what the parent wrote on fd 3 (encodeRequest): the
// request line, read whole and then decoded, and the trust roots raw after
// it (wireRequest.RootsLen) into its Material; the decoder returned reads
// the control lines that follow.
func readRequest(in io.Reader) (wireRequest, *json.Decoder, error) {
	var req wireRequest
	// 64 KiB: the line is a few KiB and the roots, larger than the
	// buffer, are read straight into their slice; a 1 MiB buffer cost the
	// child a millisecond of page faults before its first read.
	br := bufio.NewReaderSize(in, 64<<10)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return req, nil, err
	}
	if err := json.Unmarshal(line, &req); err != nil {
		return req, nil, err
	}
	if req.RootsLen != 0 {
		if req.RootsLen < 0 || req.RootsLen > maxWireRoots || req.Material == nil {
			return req, nil, fmt.Errorf("trust roots of %d bytes (material sent: %v)", req.RootsLen, req.Material != nil)
		}
		req.Material.SystemRoots = make([]byte, req.RootsLen)
		if _, err := io.ReadFull(br, req.Material.SystemRoots); err != nil {
			return req, nil, fmt.Errorf("trust roots: %w", err)
		}
	}
	return req, json.NewDecoder(br), nil
}

// privateTmp mounts the child's private /tmp: a tmpfs (root's, 0755)
// holding stage/, the staging directory attached from the detached mount
// the parent passed as fd, and config/ (the pull uid's, 0700) for the copy's configuration
// and key material.
func privateTmp(fd int, id privdrop.Identity) error {
	if err := unix.Mount("tmpfs", childTmp, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC,
		fmt.Sprintf("size=%d,nr_inodes=4096,mode=0755", childTmpSize)); err != nil {
		return failure.Wrap(failure.Isolation, err, "child: mounting a private tmpfs on %s", childTmp)
	}
	stage, config := filepath.Join(childTmp, "stage"), filepath.Join(childTmp, "config")
	if err := os.Mkdir(stage, 0o755); err != nil {
		return failure.Wrap(failure.Isolation, err, "child: private /tmp")
	}
	// fd is a detached clone of the staging directory (open_tree in the
	// parent's namespace): attach it here, by fd, no path involved.
	if err := attach(fd, stage, "the staging directory"); err != nil {
		return err
	}
	if err := os.Mkdir(config, 0o700); err != nil {
		return failure.Wrap(failure.Isolation, err, "child: private /tmp")
	}
	if err := os.Lchown(config, id.UID, id.GID); err != nil {
		return failure.Wrap(failure.Isolation, err, "child: private /tmp")
	}
	return nil
}

// attach mounts the detached mount fd (open_tree in the parent) on the
// directory target of the private /tmp (created when missing), and closes fd.
func attach(fd int, target, what string) error {
	if err := os.Mkdir(target, 0o755); err != nil && !os.IsExist(err) {
		return failure.Wrap(failure.Isolation, err, "child: private /tmp")
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return failure.Wrap(failure.Isolation, err, "child: mounting %s (fd %d) on %s", what, fd, target)
	}
	if err := unix.Close(fd); err != nil {
		return failure.Wrap(failure.Isolation, err, "child: closing the fd of %s", what)
	}
	return nil
}

// bindFile writes content to a root-owned file in the child's private /tmp
// and bind-mounts it read-only over target, in this process's private
// mount namespace only.
func bindFile(content, target string) error {
	src := filepath.Join(childTmp, ".pullhelper-"+filepath.Base(target))
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

func newLogger(c LogConfig) *slog.Logger {
	if c.Quiet {
		return slog.New(slog.DiscardHandler)
	}
	o := &slog.HandlerOptions{Level: slog.LevelInfo}
	if c.Debug {
		o.Level = slog.LevelDebug
	}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, o))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, o))
}
