package cgroup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	cg "github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	"github.com/opencontainers/cgroups/systemd"
	"github.com/pullhelper/pullhelper/internal/proc"
	"golang.org/x/sys/unix"
)

func useSystemd(driver string) (bool, error) {
	switch driver {
	case "systemd":
		if !systemd.IsRunningSystemd() {
			return false, errors.New("cgroup.driver is \"systemd\" but systemd is not running as PID 1; use \"cgroupfs\" or \"auto\"")
		}
		return true, nil
	case "auto":
		return systemd.IsRunningSystemd(), nil
	}
	return false, nil
}

// Create makes the per-pull cgroup (with its limits) or opens the joined
// one. The limits are in place before any process is in the cgroup. A
// cgroupfs one is made under the parents lock, waited for at most
// parentsLockWait and not past ctx (then context.Cause(ctx) is in the
// error's chain).
func Create(ctx context.Context, cfg Config) (*Group, error) {
	sd, err := useSystemd(cfg.Driver)
	if err != nil {
		return nil, err
	}
	g := &Group{cfg: cfg, v2: cg.IsCgroup2UnifiedMode(), systemd: sd}
	c := &cg.Cgroup{Systemd: sd}
	// The name records the owner, so a later run can tell a stale one.
	name, err := pullName()
	if err != nil {
		return nil, err
	}
	if cfg.Joined() {
		return createJoined(g, name)
	}
	if cfg.ParentMustExist && !ExistingParent(mustExistName(cfg.Parent, sd), sd) {
		return nil, fmt.Errorf("cgroup parent %s does not exist (any more); it is not pullhelper's to create", cfg.Parent)
	}
	if sd {
		// A transient scope pullhelper-NAME.scope under the parent slice.
		c.Parent, c.ScopePrefix, c.Name = systemdSlice(cfg.Parent), "pullhelper", name
		if g.v2 {
			c.SystemdProps = systemdIOProps(cfg.Limits)
		}
	} else {
		c.Path = filepath.Join(cfg.Parent, name)
	}
	lim := cfg.Limits
	if !g.v2 {
		lim = accounting(lim, cfg.AccountPaths)
	}
	c.Resources = resources(lim, g.v2)
	g.path = c.Path
	m, err := manager.New(c)
	if err != nil {
		return nil, fmt.Errorf("setting up cgroup %s: %w", g.describe(), err)
	}
	g.mgr = m
	if sd {
		// The scope is started now, with the anchor as its process, and
		// its limits set: the child is born in it like in a cgroupfs one.
		a, err := startAnchor()
		if err != nil {
			return nil, err
		}
		if err := m.Apply(a.pid); err != nil {
			a.stop()
			return nil, fmt.Errorf("starting systemd scope %s: %w", g.describe(), err)
		}
		g.anchor, g.created = a, true
		if err := m.Set(c.Resources); err != nil {
			_ = g.Remove()
			return nil, fmt.Errorf("setting limits on systemd scope %s: %w", g.SubPath(), err)
		}
		return g, nil
	}
	// Create without joining (pid -1), then write the limits. The
	// parents lock keeps a concurrent pull from removing the parent
	// between its check and the mkdir.
	g.pullDirs = maps.Clone(m.GetPaths())
	// SkipDevices: the library makes no directory in the devices
	// hierarchy, so no parent level there is the pull's.
	delete(g.pullDirs, "devices")
	err = cfg.withParentsLock(ctx, parentsLockWait, func(dfd int) error {
		if cfg.ParentMustExist {
			// Checked again under the lock, in every hierarchy the
			// library would mkdir -p it in: gone since (the pod
			// ended), or never there, it is not made.
			for sub, dir := range g.pullDirs {
				if st, err := os.Stat(filepath.Dir(dir)); err != nil || !st.IsDir() {
					return fmt.Errorf("cgroup parent %s does not exist (any more) in the %q hierarchy; it is not pullhelper's to create", cfg.Parent, sub)
				}
			}
		}
		owned, err := cfg.claimParent(dfd, g.pullDirs)
		if err != nil {
			return err
		}
		g.ownsParent = owned
		if err := m.Apply(-1); err != nil {
			_ = m.Destroy()
			return fmt.Errorf("creating cgroup %s: %w", g.path, err)
		}
		return nil
	})
	if err != nil {
		g.releaseParent()
		return nil, err
	}
	g.created = true
	if err := m.Set(c.Resources); err != nil {
		_ = m.Destroy()
		g.releaseParent()
		return nil, fmt.Errorf("setting limits on cgroup %s: %w", g.path, err)
	}
	return g, nil
}

// mustExistName is the parent as ExistingParent takes it: with systemd
// the slice (as systemdSlice names it), else the path.
func mustExistName(parent string, sd bool) string {
	if sd {
		return systemdSlice(parent)
	}
	return parent
}

