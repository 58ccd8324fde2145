package cri

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/pipeline"
	"github.com/pullhelper/pullhelper/policy"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// testCgroup makes an empty cgroup where ExistingParent looks (v1: the
// pids hierarchy; v2: the unified one) and returns its path; it is removed
// when the test ends.
func testCgroup(t *testing.T, suffix string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: making a cgroup needs root")
	}
	root := "/sys/fs/cgroup"
	if _, err := os.Stat("/sys/fs/cgroup/pids/cgroup.procs"); err == nil {
		root = "/sys/fs/cgroup/pids"
	}
	name := fmt.Sprintf("/pullhelper-gotest-cri-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "_")+suffix)
	if err := os.Mkdir(filepath.Join(root, name), 0o755); err != nil {
		t.Skipf("skipped: cannot make a test cgroup in %s: %v", root, err)
	}
	t.Cleanup(func() { _ = os.Remove(filepath.Join(root, name)) })
	return name
}

// pods is a policy with three profiles: the service's (pods choose by
// pullhelper.io/profile among "inpod" and "dns"), "inpod" (pull_cgroup
// pod), "dns" (pod_dns), and "hidden", which exists but is not listed.
func pods(profile string) (PodPolicy, error) {
	base := policy.CRI{ProfileAnnotation: "pullhelper.io/profile", PodProfiles: []string{"inpod", "dns"}, PullCgroup: policy.PullCgroupOwn}
	switch profile {
	case "":
		return PodPolicy{CRI: base}, nil
	case "inpod":
		base.PullCgroup = policy.PullCgroupPod
		return PodPolicy{CRI: base}, nil
	case "dns":
		base.PodDNS = true
		return PodPolicy{CRI: base}, nil
	}
	return PodPolicy{}, fmt.Errorf("no profile %q", profile)
}

func sandbox(profile, cgroupParent string, dns *runtimeapi.DNSConfig) *runtimeapi.PodSandboxConfig {
	sb := &runtimeapi.PodSandboxConfig{
		Metadata:  &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "shop", Uid: "u1"},
		Linux:     &runtimeapi.LinuxPodSandboxConfig{CgroupParent: cgroupParent},
		DnsConfig: dns,
	}
	if profile != "" {
		sb.Annotations = map[string]string{"pullhelper.io/profile": profile}
	}
	return sb
}

