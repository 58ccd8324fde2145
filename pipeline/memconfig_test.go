package pipeline

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The --no-isolation configuration directory is in memory, mounted nowhere
// and gone with its descriptor (issue 22, finding 14).
func TestMemConfigIsMountedNowhere(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("fsopen needs root")
	}
	m, err := newMemConfig()
	if err != nil {
		t.Fatal(err)
	}
	dir := m.Path()
	if !strings.HasPrefix(dir, "/proc/self/fd/") {
		t.Fatalf("path %s: want a /proc/self/fd/N path", dir)
	}
	secret := "memconfig-test-secret"
	if err := os.MkdirAll(filepath.Join(dir, "certs.d", "reg.example"), 0o700); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "certs.d", "reg.example", "client.key")
	if err := os.WriteFile(key, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(key); err != nil || string(b) != secret {
		t.Fatalf("read back %q, %v", b, err)
	}
	var st, root os.FileInfo
	if st, err = os.Stat(dir); err != nil {
		t.Fatal(err)
	}
	if root, err = os.Stat("/"); err != nil {
		t.Fatal(err)
	}
	if os.SameFile(st, root) {
		t.Fatal("the configuration directory is the root directory")
	}
	if st.Mode().Perm() != 0o700 {
		t.Errorf("mode %v, want 0700", st.Mode().Perm())
	}
	// In no mount table: no path names it.
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dir, 0, unix.STATX_MNT_ID, &stx); err != nil {
		t.Fatal(err)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(mi), "\n") {
		if id, _, _ := strings.Cut(l, " "); id == strconv.FormatUint(stx.Mnt_id, 10) {
			t.Errorf("the configuration filesystem is mounted: %s", l)
		}
	}
	m.Close()
	if _, err := os.Stat(key); err == nil {
		t.Error("the key is still reachable after Close")
	}
}
