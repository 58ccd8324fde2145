package target

import (
	"context"

	"github.com/opencontainers/go-digest"
	"go.podman.io/image/v5/types"
)

// KnownBlob is a blob DEST already has: the copy skips it, the parent
// checks at commit that DEST still has it with this size. It must be
// JSON-representable (it travels to the child).
type KnownBlob struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
	// Data is the blob itself when it is small (at most KnownDataMax, all
	// of them at most KnownDataTotal) and its digest checked by the parent:
	// a config, which containers/image always reads from the source even
	// when DEST has it; the copy serves it from here instead of asking the
	// registry (and containers/image checks its digest again).
	Data []byte `json:"data,omitempty"`
}

// Bounds of the known blobs' bytes handed to the copy.
const (
	KnownDataMax   = 64 << 10
	KnownDataTotal = 4 << 20
)

// withKnown wraps an oci: reference so that its destination reports the
// blobs DEST already has as present: containers/image then skips them
// without reading a byte (copy reports them as ProgressEventSkipped and
// "skipped: already exists"). The copy never sees DEST's files.
//
// The wrapper is a public types.ImageDestination; copy wraps it with
// internal/imagedestination.FromPublic, whose TryReusingBlobWithOptions
// calls our TryReusingBlob (unless a compression format is required,
// which pullhelper never asks for) and whose other private methods fall
// back to the public ones (PutBlob, Commit); the OCI layout destination
// supports no partial pulls and no signatures, so nothing is lost.
func withKnown(ref types.ImageReference, known []KnownBlob) types.ImageReference {
	if len(known) == 0 {
		return ref
	}
	m := map[digest.Digest]int64{}
	for _, k := range known {
		m[digest.Digest(k.Digest)] = k.Size
	}
	return knownRef{ImageReference: ref, known: m}
}

type knownRef struct {
	types.ImageReference
	known map[digest.Digest]int64
}

func (r knownRef) NewImageDestination(ctx context.Context, sys *types.SystemContext) (types.ImageDestination, error) {
	d, err := r.ImageReference.NewImageDestination(ctx, sys)
	if err != nil {
		return nil, err
	}
	return &knownDest{ImageDestination: d, ref: r, known: r.known}, nil
}

type knownDest struct {
	types.ImageDestination
	ref   knownRef
	known map[digest.Digest]int64
}

func (d *knownDest) Reference() types.ImageReference { return d.ref }

// TryReusingBlob answers from the known list first; the parent checks at
// commit that DEST still has each reused blob with this size.
func (d *knownDest) TryReusingBlob(ctx context.Context, info types.BlobInfo, cache types.BlobInfoCache, canSubstitute bool) (bool, types.BlobInfo, error) {
	if size, ok := d.known[info.Digest]; ok && (info.Size < 0 || info.Size == size) {
		return true, types.BlobInfo{Digest: info.Digest, Size: size, MediaType: info.MediaType}, nil
	}
	return d.ImageDestination.TryReusingBlob(ctx, info, cache, canSubstitute)
}
