package dest

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/pullhelper/pullhelper/dest/target"
	"github.com/pullhelper/pullhelper/internal/failure"
	"go.podman.io/image/v5/manifest"
)

// The media types of indexes (an index inside an index is refused) and of
// the image manifests a converted index names.
const (
	mtOCIIndex       = "application/vnd.oci.image.index.v1+json"
	mtDockerList     = "application/vnd.docker.distribution.manifest.list.v2+json"
	mtOCIManifest    = "application/vnd.oci.image.manifest.v1+json"
	mtDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
	refNameAnnot     = "org.opencontainers.image.ref.name"
	ociLayoutBody    = "1.0.0"
)

// splitDigest validates "sha256:<64 hex>" or "sha512:<128 hex>".
func splitDigest(d string) (alg, hx string, err error) {
	alg, hx, ok := strings.Cut(d, ":")
	if !ok || !target.IsHex(alg, hx) {
		return "", "", fmt.Errorf("%q is not a sha256 or sha512 digest", d)
	}
	return alg, hx, nil
}

func digestOf(alg string, b []byte) string {
	h := hasher(alg)
	h.Write(b)
	return alg + ":" + hex.EncodeToString(h.Sum(nil))
}

type descriptor struct {
	MediaType   string            `json:"mediaType,omitempty"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	URLs        []string          `json:"urls,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type manifestDoc struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType,omitempty"`
	Config        *descriptor  `json:"config,omitempty"`
	Layers        []descriptor `json:"layers,omitempty"`
	Manifests     []descriptor `json:"manifests,omitempty"`
	FSLayers      []struct {
		BlobSum string `json:"blobSum"`
	} `json:"fsLayers,omitempty"`
}

func (m *manifestDoc) isIndex() bool {
	return m.MediaType == mtOCIIndex || m.MediaType == mtDockerList || m.Manifests != nil
}

func parseManifest(what string, b []byte) (*manifestDoc, error) {
	var m manifestDoc
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, badStaged("parsing %s: %v", what, err)
	}
	if m.FSLayers != nil {
		return nil, badStaged("%s is a Docker schema 1 manifest, which pullhelper does not verify", what)
	}
	if !m.isIndex() && m.Config == nil {
		return nil, badStaged("%s is neither an image manifest nor an index", what)
	}
	return &m, nil
}

// checkExpect checks what the copy reported against what the parent knows
// independently (the pinned digest, the raw index it resolved).
func checkExpect(e Expect) error {
	for _, d := range []string{e.Digest, e.Pinned, e.Instance, e.DestDigest} {
		if d == "" {
			continue
		}
		if _, _, err := splitDigest(d); err != nil {
			return badStaged("the reported digest %v", err)
		}
	}
	if e.Digest == "" {
		return badStaged("the copy reported no manifest digest")
	}
	if e.Pinned != "" && e.Pinned != e.Digest {
		return badStaged("the copy reported manifest %s, but the pull is pinned to %s", e.Digest, e.Pinned)
	}
	if e.Instance != "" && e.IndexRaw == nil {
		return badStaged("the copy reported instance %s of %s without the index it belongs to", e.Instance, e.Digest)
	}
	src := e.source()
	if e.Served == nil {
		return badStaged("the copy did not hand over the manifest it was served for %s", src)
	}
	salg, _, _ := splitDigest(src)
	if got := digestOf(salg, e.Served); got != src {
		return badStaged("the manifest handed over as served is %s, not the reported %s", got, src)
	}
	// The whole index only with --all-architectures: otherwise the copy
	// stores one platform's instance, which it must name (and which
	// checkPlatform then checks), however the plan was pinned.
	if e.Instance == "" && !e.AllArchitectures && manifest.MIMETypeIsMultiImage(manifest.GuessMIMEType(e.Served)) {
		return badStaged("the copy stored the whole index %s, but the pull copies one platform's image (no --all-architectures)", e.Digest)
	}
	if e.IndexRaw != nil {
		alg, _, _ := splitDigest(e.Digest)
		if got := digestOf(alg, e.IndexRaw); got != e.Digest {
			return badStaged("the resolved index is %s, not the reported %s", got, e.Digest)
		}
		if e.Instance != "" {
			m, err := parseManifest("the resolved index", e.IndexRaw)
			if err != nil {
				return err
			}
			found := false
			for _, d := range m.Manifests {
				found = found || d.Digest == e.Instance
			}
			if !found {
				return badStaged("instance %s is not one of the manifests of index %s", e.Instance, e.Digest)
			}
			if err := checkPlatform(e); err != nil {
				return err
			}
		}
	}
	return checkServedInstances(e)
}

// convertedIndex: every instance of an index was copied and the staging
// stored the index converted (--all-architectures into an oci: layout of a
// Docker manifest list, or of an OCI index with Docker schema 2 or zstd
// instances), so ServedInstances carries the registry's instances.
func (e Expect) convertedIndex() bool {
	return e.AllArchitectures && e.Instance == "" && e.IndexRaw != nil && e.DestDigest != ""
}

// checkServedInstances checks ServedInstances against the resolved index
// (IndexRaw, already checked against Digest): present exactly when the
// staging converted the whole index, one per manifest of the index, each
// hashing to its descriptor's digest with its size.
func checkServedInstances(e Expect) error {
	if !e.convertedIndex() {
		if e.ServedInstances != nil {
			return badStaged("the copy handed over the instances of %s as served, but it did not store the whole index converted", e.Digest)
		}
		return nil
	}
	idx, err := parseManifest("the resolved index", e.IndexRaw)
	if err != nil {
		return err
	}
	if !idx.isIndex() {
		return badStaged("the copy stored %s converted as an index, but the registry served an image manifest", e.Digest)
	}
	if len(e.ServedInstances) != len(idx.Manifests) {
		return badStaged("the copy stored index %s converted and handed over %d of its %d instances as served", e.Digest, len(e.ServedInstances), len(idx.Manifests))
	}
	for i, d := range idx.Manifests {
		alg, _, err := splitDigest(d.Digest)
		if err != nil {
			return badStaged("index %s names a manifest %v", e.Digest, err)
		}
		raw := e.ServedInstances[i]
		if got := digestOf(alg, raw); got != d.Digest || int64(len(raw)) != d.Size {
			return badStaged("instance %d handed over as served is %s (%d bytes), not index %s's %s (%d bytes)", i+1, got, len(raw), e.Digest, d.Digest, d.Size)
		}
	}
	return nil
}

// source is the digest of the manifest the registry served for what is
// stored: the instance of an index, or the reported manifest itself.
func (e Expect) source() string {
	if e.Instance != "" {
		return e.Instance
	}
	return e.Digest
}

// tieToServed checks that a stored manifest that is not the served one (a
// converted manifest: DestDigest) describes the same image: the same
// config, and each layer either the served blob or its uncompressed form,
// which the config names (rootfs.diff_ids). config loads the config blob
// (already verified by its digest) when a layer needs it. With no
// conversion the stored digest is the served one, checked by the caller.
func tieToServed(e Expect, stored *manifestDoc, config func(descriptor) ([]byte, error)) error {
	if e.DestDigest == "" {
		return nil
	}
	if e.convertedIndex() {
		return badStaged("a converted index is tied to the registry's by tieIndexToServed")
	}
	served, err := parseManifest("the served manifest", e.Served)
	if err != nil {
		return err
	}
	if served.isIndex() || stored.isIndex() {
		return badStaged("a converted manifest must be an image manifest, not an index")
	}
	if stored.Config.Digest != served.Config.Digest {
		if _, err := convertedConfig(e, served, stored); err != nil {
			return err
		}
	}
	if len(stored.Layers) != len(served.Layers) {
		return badStaged("the stored manifest has %d layers, the served one %d", len(stored.Layers), len(served.Layers))
	}
	var diffIDs []string
	for i, l := range stored.Layers {
		if l.Digest == served.Layers[i].Digest {
			continue
		}
		if diffIDs == nil {
			b, err := config(*stored.Config)
			if err != nil {
				return err
			}
			ids, err := configDiffIDs(b)
			if err != nil {
				return badStaged("parsing config %s: %v", stored.Config.Digest, err)
			}
			diffIDs = append(ids, "")
		}
		if i >= len(diffIDs)-1 || l.Digest != diffIDs[i] {
			return badStaged("stored layer %d is %s: neither the served layer %s nor its uncompressed form", i+1, l.Digest, served.Layers[i].Digest)
		}
	}
	return nil
}

// checkConvertedIndex checks the staged top of a converted index (raw,
// described by d) before the graph walks it: it must be exactly
// containers/image's conversion of the registry's index (IndexRaw) with
// each instance replaced by the stored one in its place, its digest, size
// and image manifest media type, as the copy writes it (copyMultipleImages:
// EditInstances, then ConvertToMIMEType to the type the layout takes). So
// every other byte is the registry's (platforms, annotations, order, the
// number of entries the graph then walks), and tieIndexToServed ties each
// stored instance to the registry's in its place.
//
// ociOnly: the staging is an OCI layout, which holds OCI indexes and
// manifests only (the copy converts a Docker list and Docker instances);
// else (dir:) the index keeps the registry's type and the instances theirs.
func checkConvertedIndex(e Expect, d descriptor, raw []byte, ociOnly bool) error {
	alg, _, _ := splitDigest(d.Digest)
	if got := digestOf(alg, raw); got != d.Digest || int64(len(raw)) != d.Size {
		return badStaged("the stored index is %s (%d bytes), not %s (%d bytes)", got, len(raw), d.Digest, d.Size)
	}
	stored, err := parseManifest("the stored index "+d.Digest, raw)
	if err != nil {
		return err
	}
	// The copy parsed the registry's index as the type its response
	// named, which the parent does not hold: one without a mediaType
	// field parses as either list type, and either conversion is the
	// registry's.
	types := []string{manifest.GuessMIMEType(e.IndexRaw)}
	var probe struct {
		MediaType *string `json:"mediaType"`
	}
	if json.Unmarshal(e.IndexRaw, &probe) == nil && probe.MediaType == nil {
		types = []string{mtOCIIndex, mtDockerList}
	}
	var last error
	for _, mt := range types {
		if last = rebuildConverted(e, d, raw, stored, mt, ociOnly); last == nil {
			return nil
		}
	}
	return last
}

// rebuildConverted is checkConvertedIndex for the registry's index parsed
// as listType: the stored index must be its conversion, byte for byte.
func rebuildConverted(e Expect, d descriptor, raw []byte, stored *manifestDoc, listType string, ociOnly bool) error {
	list, err := manifest.ListFromBlob(e.IndexRaw, listType)
	if err != nil {
		return badStaged("parsing the resolved index %s: %v", e.Digest, err)
	}
	// As the copy takes it (copyMultipleImages: CloneInternal): a Docker
	// list's clone has its mediaType field whether the registry's had one
	// or not.
	list = list.Clone()
	// An OCI layout holds an OCI index, the conversion of the registry's;
	// dir: the registry's type, never converted (the bytes compared below
	// say the rest).
	if (ociOnly && stored.MediaType != mtOCIIndex) || len(stored.Manifests) != len(list.Instances()) {
		return badStaged("the stored index %s is not an index of the %d manifests of the registry's %s that the destination holds", d.Digest, len(list.Instances()), e.Digest)
	}
	ups := make([]manifest.ListUpdate, len(stored.Manifests))
	for i, m := range stored.Manifests {
		if _, _, err := splitDigest(m.Digest); err != nil {
			return badStaged("the stored index %s names a manifest %v", d.Digest, err)
		}
		if m.Size < 0 || (m.MediaType != mtOCIManifest && (ociOnly || m.MediaType != mtDockerManifest)) {
			return badStaged("manifest %d of the stored index %s is not an image manifest of a size the destination holds", i+1, d.Digest)
		}
		ups[i] = manifest.ListUpdate{Digest: digest.Digest(m.Digest), Size: m.Size, MediaType: m.MediaType}
	}
	if err := list.UpdateInstances(ups); err != nil {
		return badStaged("updating the registry's index %s: %v", e.Digest, err)
	}
	if list.MIMEType() == mtOCIIndex {
		if list, err = zstdMarked(list, stored, e.ServedInstances); err != nil {
			return badStaged("the registry's index %s: %v", e.Digest, err)
		}
	}
	if ociOnly && list.MIMEType() != mtOCIIndex {
		if list, err = list.ConvertToMIMEType(mtOCIIndex); err != nil {
			return badStaged("the stored index %s: %v", d.Digest, err)
		}
	}
	want, err := list.Serialize()
	if err != nil {
		return badStaged("serializing the registry's index %s: %v", e.Digest, err)
	}
	if !bytes.Equal(want, raw) {
		return badStaged("the stored index %s is not the registry's index %s converted with the stored instances in place", d.Digest, e.Digest)
	}
	return nil
}

// zstdAnnotation is what containers/image's copy adds to an OCI index
// entry whose instance has zstd layers (addCompressionAnnotations).
const zstdAnnotation = "io.github.containers.compression.zstd"

// zstdMarked is the registry's OCI index (instances updated) with the
// annotation containers/image's copy adds to the entry of an instance with
// zstd layers, on each entry the stored index marks so whose registry
// instance (served, checked against the index) has a zstd layer: the copy
// marks it when it knows the layers' compression (not for a layer it
// reused without reading it), so either form is its.
func zstdMarked(list manifest.List, stored *manifestDoc, served [][]byte) (manifest.List, error) {
	raw, err := list.Serialize()
	if err != nil {
		return nil, err
	}
	idx, err := manifest.OCI1IndexFromManifest(raw)
	if err != nil {
		return nil, err
	}
	for i := range idx.Manifests {
		if stored.Manifests[i].Annotations[zstdAnnotation] != "true" || idx.Manifests[i].Annotations[zstdAnnotation] == "true" || !hasZstdLayer(served[i]) {
			continue
		}
		if idx.Manifests[i].Annotations == nil {
			idx.Manifests[i].Annotations = map[string]string{}
		}
		idx.Manifests[i].Annotations[zstdAnnotation] = "true"
	}
	return idx, nil
}

// hasZstdLayer: the image manifest raw names a zstd layer.
func hasZstdLayer(raw []byte) bool {
	var m manifestDoc
	if json.Unmarshal(raw, &m) != nil {
		return false
	}
	for _, l := range m.Layers {
		if strings.HasSuffix(l.MediaType, "+zstd") {
			return true
		}
	}
	return false
}

// instanceExpects pairs each instance of a converted index (the staged
// one, stored, named by DestDigest) with the registry's instance in the
// same place (checkServedInstances checked those against IndexRaw;
// checkConvertedIndex the stored index against the registry's). Each pair
// is an Expect of one converted manifest: Instance the served digest,
// DestDigest the staged one (equal when that instance was not converted).
func instanceExpects(e Expect, stored *manifestDoc) ([]Expect, error) {
	served, err := parseManifest("the resolved index", e.IndexRaw)
	if err != nil {
		return nil, err
	}
	if !stored.isIndex() {
		return nil, badStaged("the copy stored %s, an image manifest, for index %s", e.DestDigest, e.Digest)
	}
	if len(stored.Manifests) != len(served.Manifests) {
		return nil, badStaged("the stored index %s has %d manifests, the registry's %s %d", e.DestDigest, len(stored.Manifests), e.Digest, len(served.Manifests))
	}
	out := make([]Expect, len(served.Manifests))
	ci := &configIndex{}
	for i, sv := range served.Manifests {
		st := stored.Manifests[i]
		out[i] = Expect{Digest: e.Digest, Instance: sv.Digest, Served: e.ServedInstances[i], ServedConfigs: e.ServedConfigs, cfgs: ci}
		if st.Digest != sv.Digest {
			out[i].DestDigest = st.Digest
		}
	}
	return out, nil
}

// tieIndexToServed ties a converted index to the registry's (see
// instanceExpects), each staged instance to the served one as tieToServed
// ties one converted manifest. load reads a staged manifest or config of
// the OCI layout (each verified by the graph already).
func tieIndexToServed(ctx context.Context, e Expect, stored *manifestDoc, load func(descriptor) ([]byte, error)) error {
	subs, err := instanceExpects(e, stored)
	if err != nil {
		return err
	}
	for i, sub := range subs {
		if err := failure.Context(ctx, "verifying the staged image"); err != nil {
			return err
		}
		if sub.DestDigest == "" {
			continue // stored as served: the graph checked its digest
		}
		raw, err := load(stored.Manifests[i])
		if err != nil {
			return err
		}
		m, err := parseManifest("the stored instance "+sub.DestDigest, raw)
		if err != nil {
			return err
		}
		if err := tieToServed(sub, m, load); err != nil {
			return err
		}
	}
	return nil
}

// servedIndex are the registry's manifests a store import keeps for a
// converted index (Expect.convertedIndex), by digest: the index and its
// instances, each instance naming exactly the staged blobs of the staged
// instance in its place (servedIsStaged), which Verify checked, and the
// registry's configs of the instances whose config the conversion
// re-encoded.
func servedIndex(ctx context.Context, t *tree, e Expect) (manifests, configs map[string][]byte, err error) {
	raw, err := stagedRaw(t, e.DestDigest)
	if err != nil {
		return nil, nil, err
	}
	stored, err := parseManifest("the staged index", raw)
	if err != nil {
		return nil, nil, err
	}
	subs, err := instanceExpects(e, stored)
	if err != nil {
		return nil, nil, err
	}
	manifests = map[string][]byte{e.Digest: e.IndexRaw}
	for _, sub := range subs {
		if err := failure.Context(ctx, "verifying the staged image"); err != nil {
			return nil, nil, err
		}
		if sub.DestDigest != "" {
			cfgs, err := servedIsStaged(t, sub)
			if err != nil {
				return nil, nil, err
			}
			for d, c := range cfgs {
				if configs == nil {
					configs = map[string][]byte{}
				}
				configs[d] = c
			}
		}
		manifests[sub.Instance] = sub.Served
	}
	return manifests, configs, nil
}

// servedIsStaged checks that the manifest the registry served (Expect.Served,
// checked against its digest by checkExpect), which a store import
// (containers-storage:, containerd:) stores in place of the staged one the
// staging converted it to (DestDigest), names
// exactly the blobs the staged manifest does, which Verify checked: the
// same config and layers, in order, with the same sizes, and no urls.
// tieToServed already ties the two; a conversion that changed a layer (its
// uncompressed form) is refused here, as the import would read blobs that
// are not staged.
//
// The config is the exception: a Docker schema 2 manifest's config is
// re-encoded as an OCI config by the conversion (convertedConfig checks the
// staged one is that re-encoding of the registry's); the registry's config
// (from Expect.ServedConfigs) is returned then, by digest, for the import to
// store with the served manifest; else nil.
func servedIsStaged(t *tree, e Expect) (map[string][]byte, error) {
	raw, err := stagedRaw(t, e.DestDigest)
	if err != nil {
		return nil, err
	}
	staged, err := parseManifest("the staged manifest", raw)
	if err != nil {
		return nil, err
	}
	served, err := parseManifest("the served manifest", e.Served)
	if err != nil {
		return nil, err
	}
	if served.isIndex() || staged.isIndex() {
		return nil, badStaged("a converted manifest must be an image manifest, not an index")
	}
	if len(served.Layers) != len(staged.Layers) {
		return nil, badStaged("the served manifest has %d layers, the staged one %d", len(served.Layers), len(staged.Layers))
	}
	src := e.source()
	var configs map[string][]byte
	for i, b := range append([]descriptor{*served.Config}, served.Layers...) {
		want := *staged.Config
		if i > 0 {
			want = staged.Layers[i-1]
		}
		if err := refuseURLs(src, b); err != nil {
			return nil, err
		}
		if i == 0 && b.Digest != want.Digest {
			cfg, err := convertedConfig(e, served, staged)
			if err != nil {
				return nil, err
			}
			configs = map[string][]byte{b.Digest: cfg}
			continue
		}
		if b.Digest != want.Digest || b.Size != want.Size {
			return nil, badStaged("the served manifest %s names blob %s (%d bytes) where the staged one names %s (%d bytes)", src, b.Digest, b.Size, want.Digest, want.Size)
		}
	}
	return configs, nil
}

// convertedConfig checks that the stored manifest's config, which is not
// the served manifest's, is containers/image's re-encoding of the
// registry's (a Docker schema 2 manifest stored as OCI: its config
// unmarshalled into an OCI image config and marshalled again,
// manifestSchema2.convertToManifestOCI1), the registry's config being one
// the child handed over (Expect.ServedConfigs) that hashes to the served
// manifest's config descriptor. It returns the registry's config.
func convertedConfig(e Expect, served, stored *manifestDoc) ([]byte, error) {
	sc, dc := *served.Config, *stored.Config
	if served.MediaType != mtDockerManifest || stored.MediaType != mtOCIManifest {
		return nil, badStaged("the stored manifest names config %s, the served one %s", dc.Digest, sc.Digest)
	}
	salg, _, err := splitDigest(sc.Digest)
	if err != nil {
		return nil, badStaged("the served manifest names a config %v", err)
	}
	ci := e.cfgs
	if ci == nil {
		ci = &configIndex{}
	}
	cfg, err := ci.lookup(e.ServedConfigs, salg, sc.Digest)
	if err != nil {
		return nil, err
	}
	if cfg == nil || int64(len(cfg)) != sc.Size {
		return nil, badStaged("the stored manifest names config %s, the served one %s, which the copy did not hand over", dc.Digest, sc.Digest)
	}
	key := reencoding{sc.Digest, dc.Digest, dc.Size}
	if ci.checked[key] {
		return cfg, nil
	}
	var oci ocispec.Image
	if err := json.Unmarshal(cfg, &oci); err != nil {
		return nil, badStaged("parsing the registry's config %s: %v", sc.Digest, err)
	}
	conv, err := json.Marshal(&oci)
	if err != nil {
		return nil, badStaged("re-encoding the registry's config %s: %v", sc.Digest, err)
	}
	dalg, _, err := splitDigest(dc.Digest)
	if err != nil {
		return nil, badStaged("the stored manifest names a config %v", err)
	}
	if digestOf(dalg, conv) != dc.Digest || int64(len(conv)) != dc.Size {
		return nil, badStaged("the stored config %s is not the OCI re-encoding of the registry's config %s", dc.Digest, sc.Digest)
	}
	if ci.checked == nil {
		ci.checked = map[reencoding]bool{}
	}
	ci.checked[key] = true
	return cfg, nil
}

// configIndex is Expect.ServedConfigs by digest, hashed once for each
// digest algorithm asked for, and the re-encodings convertedConfig has
// checked: one is shared by the instances of an index (instanceExpects),
// so a config many instances name is hashed and re-encoded once.
type configIndex struct {
	byAlg   map[string]map[string][]byte
	checked map[reencoding]bool
}

// reencoding is a registry's config and the stored config checked to be
// its re-encoding.
type reencoding struct {
	served, stored string
	size           int64
}

// lookup is the handed-over config hashing to dg (alg its algorithm), or
// nil; two handed-over configs alike are refused.
func (ci *configIndex) lookup(cfgs [][]byte, alg, dg string) ([]byte, error) {
	m, ok := ci.byAlg[alg]
	if !ok {
		m = make(map[string][]byte, len(cfgs))
		for _, c := range cfgs {
			d := digestOf(alg, c)
			if _, dup := m[d]; dup {
				return nil, badStaged("the copy handed over config %s twice", d)
			}
			m[d] = c
		}
		if ci.byAlg == nil {
			ci.byAlg = map[string]map[string][]byte{}
		}
		ci.byAlg[alg] = m
	}
	return m[dg], nil
}

// configDiffIDs is an image config's rootfs.diff_ids, as written (each
// caller checks them against what it has).
func configDiffIDs(config []byte) ([]string, error) {
	var c struct {
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(config, &c); err != nil {
		return nil, err
	}
	return c.RootFS.DiffIDs, nil
}

// want is the manifest the destination must store.
func (e Expect) want() string {
	switch {
	case e.DestDigest != "":
		return e.DestDigest
	case e.Instance != "":
		return e.Instance
	}
	return e.Digest
}

// store is a staged image as the graph check sees it: a taken-back tree
// or the members of a staged archive.
type store interface {
	has(rel string) (int64, bool)
	load(rel string, max int64) ([]byte, error)
	sum(rel, alg string) (string, error)
	// claim leaves a layer's digest to the store (true), which checks it
	// as it ingests the blob.
	claim(rel string) bool
}

// graph collects the blobs a manifest graph names.
type graph struct {
	ctx     context.Context // the pull's: check stops between blobs once it is done (nil: never)
	st      store
	path    func(alg, hex string, manifest bool) string
	known   map[string]int64
	blobs   map[string]descriptor
	usedOld []KnownBlob // DEST's blobs the image uses
	total   int64
	layers  map[string]bool // the layer digests the manifests name
	configs map[string]bool // the config digests (the parent reads them)
	nman    int             // the manifests (and index) verified
}

// counts is what the graph verified: its manifests, its distinct layers
// and blobs and the declared sizes of those blobs (configs and layers).
func (g *graph) counts() Counts {
	c := Counts{Manifests: g.nman, Blobs: len(g.blobs)}
	for d, b := range g.blobs {
		c.Bytes += b.Size
		if g.layers[d] {
			c.Layers++
		}
	}
	return c
}

// manifest loads, checks and parses the manifest named by d; top allows
// an index (its children may not be indexes).
func (g *graph) manifest(d descriptor, top bool, rel string) (*manifestDoc, error) {
	alg, _, err := splitDigest(d.Digest)
	if err != nil {
		return nil, badStaged("manifest %v", err)
	}
	if _, ok := g.st.has(rel); !ok {
		return nil, badStaged("manifest %s is not staged (%s)", d.Digest, rel)
	}
	b, err := g.st.load(rel, maxJSON)
	if err != nil {
		return nil, err
	}
	if got := digestOf(alg, b); got != d.Digest {
		return nil, badStaged("digest mismatch: %s hashes to %s, not %s", rel, got, d.Digest)
	}
	if d.Size >= 0 && d.Size != int64(len(b)) {
		return nil, badStaged("%s is %d bytes, its descriptor says %d", rel, len(b), d.Size)
	}
	g.total += int64(len(b))
	g.nman++
	m, err := parseManifest(rel, b)
	if err != nil {
		return nil, err
	}
	if m.isIndex() {
		if !top {
			return nil, badStaged("%s is an index inside an index (nested indexes are refused)", rel)
		}
		// Each distinct manifest is loaded and hashed once (an index may
		// name one many times), and the walk stops once the pull is done.
		type key struct {
			digest string
			size   int64
		}
		walked := map[key]bool{}
		for _, c := range m.Manifests {
			if g.ctx != nil {
				if err := failure.Context(g.ctx, "verifying the staged image"); err != nil {
					return nil, err
				}
			}
			calg, chx, err := splitDigest(c.Digest)
			if err != nil {
				return nil, badStaged("index %s names a manifest %v", d.Digest, err)
			}
			if err := refuseURLs(d.Digest, c); err != nil {
				return nil, err
			}
			if k := (key{c.Digest, c.Size}); !walked[k] {
				walked[k] = true
				if _, err := g.manifest(c, false, g.path(calg, chx, true)); err != nil {
					return nil, err
				}
			}
		}
		return m, nil
	}
	for _, l := range m.Layers {
		if g.layers == nil {
			g.layers = map[string]bool{}
		}
		g.layers[l.Digest] = true
	}
	if g.configs == nil {
		g.configs = map[string]bool{}
	}
	g.configs[m.Config.Digest] = true
	for _, b := range append([]descriptor{*m.Config}, m.Layers...) {
		if _, _, err := splitDigest(b.Digest); err != nil {
			return nil, badStaged("manifest %s names a blob %v", d.Digest, err)
		}
		if err := refuseURLs(d.Digest, b); err != nil {
			return nil, err
		}
		if b.Size < 0 {
			return nil, badStaged("manifest %s gives blob %s a negative size", d.Digest, b.Digest)
		}
		if old, ok := g.blobs[b.Digest]; ok && old.Size != b.Size {
			return nil, badStaged("blob %s is given two sizes (%d, %d)", b.Digest, old.Size, b.Size)
		}
		g.blobs[b.Digest] = b
	}
	return m, nil
}

// refuseURLs refuses a descriptor with "urls" (a foreign or
// non-distributable layer's download locations): the parent never
// contacts the network, and what it commits must not lead anyone who
// reads the image later as root (a store's import, containerd, a copy
// out of an oci: layout missing the blob) to fetch from where the
// manifest says. Refused rather than stripped: the manifest is the
// registry's, its digest pinned, and cannot be changed; foreign layers
// exist for Windows images only.
func refuseURLs(manifest string, d descriptor) error {
	if len(d.URLs) == 0 {
		return nil
	}
	return badStaged("manifest %s gives blob %s foreign urls (%d); pullhelper never fetches from a manifest's urls and does not store images that name them", manifest, d.Digest, len(d.URLs))
}

// check verifies every collected blob: staged and hashing to its name with
// the descriptor's size, or one of DEST's own (Known, same size).
func (g *graph) check(max int64) error {
	var ds []string
	for d, b := range g.blobs {
		ds = append(ds, d)
		g.total += b.Size
	}
	sort.Strings(ds)
	if max > 0 && g.total > max {
		return badStaged("the image is %d bytes, more than the %d allowed", g.total, max)
	}
	for _, d := range ds {
		if g.ctx != nil {
			if err := failure.Context(g.ctx, "verifying the staged image"); err != nil {
				return err
			}
		}
		b := g.blobs[d]
		alg, hx, _ := splitDigest(d)
		rel := g.path(alg, hx, false)
		size, staged := g.st.has(rel)
		if !staged {
			if ks, ok := g.known[d]; ok && ks == b.Size {
				g.usedOld = append(g.usedOld, KnownBlob{Digest: d, Size: ks})
				continue
			}
			return badStaged("the manifest names blob %s, which is neither staged nor already in the destination", d)
		}
		if size != b.Size {
			return badStaged("%s is %d bytes, its descriptor says %d", rel, size, b.Size)
		}
		if g.layers[d] && !g.configs[d] && g.st.claim(rel) {
			continue // the store checks its digest as it ingests it
		}
		got, err := g.st.sum(rel, alg)
		if err != nil {
			return err
		}
		if got != hx {
			return badStaged("digest mismatch: %s hashes to %s:%s", rel, alg, got)
		}
	}
	return nil
}

// ociResult is a verified OCI layout (staged directory or archive).
type ociResult struct {
	entry  json.RawMessage // the single descriptor of the staged index.json
	used   []KnownBlob
	counts Counts
}

// verifyOCI checks a staged OCI layout: oci-layout, an index.json with
// exactly the one entry for the expected manifest carrying the requested
// tag (none without one), then the graph below it.
func verifyOCI(ctx context.Context, st store, e Expect, tag string, known map[string]int64) (*ociResult, error) {
	b, err := st.load("oci-layout", 4096)
	if err != nil {
		return nil, err
	}
	var lay struct {
		Version string `json:"imageLayoutVersion"`
	}
	if err := json.Unmarshal(b, &lay); err != nil || lay.Version != ociLayoutBody {
		return nil, badStaged("oci-layout is not an OCI image layout %s marker", ociLayoutBody)
	}
	b, err = st.load("index.json", maxJSON)
	if err != nil {
		return nil, err
	}
	var idx struct {
		SchemaVersion int               `json:"schemaVersion"`
		Manifests     []json.RawMessage `json:"manifests"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, badStaged("parsing index.json: %v", err)
	}
	if len(idx.Manifests) != 1 {
		return nil, badStaged("index.json has %d entries; exactly one (the pulled image) is accepted", len(idx.Manifests))
	}
	var d descriptor
	if err := json.Unmarshal(idx.Manifests[0], &d); err != nil {
		return nil, badStaged("parsing index.json: %v", err)
	}
	want := e.want()
	if d.Digest != want {
		return nil, badStaged("index.json names %s, not the reported manifest %s", d.Digest, want)
	}
	if name := d.Annotations[refNameAnnot]; name != tag {
		if tag == "" {
			return nil, badStaged("index.json tags the image %q, but the destination has no tag", name)
		}
		return nil, badStaged("index.json tags the image %q, not the requested %q", name, tag)
	}
	g := &graph{ctx: ctx, st: st, known: known, blobs: map[string]descriptor{}, path: func(alg, hx string, _ bool) string {
		return "blobs/" + alg + "/" + hx
	}}
	alg, hx, _ := splitDigest(d.Digest)
	mrel := g.path(alg, hx, true)
	if d.Size < 0 {
		return nil, badStaged("index.json gives the manifest a negative size")
	}
	if e.convertedIndex() {
		raw, err := st.load(mrel, maxJSON)
		if err != nil {
			return nil, err
		}
		if err := checkConvertedIndex(e, d, raw, true); err != nil {
			return nil, err
		}
	}
	m, err := g.manifest(d, d.Digest == e.Digest || e.convertedIndex(), mrel)
	if err != nil {
		return nil, err
	}
	if err := g.check(e.MaxBytes); err != nil {
		return nil, err
	}
	load := func(c descriptor) ([]byte, error) {
		calg, chx, _ := splitDigest(c.Digest)
		return st.load(g.path(calg, chx, false), maxJSON)
	}
	if e.convertedIndex() {
		err = tieIndexToServed(ctx, e, m, load)
	} else {
		err = tieToServed(e, m, load)
	}
	if err != nil {
		return nil, err
	}
	// The entry committed is the parent's own, built from what it
	// verified: never the child's bytes (a JSON document can say one
	// thing to Go and another to other readers).
	raw, err := st.load(mrel, maxJSON)
	if err != nil {
		return nil, err
	}
	entry := map[string]any{"mediaType": manifestMediaType(m, raw), "digest": d.Digest, "size": len(raw)}
	if tag != "" {
		entry["annotations"] = map[string]string{refNameAnnot: tag}
	}
	b, err = json.Marshal(entry)
	if err != nil {
		return nil, badStaged("%v", err)
	}
	return &ociResult{entry: b, used: g.usedOld, counts: g.counts()}, nil
}

// manifestMediaType is the media type of a verified manifest: its own
// mediaType field, else what its shape says.
func manifestMediaType(m *manifestDoc, raw []byte) string {
	if m.MediaType != "" {
		return m.MediaType
	}
	if m.isIndex() {
		return mtOCIIndex
	}
	return "application/vnd.oci.image.manifest.v1+json"
}
