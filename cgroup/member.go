package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	cg "github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
)

// OpenDir opens the unified cgroup directory for CLONE_INTO_CGROUP: on v2,
// with either driver, and on v1 in hybrid mode, where the child is born in
// the v1 hierarchies by its forking thread (EnterThread) and in the
// unified one by CLONE_INTO_CGROUP, which the kernel applies to the
// default (unified) hierarchy only, the others coming from the forking
// thread. Nil on v1 without a unified hierarchy, with the systemd driver
// on v1, and in hybrid mode on a kernel older than Linux 5.7, which has no
// CLONE_INTO_CGROUP (Ubuntu 20.04's 5.4, RHEL 8's 4.18): the child is then
// placed by pid after the fork (Place), before it is sent its request.
//
// Born there, the child is never moved: a write of a pid to cgroup.procs
// takes the kernel's global threadgroup lock, whose write side waits for
// an RCU grace period (Place's move into the hybrid unified hierarchy
// and its no-op moves in the v1 ones took 10-15 ms a pull here).
func (g *Group) OpenDir() (*os.File, error) {
	dir := ""
	switch {
	case g.v2:
		dir = g.mgr.Path("")
	case g.BornInside() && cloneIntoCgroup():
		dir = g.paths()[""]
	}
	if dir == "" {
		return nil, nil
	}
	return os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
}

// cloneIntoCgroup reports whether this kernel has CLONE_INTO_CGROUP
// (clone3, Linux 5.7). Only hybrid mode asks: v2 has always needed it here.
var cloneIntoCgroup = sync.OnceValue(func() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	return kernelAtLeast(unix.ByteSliceToString(u.Release[:]), 5, 7)
})

// kernelAtLeast reports whether a kernel release ("6.18.44-fc", "5.4.0-150-
// generic") is major.minor or later; a release it cannot read is not.
func kernelAtLeast(release string, major, minor int) bool {
	maj, rest, ok := strings.Cut(release, ".")
	if !ok {
		return false
	}
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	mj, err1 := strconv.Atoi(maj)
	mn, err2 := strconv.Atoi(rest[:end])
	if err1 != nil || err2 != nil {
		return false
	}
	return mj > major || (mj == major && mn >= minor)
}

// Place moves pid into the cgroup, in every controller (a systemd scope
// exists by then, holding its anchor: the pid is written into its
// directories as into a joined cgroup's).
func (g *Group) Place(pid int) error {
	if g.cfg.Joined() || g.systemd {
		for _, dir := range g.paths() {
			if err := cg.WriteCgroupProc(dir, pid); err != nil {
				return fmt.Errorf("moving pid %d into cgroup %s: %w", pid, dir, err)
			}
		}
		return nil
	}
	if err := g.mgr.Apply(pid); err != nil {
		return fmt.Errorf("moving pid %d into cgroup %s: %w", pid, g.Path(), err)
	}
	return nil
}

// Contains reports whether /proc/PID/cgroup shows pid in this cgroup in
// every controller the group uses.
func (g *Group) Contains(pid int) error {
	return Verify(fmt.Sprintf("/proc/%d/cgroup", pid), g.Expected())
}

// Expected maps each controller of the group to the path /proc/PID/cgroup
// shows for a member process.
func (g *Group) Expected() map[string]string {
	out := map[string]string{}
	for sub, dir := range g.paths() {
		if rel := g.relative(sub, dir); rel != "" {
			out[sub] = rel
		}
	}
	return out
}

// relative turns a controller directory back into the path /proc/PID/cgroup
// shows for it.
func (g *Group) relative(sub, dir string) string {
	mnt := unifiedMountpoint
	if !g.v2 {
		mnt = filepath.Join(unifiedMountpoint, "unified") // hybrid mode
	}
	if sub != "" {
		m, root, err := cg.FindCgroupMountpointAndRoot("", sub)
		if err != nil {
			return ""
		}
		rel := strings.TrimPrefix(dir, m)
		if root != "/" {
			rel = filepath.Join(root, rel)
		}
		return rel
	}
	return strings.TrimPrefix(dir, mnt)
}

// Verify checks a /proc/PID/cgroup file against Expected's map.
func Verify(procFile string, want map[string]string) error {
	own, err := cg.ParseCgroupFile(procFile)
	if err != nil {
		return err
	}
	for sub, path := range want {
		if own[sub] != path {
			name := sub
			if name == "" {
				name = "unified"
			}
			return fmt.Errorf("%s shows %s:%s, want %s", procFile, name, own[sub], path)
		}
	}
	return nil
}
