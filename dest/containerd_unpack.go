package dest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/diff"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/labels"
	"github.com/containerd/containerd/v2/pkg/rootfs"
	"github.com/containerd/platforms"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// unpackAhead applies an image's layers for the snapshotter in order,
// each as soon as its blob is in the content store, while the blobs after
// it are still being written: what img.Unpack does after the last write
// (rootfs.ApplyLayerWithOpts per layer, then the uncompressed label on a
// layer it applied), started earlier. The image's own Unpack runs after
// it as before: it finds every snapshot, applies nothing and labels the
// config to the top one.
//
// It does nothing (Unpack does it all, after the writes) where Unpack
// would not simply apply these layers: a config that does not parse as an
// image config (read back from the content store, as Unpack reads it), a
// platform with OS features (Unpack checks the snapshotter supports it
// first), or diff IDs that do not match the layers. The caller starts it
// only for the manifest Unpack picks (unpackPicks).
type unpackAhead struct {
	cancel context.CancelFunc
	// ready has a channel per layer digest, closed once its write is
	// done (closed, under mu, records which); the map itself is not
	// changed after startUnpack.
	ready  map[digest.Digest]chan struct{}
	mu     sync.Mutex
	closed map[digest.Digest]bool
	failed atomic.Bool // the unpacker stopped on an error: no more writes
	done   chan error
}

// errUnpackStopped ends the writes once the unpacker has failed: its
// error is the import's.
var errUnpackStopped = errors.New("the unpack ahead failed")

// startUnpack starts the unpacker for manifest m, whose config is already
// in the content store, or returns nil where it does nothing (see
// unpackAhead). Its methods are nil-safe: on nil they let Unpack do it all.
func (d *containerdDest) startUnpack(ctx context.Context, c *containerd.Client, m *ocispec.Manifest) *unpackAhead {
	cs := c.ContentStore()
	// images.RootFS and images.ConfigPlatform, in one read.
	raw, err := content.ReadBlob(ctx, cs, m.Config)
	if err != nil {
		return nil
	}
	var cfg ocispec.Image
	if json.Unmarshal(raw, &cfg) != nil || len(cfg.OSFeatures) > 0 {
		return nil
	}
	var layers []rootfs.Layer
	for _, l := range m.Layers {
		if images.IsLayerType(l.MediaType) {
			layers = append(layers, rootfs.Layer{Blob: l})
		}
	}
	if len(layers) == 0 || len(layers) != len(cfg.RootFS.DiffIDs) {
		return nil
	}
	for i, dg := range cfg.RootFS.DiffIDs {
		if dg.Validate() != nil {
			return nil
		}
		layers[i].Diff = ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: dg}
	}
	sn, a := c.SnapshotService(d.set.Snapshotter), c.DiffService()

	ua := &unpackAhead{ready: map[digest.Digest]chan struct{}{}, closed: map[digest.Digest]bool{}, done: make(chan error, 1)}
	ctx, ua.cancel = context.WithCancel(ctx)
	for _, l := range m.Layers {
		ua.ready[l.Digest] = make(chan struct{})
	}
	name := d.spec.Ref
	go func() {
		ua.done <- ua.run(ctx, name, layers, sn, a, cs)
	}()
	return ua
}

// run applies the layers in order, each once written.
func (ua *unpackAhead) run(ctx context.Context, name string, layers []rootfs.Layer, sn snapshots.Snapshotter, a diff.Applier, cs content.Store) (err error) {
	defer func() {
		if err != nil {
			ua.failed.Store(true)
		}
	}()
	var chain []digest.Digest
	for _, l := range layers {
		select {
		case <-ua.ready[l.Blob.Digest]:
		case <-ctx.Done():
			return ctx.Err()
		}
		opts := []snapshots.Opt{snapshots.WithLabels(unpackSnapshotLabels(l, chain))}
		unpacked, err := rootfs.ApplyLayerWithOpts(ctx, l, chain, sn, a, opts, nil)
		if err != nil {
			return fmt.Errorf("apply layer error for %q: %w", name, err) // Unpack's words
		}
		if unpacked {
			info := content.Info{Digest: l.Blob.Digest, Labels: map[string]string{labels.LabelUncompressed: l.Diff.Digest.String()}}
			if _, err := cs.Update(ctx, info, "labels."+labels.LabelUncompressed); err != nil {
				return fmt.Errorf("labelling %s %s: %w", l.Blob.Digest, labels.LabelUncompressed, err)
			}
		}
		chain = append(chain, l.Diff.Digest)
	}
	return nil
}

