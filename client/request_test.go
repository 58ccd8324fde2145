package client_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/client"
)

// A binary that cannot be found is ErrProtocol and fs.ErrNotExist, by
// path or by name (issue 24 item 15).
func TestMissingBinary(t *testing.T) {
	for _, bin := range []string{filepath.Join(t.TempDir(), "pullhelper"), "pullhelper-no-such-binary"} {
		c := &client.Client{Binary: bin}
		_, err := c.Pull(testCtx(t), client.Request{Image: "127.0.0.1:1/x", Dest: "oci:" + t.TempDir() + "/d"})
		if !errors.Is(err, client.ErrProtocol) || !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Pull with %s: %v; want ErrProtocol and fs.ErrNotExist", bin, err)
		}
		if _, err := c.Version(testCtx(t)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Version with %s: %v; want fs.ErrNotExist", bin, err)
		}
	}
}

// Each typed field of Request is the flag it documents, before IMAGE and
// DEST (a fake binary records its argv).
func TestTypedFlags(t *testing.T) {
	dir := t.TempDir()
	argv := filepath.Join(dir, "argv")
	fake := writeScript(t, dir, "pullhelper", fmt.Sprintf(`case "$1" in
version) echo '{"version":"x","protocol":%d}' ;;
*) for a in "$@"; do echo "$a"; done > %s; echo '{"error":{"code":"usage","message":"fake"}}'; exit 2 ;;
esac`, api.Protocol, argv))
	c := &client.Client{Binary: fake}
	no := false
	_, err := c.Pull(testCtx(t), client.Request{
		Image: "127.0.0.1:1/x", Dest: "containerd:127.0.0.1:1/x",
		User: "4242", CPUQuota: 0.5, MemoryMax: "256Mi", PidsMax: 64,
		IOReadBPS: []string{"/var=5MB/s"}, IOWriteBPS: []string{"/var=1MB/s", "/tmp=2MB/s"},
		MaxBandwidth: "10MB/s", MaxImageSize: "2Gi", ParallelLayers: 3,
		ContainerdConfig: "/etc/containerd/config.toml", ContainerdAddress: "/run/c.sock", ContainerdNamespace: "ns",
		ContainerdSnapshotter: "native", ContainerdStaging: "/var/lib/s", Pin: &no,
		Extra: []string{"--debug"},
	})
	if !errors.Is(err, client.ErrUsage) {
		t.Fatalf("Pull: %v; want the fake's usage error", err)
	}
	b, err := os.ReadFile(argv)
	if err != nil {
		t.Fatal(err)
	}
	got := " " + strings.Join(strings.Fields(string(b)), " ") + " "
	for _, want := range []string{"--user 4242", "--cpu-quota 0.5", "--memory-max 256Mi", "--pids-max 64",
		"--io-read-bps /var=5MB/s", "--io-write-bps /var=1MB/s --io-write-bps /tmp=2MB/s",
		"--max-bandwidth 10MB/s", "--max-image-size 2Gi", "--parallel-layers 3",
		"--containerd-config /etc/containerd/config.toml", "--containerd-address /run/c.sock",
		"--containerd-namespace ns", "--containerd-snapshotter native", "--containerd-staging /var/lib/s",
		"--pin=false", "--debug -- 127.0.0.1:1/x containerd:127.0.0.1:1/x"} {
		if !strings.Contains(got, " "+want+" ") {
			t.Errorf("argv %q lacks %q", got, want)
		}
	}
	if !strings.HasPrefix(got, " pull ") {
		t.Errorf("argv %q does not start with pull", got)
	}
}

// A typed limit reaches the real binary: a memory limit it refuses is
// its usage error naming the flag.
func TestTypedFlagReal(t *testing.T) {
	w := env(t)
	r := w.request(t, "tiny")
	r.MemoryMax = "12apples"
	_, err := w.client().Pull(testCtx(t), r)
	if !errors.Is(err, client.ErrUsage) || !strings.Contains(err.Error(), "--memory-max") {
		t.Fatalf("Pull with MemoryMax 12apples: %v; want ErrUsage naming --memory-max", err)
	}
}
