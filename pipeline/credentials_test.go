package pipeline

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/internal/state"
	"github.com/pullhelper/pullhelper/policy"
)

// The credential-provider cache (passwords between pulls) is kept only in
// a state root nobody but root can change: in another user's, that user
// could read the file's name and swap the cache for one of their own.
func TestProviderCacheOnlyInRootsDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the state root is given to uid 65534")
	}
	l := policy.Defaults()
	l.Auth.CredentialProviderConfig = "/etc/kubernetes/credential-providers.yaml"
	root := filepath.Join(t.TempDir(), "run")
	must(t, os.Mkdir(root, 0o700))
	if c, warning := keyringConfig(l, Inputs{StateRoot: state.Root(root)}); c.ProviderCacheDir != filepath.Join(root, "credential-provider-cache") || warning != "" {
		t.Errorf("cache directory in root's state root: %q (%q)", c.ProviderCacheDir, warning)
	}
	must(t, os.Chown(root, 65534, 65534))
	must(t, os.Remove(filepath.Join(root, "credential-provider-cache")))
	c, warning := keyringConfig(l, Inputs{StateRoot: state.Root(root)})
	if c.ProviderCacheDir != "" {
		t.Errorf("cache directory in another user's state root: %q, want none (no cache)", c.ProviderCacheDir)
	}
	if !strings.Contains(warning, "not cached") || !strings.Contains(warning, root+" is owned by uid 65534") {
		t.Errorf("warning %q does not say the responses are not cached and why", warning)
	}
	if names := dirNames(root); len(names) != 0 {
		t.Errorf("created in another user's state root: %v", names)
	}
}
