package cgroup

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	cg "github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	"github.com/opencontainers/cgroups/systemd"
	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/internal/proc"
)

// namePrefix marks the per-pull cgroups this program creates.
const namePrefix = "pull-"

const unifiedMountpoint = "/sys/fs/cgroup"

// Group is the cgroup of one pull.
type Group struct {
	cfg     Config
	mgr     cg.Manager
	path    string // cgroup path relative to the hierarchy root
	v2      bool
	systemd bool
	created bool
	removed bool
	// ownsParent: pullhelper created the parent (a marker says so, see
	// parents.go), so the last pull to leave it removes it.
	ownsParent bool
	// anchor holds a per-pull systemd scope open (see systemd.go).
	anchor *anchor
}

// Usage is what the cgroup reports after the pull; a field the kernel does
// not report is omitted (nil). It is the output contract's type.
type Usage = api.Usage

// Version is "v1", "hybrid" or "v2" for this host.
func Version() string {
	switch {
	case cg.IsCgroup2UnifiedMode():
		return "v2"
	case cg.IsCgroup2HybridMode():
		return "hybrid"
	}
	return "v1"
}

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
// one. The limits are in place before any process is in the cgroup.
func Create(cfg Config) (*Group, error) {
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
	err = withParentsLock(func() error {
		owned, err := claimParent(cfg.Parent)
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
	joined := g.joinedPaths()
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
	for ctl, dir := range joined {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err == nil {
			made = append(made, d)
		} else if !errors.Is(err, fs.ErrExist) { // co-mounted controllers share a directory
			undo()
			return nil, fmt.Errorf("creating the pull's sub-cgroup in %s: %w", dir, err)
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

func (g *Group) describe() string {
	if g.path != "" {
		return g.path
	}
	return g.cfg.Parent
}

// Path is the cgroup path (relative to the hierarchy root). For a joined
// cgroup it is the joined path as given; the pull itself runs in SubPath.
func (g *Group) Path() string {
	if g.cfg.Joined() {
		return g.cfg.Path
	}
	return g.SubPath()
}

// SubPath is the cgroup the pull's processes are in: the per-pull cgroup,
// or the pull's own sub-cgroup of a joined one.
func (g *Group) SubPath() string {
	if g.v2 {
		if p := g.mgr.Path(""); p != "" {
			return strings.TrimPrefix(p, unifiedMountpoint)
		}
	}
	return g.path
}

// Paths maps each controller to its directory (v1), or "" to the unified one.
func (g *Group) Paths() map[string]string { return g.mgr.GetPaths() }

// Joined reports whether this is an existing cgroup joined (the pull runs
// in a sub-cgroup of its own inside it).
func (g *Group) Joined() bool { return g.cfg.Joined() }

// OpenDir opens the unified cgroup directory for CLONE_INTO_CGROUP (v2, with
// either driver; nil otherwise).
func (g *Group) OpenDir() (*os.File, error) {
	if !g.v2 {
		return nil, nil
	}
	return os.OpenFile(g.mgr.Path(""), os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
}

// joinedPaths are the hierarchies in which a joined cgroup exists; the
// pull's sub-cgroup is created in those and in no other.
func (g *Group) joinedPaths() map[string]string {
	out := map[string]string{}
	for sub, dir := range g.mgr.GetPaths() {
		if sub == "devices" {
			continue
		}
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			out[sub] = dir
		}
	}
	return out
}

// paths are the hierarchies a member process must be in.
func (g *Group) paths() map[string]string {
	out := maps.Clone(g.mgr.GetPaths())
	delete(out, "devices") // not joined: SkipDevices (a pull needs no device rules)
	return out
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

// Usage reads the cgroup's accounting.
func (g *Group) Usage() Usage {
	var u Usage
	st, err := g.mgr.GetStats()
	if err == nil {
		u.CPUUsageNS = ptr(st.CpuStats.CpuUsage.TotalUsage)
		if st.MemoryStats.Usage.MaxUsage > 0 {
			u.MemoryPeakBytes = ptr(st.MemoryStats.Usage.MaxUsage)
		}
		var rd, wr uint64
		for _, e := range st.BlkioStats.IoServiceBytesRecursive {
			switch strings.ToLower(e.Op) {
			case "read":
				rd += e.Value
			case "write":
				wr += e.Value
			}
		}
		u.IOReadBytes, u.IOWriteBytes = ptr(rd), ptr(wr)
	}
	if n, err := g.mgr.OOMKillCount(); err == nil {
		u.OOMKills = ptr(n)
	}
	for sub, dir := range g.mgr.GetPaths() {
		if sub != "pids" && !(g.v2 && sub == "") {
			continue
		}
		if v, err := readUint(dir, "pids.peak"); err == nil {
			u.PidsPeak = ptr(v)
		}
		if v, err := readKeyed(dir, "pids.events", "max"); err == nil {
			u.PidsMaxHits = ptr(v)
		}
	}
	return u
}

func ptr(v uint64) *uint64 { return &v }

func readUint(dir, file string) (uint64, error) {
	s, err := cg.ReadFile(dir, file)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(s), 10, 64)
}

func readKeyed(dir, file, key string) (uint64, error) {
	s, err := cg.ReadFile(dir, file)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			return strconv.ParseUint(f[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("%s has no %q", file, key)
}

// Kill kills every process in the pull's cgroup (the per-pull one, or the
// pull's sub-cgroup of a joined one) and the given pids, and waits until
// none is left: cgroup.kill where the kernel has it, otherwise freeze,
// SIGKILL each process, thaw (or, without a freezer hierarchy, SIGKILL
// until empty). The calling process is never signalled, should one of its
// threads be inside (see EnterThread), nor a systemd scope's anchor, which
// must hold the scope until Remove (so there the freeze is used: cgroup.kill
// would take the anchor too).
func (g *Group) Kill(only ...int) error {
	for _, pid := range only {
		if pid > 0 && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if g.v2 && g.anchor == nil {
		if err := cg.WriteFile(g.mgr.Path(""), "cgroup.kill", "1"); err == nil {
			return g.waitEmpty()
		}
	}
	_ = g.mgr.Freeze(cg.Frozen)
	pids, _ := g.allPids()
	killAll(pids)
	_ = g.mgr.Freeze(cg.Thawed)
	return g.waitEmpty()
}

func killAll(pids []int) {
	self := os.Getpid()
	for _, pid := range pids {
		if pid != self {
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
	// Copy: Destroy deletes entries from the library's own map.
	paths := maps.Clone(g.mgr.GetPaths())
	if err := g.mgr.Destroy(); err != nil {
		return fmt.Errorf("removing cgroup %s: %w", g.SubPath(), err)
	}
	g.removed = true
	if g.ownsParent {
		g.removeParent(paths)
	}
	return nil
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

// Reclaim removes per-pull cgroups under cfg.Parent whose owner process is
// gone (e.g. a parent that was SIGKILLed), killing what is left in them. It
// returns the cgroup paths it removed.
func Reclaim(cfg Config) ([]string, error) {
	parent := cfg.Parent
	if cfg.Joined() {
		parent = cfg.Path // stale sub-cgroups of earlier pulls in the joined one
	} else {
		sd, err := useSystemd(cfg.Driver)
		if err != nil || sd {
			return nil, err // systemd collects scopes whose processes are gone
		}
	}
	var dir string
	if cg.IsCgroup2UnifiedMode() {
		dir = filepath.Join(unifiedMountpoint, parent)
	} else {
		m, err := cg.FindCgroupMountpoint("", "pids")
		if err != nil {
			if m, err = cg.FindCgroupMountpoint("", "memory"); err != nil {
				return nil, nil
			}
		}
		dir = filepath.Join(m, parent)
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), namePrefix) || !stale(e.Name()) {
			continue
		}
		p := filepath.Join(parent, e.Name())
		m, err := manager.New(&cg.Cgroup{Path: p, Resources: &cg.Resources{SkipDevices: true}})
		if err != nil {
			continue
		}
		g := &Group{cfg: Config{Parent: parent}, mgr: m, path: p, v2: cg.IsCgroup2UnifiedMode(), created: true}
		if err := g.Remove(); err != nil {
			return removed, err
		}
		removed = append(removed, p)
	}
	return removed, nil
}

// stale parses pull-<pid>-<starttime>-<rand> and reports whether that
// process no longer exists.
func stale(name string) bool {
	f := strings.Split(strings.TrimPrefix(name, namePrefix), "-")
	return len(f) == 3 && proc.Gone(f[0]+"-"+f[1])
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
