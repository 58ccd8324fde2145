package pipeline

import (
	"os"
	"strings"
	"testing"

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
