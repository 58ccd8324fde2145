package pull_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/pull"
)

// layout writes a minimal staged OCI layout whose index names one manifest
// blob, and returns the stage and the manifest digest.
func layout(t *testing.T) (*pull.Stage, string) {
	t.Helper()
	root := t.TempDir()
	st := &pull.Stage{Root: root, Path: filepath.Join(root, "image")}
	blobs := filepath.Join(st.Path, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o700); err != nil {
		t.Fatal(err)
	}
	put := func(b []byte) string {
		sum := sha256.Sum256(b)
		h := hex.EncodeToString(sum[:])
		if err := os.WriteFile(filepath.Join(blobs, h), b, 0o600); err != nil {
			t.Fatal(err)
		}
		return "sha256:" + h
	}
	put([]byte("layer"))
	m := put([]byte(`{"schemaVersion":2,"layers":[]}`))
	idx := fmt.Sprintf(`{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":%q,"size":31}]}`, m)
	if err := os.WriteFile(filepath.Join(st.Path, "index.json"), []byte(idx), 0o600); err != nil {
		t.Fatal(err)
	}
	return st, m
}

func dest(t *testing.T) pull.Destination {
	d, err := pull.ParseDestination("oci:" + filepath.Join(t.TempDir(), "d"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestTakeBackAccepts(t *testing.T) {
	st, m := layout(t)
	if err := st.TakeBack(dest(t), &pull.Result{Digest: m}, os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(st.Path, "index.json"))
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("index.json mode %v, %v", fi.Mode(), err)
	}
}

func TestTakeBackRefuses(t *testing.T) {
	for name, plant := range map[string]func(st *pull.Stage){
		"symlink": func(st *pull.Stage) {
			_ = os.Symlink("/etc/shadow", filepath.Join(st.Path, "blobs", "sha256", strings.Repeat("a", 64)))
		},
		"fifo": func(st *pull.Stage) {
			_ = mkfifo(filepath.Join(st.Path, "blobs", "sha256", strings.Repeat("b", 64)))
		},
		"hard link": func(st *pull.Stage) {
			outside := filepath.Join(st.Root, "outside")
			_ = os.WriteFile(outside, []byte("x"), 0o600)
			_ = os.Link(outside, filepath.Join(st.Path, "blobs", "sha256", strings.Repeat("c", 64)))
		},
		"bad digest": func(st *pull.Stage) {
			_ = os.WriteFile(filepath.Join(st.Path, "blobs", "sha256", strings.Repeat("d", 64)), []byte("not it"), 0o600)
		},
	} {
		t.Run(name, func(t *testing.T) {
			st, m := layout(t)
			plant(st)
			err := st.TakeBack(dest(t), &pull.Result{Digest: m}, os.Getuid(), os.Getgid())
			if err == nil || failure.CodeOf(err) != failure.Verification {
				t.Fatalf("err = %v, want a verification error", err)
			}
		})
	}
	st, _ := layout(t)
	err := st.TakeBack(dest(t), &pull.Result{Digest: "sha256:" + strings.Repeat("e", 64)}, os.Getuid(), os.Getgid())
	if err == nil || !strings.Contains(err.Error(), "does not reference the reported manifest") {
		t.Fatalf("a manifest the child did not store must be refused: %v", err)
	}
}
