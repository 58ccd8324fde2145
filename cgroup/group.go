package cgroup

import (
	"maps"
	"strings"

	cg "github.com/opencontainers/cgroups"
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
	// ownsParent: pullhelper created the parent, in some hierarchy at
	// least (a marker says so, see parents.go), so the last pull to leave
	// it removes what pullhelper created of it.
	ownsParent bool
	// pullDirs are the per-pull cgroup's directories by controller, as
	// the library computed them before creating them (its own map is
	// emptied by Destroy): the parents' directories are above them.
	pullDirs map[string]string
	// anchor holds a per-pull systemd scope open (see systemd.go).
	anchor *anchor
}

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

// describe names the cgroup in errors: its path, or its parent before the
// path is known.
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

// paths are the hierarchies a member process must be in.
func (g *Group) paths() map[string]string {
	out := maps.Clone(g.mgr.GetPaths())
	delete(out, "devices") // not joined: SkipDevices (a pull needs no device rules)
	return out
}
