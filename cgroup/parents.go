package cgroup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
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

// markerName is the name of the file in the state directory that marks
// the cgroup parent as pullhelper's: the hex of its clean path, or, when
// that is longer than a file name may be (a path over 127 bytes), "sha256-"
// and the hex of its SHA-256 (never a hex encoding: it has an "s").
func markerName(parent string) string {
	b := []byte(filepath.Clean(parent))
	if 2*len(b) <= maxCgroupName {
		return hex.EncodeToString(b)
	}
	sum := sha256.Sum256(b)
	return "sha256-" + hex.EncodeToString(sum[:])
}

// maxCgroupName is NAME_MAX, the longest name of a file.
const maxCgroupName = 255

// parentLevels are c.Parent and each of its ancestors below the root,
// the parent first: "/a/b" is "/a/b", "/a".
func (c Config) parentLevels() []string {
	var out []string
	for p := filepath.Clean("/" + c.Parent); p != "/"; p = filepath.Dir(p) {
		out = append(out, p)
	}
	return out
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
// and marked it. A nested parent's ancestors that do not exist yet are
// marked as well, since the caller creates them too (mkdir -p): the last
// pull to leave removes each (removeParent). An ancestor that exists and
// is not marked is the administrator's, and so is everything above it.
func (c Config) claimParent(dfd int) (bool, error) {
	levels := c.parentLevels()
	var marked []string // by this call, undone on error
	owned := false
	for i := len(levels) - 1; i >= 0; i-- { // from the top
		level := levels[i]
		var st unix.Stat_t
		if unix.Fstatat(dfd, markerName(level), &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			owned = true
			continue
		}
		if parentExists(level) {
			owned = false // the administrator's: never removed
			continue
		}
		if err := writeMarker(dfd, level); err != nil {
			for _, m := range marked {
				_ = unix.Unlinkat(dfd, markerName(m), 0)
			}
			return false, fmt.Errorf("marking cgroup parent %s as pullhelper's: %w", level, err)
		}
		marked = append(marked, level)
		owned = true
	}
	return owned, nil
}

// writeMarker marks level as pullhelper's: a file named by markerName
// that holds the path (for whoever reads the state directory).
func writeMarker(dfd int, level string) error {
	fd, err := unix.Openat(dfd, markerName(level), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	line := []byte(level + "\n")
	var n int
	if n, err = unix.Write(fd, line); err == nil && n != len(line) {
		err = io.ErrShortWrite
	}
	unix.Close(fd)
	if err != nil {
		// No half-made marker: a later pull would take the parent for
		// pullhelper's.
		_ = unix.Unlinkat(dfd, markerName(level), 0)
	}
	return err
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
// The marker goes when the parent is gone from every hierarchy, and then
// the same for each marked ancestor, upwards (claimParent). It waits for
// the lock at most parentsReleaseWait: past it the parent stays, and the
// error says so.
func (g *Group) removeParent(paths map[string]string) error {
	err := g.cfg.withParentsLock(context.Background(), parentsReleaseWait, func(dfd int) error {
		dirs := maps.Clone(paths)
		for _, level := range g.cfg.parentLevels() {
			var st unix.Stat_t
			if unix.Fstatat(dfd, markerName(level), &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				return nil // another pull removed it already, or not pullhelper's
			}
			gone := true
			for ctl, dir := range dirs {
				p := filepath.Dir(dir)
				if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
					gone = false
				}
				dirs[ctl] = p
			}
			if !gone {
				return nil
			}
			_ = unix.Unlinkat(dfd, markerName(level), 0)
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
