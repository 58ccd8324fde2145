package dest_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/internal/failure"
)

// convertedFixture is a Docker manifest list of one Docker schema 2
// instance (as a registry serves it) and the OCI index and manifest
// containers/image's copy --all stores for it in an oci: layout.
type convertedFixture struct {
	im       img    // the stored (converted) instance
	inst     []byte // the registry's instance
	platform string // its platform in the list
}

func newConverted(t *testing.T) convertedFixture {
	im := newImg("x")
	m := descOf(t, im)
	return convertedFixture{im: im, inst: dockerManifest(m, m.Layers[0].Digest, m.Layers[0].Size), platform: `{"architecture":"amd64","os":"linux"}`}
}

// list is the registry's manifest list naming inst (with no platform when
// c.platform is "").
func (c convertedFixture) list(inst []byte) []byte {
	pl := ""
	if c.platform != "" {
		pl = `,"platform":` + c.platform
	}
	return fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.list.v2+json","manifests":[{"mediaType":"application/vnd.docker.distribution.manifest.v2+json","digest":%q,"size":%d%s}]}`, sha(inst), len(inst), pl)
}

// index is the stored OCI index naming the converted instance for
// platform with size ("": its own) and index-level fields extra, as
// containers/image writes it when size and extra are "".
func (c convertedFixture) index(platform, size, extra string) []byte {
	if size == "" {
		size = fmt.Sprint(len(c.im.manifest))
	}
	return fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":%q,"size":%s,"platform":%s}]%s}`, c.im.digest, size, platform, extra)
}

// entries is a stored OCI index naming the converted instance n times.
func (c convertedFixture) entries(n int) []byte {
	e := fmt.Sprintf(`{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":%q,"size":%d,"platform":%s}`, c.im.digest, len(c.im.manifest), c.platform)
	return []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[` + strings.TrimSuffix(strings.Repeat(e+",", n), ",") + `]}`)
}

// plant makes the staged layout (holding c.im already) hold idx as its
// image, tagged tag, and returns what a child reports for it: the list
// resolved and served (naming inst), idx stored, served handed over.
func (c convertedFixture) plant(t *testing.T, st *dest.Stage, idx, inst []byte, served [][]byte, tag string) dest.Expect {
	t.Helper()
	stageTop(t, st, mtOCIIndex, idx, tag)
	l := c.list(inst)
	return dest.Expect{Digest: sha(l), Pinned: sha(l), IndexRaw: l, Served: l, DestDigest: sha(idx), AllArchitectures: true, ServedInstances: served}
}

// --all-architectures of a Docker manifest list into an oci: layout:
// containers/image stores the list converted to an OCI index and each
// Docker schema 2 instance converted to OCI (skopeo copy --all does the
// same). The stored index must be exactly containers/image's conversion of
// the registry's with the stored instances in place (checkConvertedIndex,
// before the graph walks it), and each stored instance the registry's
// instance in its place (Expect.ServedInstances, each hashing to the
// list's descriptor) converted: the same config, the same layers. Before,
// the stored index was refused as "an index inside an index".
func TestVerifyTiesAConvertedIndex(t *testing.T) {
	needRoot(t)
	c := newConverted(t)
	t.Run("accepted and committed as stored", func(t *testing.T) {
		dd, st, _, d := staged(t, c.im)
		idx := c.index(c.platform, "", "")
		e := c.plant(t, st, idx, c.inst, [][]byte{c.inst}, "a")
		must(t, dd.Verify(bg, st, e))
		if want := (dest.Counts{Manifests: 2, Layers: 1, Blobs: 2, Bytes: int64(len(c.im.config) + len(c.im.layer))}); st.Counts != want {
			t.Errorf("counts %+v, want %+v", st.Counts, want)
		}
		must(t, dd.Commit(bg, st))
		if got := readIndex(t, d)["a"]; got != sha(idx) {
			t.Fatalf("a is %s, want the stored index %s", got, sha(idx))
		}
	})
	// A Docker list entry with no platform: containers/image's conversion
	// writes an empty one (ociPlatformFromSchema2PlatformSpec).
	t.Run("a list entry with no platform", func(t *testing.T) {
		np := c
		np.platform = ""
		dd, st, _, _ := staged(t, np.im)
		e := np.plant(t, st, np.index(`{"architecture":"","os":""}`, "", ""), np.inst, [][]byte{np.inst}, "a")
		must(t, dd.Verify(bg, st, e))
	})
	// An OCI index whose instance has zstd layers: the copy marks its
	// entry (addCompressionAnnotations) when it knows the layers'
	// compression, so the stored index differs from the registry's by
	// that annotation alone, which the parent accepts only on an entry
	// whose registry instance has a zstd layer.
	t.Run("an OCI index with a zstd instance", func(t *testing.T) {
		m := descOf(t, c.im)
		zstd := fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":%q,"size":%d},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+zstd","digest":%q,"size":%d}]}`,
			m.Config.Digest, m.Config.Size, m.Layers[0].Digest, m.Layers[0].Size)
		entry := func(inst []byte, ann string) string {
			return fmt.Sprintf(`{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":%q,"size":%d%s,"platform":%s}`, sha(inst), len(inst), ann, c.platform)
		}
		const marked = `,"annotations":{"io.github.containers.compression.zstd":"true"}`
		for name, k := range map[string]struct {
			inst []byte
			ok   bool
		}{"marked": {zstd, true}, "a gzip instance marked": {c.im.manifest, false}} {
			t.Run(name, func(t *testing.T) {
				dd, st, _, _ := staged(t, c.im)
				img := filepath.Join(st.WorkPath, "image")
				must(t, os.WriteFile(filepath.Join(img, "blobs", "sha256", sha(zstd)[7:]), zstd, 0o644))
				if !bytes.Equal(k.inst, c.im.manifest) {
					must(t, os.Remove(filepath.Join(img, "blobs", "sha256", c.im.digest[7:])))
				} else {
					must(t, os.Remove(filepath.Join(img, "blobs", "sha256", sha(zstd)[7:])))
				}
				registry := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[` + entry(k.inst, "") + `]}`)
				storedIdx := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[` + entry(k.inst, marked) + `]}`)
				stageTop(t, st, mtOCIIndex, storedIdx, "a")
				e := dest.Expect{Digest: sha(registry), IndexRaw: registry, Served: registry, DestDigest: sha(storedIdx), AllArchitectures: true, ServedInstances: [][]byte{k.inst}}
				err := dd.Verify(bg, st, e)
				if k.ok {
					must(t, err)
				} else {
					wantCode(t, err, failure.Verification, "converted with the stored instances in place")
				}
			})
		}
	})
	// The stored index converted to a Docker list (which an OCI layout
	// never holds) is refused, though it is a conversion of the registry's.
	t.Run("the stored index a Docker list", func(t *testing.T) {
		dd, st, _, _ := staged(t, c.im)
		e := c.plant(t, st, c.list(c.im.manifest), c.inst, [][]byte{c.inst}, "a")
		wantCode(t, dd.Verify(bg, st, e), failure.Verification, "is not an index of the 1 manifests")
	})
	other := newImg("other")
	otherInst := dockerManifest(descOf(t, other), descOf(t, c.im).Layers[0].Digest, descOf(t, c.im).Layers[0].Size)
	for name, k := range map[string]struct {
		idx    []byte
		inst   []byte // the list's instance
		served [][]byte
		edit   func(e *dest.Expect)
		want   string
	}{
		"no instances handed over":                                  {c.index(c.platform, "", ""), c.inst, nil, nil, "handed over 0 of its 1 instances"},
		"an instance that is not the list's":                        {c.index(c.platform, "", ""), c.inst, [][]byte{append([]byte(" "), c.inst...)}, nil, "instance 1 handed over as served is"},
		"an instance stored for another platform":                   {c.index(`{"architecture":"arm64","os":"linux"}`, "", ""), c.inst, [][]byte{c.inst}, nil, "converted with the stored instances in place"},
		"an annotation added to the stored index":                   {c.index(c.platform, "", `,"annotations":{"k":"v"}`), c.inst, [][]byte{c.inst}, nil, "converted with the stored instances in place"},
		"a negative size in the stored index":                       {c.index(c.platform, "-1", ""), c.inst, [][]byte{c.inst}, nil, "not an image manifest of a size the destination holds"},
		"more entries than the registry's, refused before the walk": {c.entries(200), c.inst, [][]byte{c.inst}, nil, "is not an index of the 1 manifests"},
		"a stored instance of another image":                        {c.index(c.platform, "", ""), otherInst, [][]byte{otherInst}, nil, "names config"},
		"instances handed over without a converted index": {c.index(c.platform, "", ""), c.inst, [][]byte{c.inst}, func(e *dest.Expect) {
			e.DestDigest = "" // the index stored as served
		}, "did not store the whole index converted"},
		"instances handed over without a resolved index": {c.index(c.platform, "", ""), c.inst, [][]byte{c.inst}, func(e *dest.Expect) {
			e.IndexRaw = nil
		}, "did not store the whole index converted"},
	} {
		t.Run(name, func(t *testing.T) {
			dd, st, _, d := staged(t, c.im)
			e := c.plant(t, st, k.idx, k.inst, k.served, "a")
			if k.edit != nil {
				k.edit(&e)
			}
			wantCode(t, dd.Verify(bg, st, e), failure.Verification, k.want)
			if _, err := os.Lstat(d); !os.IsNotExist(err) {
				t.Fatalf("DEST was created: %v", err)
			}
		})
	}
}

