package pipeline

import (
	"os"
	"path/filepath"
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
	if got := keyringConfig(l, Inputs{StateRoot: state.Root(root)}).ProviderCacheDir; got != filepath.Join(root, "credential-provider-cache") {
		t.Errorf("cache directory in root's state root: %q", got)
	}
	must(t, os.Chown(root, 65534, 65534))
	must(t, os.Remove(filepath.Join(root, "credential-provider-cache")))
	if got := keyringConfig(l, Inputs{StateRoot: state.Root(root)}).ProviderCacheDir; got != "" {
		t.Errorf("cache directory in another user's state root: %q, want none (no cache)", got)
	}
	if names := dirNames(root); len(names) != 0 {
		t.Errorf("created in another user's state root: %v", names)
	}
}
