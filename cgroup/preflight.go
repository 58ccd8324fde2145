package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	cg "github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
)

// Preflight refuses a config this host cannot apply, before anything is
// created, so that explain refuses it as pull does and a pull fails
// before its lock, staging and cgroup: the systemd driver where systemd is
// not PID 1, a joined cgroup that does not exist (or, on v1, has no CPUs
// or memory nodes), an io_weight where no IO scheduler weighs cgroups.
// Create checks again where it acts (the host may change in between).
func Preflight(cfg Config) error {
	if _, err := useSystemd(cfg.Driver); err != nil {
		return err
	}
	if err := CheckJoined(cfg); err != nil {
		return err
	}
	if cfg.Limits.IOWeight > 0 {
		if why := noIOWeight(thisIOHost()); why != "" {
			return fmt.Errorf("cgroup.io_weight is set, but %s; remove it, or use io_read_bps/io_write_bps", why)
		}
	}
	return nil
}

// ErrNoJoined is in the chain of CheckJoined's error for a joined cgroup
// that does not exist: a service that starts before the cgroup's owner
// (pullhelper cri before the kubelet) cannot hold that against it yet.
var ErrNoJoined = errors.New("the joined cgroup does not exist")

// CheckJoined refuses a joined cgroup (cfg.Path) that does not exist
// (ErrNoJoined), or on v1 has no CPUs or memory nodes; nil when cfg joins
// none.
func CheckJoined(cfg Config) error {
	if cfg.Joined() {
		m, err := manager.New(&cg.Cgroup{Path: cfg.Path, Resources: &cg.Resources{SkipDevices: true}})
		if err != nil {
			return fmt.Errorf("setting up cgroup %s: %w", cfg.Path, err)
		}
		joined := existingPaths(m.GetPaths())
		if len(joined) == 0 {
			if strings.HasPrefix(cfg.Path, "/sys/fs/cgroup/") {
				return &noJoined{fmt.Sprintf("cgroup.path %s does not exist: it is a cgroup's path in its hierarchy, such as /kubepods/pod1234, not a directory of /sys/fs/cgroup", cfg.Path)}
			}
			return &noJoined{fmt.Sprintf("cgroup.path %s does not exist", cfg.Path)}
		}
		if dir, ok := joined["cpuset"]; ok && !cg.IsCgroup2UnifiedMode() {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				if v, err := cg.ReadFile(dir, f); err == nil && strings.TrimSpace(v) == "" {
					return emptyCpuset(dir, f)
				}
			}
		}
	}
	return nil
}

// ioHost is where noIOWeight looks: the v2 root (unified mode), else the
// v1 blkio hierarchy ("" when not mounted), and the block devices'
// directory. Tests give directories laid out as these are.
type ioHost struct{ unified, blkio, block string }

// thisIOHost is this host's ioHost.
func thisIOHost() ioHost {
	h := ioHost{block: "/sys/block"}
	if cg.IsCgroup2UnifiedMode() {
		h.unified = unifiedMountpoint
	} else if m, err := cg.FindCgroupMountpoint("", "blkio"); err == nil {
		h.blkio = m
	}
	return h
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// noIOWeight says why a cgroup's IO weight cannot be set on this host, or
// "" when it can. The weight is a scheduler's: on v1 blkio.weight (CFQ,
// before Linux 5.0) or blkio.bfq.weight (BFQ), on v2 io.weight (the
// iocost controller, whose root has io.cost.qos) or io.bfq.weight; the
// library writes one of them and fails without. BFQ's files exist once it
// is registered, which the block queues' scheduler lists show.
func noIOWeight(h ioHost) string {
	if h.unified != "" {
		b, err := os.ReadFile(filepath.Join(h.unified, "cgroup.controllers"))
		if err != nil || !hasWord(string(b), "io") {
			return "the io controller is not available (cgroup.controllers)"
		}
		if exists(filepath.Join(h.unified, "io.cost.qos")) || bfqRegistered(h.block) {
			return ""
		}
		return "this kernel weighs no cgroup's IO (no iocost, and the bfq IO scheduler is not loaded: modprobe bfq)"
	}
	if h.blkio == "" {
		return "the blkio controller is not mounted"
	}
	if exists(filepath.Join(h.blkio, "blkio.weight")) || exists(filepath.Join(h.blkio, "blkio.bfq.weight")) || bfqRegistered(h.block) {
		return ""
	}
	return "this kernel weighs no cgroup's IO (the bfq IO scheduler is not loaded: modprobe bfq)"
}

// bfqRegistered reports whether a block queue under dir lists the bfq
// scheduler.
func bfqRegistered(dir string) bool {
	files, _ := filepath.Glob(filepath.Join(dir, "*", "queue", "scheduler"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && hasWord(strings.NewReplacer("[", " ", "]", " ").Replace(string(b)), "bfq") {
			return true
		}
	}
	return false
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// noJoined is CheckJoined's error for a joined cgroup that does not exist.
type noJoined struct{ msg string }

func (e *noJoined) Error() string { return e.msg }
func (e *noJoined) Unwrap() error { return ErrNoJoined }
