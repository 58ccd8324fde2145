package hosts

import (
	"os"
	"path/filepath"
	"testing"
)

// An IPv6 literal registry ("[::1]:5000") cannot be named in an image
// reference (docker/reference rejects it), so Endpoints never sees one;
// containerd's host-directory rules for it are checked here, below the
// public API.
func TestContainerdEndpointListIPv6(t *testing.T) {
	root := t.TempDir()
	// hostDirFromRoots turns only the LAST colon into _PORT_.
	dir := filepath.Join(root, "[::1]_5000_")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	list, err := containerdEndpointList(&ctrdRegistry{ConfigPath: root}, "[::1]:5000", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].file != dir || list[0].scheme != "http" || list[0].host != "[::1]:5000" || !list[0].tls.SkipVerify {
		t.Errorf("config_path: %+v, want http://[::1]:5000 from %s with the localhost skip_verify", list, dir)
	}
	// No config: the legacy default endpoint, http and skip_verify for a
	// loopback address.
	list, err = containerdEndpointList(&ctrdRegistry{}, "[::1]:5000", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].scheme != "http" || list[0].host != "[::1]:5000" || !list[0].tls.SkipVerify {
		t.Errorf("legacy: %+v, want http://[::1]:5000 with skip_verify", list)
	}
}