// labelSnapshotParent is containerd's unpacker's label of a layer's
// snapshot naming its parent's chain ID (core/unpack: labelSnapshotParent).
const labelSnapshotParent = "containerd.io/snapshot/parent-chain-id"

// unpackSnapshotLabels are the labels containerd's unpacker (core/unpack
// Unpacker.unpack, which client.Pull and the CRI's pull run) sets on the
// snapshot of layer l applied on chain (the diff IDs below it), at Prepare
// and Commit: the layer's inherited annotations (containerd.io/snapshot/…,
// but not the uid and gid mappings: layerSnapshotLabels), its chain ID
// (containerd.io/snapshot.ref), its diff ID and, above the first layer,
// its parent's chain ID.
func unpackSnapshotLabels(l rootfs.Layer, chain []digest.Digest) map[string]string {
	out := snapshots.FilterInheritedLabels(l.Blob.Annotations)
	if out == nil {
		out = map[string]string{}
	}
	delete(out, snapshots.LabelSnapshotUIDMapping)
	delete(out, snapshots.LabelSnapshotGIDMapping)
	out[snapshots.LabelSnapshotRef] = identity.ChainID(append(slices.Clip(chain), l.Diff.Digest)).String()
	out[snapshots.LabelSnapshotDiffID] = l.Diff.Digest.String()
	if len(chain) > 0 {
		out[labelSnapshotParent] = identity.ChainID(chain).String()
	}
	return out
}

// stopped reports that the unpacker failed: the writes stop (their error
// is errUnpackStopped, and wait's the import's).
func (ua *unpackAhead) stopped() bool { return ua != nil && ua.failed.Load() }

// written reports one layer's write: done, its layer may be applied;
// failed, the unpacker stops (the import fails).
func (ua *unpackAhead) written(dg digest.Digest, err error) {
	if ua == nil {
		return
	}
	if err != nil {
		ua.cancel()
		return
	}
	ua.mu.Lock()
	defer ua.mu.Unlock()
	if ch, ok := ua.ready[dg]; ok && !ua.closed[dg] {
		ua.closed[dg] = true
		close(ch)
	}
}

// wait stops the unpacker if the writes did not all succeed and returns
// its error once it has stopped; nothing of it runs after wait returns.
func (ua *unpackAhead) wait(writeErr error) error {
	if ua == nil {
		return nil
	}
	if writeErr != nil {
		ua.cancel()
	}
	err := <-ua.done
	ua.cancel()
	return err
}

// parallel is how many layers putAll writes at once: one, in order, when
// they are unpacked as they arrive (the first layer's apply starts once
// it alone is written, and the writes keep ahead of the applies, which
// take longer a byte), else putParallel.
func (ua *unpackAhead) parallel() int {
	if ua == nil {
		return putParallel
	}
	return 1
}

// unpackPicks reports whether Unpack, given the registry's index (its
// manifests) as the image's target, picks the manifest dg: images.Manifest
// keeps the instances whose platform the matcher matches (or that name
// none), sorts them with its Less (those without a platform last) and
// takes the first.
func unpackPicks(manifests []ocispec.Descriptor, dg digest.Digest, matcher platforms.MatchComparer) bool {
	var descs []ocispec.Descriptor
	for _, m := range manifests {
		if m.Platform == nil || matcher.Match(*m.Platform) {
			descs = append(descs, m)
		}
	}
	sort.SliceStable(descs, func(i, j int) bool {
		if descs[i].Platform == nil {
			return false
		}
		if descs[j].Platform == nil {
			return true
		}
		return matcher.Less(*descs[i].Platform, *descs[j].Platform)
	})
	return len(descs) > 0 && descs[0].Digest == dg
}
