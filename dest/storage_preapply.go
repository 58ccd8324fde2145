package dest

import (
	"context"
	"errors"
	"fmt"
	"go.podman.io/storage/pkg/archive"
	"io"
	"os"

	"github.com/opencontainers/go-digest"
	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/manifest"
	"go.podman.io/image/v5/types"
	"go.podman.io/storage"
)

// Applying the layers before containers/image's import.
//
// containers/image's storage destination reads each layer blob through a
// decompressor into a temporary file while it computes the uncompressed
// digest (putBlobToPendingFile), then applies that file (createNewLayer →
// PutLayer), one layer after the other. preApply gives the store the
// verified blobs instead, with the same two decompressions and no copy:
// each layer's DiffID is computed from its blob first (decompressed and
// hashed, the next layer's while the store applies this one) and compared
// with the config's, then the store applies the blob under that DiffID.
// A layer is created only under an ID derived from a DiffID computed here
// from its bytes (never from the config's word alone: a kill or another
// pull must never find a layer whose ID names content it does not hold).
// The layer gets the ID containers/image gives it (layerID: the DiffID's
// hex for the first, the digest of "PARENT+DIFFID" above it), so that the
// import that follows finds every layer by its blob's digest
// (tryReusingBlobAsPending, LayersByCompressedDigest) and by that ID
// (commitLayer), applies nothing and writes only the image record, last, as
// before. A layer whose DiffID is not the config's is refused with
// containers/image's words, before anything of it is written.
//
// Only what the import would apply the same way is taken: a single image
// (an index's instances are left to the import), every layer a tar,
// gzip'd or not (zstd, encrypted and foreign types go to the import
// unchanged), as many DiffIDs in the config as layers. Anything else, or a
// blob the staging does not hold (the store had it), stops the pre-apply
// there: what is left is the import's, as before.

// layerMediaTypes are the layer types preApply gives the store itself.
var layerMediaTypes = map[string]bool{
	imgspecv1.MediaTypeImageLayer:                     true,
	imgspecv1.MediaTypeImageLayerGzip:                 true,
	manifest.DockerV2Schema2LayerMediaType:            true,
	manifest.DockerV2SchemaLayerMediaTypeUncompressed: true,
}

// chainID is containers/image's layer ID (storage.layerID, without TOC):
// the DiffID's hex for a layer without parent, else the digest of
// "PARENT+DIFFID-HEX".
func chainID(parent string, diffID digest.Digest) string {
	if parent == "" {
		return diffID.Encoded()
	}
	return digest.Canonical.FromString(parent + "+" + diffID.Encoded()).Encoded()
}

// preApply applies the verified image's layers to store in order, each
// that is not there yet, and returns the IDs of the layers it created
// (the caller removes them if the import then fails). An error is the
// store's, a blob's that cannot be read, or a layer's whose DiffID is not
// the config's.
func preApply(ctx context.Context, store storage.Store, src *verifiedSource) ([]string, error) {
	man, mime, err := src.GetManifest(ctx, nil)
	if err != nil || manifest.MIMETypeIsMultiImage(mime) {
		return nil, nil // the import reads it and says what is wrong
	}
	m, err := manifest.FromBlob(man, mime)
	if err != nil {
		return nil, nil
	}
	layers := m.LayerInfos()
	cfg, err := stagedRaw(src.t, m.ConfigInfo().Digest.String())
	if err != nil {
		return nil, nil
	}
	ids, err := configDiffIDs(cfg)
	if err != nil || len(ids) != len(layers) || len(layers) == 0 {
		return nil, nil
	}
	diffIDs := make([]digest.Digest, len(ids))
	for i, d := range ids {
		diffIDs[i] = digest.Digest(d)
	}
	for i, l := range layers {
		if l.EmptyLayer || !layerMediaTypes[l.MediaType] || l.Digest.Validate() != nil || diffIDs[i].Validate() != nil ||
			diffIDs[i].Algorithm() != digest.Canonical {
			return nil, nil
		}
	}
	// The DiffIDs, computed from the blobs in order, one ahead of the
	// store: the channel holds the next layer's while the store applies
	// this one.
	type computed struct {
		diffID digest.Digest
		err    error
		absent bool // not staged
	}
	sums := make(chan computed, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		defer close(sums)
		for _, l := range layers {
			var c computed
			c.diffID, c.absent, c.err = blobDiffID(ctx, src, l.BlobInfo)
			select {
			case sums <- c:
			case <-stop:
				return
			}
			if c.err != nil || c.absent {
				return
			}
		}
	}()
	var created []string
	parent := ""
	for i, l := range layers {
		c, ok := <-sums
		if !ok || c.absent {
			return created, nil // the import takes it from here
		}
		if c.err != nil {
			return created, fmt.Errorf("reading layer %d (blob %s): %w", i, l.Digest, c.err)
		}
		if c.diffID != diffIDs[i] {
			return created, fmt.Errorf("layer %d (blob %s) does not match config's DiffID %q", i, l.Digest, diffIDs[i])
		}
		id := chainID(parent, c.diffID)
		if have, err := store.Layer(id); err == nil && have != nil {
			parent = id
			continue
		}
		rc, _, err := src.GetBlob(ctx, types.BlobInfo{Digest: l.Digest, Size: l.Size}, nil)
		if err != nil {
			return created, nil
		}
		// Both digests are known and checked: the blob's (Verify) and
		// its DiffID (computed above); the store records them.
		_, _, err = store.PutLayer(id, parent, nil, "", false,
			&storage.LayerOptions{OriginalDigest: l.Digest, UncompressedDigest: c.diffID}, rc)
		rc.Close()
		if errors.Is(err, storage.ErrDuplicateID) {
			parent = id // another pull applied it meanwhile
			continue
		}
		if err != nil {
			return created, fmt.Errorf("applying layer %d (blob %s): %w", i, l.Digest, err)
		}
		created = append(created, id)
		if importHook != nil { // the test build only (hook_hostile_storage.go)
			importHook(store, l.Digest)
		}
		parent = id
	}
	return created, nil
}

// blobDiffID is the digest of a staged layer blob decompressed (gzip or
// none, as the store detects it), or absent when the staging does not hold
// it.
func blobDiffID(ctx context.Context, src *verifiedSource, l types.BlobInfo) (digest.Digest, bool, error) {
	rc, _, err := src.GetBlob(ctx, types.BlobInfo{Digest: l.Digest, Size: l.Size}, nil)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) && errors.Is(err, os.ErrNotExist) {
			return "", true, nil
		}
		return "", false, err
	}
	defer rc.Close()
	un, err := archive.DecompressStream(rc)
	if err != nil {
		return "", false, err
	}
	defer un.Close()
	h := digest.Canonical.Digester()
	if _, err := io.Copy(h.Hash(), un); err != nil {
		return "", false, err
	}
	return h.Digest(), false, nil
}

// removeLayers deletes the layers preApply created for an import that
// failed, last first. A layer an image or another layer uses by now (a
// concurrent pull of the same layers) stays: the store refuses, and that
// is right.
func removeLayers(store storage.Store, ids []string) {
	for i := len(ids) - 1; i >= 0; i-- {
		_ = store.DeleteLayer(ids[i])
	}
}
