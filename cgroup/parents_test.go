package cgroup

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// The directory where pullhelper marks the cgroup parents it created must
// be root's and writable by nobody else (state.CheckDir): a marker planted
// there would make an administrator's cgroup parent pullhelper's to remove.
func TestParentsLockRefusesStateDirOthersControl(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the directory is given to uid 65534")
	}
	dir := t.TempDir()
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	ran := false
	err := Config{StateDir: dir, Parent: "/pullhelper-markertest"}.withParentsLock(context.Background(), time.Second, func(int) error { ran = true; return nil })
	if err == nil || ran || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("withParentsLock in another user's directory: ran %v, %v; want a refusal naming the owner", ran, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left in the refused directory: %v", entries)
	}
}
