package dest

import (
	"reflect"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// childGCLabels numbers as containerd's images.SetChildrenMappedLabels:
// per key, the config unnumbered, layers l.N, manifests m.N.
func TestChildGCLabels(t *testing.T) {
	d := func(mt, h string) ocispec.Descriptor {
		return ocispec.Descriptor{MediaType: mt, Digest: digest.Digest("sha256:" + h)}
	}
	got := childGCLabels([]ocispec.Descriptor{
		d(ocispec.MediaTypeImageConfig, "c"), d(ocispec.MediaTypeImageLayerGzip, "l0"), d("application/vnd.docker.image.rootfs.diff.tar.gzip", "l1"),
	})
	want := map[string]string{
		"containerd.io/gc.ref.content.config": "sha256:c",
		"containerd.io/gc.ref.content.l.0":    "sha256:l0",
		"containerd.io/gc.ref.content.l.1":    "sha256:l1",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("manifest labels %v", got)
	}
	got = childGCLabels([]ocispec.Descriptor{d(ocispec.MediaTypeImageManifest, "a"), d("application/vnd.docker.distribution.manifest.v2+json", "b")})
	want = map[string]string{"containerd.io/gc.ref.content.m.0": "sha256:a", "containerd.io/gc.ref.content.m.1": "sha256:b"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("index labels %v", got)
	}
}
