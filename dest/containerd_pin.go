package dest

import (
	"context"
	"strings"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// pinnedByUs marks the image records whose io.cri-containerd.pinned
// label this tool set (--pin), so that it unpins only those: the CRI's own
// pins (its pinned_images, the sandbox image) are never touched.
const (
	pinnedByUsLabel = "io.pullhelper.pinned"
	pinnedByUsValue = "pinned"
)

// writeRecords creates or updates the image records names (REF first,
// then REPO@DIGEST and the image ID) at target, as the CRI's
// createOrUpdateImageReference does (Create, then on AlreadyExists an
// Update of the target and labels), with one difference in the pin: the
// CRI only ever adds io.cri-containerd.pinned (its pinned_images), this
// sets it exactly as this pull asks (--pin, or none: --pin=false or no
// --pin removes it), so that a prefetch is pinned only while the caller
// says so; a pin this tool did not set is removed only by an explicit
// --pin=false (Unpin). When REF moved (it targeted another image), what it leaves
// behind is unpinned: unpinLeftBehind.
func (d *containerdDest) writeRecords(ctx context.Context, is images.Store, names []string, target ocispec.Descriptor) error {
	labels := map[string]string{criImageLabel: criImageValue}
	if d.set.Pin {
		labels[criPinnedLabel] = criPinnedValue
		labels[pinnedByUsLabel] = pinnedByUsValue
	}
	// The labels an Update sets (an absent one is removed: containerd's
	// image store drops a label updated to "").
	paths := []string{"target", "labels." + criImageLabel, "labels." + criPinnedLabel, "labels." + pinnedByUsLabel}
	var moved ocispec.Descriptor
	if old, err := is.Get(ctx, d.spec.Ref); err == nil && old.Target.Digest != target.Digest {
		moved = old.Target
	} else if err != nil && !errdefs.IsNotFound(err) {
		return d.ctrdErr(err, "reading the image record "+d.spec.Ref)
	}
	for _, n := range names {
		rec := images.Image{Name: n, Target: target, Labels: labels}
		if _, err := is.Create(ctx, rec); err != nil {
			if !errdefs.IsAlreadyExists(err) {
				return d.ctrdErr(err, "creating the image record "+n)
			}
			p := paths
			if !d.set.Unpin {
				// Without --pin=false a pin this tool did not set (the
				// CRI's pinned_images, the sandbox image) stays the
				// CRI's: not unpinned without --pin, and not marked as
				// ours with it (a later pull without --pin would
				// otherwise remove it).
				if cur, err := is.Get(ctx, n); err == nil && cur.Labels[pinnedByUsLabel] == "" &&
					(!d.set.Pin || cur.Labels[criPinnedLabel] == criPinnedValue) {
					p = paths[:2]
				}
			}
			if _, err := is.Update(ctx, rec, p...); err != nil {
				return d.ctrdErr(err, "updating the image record "+n)
			}
		}
	}
	if moved.Digest != "" {
		return d.unpinLeftBehind(ctx, is, moved)
	}
	return nil
}

// unpinLeftBehind unpins the records of the image REF no longer names
// (old: its previous target) that this tool pinned (pinnedByUsLabel),
// unless a tag still names that image pinned: then it is still wanted.
// The records left are the old REPO@DIGEST and image ID (and any other
// tag's); nothing is deleted: the kubelet's image GC may now reclaim it.
func (d *containerdDest) unpinLeftBehind(ctx context.Context, is images.Store, old ocispec.Descriptor) error {
	recs, err := is.List(ctx, "target.digest=="+old.Digest.String())
	if err != nil {
		return d.ctrdErr(err, "listing the image records of "+old.Digest.String())
	}
	for _, r := range recs {
		if isTagRecord(r.Name) && r.Labels[criPinnedLabel] == criPinnedValue {
			return nil
		}
	}
	for _, r := range recs {
		if r.Labels[pinnedByUsLabel] == "" {
			continue
		}
		r.Labels = nil
		if _, err := is.Update(ctx, r, "labels."+criPinnedLabel, "labels."+pinnedByUsLabel); err != nil && !errdefs.IsNotFound(err) {
			return d.ctrdErr(err, "unpinning the image record "+r.Name)
		}
	}
	return nil
}

// isTagRecord: an image record named REPO:TAG (not REPO@DIGEST, not an
// image ID sha256:…).
func isTagRecord(name string) bool {
	return !strings.Contains(name, "@") && !strings.HasPrefix(name, "sha256:")
}
