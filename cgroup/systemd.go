package cgroup

import (
	"fmt"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"

	systemdDbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
)

// AnchorName is argv[0] of the anchor process (see startAnchor); main's
// reexec.Dispatch runs RunAnchor for it.
const AnchorName = "pullhelper-cgroup-anchor"

// RunAnchor is the anchor's whole life: it gives back what the packages'
// initialisation allocated (it is charged to the scope) and waits, doing
// nothing, until it is killed (by Remove, or by its parent's death).
func RunAnchor() {
	debug.FreeOSMemory()
	for {
		_ = unix.Pause()
	}
}

// anchor is the first process of a per-pull systemd scope. systemd stops a
// scope, and removes its cgroup, as soon as no process is left in it, so a
// scope holding only the child would vanish the moment the child exits:
// before the parent reads its usage (or its OOM kills) and before Remove.
// With the anchor in it the scope, with its limits, exists before the child
// is born in it (CLONE_INTO_CGROUP on v2, as with cgroupfs), and lives until
// Remove kills the anchor with everything else. It is forked from a thread
// locked for its whole life, with Pdeathsig: it dies with the parent, and
// then systemd collects the empty scope.
type anchor struct {
	pid  int
	quit chan struct{}
	done chan struct{}
	once sync.Once
}

func startAnchor() (*anchor, error) {
	a := &anchor{quit: make(chan struct{}), done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: Pdeathsig follows this thread
		defer close(a.done)
		cmd := &exec.Cmd{
			Path: "/proc/self/exe",
			Args: []string{AnchorName},
			Dir:  "/",
			// One P: the fewest runtime threads (they count in TasksMax).
			Env:         []string{"GOMAXPROCS=1"},
			SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setsid: true},
		}
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		a.pid = cmd.Process.Pid
		started <- nil
		<-a.quit
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting the process that holds the systemd scope: %w", err)
	}
	return a, nil
}

// stop kills the anchor (if the cgroup kill has not already) and reaps it.
func (a *anchor) stop() {
	if a == nil {
		return
	}
	a.once.Do(func() { close(a.quit) })
	<-a.done
}

// ioDeviceLimit is systemd's IO*BandwidthMax / IO*IOPSMax element: (st).
type ioDeviceLimit struct {
	Path  string
	Limit uint64
}

// systemdIOProps are the IO limits as properties of the scope (cgroup v2),
// which the library leaves out (it writes io.max and io.weight to the
// cgroup only). systemd writes a unit's cgroup attributes from its
// properties whenever it realises the unit again (a set-property, a
// daemon-reload): io.weight would fall back to its default and the unit
// would not show its limits. A device is named by the path the policy gave
// (systemd resolves it to the whole disk, as ResolveDevice does), or as
// /dev/block/MAJ:MIN when it was given as MAJ:MIN.
func systemdIOProps(l Limits) []systemdDbus.Property {
	var props []systemdDbus.Property
	if l.IOWeight > 0 {
		props = append(props, systemdDbus.Property{Name: "IOWeight", Value: dbus.MakeVariant(l.IOWeight)})
	}
	lists := map[string][]ioDeviceLimit{}
	order := []string{"IOReadBandwidthMax", "IOWriteBandwidthMax", "IOReadIOPSMax", "IOWriteIOPSMax"}
	for _, d := range l.IO {
		path := d.Source
		if !strings.HasPrefix(path, "/") {
			path = fmt.Sprintf("/dev/block/%d:%d", d.Major, d.Minor)
		}
		for i, v := range []uint64{d.ReadBPS, d.WriteBPS, d.ReadIOPS, d.WriteIOPS} {
			if v > 0 {
				lists[order[i]] = append(lists[order[i]], ioDeviceLimit{Path: path, Limit: v})
			}
		}
	}
	for _, name := range order {
		if len(lists[name]) > 0 {
			props = append(props, systemdDbus.Property{Name: name, Value: dbus.MakeVariant(lists[name])})
		}
	}
	return props
}

// Driver is the driver the group uses: "systemd" or "cgroupfs" (what
// "auto" chose).
func (g *Group) Driver() string {
	if g.systemd {
		return "systemd"
	}
	return "cgroupfs"
}
