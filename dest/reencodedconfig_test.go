package dest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/internal/failure"
	"go.podman.io/image/v5/copy"
)

// A Docker schema 2 manifest stored into an oci: layout has its config
// re-encoded by containers/image (unmarshalled into an OCI image config and
// marshalled again: a docker build config's Docker-only fields dropped).
// The parent accepts the stored config only as that re-encoding of the
// registry's config, which the child hands over (Expect.ServedConfigs) and
// which must hash to the served manifest's config descriptor. Before, any
// config that did not re-encode to itself was refused.
func TestVerifyTiesAReEncodedConfig(t *testing.T) {
	needRoot(t)
	im := newImg("cfg")
	raw := layer("cfg")
	dockerCfg := fmt.Appendf(nil, `{"architecture":"amd64","container_config":{"Cmd":["sh"]},"docker_version":"20.10.23","os":"linux","rootfs":{"type":"layers","diff_ids":[%q]}}`, sha(raw))
	served := fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{"mediaType":"application/vnd.docker.container.image.v1+json","size":%d,"digest":%q},"layers":[{"mediaType":"application/vnd.docker.image.rootfs.diff.tar.gzip","size":%d,"digest":%q}]}`,
		len(dockerCfg), sha(dockerCfg), len(im.layer), sha(im.layer))
	src := filepath.Join(t.TempDir(), "src")
	must(t, os.MkdirAll(filepath.Join(src, "blobs", "sha256"), 0o755))
	for _, b := range [][]byte{im.layer, dockerCfg, served} {
		must(t, os.WriteFile(filepath.Join(src, "blobs", "sha256", sha(b)[7:]), b, 0o644))
	}
	must(t, os.WriteFile(filepath.Join(src, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644))
	must(t, os.WriteFile(filepath.Join(src, "index.json"), fmt.Appendf(nil, `{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.docker.distribution.manifest.v2+json","digest":%q,"size":%d,"annotations":{"org.opencontainers.image.ref.name":"src"}}]}`, sha(served), len(served)), 0o644))
	// stage runs the child's copy (containers/image) of src into a fresh
	// oci: DEST's staging and returns what the child reports.
	stage := func(t *testing.T) (dest.Destination, *dest.Stage, dest.Expect) {
		dd, st, out := stageCopy(t, "oci", src, copy.CopySystemImage)
		return dd, st, dest.Expect{Digest: sha(served), Served: served, DestDigest: sha(out), ServedConfigs: [][]byte{dockerCfg}}
	}
	t.Run("the re-encoding of the registry's config", func(t *testing.T) {
		dd, st, e := stage(t)
		must(t, dd.Verify(bg, st, e))
		must(t, dd.Commit(bg, st))
	})
	t.Run("the registry's config not handed over", func(t *testing.T) {
		dd, st, e := stage(t)
		e.ServedConfigs = nil
		wantCode(t, dd.Verify(bg, st, e), failure.Verification, "which the copy did not hand over")
	})
	t.Run("another config handed over", func(t *testing.T) {
		dd, st, e := stage(t)
		e.ServedConfigs = [][]byte{append([]byte(" "), dockerCfg...)}
		wantCode(t, dd.Verify(bg, st, e), failure.Verification, "which the copy did not hand over")
	})
	// The child stores a config of its own (the re-encoding with one field
	// more), and a manifest naming it.
	t.Run("a stored config that is not the re-encoding", func(t *testing.T) {
		dd, st, e := stage(t)
		img := filepath.Join(st.WorkPath, "image")
		other := fmt.Appendf(nil, `{"architecture":"amd64","os":"linux","author":"child","rootfs":{"type":"layers","diff_ids":[%q]}}`, sha(raw))
		m := fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":%q,"size":%d},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":%q,"size":%d}]}`,
			sha(other), len(other), sha(im.layer), len(im.layer))
		entries, err := os.ReadDir(filepath.Join(img, "blobs", "sha256"))
		must(t, err)
		for _, f := range entries {
			if "sha256:"+f.Name() != sha(im.layer) {
				must(t, os.Remove(filepath.Join(img, "blobs", "sha256", f.Name())))
			}
		}
		must(t, os.WriteFile(filepath.Join(img, "blobs", "sha256", sha(other)[7:]), other, 0o644))
		stageTop(t, st, "application/vnd.oci.image.manifest.v1+json", m, "")
		e.DestDigest = sha(m)
		wantCode(t, dd.Verify(bg, st, e), failure.Verification, "is not the OCI re-encoding of the registry's config")
	})
}
