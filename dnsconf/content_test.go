package dnsconf_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pullhelper/pullhelper/dnsconf"
)

// The kubelet config and the host resolv.conf are files root reads for the
// caller: a FIFO or a device is refused at once (go test's -timeout is the
// hang guard), and a decoder's error never quotes the file.
func TestKubeletConfigReadSafely(t *testing.T) {
	const m = "ROOTONLYMARK"
	dir := t.TempDir()
	for _, doc := range []string{
		"root:" + m + ":19000:0:99999:7:::\n",
		m + ": [\n",
		"clusterDNS: " + m + "\n",
		"- " + m + "\n- : :\n",
		"{\"clusterDomain\": [\"" + m + "\"]}\n",
	} {
		f := filepath.Join(dir, "k")
		if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := dnsconf.Build(dnsconf.Input{KubeletConfig: f})
		if err != nil && strings.Contains(err.Error(), m) {
			t.Errorf("%q: the error quotes the file: %v", doc, err)
		}
	}
	// A clusterDNS entry the kubelet skips: a warning naming the file and
	// the entry's number, not its value.
	{
		f := filepath.Join(dir, "k")
		if err := os.WriteFile(f, []byte("clusterDNS:\n- 10.0.0.10\n- "+m+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := dnsconf.Build(dnsconf.Input{Policy: dnsconf.PolicyDefault, KubeletConfig: f})
		w := ""
		if c != nil {
			w = strings.Join(c.Warnings, "\n")
		}
		if err != nil || strings.Contains(w, m) || !strings.Contains(w, "kubelet config "+f+": clusterDNS entry 2") {
			t.Errorf("a bad clusterDNS entry: %v, warnings %q; want a warning naming the file and entry, not the value", err, w)
		}
	}
	// Values the checks refuse, and a path the file names: the key only.
	for _, doc := range []string{
		"clusterDomain: \"" + m + " x\"\n",
		"resolvConf: " + filepath.Join(dir, m) + "\n",
	} {
		f := filepath.Join(dir, "k")
		if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := dnsconf.Build(dnsconf.Input{Policy: dnsconf.PolicyDefault, KubeletConfig: f})
		if err == nil || strings.Contains(err.Error(), m) || !strings.Contains(err.Error(), "kubelet config "+f) {
			t.Errorf("%q: %v; want an error naming the kubelet config and its key, not the value", doc, err)
		}
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, "/dev/zero"} {
		_, err := dnsconf.Build(dnsconf.Input{KubeletConfig: p})
		if err == nil || !strings.Contains(err.Error(), "kubelet config "+p+": a ") || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("kubelet config %s: %v", p, err)
		}
		_, err = dnsconf.Build(dnsconf.Input{Policy: dnsconf.PolicyDefault, HostResolvConf: p})
		if err == nil || !strings.Contains(err.Error(), "resolv.conf "+p+": a ") {
			t.Errorf("resolv.conf %s: %v", p, err)
		}
	}
}