// What the policy takes from a pod: the profile its annotation chose (one
// of cri.pod_profiles only), then by that profile its cgroup parent and its
// DNS, each checked; everything else refused as a usage error
// (InvalidArgument) on one line naming what is wrong.
func TestPodSettings(t *testing.T) {
	cg := testCgroup(t, "")
	dns := &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"shop.svc.cluster.local", "svc.cluster.local"}, Options: []string{"ndots:5"}}
	many := make([]string, 33)
	for i := range many {
		many[i] = fmt.Sprintf("d%d.example", i)
	}
	long := make([]string, 9)
	for i := range long {
		long[i] = strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + fmt.Sprintf(".x%d", i)
	}
	for _, tc := range []struct {
		name string
		sb   *runtimeapi.PodSandboxConfig
		want PodSettings
		err  string // a part of the usage error; "" for none
	}{
		{name: "no pod", sb: nil},
		{name: "no annotation: the service's profile, own cgroup, host DNS", sb: sandbox("", cg, dns)},
		{name: "inpod: under the pod's cgroup parent", sb: sandbox("inpod", cg, dns), want: PodSettings{Profile: "inpod", CgroupParent: cg}},
		{name: "inpod without a cgroup parent: own cgroup (CRI-O: no sandbox cgroup)", sb: sandbox("inpod", "", nil), want: PodSettings{Profile: "inpod"}},
		{name: "dns: the pod's DNS", sb: sandbox("dns", cg, dns), want: PodSettings{Profile: "dns", DNS: &PodDNS{Servers: dns.Servers, Searches: dns.Searches, Options: dns.Options}}},
		{name: "dns without servers: the policy's DNS", sb: sandbox("dns", cg, &runtimeapi.DNSConfig{Searches: []string{"a.example"}}), want: PodSettings{Profile: "dns"}},
		{name: "a profile not listed", sb: sandbox("hidden", cg, nil), err: `pod annotation pullhelper.io/profile: "hidden" is not a profile pods may choose (cri.pod_profiles: inpod, dns)`},
		{name: "an empty annotation", sb: sandbox("", cg, nil), err: ""},
		{name: "a control character in the annotation", sb: &runtimeapi.PodSandboxConfig{Annotations: map[string]string{"pullhelper.io/profile": "x\ny"}}, err: `"x\ny" is not a profile`},
		{name: "relative cgroup parent", sb: sandbox("inpod", "kubepods/pod1", nil), err: `linux.cgroup_parent "kubepods/pod1": want an absolute, clean cgroup path`},
		{name: "cgroup parent climbing", sb: sandbox("inpod", cg+"/../x", nil), err: "want an absolute, clean cgroup path"},
		{name: "root cgroup", sb: sandbox("inpod", "/", nil), err: "want an absolute, clean cgroup path other than /"},
		{name: "trailing slash", sb: sandbox("inpod", cg+"/", nil), err: "want an absolute, clean cgroup path"},
		{name: "a slice name without systemd", sb: sandbox("inpod", "kubepods-burstable-pod1.slice", nil), err: "want an absolute, clean cgroup path"},
		{name: "missing cgroup", sb: sandbox("inpod", cg+"/nothing-here", nil), err: "no such cgroup"},
		{name: "control character", sb: sandbox("inpod", cg+"\n", nil), err: "control characters are not allowed"},
		{name: "too long", sb: sandbox("inpod", "/"+strings.Repeat("a", 2000), nil), err: "longer than 1024 bytes"},
		{name: "four servers", sb: sandbox("dns", "", &runtimeapi.DNSConfig{Servers: []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"}}), err: "dns_config.servers: 4 servers, resolv.conf uses at most 3"},
		{name: "a server that is a name", sb: sandbox("dns", "", &runtimeapi.DNSConfig{Servers: []string{"dns.example"}}), err: `servers entry 1: "dns.example" is not an IP address`},
		{name: "a search with a space", sb: sandbox("dns", "", &runtimeapi.DNSConfig{Servers: []string{"10.0.0.1"}, Searches: []string{"a b"}}), err: `searches entry 1: "a b" is not a domain name`},
		{name: "33 searches", sb: sandbox("dns", "", &runtimeapi.DNSConfig{Servers: []string{"10.0.0.1"}, Searches: many}), err: "searches: 33 domains, at most 32"},
		{name: "searches over 2048 characters", sb: sandbox("dns", "", &runtimeapi.DNSConfig{Servers: []string{"10.0.0.1"}, Searches: append(long, long...)}), err: "characters, at most 2048"},
		{name: "an option with a newline", sb: sandbox("dns", "", &runtimeapi.DNSConfig{Servers: []string{"10.0.0.1"}, Options: []string{"ndots:5\nnameserver 1.2.3.4"}}), err: `options entry 1: "ndots:5\nnameserver 1.2.3.4"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "an empty annotation" {
				tc.sb.Annotations = map[string]string{"pullhelper.io/profile": ""}
				tc.err = `"" is not a profile pods may choose`
			}
			got, err := podSettings(tc.sb, pods)
			if tc.err != "" {
				if err == nil || failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("got %+v, %v; want a one-line usage error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got.key() != tc.want.key() {
				t.Fatalf("got %s, %v; want %s", got.key(), err, tc.want.key())
			}
		})
	}
}

// A slice name is what the kubelet's systemd driver passes; its form is
// checked before its existence (ExpandSlice's dashes).
func TestCgroupParentSystemd(t *testing.T) {
	for p, want := range map[string]string{
		"kubepods-burstable-pod1.slice":  "no such cgroup",
		"/kubepods/burstable/pod1":       "want a slice name",
		"kubepods--pod1.slice":           "want a slice name",
		"-kubepods.slice":                "want a slice name",
		"kubepods-.slice":                "want a slice name",
		"kubepods/x.slice":               "want a slice name",
		"kubepods-burstable-pod1.scope":  "want a slice name",
		"kubepods-burstable-pod1 .slice": "want a slice name",
	} {
		err := checkCgroupParent(p, true)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", p, err, want)
		}
	}
	// An existing slice, found where systemd nests it
	// (a-b.slice is /a.slice/a-b.slice).
	testCgroup(t, "") // root, a place for cgroups (or skipped)
	root := "/sys/fs/cgroup"
	if _, err := os.Stat("/sys/fs/cgroup/pids/cgroup.procs"); err == nil {
		root = "/sys/fs/cgroup/pids"
	}
	name := fmt.Sprintf("phgotest%d", os.Getpid()) // no dash: one level
	pod := name + "-pod1.slice"
	for _, d := range []string{name + ".slice", name + ".slice/" + pod} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(filepath.Join(root, d)) })
	}
	if err := checkCgroupParent(pod, true); err != nil {
		t.Fatalf("%s: %v", pod, err)
	}
	if err := checkCgroupParent(name+"-pod2.slice", true); err == nil || !strings.Contains(err.Error(), "no such cgroup") {
		t.Fatalf("missing slice: %v", err)
	}
}

// Pulls share a flight only with equal pod settings: two requests of one
// pod (its cgroup) share one pull; the same image for another pod, or
// with another profile, is a pull of its own, planned with that pod's
// settings.
func TestFlightPerPod(t *testing.T) {
	cgA, cgB := testCgroup(t, "-a"), testCgroup(t, "-b")
	var mu sync.Mutex
	var planned []PodSettings
	release := make(chan struct{})
	started := make(chan struct{}, 8)
	s := &Server{base: context.Background(), flights: map[string]*flight{}, log: discardLog(), sem: make(chan struct{}, 8),
		listed: func(context.Context, string, string) error { return nil }, cfg: Config{
			PodPolicy: pods,
			Plan: func(r Request) (*pipeline.Plan, error) {
				mu.Lock()
				planned = append(planned, r.Settings)
				mu.Unlock()
				return &pipeline.Plan{}, nil
			},
			Run: func(ctx context.Context, _ *pipeline.Plan, _ pipeline.Options) (*api.Result, error) {
				started <- struct{}{}
				select {
				case <-release:
					return &api.Result{ImageID: "sha256:x"}, nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			},
		}}
	req := func(sb *runtimeapi.PodSandboxConfig) *runtimeapi.PullImageRequest {
		return &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "reg.example/app:1"}, SandboxConfig: sb}
	}
	type answer struct {
		shared bool
		err    error
	}
	call := func(sb *runtimeapi.PodSandboxConfig) chan answer {
		ch := make(chan answer, 1)
		go func() { _, sh, _, err := s.pull(context.Background(), req(sb)); ch <- answer{sh, err} }()
		return ch
	}
	waitStarted := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			select {
			case <-started:
			case <-time.After(30 * time.Second):
				t.Fatalf("pull %d of %d did not start", i+1, n)
			}
		}
	}
	a1 := call(sandbox("inpod", cgA, nil))
	waitStarted(1)
	// The same pod again: it joins (waiters 2 on the one flight).
	a2 := call(sandbox("inpod", cgA, nil))
	deadline := time.Now().Add(30 * time.Second)
	for {
		s.mu.Lock()
		n := 0
		for _, f := range s.flights {
			n += f.waiters
		}
		s.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second request of pod A did not join")
		}
		time.Sleep(time.Millisecond)
	}
	// Another pod's cgroup, and the service's own profile: pulls of their own.
	a3 := call(sandbox("inpod", cgB, nil))
	a4 := call(sandbox("", cgA, nil))
	waitStarted(2)
	close(release)
	for i, a := range []chan answer{a1, a2, a3, a4} {
		got := <-a
		if got.err != nil || got.shared != (i == 1) {
			t.Errorf("request %d: shared %v, %v", i+1, got.shared, got.err)
		}
	}
	s.running.Wait()
	mu.Lock()
	defer mu.Unlock()
	var keys []string
	for _, p := range planned {
		keys = append(keys, p.key())
	}
	want := []string{
		PodSettings{Profile: "inpod", CgroupParent: cgA}.key(),
		PodSettings{Profile: "inpod", CgroupParent: cgB}.key(),
		PodSettings{}.key(),
	}
	if len(keys) != 3 || keys[0] != want[0] || !((keys[1] == want[1] && keys[2] == want[2]) || (keys[1] == want[2] && keys[2] == want[1])) {
		t.Fatalf("planned %v, want %v", keys, want)
	}
	// A pod the policy refuses starts nothing.
	if _, _, _, err := s.pull(context.Background(), req(sandbox("hidden", "", nil))); failure.CodeOf(err) != failure.Usage {
		t.Fatalf("hidden profile: %v", err)
	}
	if len(planned) != 3 {
		t.Fatalf("a refused request was planned: %d plans", len(planned))
	}
}
