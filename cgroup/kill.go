package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	cg "github.com/opencontainers/cgroups"
)

// Kill kills every process in the pull's cgroup (the per-pull one, or the
// pull's sub-cgroup of a joined one) and the given pids, and waits until
// none is left: cgroup.kill where the kernel has it, otherwise freeze,
// SIGKILL each process, thaw (or, without a freezer hierarchy, SIGKILL
// until empty). The calling process is never signalled, should one of its
// threads be inside (see EnterThread), nor a systemd scope's anchor, which
// must hold the scope until Remove (so there the freeze is used: cgroup.kill
// would take the anchor too).
//
// A cgroup already empty, as it is after the child was reaped, is left as
// it is: with no process inside nothing can fork in it, and only root can
// move one in (its files are root's), so there is nothing to freeze. On v1
// a freeze and a thaw of even an empty cgroup cost 1–1.5 ms each, and a
// pull kills its cgroup three times after the child is reaped.
func (g *Group) Kill(only ...int) error {
	for _, pid := range only {
		if pid > 0 && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if pids, err := g.allPids(); err == nil && len(pids) == 0 {
		return nil
	}
	if g.v2 && g.anchor == nil {
		if err := cg.WriteFile(g.mgr.Path(""), "cgroup.kill", "1"); err == nil {
			return g.waitEmpty()
		}
	}
	freezes.Add(1)
	_ = g.mgr.Freeze(cg.Frozen)
	pids, _ := g.allPids()
	killAll(pids)
	_ = g.mgr.Freeze(cg.Thawed)
	return g.waitEmpty()
}

// freezes counts Kill's freezes (the tests check an empty cgroup has none).
var freezes atomic.Int64

// killAll SIGKILLs each listed process but this one. A pid of 0 or less is
// never signalled: a v2 cgroup.procs lists a task of a pid namespace the
// reader cannot see as 0, and kill(0) would take this process's own group
// (kill(-1) every process root can signal).
func killAll(pids []int) {
	self := os.Getpid()
	for _, pid := range pids {
		if pid > 0 && pid != self {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// allPids lists every process in the cgroup but a systemd scope's anchor.
func (g *Group) allPids() ([]int, error) {
	pids, err := g.cgroupPids()
	if g.anchor != nil {
		pids = slices.DeleteFunc(pids, func(p int) bool { return p == g.anchor.pid })
	}
	return pids, err
}

// cgroupPids lists every process in the cgroup. On v1 the library reads the
// devices hierarchy, which a pull does not join (SkipDevices), so read the
// pids (or freezer, or memory) hierarchy instead.
func (g *Group) cgroupPids() ([]int, error) {
	if g.v2 {
		return g.mgr.GetAllPids()
	}
	paths := g.mgr.GetPaths()
	for _, sub := range []string{"pids", "freezer", "memory", "cpu", "cpuacct", "blkio", "name=systemd"} {
		if dir, ok := paths[sub]; ok {
			return cg.GetAllPids(dir)
		}
	}
	return nil, errors.New("no v1 hierarchy to list processes from")
}

func (g *Group) waitEmpty() error {
	deadline := time.Now().Add(10 * time.Second)
	for delay := time.Millisecond; ; delay = min(delay*2, 50*time.Millisecond) {
		pids, err := g.allPids()
		if errors.Is(err, fs.ErrNotExist) || (err == nil && len(pids) == 0) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("listing the processes of cgroup %s: %w", g.Path(), err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still has processes %v after SIGKILL", g.Path(), pids)
		}
		killAll(pids)
		time.Sleep(delay)
	}
}

// Remove kills and deletes the pull's cgroup: the per-pull one, or the
// pull's sub-cgroup of a joined one (never the joined cgroup itself). The
// last pull to leave a parent that pullhelper created removes it too.
func (g *Group) Remove() error {
	if g.mgr == nil || g.removed {
		return nil
	}
	if err := g.Kill(); err != nil {
		return err
	}
	g.anchor.stop() // killed with the cgroup: reap it
	if err := g.mgr.Destroy(); err != nil {
		return fmt.Errorf("removing cgroup %s: %w", g.SubPath(), err)
	}
	g.removed = true
	if g.ownsParent {
		// The directories Create kept (without devices, where the
		// library makes none), not the library's map.
		return g.removeParent(g.pullDirs)
	}
	return nil
}