// pullName is pull-<pid>-<starttime>-<rand>.
func pullName() (string, error) {
	tag, err := proc.SelfTag()
	if err != nil {
		return "", err
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	return namePrefix + tag + "-" + hex.EncodeToString(rnd[:]), nil
}

// createJoined makes the pull's own sub-cgroup NAME inside the joined cgroup,
// in every hierarchy the joined cgroup exists in and in no other: the pull's
// processes are charged to the joined cgroup (its limits apply to them), yet
// the pull can be killed as a whole and measured on its own. No controller
// is enabled and no limit written, so the joined cgroup is left as it was;
// on v2 a child without controllers is allowed next to the joined cgroup's
// own processes.
func createJoined(g *Group, name string) (*Group, error) {
	cfg := g.cfg
	m, err := manager.New(&cg.Cgroup{Path: cfg.Path, Resources: &cg.Resources{SkipDevices: true}})
	if err != nil {
		return nil, fmt.Errorf("setting up cgroup %s: %w", cfg.Path, err)
	}
	g.mgr = m
	joined := existingPaths(m.GetPaths())
	if len(joined) == 0 {
		return nil, fmt.Errorf("cgroup.path %s does not exist", cfg.Path)
	}
	sub := map[string]string{}
	var made []string
	undo := func() {
		for i := len(made) - 1; i >= 0; i-- {
			_ = os.Remove(made[i])
		}
	}
	// Co-mounted controllers share a directory: one the pull made already
	// (the same file), never one that was there (in a cgroup delegated to
	// a user, the user's).
	var ids []fileID
	for ctl, dir := range joined {
		d := filepath.Join(dir, name)
		err := os.Mkdir(d, 0o755)
		if err == nil {
			made = append(made, d)
			id, serr := idOf(d)
			if serr != nil {
				undo()
				return nil, fmt.Errorf("creating the pull's sub-cgroup in %s: %w", dir, serr)
			}
			ids = append(ids, id)
		} else if id, serr := idOf(d); !errors.Is(err, fs.ErrExist) || serr != nil || !slices.Contains(ids, id) {
			undo()
			if errors.Is(err, fs.ErrExist) {
				err = errors.New("it exists already, and the pull did not make it")
			}
			return nil, fmt.Errorf("creating the pull's sub-cgroup %s: %w", d, err)
		}
		if ctl == "cpuset" && !g.v2 {
			if err := inheritCpuset(dir, d); err != nil {
				undo()
				return nil, err
			}
		}
		sub[ctl] = d
	}
	g.path = filepath.Join(cfg.Path, name)
	m, err = manager.NewWithPaths(&cg.Cgroup{Path: g.path, Resources: &cg.Resources{SkipDevices: true}}, sub)
	if err != nil {
		undo()
		return nil, fmt.Errorf("setting up cgroup %s: %w", g.path, err)
	}
	g.mgr, g.created = m, true
	return g, nil
}

// inheritCpuset gives a new v1 cpuset cgroup dir its parent's CPUs and
// memory nodes, as the kernel does only with cgroup.clone_children: a
// cpuset cgroup with none takes no process (ENOSPC), so without them a
// joined pod cgroup that exists in the cpuset hierarchy (the kubelet's, on
// v1) could not be joined at all. runc's fs cpuset does the same for the
// cgroups it creates.
func inheritCpuset(parent, dir string) error {
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		cur, err := cg.ReadFile(dir, f)
		if err != nil {
			return fmt.Errorf("reading %s of the pull's sub-cgroup %s: %w", f, dir, err)
		}
		if strings.TrimSpace(cur) != "" {
			continue // clone_children copied it
		}
		v, err := cg.ReadFile(parent, f)
		if err != nil {
			return fmt.Errorf("reading %s of the joined cgroup %s: %w", f, parent, err)
		}
		if strings.TrimSpace(v) == "" {
			return emptyCpuset(parent, f)
		}
		if err := cg.WriteFile(dir, f, strings.TrimSpace(v)); err != nil {
			return fmt.Errorf("giving the pull's sub-cgroup %s the joined cgroup's %s: %w", dir, f, err)
		}
	}
	return nil
}

// fileID names a file: its device and inode.
type fileID struct{ dev, ino uint64 }

func idOf(path string) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return fileID{}, &fs.PathError{Op: "lstat", Path: path, Err: err}
	}
	return fileID{uint64(st.Dev), st.Ino}, nil
}

// emptyCpuset is the error for a joined v1 cgroup whose cpuset file f
// (cpuset.cpus or cpuset.mems) is empty: no process can run in it.
func emptyCpuset(dir, f string) error {
	return fmt.Errorf("cgroup.path: the joined cgroup %s has an empty %s: no process can run in it (give it the CPUs and memory nodes of its parent, as the kubelet does)", dir, f)
}

// existingPaths are those of paths (a manager's, by controller) that
// exist: the hierarchies in which a joined cgroup exists, in which the
// pull's sub-cgroup is created and in no other.
func existingPaths(paths map[string]string) map[string]string {
	out := map[string]string{}
	for sub, dir := range paths {
		if sub == "devices" {
			continue
		}
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			out[sub] = dir
		}
	}
	return out
}

// systemdSlice names the slice for a parent given as a cgroup path: a path
// whose last element is a slice ("/kubepods.slice/kubepods-burstable.slice")
// is that slice; any other path becomes one ("/pullhelper" →
// "pullhelper.slice", "/a/b" → "a-b.slice").
func systemdSlice(parent string) string {
	p := strings.Trim(parent, "/")
	if base := filepath.Base(p); strings.HasSuffix(base, ".slice") {
		return base
	}
	if p == "" || p == "." {
		return "system.slice"
	}
	return strings.ReplaceAll(p, "/", "-") + ".slice"
}
