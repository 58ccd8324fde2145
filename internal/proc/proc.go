package proc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// StartTime returns the start time of pid in clock ticks since boot
// (field 22 of /proc/PID/stat).
func StartTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// SelfTag is the tag of the calling process.
func SelfTag() (string, error) {
	pid := os.Getpid()
	st, err := StartTime(pid)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d-%d", pid, st), nil
}

// Gone reports whether the process named by tag no longer exists. A tag that
// does not parse is never gone (never reclaim what we cannot identify).
func Gone(tag string) bool {
	p, s, ok := strings.Cut(tag, "-")
	if !ok {
		return false
	}
	pid, err1 := strconv.Atoi(p)
	start, err2 := strconv.ParseUint(s, 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return false
	}
	got, err := StartTime(pid)
	return err != nil || got != start
}
