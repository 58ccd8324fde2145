package cgroup

import (
	"fmt"
	"strconv"
	"strings"

	cg "github.com/opencontainers/cgroups"
	"github.com/pullhelper/pullhelper/api"
)

// Usage is what the cgroup reports after the pull; a field the kernel does
// not report is omitted (nil). It is the output contract's type.
type Usage = api.Usage

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
