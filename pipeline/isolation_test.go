package pipeline

import (
	"os"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/cgroup"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/netns"
	"golang.org/x/sys/unix"
)

// Run forks the child into the namespace the plan checked or none: the
// path is opened again and what is there must be that namespace (a pid
// that exited and was reused, a link swapped, a namespace the pod's
// process unshared since, all give another ID), else exit 7.
func TestOpenNetnsRefusesAnotherNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: /proc/self/ns/net of root's")
	}
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &st); err != nil {
		t.Fatal(err)
	}
	p := &Plan{}
	p.Isolation.Enabled = true
	p.Isolation.Network.Netns = "/proc/self/ns/net"
	p.Isolation.Network.NetnsID = netns.ID{Dev: st.Dev, Ino: st.Ino}
	h, err := p.openNetns()
	if err != nil || h == nil || h.ID != p.Isolation.Network.NetnsID {
		t.Fatalf("the namespace the plan checked: %+v %v", h, err)
	}
	h.Close()
	p.Isolation.Network.NetnsID.Ino++
	if h, err := p.openNetns(); h != nil || failure.CodeOf(err) != failure.Isolation || !strings.Contains(err.Error(), "no longer the one checked") {
		t.Fatalf("another namespace at the path: %+v %v; want exit 7 naming it", h, err)
	}
	// Without isolation, or without a namespace: nothing is held.
	p.Isolation.Enabled = false
	if h, err := p.openNetns(); h != nil || err != nil {
		t.Fatalf("not isolated: %+v %v", h, err)
	}
}

// Staged blobs a store does not need synced are synced all the same where
// the sync is what puts the pull's writes under IO limits: on cgroup v1,
// with an io_weight or a write throttle of its own, or in a cgroup whose
// limits are someone else's; never on v2 or without isolation.
func TestSyncsChargeIO(t *testing.T) {
	with := func(c cgroup.Config) Isolation { return Isolation{Enabled: true, Cgroup: &c} }
	for _, c := range []struct {
		name    string
		iso     Isolation
		version string
		want    bool
	}{
		{"no limits", with(cgroup.Config{Parent: "/p"}), "v1", false},
		{"a read throttle only", with(cgroup.Config{Parent: "/p", Limits: cgroup.Limits{IO: []cgroup.IODevice{{Major: 8, ReadBPS: 1 << 20}}}}), "hybrid", false},
		{"a write throttle", with(cgroup.Config{Parent: "/p", Limits: cgroup.Limits{IO: []cgroup.IODevice{{Major: 8, WriteBPS: 1 << 20}}}}), "v1", true},
		{"write IOPS", with(cgroup.Config{Parent: "/p", Limits: cgroup.Limits{IO: []cgroup.IODevice{{Major: 8, WriteIOPS: 100}}}}), "hybrid", true},
		{"an io_weight", with(cgroup.Config{Parent: "/p", Limits: cgroup.Limits{IOWeight: 100}}), "v1", true},
		{"a joined cgroup", with(cgroup.Config{Path: "/pod/x"}), "v1", true},
		{"a pod's parent", with(cgroup.Config{Parent: "/kubepods/pod1", ParentMustExist: true}), "hybrid", true},
		{"v2, a write throttle", with(cgroup.Config{Parent: "/p", Limits: cgroup.Limits{IO: []cgroup.IODevice{{Major: 8, WriteBPS: 1 << 20}}}}), "v2", false},
		{"v2, joined", with(cgroup.Config{Path: "/pod/x"}), "v2", false},
		{"--no-isolation", Isolation{}, "v1", false},
	} {
		if got := c.iso.syncsChargeIO(c.version); got != c.want {
			t.Errorf("%s on %s: %v, want %v", c.name, c.version, got, c.want)
		}
	}
}