// The containerd import of a converted index keeps the registry's list and
// instances (as containerd's own pull stores what it fetched), each
// instance naming exactly the staged blobs (servedIsStaged): an instance
// giving a layer another size is refused at Verify, which the oci: tie
// (config and layer digests) alone would let through.
func TestContainerdVerifyKeepsTheServedList(t *testing.T) {
	needRoot(t)
	c := newConverted(t)
	m := descOf(t, c.im)
	verify := func(inst []byte) (dest.Destination, dest.Expect, error) {
		d := parse(t, "containerd:h.example/t/list:v1")
		od := parse(t, "oci:"+filepath.Join(t.TempDir(), "layout"))
		st, err := od.Stage(dest.StageOptions{Locks: testLocks})
		must(t, err)
		t.Cleanup(st.Remove)
		writeLayout(t, filepath.Join(st.WorkPath, "image"), c.im, "")
		e := c.plant(t, st, c.index(c.platform, "", ""), inst, [][]byte{inst}, "")
		return d, e, d.Verify(bg, st, e)
	}
	_, _, err := verify(dockerManifest(m, m.Layers[0].Digest, m.Layers[0].Size+1))
	wantCode(t, err, failure.Verification, "names blob")

	d, e, err := verify(c.inst)
	must(t, err)
	got := dest.CtrdInstances(d)
	if len(got) != 2 || string(got[e.Digest]) != string(e.IndexRaw) || string(got[sha(c.inst)]) != string(c.inst) {
		t.Fatalf("the import writes %d manifests, want the registry's list %s and instance %s", len(got), e.Digest, sha(c.inst))
	}
	if _, _, ok := dest.CtrdServed(d); ok {
		t.Fatal("a single served manifest is set for a whole index")
	}
}
