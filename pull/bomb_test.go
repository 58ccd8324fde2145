package pull

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"go.podman.io/image/v5/copy"
	"go.podman.io/image/v5/docker/archive"
	"go.podman.io/image/v5/oci/layout"
	"go.podman.io/image/v5/signature"
	"go.podman.io/image/v5/types"
)

// writeBomb writes an OCI layout whose one layer is a small gzip stream
// that expands to a tar holding n zero bytes.
func writeBomb(t *testing.T, dir string, n int64) {
	t.Helper()
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	put := func(b []byte) string {
		s := sha256.Sum256(b)
		h := hex.EncodeToString(s[:])
		if err := os.WriteFile(filepath.Join(blobs, h), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return "sha256:" + h
	}
	// The gzip stream and the tar's digest are computed while streaming.
	pr, pw := io.Pipe()
	diff := sha256.New()
	go func() {
		zw, _ := gzip.NewWriterLevel(pw, gzip.BestCompression)
		tw := tar.NewWriter(io.MultiWriter(zw, diff))
		err := tw.WriteHeader(&tar.Header{Name: "zeros", Mode: 0o644, Size: n})
		if err == nil {
			_, err = io.Copy(tw, io.LimitReader(zeros{}, n))
		}
		if err == nil {
			err = tw.Close()
		}
		if err == nil {
			err = zw.Close()
		}
		pw.CloseWithError(err)
	}()
	gz, err := io.ReadAll(pr)
	if err != nil {
		t.Fatal(err)
	}
	layer := put(gz)
	config, _ := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux",
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diff.Sum(nil))}}})
	cd := put(config)
	man, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": len(config)},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer, "size": len(gz)}}})
	md := put(man)
	index, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{map[string]any{
		"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": len(man),
		"annotations": map[string]string{"org.opencontainers.image.ref.name": "latest"}}}})
	if err := os.WriteFile(filepath.Join(dir, "index.json"), index, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// A gzip bomb into docker-archive: (which stores layers uncompressed) is
// stopped by the guarded destination at the image limit; the same image
// under a larger limit expands fully, so the limit is what stopped it.
func TestGzipBombIntoDockerArchive(t *testing.T) {
	const expanded = 64 << 20
	dir := t.TempDir()
	writeBomb(t, filepath.Join(dir, "src"), expanded)
	pc, err := signature.NewPolicyContext(&signature.Policy{Default: signature.PolicyRequirements{signature.NewPRInsecureAcceptAnything()}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pc.Destroy() }()
	pullInto := func(name string, max int64) (int64, error) {
		src, err := layout.NewReference(filepath.Join(dir, "src"), "latest")
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, name)
		dst, err := archive.NewReference(out, nil)
		if err != nil {
			t.Fatal(err)
		}
		g := newGuard("local", max)
		_, err = copy.Image(context.Background(), pc, guardedRef{ImageReference: dst, g: g}, guardedRef{ImageReference: src, g: g},
			&copy.Options{ReportWriter: io.Discard, SourceCtx: &types.SystemContext{}, DestinationCtx: &types.SystemContext{}})
		return g.written.Load(), err
	}
	written, err := pullInto("big.tar", 1<<30)
	if err != nil || written < expanded {
		t.Fatalf("control copy under a 1 GiB limit: wrote %d bytes, err %v; want at least %d", written, err, expanded)
	}
	written, err = pullInto("capped.tar", 8<<20)
	if !errors.Is(err, errImageTooLarge) {
		t.Fatalf("under an 8 MiB limit: err %v, want errImageTooLarge", err)
	}
	if written > 8<<20+1<<20 {
		t.Errorf("wrote %d bytes past an 8 MiB limit", written)
	}
	if st, err := os.Stat(filepath.Join(dir, "capped.tar")); err == nil && st.Size() > 16<<20 {
		t.Errorf("the archive grew to %d bytes", st.Size())
	}
}
