package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/auth"
	"github.com/pullhelper/pullhelper/cri"
	"github.com/pullhelper/pullhelper/pipeline"
	"github.com/pullhelper/pullhelper/policy"
)

// The plan of one pod's pull: its cgroup under the pod's cgroup parent,
// the pod's DNS as the child's whole resolv.conf (dnsPolicy None, as the
// kubelet's GetPodDNS builds it: the policy's search replaced), the flags'
// limits kept; a pod without settings keeps the service's plan.
func TestPodPlan(t *testing.T) {
	plan := func(st cri.PodSettings) *pipeline.Plan {
		t.Helper()
		l := policy.Defaults()
		empty := filepath.Join(t.TempDir(), "registries.conf")
		if err := os.WriteFile(empty, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, s := range [][3]string{{"--registries-conf", "pull.registries_conf", "x"}, {"--memory-max", "cgroup.memory_max", "96Mi"}} {
			v := s[2]
			if v == "x" {
				v = empty
			}
			if err := l.Set(s[0], s[1], policy.String, v); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Set("--dns-search", "network.dns.search", policy.Strings, "node.example"); err != nil {
			t.Fatal(err)
		}
		if err := l.Set("--dns", "network.dns.nameservers", policy.Strings, "192.0.2.53"); err != nil {
			t.Fatal(err)
		}
		if err := l.Set("--dns", "network.mode", policy.String, "cluster-dns"); err != nil {
			t.Fatal(err)
		}
		if err := applyPodSettings(l, st); err != nil {
			t.Fatal(err)
		}
		p, err := pipeline.NewPlan(l, pipeline.Inputs{Image: "reg.example/app:1", Dest: "containerd:reg.example/app:1", Env: auth.Env{Home: t.TempDir()}, Explain: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	p := plan(cri.PodSettings{CgroupParent: "/kubepods/burstable/pod1", DNS: &cri.PodDNS{
		Servers: []string{"10.96.0.10"}, Searches: []string{"shop.svc.cluster.local"}, Options: []string{"ndots:5"}}})
	if c := p.Isolation.Cgroup; c == nil || c.Parent != "/kubepods/burstable/pod1" || c.Path != "" || c.Limits.MemoryMax != 96<<20 {
		t.Fatalf("cgroup %+v", c)
	}
	d := p.Isolation.Network.DNS
	if d == nil || d.Policy != "None" || strings.Join(d.Nameservers, " ") != "10.96.0.10" || strings.Join(d.Search, " ") != "shop.svc.cluster.local" {
		t.Fatalf("dns %+v", d)
	}
	if !strings.Contains(d.ResolvConf, "nameserver 10.96.0.10\n") || strings.Contains(d.ResolvConf, "192.0.2.53") ||
		strings.Contains(d.ResolvConf, "node.example") || !strings.Contains(d.ResolvConf, "ndots:5") {
		t.Fatalf("resolv.conf:\n%s", d.ResolvConf)
	}
	// No settings: the service's own cgroup parent and DNS.
	p = plan(cri.PodSettings{})
	if c := p.Isolation.Cgroup; c == nil || c.Parent != "/pullhelper" {
		t.Fatalf("cgroup %+v", c)
	}
	if d := p.Isolation.Network.DNS; d == nil || !strings.Contains(d.ResolvConf, "nameserver 192.0.2.53") {
		t.Fatalf("dns %+v", d)
	}
}
