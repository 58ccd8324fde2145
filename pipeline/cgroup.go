package pipeline

import (
	"fmt"
	"strings"

	"github.com/pullhelper/pullhelper/cgroup"
	"github.com/pullhelper/pullhelper/internal/state"
	"github.com/pullhelper/pullhelper/policy"
)

// CgroupConfig translates the [cgroup] section, validated (its
// combinations are policy.Validate's, so that policy check refuses them
// too, but for memory_swap_max without memory_max, which a flag may
// complete), resolving IO paths to their whole-disk devices. Errors name the
// policy key. The cgroup parents are marked under the default state root.
func CgroupConfig(l *policy.Loaded) (cgroup.Config, error) {
	p := l.Cgroup
	c := cgroup.Config{Driver: p.Driver, Parent: p.Parent, Path: p.Path, StateDir: state.Default.CgroupParents(), Limits: cgroup.Limits{
		CPUQuota:   float64(p.CPUQuota),
		CPUWeight:  uint64(p.CPUWeight),
		MemoryMax:  int64(p.MemoryMax),
		MemoryHigh: int64(p.MemoryHigh),
		PidsMax:    int64(p.PidsMax),
		IOWeight:   uint64(p.IOWeight),
	}}
	if _, set := l.Defined("cgroup.memory_swap_max"); set {
		v := int64(p.MemorySwapMax)
		c.Limits.SwapMax = &v
	}
	if c.Limits.SwapMax != nil && c.Limits.MemoryMax == 0 {
		return c, fmt.Errorf("cgroup.memory_swap_max needs cgroup.memory_max")
	}
	if !strings.HasPrefix(c.Parent, "/") {
		c.Parent = "/" + c.Parent
	}
	byDev := map[[2]int64]*cgroup.IODevice{}
	var order [][2]int64
	add := func(key string, vals []string, iops bool, set func(*cgroup.IODevice, uint64)) error {
		for _, v := range vals {
			target, n, err := policy.ParseIOLimit(v, iops)
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			maj, min, err := cgroup.ResolveDevice(target)
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			k := [2]int64{maj, min}
			d := byDev[k]
			if d == nil {
				d = &cgroup.IODevice{Source: target, Major: maj, Minor: min}
				byDev[k] = d
				order = append(order, k)
			}
			set(d, uint64(n))
		}
		return nil
	}
	if err := add("cgroup.io_read_bps", p.IOReadBPS, false, func(d *cgroup.IODevice, n uint64) { d.ReadBPS = n }); err != nil {
		return c, err
	}
	if err := add("cgroup.io_write_bps", p.IOWriteBPS, false, func(d *cgroup.IODevice, n uint64) { d.WriteBPS = n }); err != nil {
		return c, err
	}
	if err := add("cgroup.io_read_iops", p.IOReadIOPS, true, func(d *cgroup.IODevice, n uint64) { d.ReadIOPS = n }); err != nil {
		return c, err
	}
	if err := add("cgroup.io_write_iops", p.IOWriteIOPS, true, func(d *cgroup.IODevice, n uint64) { d.WriteIOPS = n }); err != nil {
		return c, err
	}
	for _, k := range order {
		c.Limits.IO = append(c.Limits.IO, *byDev[k])
	}
	return c, nil
}
