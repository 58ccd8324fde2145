package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	cg "github.com/opencontainers/cgroups"
	"github.com/pullhelper/pullhelper/api"
	"golang.org/x/sys/unix"
)

// Limits are the resource limits of a per-pull cgroup: the output
// contract's type, so the result reports them without a translation.
type Limits = api.Limits

// IODevice is a throttle on one block device.
type IODevice = api.IODevice

// Config says where the pull's cgroup is and what it may use.
type Config struct {
	Driver string `json:"driver"`           // auto, cgroupfs, systemd
	Parent string `json:"parent,omitempty"` // per-pull mode
	Path   string `json:"path,omitempty"`   // joined mode
	Limits Limits `json:"limits"`
	// StateDir marks the cgroup parents pullhelper created (state.Root's
	// CgroupParents): a file named by the path (markerName), listing the
	// directories pullhelper made of it, marks a parent pullhelper created,
	// and each ancestor it created with it, so the last pull to leave it
	// removes those directories, whichever pull created them,
	// and .lock serialises creating pull cgroups against removing parents.
	// A per-pull cgroupfs cgroup needs it; explain does not print it.
	StateDir string `json:"-"`
	// ParentMustExist: Parent is someone else's (a pod's cgroup, for
	// pullhelper cri) and must exist when the pull's cgroup is made; it is
	// never created, so never claimed or removed.
	ParentMustExist bool `json:"-"`
	// AccountPaths are paths (DEST's directory) whose disks get a no-op
	// throttle rule on cgroup v1, where the kernel counts a cgroup's IO
	// only on devices that have a rule; v2 always counts.
	AccountPaths []string `json:"account_paths,omitempty"`
}

// Joined reports whether the config joins an existing cgroup.
func (c Config) Joined() bool { return c.Path != "" }

// ResolveDevice turns "MAJ:MIN" or a path into the major:minor of the whole
// disk that backs it (a partition resolves to its disk, as the kernel's IO
// controllers throttle whole devices).
func ResolveDevice(target string) (int64, int64, error) {
	if !strings.HasPrefix(target, "/") {
		var maj, min int64
		if _, err := fmt.Sscanf(target, "%d:%d", &maj, &min); err != nil {
			return 0, 0, fmt.Errorf("%q is not MAJOR:MINOR", target)
		}
		// The kernel takes a throttle only for a block device it has
		// (ENODEV, after the cgroup is made): refused here.
		if _, err := os.Stat(fmt.Sprintf("/sys/dev/block/%d:%d", maj, min)); err != nil {
			return 0, 0, fmt.Errorf("%d:%d is no block device of this host (/sys/dev/block/%d:%d: %v); lsblk lists them (MAJ:MIN)", maj, min, maj, min, errors.Unwrap(err))
		}
		maj, min = diskOf(maj, min)
		return maj, min, nil
	}
	var st unix.Stat_t
	if err := unix.Stat(target, &st); err != nil {
		return 0, 0, fmt.Errorf("resolving the device of %s: %v", target, err)
	}
	dev := st.Dev
	if st.Mode&unix.S_IFMT == unix.S_IFBLK {
		dev = st.Rdev
	}
	maj, min := int64(unix.Major(dev)), int64(unix.Minor(dev))
	if maj == 0 {
		return 0, 0, fmt.Errorf("%s is on a filesystem without a block device (device 0:%d, e.g. tmpfs or overlay); name the disk as MAJOR:MINOR instead", target, min)
	}
	maj, min = diskOf(maj, min)
	return maj, min, nil
}

// diskOf is the whole disk of block device maj:min (a partition's disk;
// any other device itself).
func diskOf(maj, min int64) (int64, int64) {
	real, err := filepath.EvalSymlinks(fmt.Sprintf("/sys/dev/block/%d:%d", maj, min))
	if err != nil {
		return maj, min
	}
	if _, err := os.Stat(filepath.Join(real, "partition")); err == nil {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(real), "dev"))
		if err == nil {
			var pm, pn int64
			if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d:%d", &pm, &pn); err == nil {
				return pm, pn
			}
		}
	}
	return maj, min
}

