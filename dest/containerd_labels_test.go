package dest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/rootfs"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	specs "github.com/opencontainers/image-spec/specs-go"
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

// unpackPicks picks the manifest containerd's images.Manifest (which
// Image.Unpack reads) picks from the same index, for the platforms
// --platform gives and this machine's default: run against containerd's
// own function over its local content store.
func TestUnpackPicksAsContainerd(t *testing.T) {
	ctx := context.Background()
	cs, err := local.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	write := func(mt string, v any) ocispec.Descriptor {
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		d := ocispec.Descriptor{MediaType: mt, Digest: digest.FromBytes(raw), Size: int64(len(raw))}
		if err := content.WriteBlob(ctx, cs, d.Digest.String(), bytes.NewReader(raw), d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	instance := func(p ocispec.Platform, withPlatform bool) ocispec.Descriptor {
		cfg := write(ocispec.MediaTypeImageConfig, ocispec.Image{Platform: p, Author: fmt.Sprint(withPlatform)})
		d := write(ocispec.MediaTypeImageManifest, ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2},
			MediaType: ocispec.MediaTypeImageManifest, Config: cfg})
		if withPlatform {
			d.Platform = &p
		}
		return d
	}
	here := platforms.DefaultSpec()
	plats := []ocispec.Platform{
		{OS: "linux", Architecture: "arm", Variant: "v7"},
		{OS: "linux", Architecture: "arm64"},
		{OS: "linux", Architecture: "amd64"},
		{OS: "linux", Architecture: "s390x"},
		here,
	}
	matchers := map[string]platforms.MatchComparer{"default": platforms.Default()}
	for _, p := range plats {
		matchers[platforms.Format(p)] = platforms.Only(p)
	}
	indexes := map[string][]ocispec.Descriptor{}
	for _, order := range [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 0, 3, 2}} {
		var ms []ocispec.Descriptor
		for _, i := range order {
			ms = append(ms, instance(plats[i], true))
		}
		indexes[fmt.Sprint(order)] = ms
		// One more instance without a platform (sorted last by containerd).
		indexes[fmt.Sprint(order)+"+none"] = append(slices.Clone(ms), instance(here, false))
	}
	// Only an instance without a platform: containerd reads its config's.
	indexes["none"] = []ocispec.Descriptor{instance(here, false)}
	for in, ms := range indexes {
		idx := write(ocispec.MediaTypeImageIndex, ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2},
			MediaType: ocispec.MediaTypeImageIndex, Manifests: ms})
		for mn, m := range matchers {
			want, err := images.Manifest(ctx, cs, idx, m)
			if err != nil {
				if !errdefs.IsNotFound(err) {
					t.Fatalf("index %s, %s: images.Manifest: %v", in, mn, err)
				}
				for _, d := range ms {
					if unpackPicks(ms, d.Digest, m) && d.Platform != nil {
						t.Errorf("index %s, %s: containerd picks nothing, unpackPicks picks %s", in, mn, d.Digest)
					}
				}
				continue
			}
			picked := 0
			for _, d := range ms {
				mf, err := content.ReadBlob(ctx, cs, d)
				if err != nil {
					t.Fatal(err)
				}
				var got ocispec.Manifest
				if err := json.Unmarshal(mf, &got); err != nil {
					t.Fatal(err)
				}
				if unpackPicks(ms, d.Digest, m) {
					picked++
					if got.Config.Digest != want.Config.Digest {
						t.Errorf("index %s, %s: unpackPicks picks %s, containerd the one with config %s", in, mn, d.Digest, want.Config.Digest)
					}
				}
			}
			if picked != 1 {
				t.Errorf("index %s, %s: unpackPicks picks %d manifests", in, mn, picked)
			}
		}
	}
}

// unpackSnapshotLabels are containerd's unpacker's (core/unpack
// Unpacker.unpack): the layer's inherited annotations without the uid and
// gid mappings, its chain ID, its diff ID and its parent's chain ID.
func TestUnpackSnapshotLabels(t *testing.T) {
	d0, d1 := digest.FromString("layer 0"), digest.FromString("layer 1")
	l := rootfs.Layer{
		Blob: ocispec.Descriptor{Annotations: map[string]string{
			"containerd.io/snapshot/remote": "x", "containerd.io/snapshot/uidmapping": "0:1000:1",
			"containerd.io/snapshot/gidmapping": "0:1000:1", "org.example/other": "y",
		}},
		Diff: ocispec.Descriptor{Digest: d0},
	}
	got := unpackSnapshotLabels(l, nil)
	want := map[string]string{
		"containerd.io/snapshot/remote": "x",
		"containerd.io/snapshot.ref":    d0.String(), "containerd.io/snapshot/diff-id": d0.String(),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("layer 0: %v, want %v", got, want)
	}
	l = rootfs.Layer{Diff: ocispec.Descriptor{Digest: d1}}
	chain := make([]digest.Digest, 1, 4)
	chain[0] = d0
	got = unpackSnapshotLabels(l, chain)
	want = map[string]string{
		"containerd.io/snapshot.ref":     identity.ChainID([]digest.Digest{d0, d1}).String(),
		"containerd.io/snapshot/diff-id": d1.String(), "containerd.io/snapshot/parent-chain-id": d0.String(),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("layer 1: %v, want %v", got, want)
	}
	if chain[:2][1] != "" {
		t.Errorf("the caller's chain was written to: %v", chain[:2])
	}
}
