package auth

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A credential helper run is bounded (review of issue 24): a helper that
// writes without end fails the lookup, a name with a "/" is never run as a
// path.
func TestRunHelperBounds(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "docker-credential-flood"), []byte("#!/bin/sh\nexec yes aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	_, err := runHelper("flood", "r.example", "credential-helper", "auth.json", "credHelpers.r.example")
	if err == nil || !strings.Contains(err.Error(), "wrote more than") {
		t.Errorf("a flooding helper: %v, want a bounded failure", err)
	}
	for _, name := range []string{"../../tmp/x", "a/b", "", ".."} {
		_, err := runHelper(name, "r.example", "credential-helper", "auth.json", "credHelpers.r.example")
		if err == nil || !strings.Contains(err.Error(), "not a helper name") {
			t.Errorf("helper %q: %v, want refused by name", name, err)
		}
	}
}