const cpuPeriod = 100000 // µs

// noLimit is a throttle rate so high it never throttles; it only makes a v1
// kernel count IO on the device.
const noLimit = 1 << 62

// accounting adds a no-op read and write throttle for each account path
// whose device has no rule yet (v1 only).
func accounting(l Limits, paths []string) Limits {
	for _, p := range paths {
		maj, min, err := ResolveDevice(p)
		if err != nil {
			continue // no block device (tmpfs): nothing to count
		}
		seen := false
		for _, d := range l.IO {
			seen = seen || (d.Major == maj && d.Minor == min)
		}
		if !seen {
			l.IO = append(append([]IODevice(nil), l.IO...), IODevice{Source: "accounting:" + p, Major: maj, Minor: min, ReadBPS: noLimit, WriteBPS: noLimit})
		}
	}
	return l
}

// resources is the one translation of Limits into the library's Resources.
func resources(l Limits, v2 bool) *cg.Resources {
	r := &cg.Resources{SkipDevices: true, Unified: map[string]string{}}
	if l.CPUQuota > 0 {
		r.CpuPeriod = cpuPeriod
		r.CpuQuota = int64(l.CPUQuota * cpuPeriod)
		if r.CpuQuota < 1000 {
			r.CpuQuota = 1000 // the kernel's minimum quota (1 ms)
		}
	}
	if l.CPUWeight > 0 {
		if v2 {
			r.CpuWeight = l.CPUWeight
		} else {
			r.CpuShares = weightToShares(l.CPUWeight)
		}
	}
	r.Memory = l.MemoryMax
	if l.MemoryHigh > 0 {
		if v2 {
			r.Unified["memory.high"] = fmt.Sprint(l.MemoryHigh)
		} else {
			r.MemoryReservation = l.MemoryHigh // v1 has no memory.high; the soft limit is the nearest
		}
	}
	if l.SwapMax != nil && l.MemoryMax > 0 {
		r.MemorySwap = l.MemoryMax + *l.SwapMax // the library takes v1 semantics (memory+swap) on both
	}
	if l.PidsMax > 0 {
		n := l.PidsMax
		r.PidsLimit = &n
	}
	if l.IOWeight > 0 {
		if v2 {
			r.Unified["io.weight"] = fmt.Sprintf("default %d", l.IOWeight)
		} else {
			r.BlkioWeight = uint16(weightToBlkio(l.IOWeight))
		}
	}
	for _, d := range l.IO {
		if d.ReadBPS > 0 {
			r.BlkioThrottleReadBpsDevice = append(r.BlkioThrottleReadBpsDevice, cg.NewThrottleDevice(d.Major, d.Minor, d.ReadBPS))
		}
		if d.WriteBPS > 0 {
			r.BlkioThrottleWriteBpsDevice = append(r.BlkioThrottleWriteBpsDevice, cg.NewThrottleDevice(d.Major, d.Minor, d.WriteBPS))
		}
		if d.ReadIOPS > 0 {
			r.BlkioThrottleReadIOPSDevice = append(r.BlkioThrottleReadIOPSDevice, cg.NewThrottleDevice(d.Major, d.Minor, d.ReadIOPS))
		}
		if d.WriteIOPS > 0 {
			r.BlkioThrottleWriteIOPSDevice = append(r.BlkioThrottleWriteIOPSDevice, cg.NewThrottleDevice(d.Major, d.Minor, d.WriteIOPS))
		}
	}
	if len(r.Unified) == 0 {
		r.Unified = nil
	}
	return r
}

// weightToShares maps a cgroup v2 weight (1..10000, default 100) to v1
// cpu.shares (2..262144, default 1024), the inverse of the OCI conversion.
func weightToShares(w uint64) uint64 {
	if w == 0 {
		return 0
	}
	return 2 + ((w-1)*262142)/9999
}

// weightToBlkio maps a v2 io weight (1..10000) to v1 blkio.weight (10..1000).
func weightToBlkio(w uint64) uint64 {
	b := 10 + ((w-1)*990)/9999
	return b
}
