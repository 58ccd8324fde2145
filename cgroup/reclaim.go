package cgroup

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	cg "github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	"github.com/pullhelper/pullhelper/internal/proc"
)

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
