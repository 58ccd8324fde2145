package cgroup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
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
// dfd, reports whether the parent is pullhelper's: it does not exist yet,
// in one hierarchy at least (it is marked, then created by the caller), or
// an earlier pull created and marked it. pullDirs are the pull cgroup's
// directories by controller; the library creates every missing level
// above them (mkdir -p), in each hierarchy. So each level of a nested
// parent that is missing from some hierarchy is marked too, with the
// directories that were missing (writeMarker): the last pull to leave
// removes exactly those (removeParent). A level that exists in every
// hierarchy and is not marked is the administrator's: never removed.
func (c Config) claimParent(dfd int, pullDirs map[string]string) (bool, error) {
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
		var missing []string
		for _, d := range levelDirs(pullDirs, i) {
			if _, err := os.Lstat(d); errors.Is(err, fs.ErrNotExist) {
				missing = append(missing, d)
			}
		}
		if len(missing) == 0 {
			owned = false // the administrator's: never removed
			continue
		}
		if err := writeMarker(dfd, level, missing); err != nil {
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

// levelDirs are the directories, one a hierarchy, of the parent level i
// above the pull cgroup's directories (0: the parent, 1: its parent...),
// sorted, each once (co-mounted controllers share one).
func levelDirs(pullDirs map[string]string, i int) []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range pullDirs {
		for range i + 1 {
			d = filepath.Dir(d)
		}
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	sort.Strings(out)
	return out
}

// writeMarker marks level as pullhelper's: a file named by markerName
// that holds the path, then the directories pullhelper creates of it, a
// line each.
func writeMarker(dfd int, level string, dirs []string) error {
	fd, err := unix.Openat(dfd, markerName(level), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	text := []byte(level + "\n" + strings.Join(dirs, "\n") + "\n")
	var n int
	if n, err = unix.Write(fd, text); err == nil && n != len(text) {
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

// maxMarker bounds a marker read: a path and a directory a hierarchy.
const maxMarker = 64 << 10

// markedDirs reads level's marker: ok is false when there is none. dirs
// are the directories it lists that are among want (level's directories
// in this pull's hierarchies); a marker that lists none (written by a
// version before markers listed them, which made the level in every
// hierarchy) stands for all of want, as that version removed them.
func markedDirs(dfd int, level string, want []string) (dirs []string, ok bool) {
	fd, err := unix.Openat(dfd, markerName(level), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	defer unix.Close(fd)
	buf := make([]byte, maxMarker)
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err != nil || m <= 0 {
			break
		}
		n += m
	}
	lines := strings.Split(strings.TrimSpace(string(buf[:n])), "\n")
	if len(lines) <= 1 {
		return want, true
	}
	for _, l := range lines[1:] {
		if slices.Contains(want, l) {
			dirs = append(dirs, l)
		}
	}
	return dirs, true
}

// releaseParent removes a parent pullhelper created when no pull cgroup is
// left in it (after a failed Create).
func (g *Group) releaseParent() {
	if g.ownsParent {
		_ = g.removeParent(g.pullDirs)
	}
}

// removeParent removes, under the lock, the parent of the given pull
// cgroup directories where pullhelper created it (the directories its
// marker lists), when it is empty; a concurrent pull keeps it busy and
// rmdir fails harmlessly (that pull removes it when it leaves). The marker
// goes when those directories are gone, and then the same for each marked
// ancestor, upwards (claimParent). It waits for the lock at most
// parentsReleaseWait: past it the parent stays, and the error says so.
func (g *Group) removeParent(pullDirs map[string]string) error {
	err := g.cfg.withParentsLock(context.Background(), parentsReleaseWait, func(dfd int) error {
		for i, level := range g.cfg.parentLevels() {
			dirs, ok := markedDirs(dfd, level, levelDirs(pullDirs, i))
			if !ok {
				return nil // another pull removed it already, or not pullhelper's
			}
			for _, d := range dirs {
				if st, err := os.Lstat(d); err == nil && !st.IsDir() {
					continue // a control file (the level was never made): not the pull's
				}
				if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return nil // busy: the last pull to leave removes it
				}
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

// UsesSystemd reports whether the driver ("auto", "cgroupfs", "systemd")
// makes cgroups through systemd here.
func UsesSystemd(driver string) (bool, error) { return useSystemd(driver) }

// ExistingParent reports whether parent, a cgroup parent as a runtime
// names it (a cgroupfs path, or with sd a systemd slice name such as
// "kubepods-burstable-pod1.slice", expanded as systemd nests it), is an
// existing cgroup: on v1 in the pids hierarchy.
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
