package dest_test

import (
	"archive/tar"
	"bytes"
	"cmp"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/dest/target"
	"go.podman.io/image/v5/copy"
	ocilayout "go.podman.io/image/v5/oci/layout"
	"go.podman.io/image/v5/signature"
)

// indexSource writes an OCI layout (tagged "src") holding a multi-arch
// index of type listType ("": a Docker list without its mediaType field)
// with an OCI instance (zstd layers with zstd) and a Docker schema 2
// instance, as chosen; it returns the layout, the index and its instances
// as a registry would serve them.
func indexSource(t *testing.T, listType string, oci, zstdLayers, docker bool) (string, []byte, [][]byte, [][]byte) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	put := func(b []byte) string {
		p := filepath.Join(src, "blobs", "sha256", sha(b)[7:])
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, b, 0o644))
		return sha(b)
	}
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	must(t, tw.WriteHeader(&tar.Header{Name: "f", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg}))
	_, _ = tw.Write([]byte("x"))
	must(t, tw.Close())
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(tb.Bytes())
	must(t, zw.Close())
	var entries []string
	var served, configs [][]byte
	instance := func(arch, mt, cmt, lmt string, layer []byte) {
		// A config as docker build writes one: fields an OCI config has
		// not, which containers/image drops as it re-encodes it.
		cfg := fmt.Appendf(nil, `{"architecture":%q,"container_config":{"Cmd":["/bin/sh"]},"docker_version":"20.10.23","os":"linux","rootfs":{"type":"layers","diff_ids":[%q]}}`, arch, sha(tb.Bytes()))
		if strings.Contains(mt, "docker") {
			configs = append(configs, cfg)
		}
		m := fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":%q,"config":{"mediaType":%q,"digest":%q,"size":%d},"layers":[{"mediaType":%q,"digest":%q,"size":%d}]}`,
			mt, cmt, put(cfg), len(cfg), lmt, put(layer), len(layer))
		entries = append(entries, fmt.Sprintf(`{"mediaType":%q,"digest":%q,"size":%d,"platform":{"architecture":%q,"os":"linux"}}`, mt, put(m), len(m), arch))
		served = append(served, m)
	}
	if oci {
		layer, lmt := gz.Bytes(), "application/vnd.oci.image.layer.v1.tar+gzip"
		if zstdLayers {
			var zb bytes.Buffer
			w, err := zstd.NewWriter(&zb)
			must(t, err)
			_, _ = w.Write(tb.Bytes())
			must(t, w.Close())
			layer, lmt = zb.Bytes(), "application/vnd.oci.image.layer.v1.tar+zstd"
		}
		instance("amd64", "application/vnd.oci.image.manifest.v1+json", "application/vnd.oci.image.config.v1+json", lmt, layer)
	}
	if docker {
		instance("arm64", "application/vnd.docker.distribution.manifest.v2+json", "application/vnd.docker.container.image.v1+json", "application/vnd.docker.image.rootfs.diff.tar.gzip", gz.Bytes())
	}
	mt := ""
	if listType != "" {
		mt = fmt.Sprintf(`"mediaType":%q,`, listType)
	}
	idx := []byte(`{"schemaVersion":2,` + mt + `"manifests":[` + strings.Join(entries, ",") + `]}`)
	put(idx)
	must(t, os.WriteFile(filepath.Join(src, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644))
	must(t, os.WriteFile(filepath.Join(src, "index.json"), fmt.Appendf(nil, `{"schemaVersion":2,"manifests":[{"mediaType":%q,"digest":%q,"size":%d,"annotations":{"org.opencontainers.image.ref.name":"src"}}]}`,
		cmp.Or(listType, mtDockerList), sha(idx), len(idx)), 0o644))
	return src, idx, served, configs
}

// What containers/image's own copy --all writes into the staging (the
// child's copy) for every kind of index it changes is verified and
// committed: into an oci: layout a Docker list (with and without its
// mediaType) and an OCI index with a Docker instance are converted to OCI,
// and the entry of an OCI index's zstd instance is marked
// io.github.containers.compression.zstd; into dir: (which converts no
// type) only that mark changes the index. Before, each was refused (exit
// 8) as an index inside an index, and the zstd one by the first
// conversion check.
func TestConvertedIndexOfTheRealCopyIsVerified(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name           string
		listType       string
		oci, zstd, dkr bool
		dirConverts    bool // dir: changes the index too
	}{
		{"a Docker list", mtDockerList, false, false, true, false},
		// Into dir: the copy writes the list with the mediaType field it
		// had not (its clone has one): the parent's rebuild clones it too
		// (before, refused, exit 8).
		{"a Docker list without its mediaType", "", false, false, true, true},
		{"an OCI index with a Docker instance", mtOCIIndex, true, false, true, false},
		{"an OCI index with a zstd instance", mtOCIIndex, true, true, false, true},
		{"an OCI index with a zstd and a Docker instance", mtOCIIndex, true, true, true, true},
	} {
		for _, kind := range []string{"oci", "dir"} {
			t.Run(tc.name+" into "+kind, func(t *testing.T) {
				src, idx, served, configs := indexSource(t, tc.listType, tc.oci, tc.zstd, tc.dkr)
				dd, st, out := stageCopy(t, kind, src, copy.CopyAllImages)
				e := dest.Expect{Digest: sha(idx), IndexRaw: idx, Served: idx, AllArchitectures: true}
				converted := sha(out) != e.Digest
				if want := kind == "oci" || tc.dirConverts; converted != want {
					t.Fatalf("the copy changed the index: %v, want %v (%s)", converted, want, out)
				}
				if converted {
					e.DestDigest, e.ServedInstances, e.ServedConfigs = sha(out), served, configs
				}
				must(t, dd.Verify(bg, st, e))
				must(t, dd.Commit(bg, st))
			})
		}
	}
}

// stageCopy stages a fresh KIND: DEST and runs the child's copy
// (containers/image, the list selection given) of the OCI layout src
// (tagged "src") into its staging; it returns what the copy stored.
func stageCopy(t *testing.T, kind, src string, sel copy.ImageListSelection) (dest.Destination, *dest.Stage, []byte) {
	t.Helper()
	dd := parse(t, kind+":"+filepath.Join(t.TempDir(), "d"))
	st, err := dd.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	t.Cleanup(st.Remove)
	pc, err := signature.NewPolicyContext(&signature.Policy{Default: signature.PolicyRequirements{signature.NewPRInsecureAcceptAnything()}})
	must(t, err)
	defer func() { _ = pc.Destroy() }()
	srcRef, err := ocilayout.NewReference(src, "src")
	must(t, err)
	dstRef, err := target.StagedReference(dd.Spec(), st.WorkPath, st.Known)
	must(t, err)
	out, err := copy.Image(t.Context(), pc, dstRef, srcRef, &copy.Options{ImageListSelection: sel, RemoveSignatures: true})
	must(t, err)
	return dd, st, out
}
