package cgroup

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	cg "github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/systemd"
	"github.com/pullhelper/pullhelper/internal/state"
	"golang.org/x/sys/unix"
)

// The parents pullhelper created are marked in Config.StateDir (see
// there): the last pull to leave one removes it, whichever pull created it.

// parentMarker is the name of the file in the state directory that marks
// c.Parent as pullhelper's.
func (c Config) parentMarker() string {
	return hex.EncodeToString([]byte(filepath.Clean(c.Parent)))
}

// withParentsLock runs f holding an exclusive flock on StateDir/.lock,
// with StateDir held open as dfd (state.OpenDir: only root can change it
// or anything above it): the markers are read, written and removed
// through it. It waits for the lock at most wait and not past ctx.
func (c Config) withParentsLock(ctx context.Context, wait time.Duration, f func(dfd int) error) error {
	if c.StateDir == "" {
		return errors.New("no directory to mark cgroup parents in (cgroup.Config.StateDir)")
	}
	dfd, err := state.OpenDir(c.StateDir)
	if err != nil {
		return fmt.Errorf("the cgroup state directory: %w", err)
	}
	defer unix.Close(dfd)
	lfd, err := state.LockAt(ctx, dfd, ".lock", wait)
	if err != nil {
		lock := filepath.Join(c.StateDir, ".lock")
		if errors.Is(err, state.ErrLocked) {
			return fmt.Errorf("the cgroup parents lock %s: %w; fuser -v %s names the process that holds it (a stopped or hung pullhelper)", lock, err, lock)
		}
		return fmt.Errorf("locking the cgroup parents lock %s: %w", lock, err)
	}
	defer unix.Close(lfd) // drops the flock
	return f(dfd)
}

// The parents lock is held for a few system calls (a marker, the mkdirs
// of a pull's cgroup, the rmdirs of a parent), so only a stopped or hung
// holder keeps it longer than these bounds. parentsLockWait bounds the
// wait of a pull making its cgroup (an error, exit 7, past it);
// parentsReleaseWait the wait of a pull leaving, past which the parent
// stays, marked, for the next pull that leaves it to remove.
const (
	parentsLockWait    = 10 * time.Second
	parentsReleaseWait = 2 * time.Second
)

// claimParent, called under the lock with the state directory held as
// dfd, reports whether the parent is pullhelper's: it does not exist yet
// (it is marked, then created by the caller) or an earlier pull created
// and marked it.
func (c Config) claimParent(dfd int) (bool, error) {
	parent := c.Parent
	var st unix.Stat_t
	if unix.Fstatat(dfd, c.parentMarker(), &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		return true, nil
	}
	if parentExists(parent) {
		return false, nil // the administrator's: never removed
	}
	fd, err := unix.Openat(dfd, c.parentMarker(), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err == nil {
		line := []byte(parent + "\n")
		var n int
		if n, err = unix.Write(fd, line); err == nil && n != len(line) {
			err = io.ErrShortWrite
		}
		unix.Close(fd)
		if err != nil {
			// No half-made marker: a later pull would take the parent
			// for pullhelper's.
			_ = unix.Unlinkat(dfd, c.parentMarker(), 0)
		}
	}
	if err != nil {
		return false, fmt.Errorf("marking cgroup parent %s as pullhelper's: %w", parent, err)
	}
	return true, nil
}

// releaseParent removes a parent pullhelper created when no pull cgroup is
// left in it (after a failed Create).
func (g *Group) releaseParent() {
	if g.ownsParent && g.mgr != nil {
		_ = g.removeParent(g.mgr.GetPaths())
	}
}

// removeParent removes the parent of the given pull cgroup directories in
// every hierarchy, under the lock, when it is empty; a concurrent pull keeps
// it busy and rmdir fails harmlessly (that pull removes it when it leaves).
// The marker goes when the parent is gone from every hierarchy. It waits
// for the lock at most parentsReleaseWait: past it the parent stays, and
// the error says so.
func (g *Group) removeParent(paths map[string]string) error {
	err := g.cfg.withParentsLock(context.Background(), parentsReleaseWait, func(dfd int) error {
		var st unix.Stat_t
		if unix.Fstatat(dfd, g.cfg.parentMarker(), &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			return nil // another pull removed it already
		}
		gone := true
		for _, dir := range paths {
			p := filepath.Dir(dir)
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				gone = false
			}
		}
		if gone {
			_ = unix.Unlinkat(dfd, g.cfg.parentMarker(), 0)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("leaving cgroup parent %s in place: %w", g.cfg.Parent, err)
	}
	return nil
}

func parentExists(parent string) bool {
	dir := filepath.Join(unifiedMountpoint, parent)
	if !cg.IsCgroup2UnifiedMode() {
		m, err := cg.FindCgroupMountpoint("", "pids")
		if err != nil {
			return true // cannot tell: never remove it
		}
		dir = filepath.Join(m, parent)
	}
	_, err := os.Stat(dir)
	return err == nil
}

// UsesSystemd reports whether the driver ("auto", "cgroupfs", "systemd")
// makes cgroups through systemd here.
func UsesSystemd(driver string) (bool, error) { return useSystemd(driver) }

// ExistingParent reports whether parent, a cgroup parent as a runtime
// names it (a cgroupfs path, or with sd a systemd slice name such as
// "kubepods-burstable-pod1.slice", expanded as systemd nests it), is an
// existing cgroup: on v1 in the pids hierarchy, as parentExists looks.
// It is false when that cannot be told.
func ExistingParent(parent string, sd bool) bool {
	if sd {
		p, err := systemd.ExpandSlice(parent)
		if err != nil {
			return false
		}
		parent = p
	}
	dir := filepath.Join(unifiedMountpoint, parent)
	if !cg.IsCgroup2UnifiedMode() {
		m, err := cg.FindCgroupMountpoint("", "pids")
		if err != nil {
			return false
		}
		dir = filepath.Join(m, parent)
	}
	st, err := os.Stat(dir)
	return err == nil && st.IsDir()
}
