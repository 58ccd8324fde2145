package examples_test

import (
	"net"
	"os"
	"strings"
	"testing"

	"github.com/coreos/go-systemd/v22/unit"
)

const criUnit = "pullhelper-cri.service"

// The systemd unit of `pullhelper cri` parses (go-systemd's
// unit.DeserializeOptions, systemd's own syntax), starts the service after
// containerd and before the kubelet, serves the socket the kubelet line in
// its header names (in the kubelet's configuration file and flag forms),
// serves its metrics on loopback only, and lets pullhelper stop its own
// pulls (KillMode=mixed).
// tests/140-examples.bats runs its ExecStart.
func TestCRIUnit(t *testing.T) {
	f, err := os.Open(criUnit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	opts, err := unit.DeserializeOptions(f)
	if err != nil {
		t.Fatalf("%s: %v", criUnit, err)
	}
	got := map[string][]string{}
	for _, o := range opts {
		got[o.Section+"."+o.Name] = append(got[o.Section+"."+o.Name], o.Value)
	}
	want := map[string]string{
		"Unit.After": "containerd.service", "Unit.Requires": "containerd.service", "Unit.Before": "kubelet.service",
		"Service.Type": "notify", "Service.KillMode": "mixed", "Install.WantedBy": "multi-user.target",
	}
	for k, v := range want {
		if len(got[k]) != 1 || got[k][0] != v {
			t.Errorf("%s: %s = %v, want %q", criUnit, k, got[k], v)
		}
	}
	exec := got["Service.ExecStart"]
	if len(exec) != 1 {
		t.Fatalf("%s: want one ExecStart, got %v", criUnit, exec)
	}
	args := strings.Fields(exec[0])
	if len(args) < 2 || args[0] != "/usr/local/bin/pullhelper" || args[1] != "cri" {
		t.Fatalf("%s: ExecStart %q does not run pullhelper cri", criUnit, exec[0])
	}
	flag := map[string]string{}
	for i := 2; i+1 < len(args); i++ {
		if strings.HasPrefix(args[i], "--") && !strings.HasPrefix(args[i+1], "--") {
			flag[args[i]] = args[i+1]
		}
	}
	data, _ := os.ReadFile(criUnit)
	if l := flag["--listen"]; l == "" || !strings.Contains(string(data), "imageServiceEndpoint: "+l) {
		t.Errorf("%s: --listen %q is not the imageServiceEndpoint its header gives", criUnit, l)
	}
	if r := flag["--runtime-endpoint"]; r == "" || !strings.Contains(string(data), "containerRuntimeEndpoint: "+r) {
		t.Errorf("%s: --runtime-endpoint %q is not the containerRuntimeEndpoint its header gives", criUnit, r)
	}
	// The kubelet's flag form names the same sockets.
	if l := flag["--listen"]; !strings.Contains(string(data), "--image-service-endpoint="+l) {
		t.Errorf("%s: its header gives no --image-service-endpoint=%s", criUnit, l)
	}
	if r := flag["--runtime-endpoint"]; !strings.Contains(string(data), "--container-runtime-endpoint="+r) {
		t.Errorf("%s: its header gives no --container-runtime-endpoint=%s", criUnit, r)
	}
	// The metrics endpoint has no authentication: loopback only, and
	// the address the header tells Prometheus to scrape.
	m := flag["--metrics-listen"]
	host, _, err := net.SplitHostPort(m)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		t.Errorf("%s: --metrics-listen %q is not a loopback HOST:PORT", criUnit, m)
	}
	if !strings.Contains(string(data), "http://"+m+"/metrics") {
		t.Errorf("%s: its header does not say where the metrics are (http://%s/metrics)", criUnit, m)
	}
}
