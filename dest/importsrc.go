package dest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/opencontainers/go-digest"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/manifest"
	"go.podman.io/image/v5/types"
)

// verifiedSource is the containers-storage import's source: the tree Verify
// took back and checked, and nothing else. It serves the verified manifests
// (each re-hashed against its digest) and the staged blobs through the held
// directory descriptors, each read checked to be the inode taken back, and
// never anything from anywhere else: no urls (refused by the graph check
// too), no path, no network — unlike containers/image's oci: layout source,
// which fetches a descriptor's urls. A blob that is not staged (one the
// store already had, which the import reuses) is reported missing.
//
// The manifests are the registry's own bytes, as containers/image's copy
// from the registry would store them: the manifest the registry served
// (Expect.Served) rather than the OCI one the staging converted a Docker
// manifest to, and for one platform of an index the index itself
// (Expect.IndexRaw) as the top-level manifest, with the served instance the
// only one it serves. Both were checked by Verify against the digests the
// pull reported (and the graph: the same config and layers as the staged
// manifest, which the staged blobs were verified against).
type verifiedSource struct {
	t   *tree
	top string // the verified top-level manifest's digest
	// instance, when top is an index of which one platform was pulled,
	// is that platform's manifest: the only instance served (the import
	// cannot store another).
	instance string
	// mem are verified manifests the parent holds (the registry's bytes),
	// by digest: served instead of the staged ones.
	mem map[string][]byte
	// configs are verified configs the parent holds (the registry's
	// configs of Docker manifests the staging re-encoded), by digest.
	configs map[string][]byte
}

// verifiedRef is the types.ImageReference of a verifiedSource.
type verifiedRef struct{ src *verifiedSource }

type verifiedTransport struct{}

func (verifiedTransport) Name() string { return "pullhelper-verified" }
func (verifiedTransport) ParseReference(string) (types.ImageReference, error) {
	return nil, errors.New("pullhelper-verified: not parseable")
}
func (verifiedTransport) ValidatePolicyConfigurationScope(string) error { return nil }

var errVerifiedOnly = errors.New("the verified staging is a read-only import source")

func (r verifiedRef) Transport() types.ImageTransport         { return verifiedTransport{} }
func (r verifiedRef) StringWithinTransport() string           { return r.src.top }
func (r verifiedRef) DockerReference() reference.Named        { return nil }
func (r verifiedRef) PolicyConfigurationIdentity() string     { return "" }
func (r verifiedRef) PolicyConfigurationNamespaces() []string { return nil }
func (r verifiedRef) NewImage(context.Context, *types.SystemContext) (types.ImageCloser, error) {
	return nil, errVerifiedOnly
}
func (r verifiedRef) NewImageSource(context.Context, *types.SystemContext) (types.ImageSource, error) {
	return r.src, nil
}
func (r verifiedRef) NewImageDestination(context.Context, *types.SystemContext) (types.ImageDestination, error) {
	return nil, errVerifiedOnly
}
func (r verifiedRef) DeleteImage(context.Context, *types.SystemContext) error { return errVerifiedOnly }

func (s *verifiedSource) Reference() types.ImageReference { return verifiedRef{s} }
func (s *verifiedSource) Close() error                    { return nil }
func (s *verifiedSource) HasThreadSafeGetBlob() bool      { return true }

// GetManifest serves the verified manifest, or one of the verified index's
// instances (only the pulled one when the pull chose an instance), the
// parent's own copy when it holds one, else from staging, checked against
// its digest again.
func (s *verifiedSource) GetManifest(ctx context.Context, instance *digest.Digest) ([]byte, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	want := s.top
	if instance != nil {
		want = instance.String()
		if s.instance != "" && want != s.instance {
			return nil, "", fmt.Errorf("instance %s of index %s is not the verified %s", want, s.top, s.instance)
		}
	}
	alg, _, err := splitDigest(want)
	if err != nil {
		return nil, "", err
	}
	if b, ok := s.mem[want]; ok {
		if got := digestOf(alg, b); got != want {
			return nil, "", badStaged("manifest %s now hashes to %s", want, got)
		}
		return b, manifest.GuessMIMEType(b), nil
	}
	f, staged, err := s.t.ctrdBlob(want)
	if err != nil {
		return nil, "", err
	}
	if !staged {
		return nil, "", fmt.Errorf("manifest %s is not in the verified staging", want)
	}
	b, err := readAll(f, maxJSON)
	f.Close()
	if err != nil {
		return nil, "", err
	}
	if got := digestOf(alg, b); got != want {
		return nil, "", badStaged("manifest %s now hashes to %s", want, got)
	}
	return b, manifest.GuessMIMEType(b), nil
}

// GetBlob reads a staged, verified blob; its reads stop once ctx is done.
func (s *verifiedSource) GetBlob(ctx context.Context, info types.BlobInfo, _ types.BlobInfoCache) (io.ReadCloser, int64, error) {
	// Nothing of the tree is touched once ctx is done: an import Commit
	// stopped waiting for may go on after the staging was removed.
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	dg := info.Digest.String()
	if c, ok := s.configs[dg]; ok {
		return io.NopCloser(bytes.NewReader(c)), int64(len(c)), nil
	}
	f, staged, err := s.t.ctrdBlob(dg)
	if err != nil {
		return nil, 0, err
	}
	if !staged {
		return nil, 0, &os.PathError{Op: "open", Path: "verified staging blob " + dg, Err: os.ErrNotExist}
	}
	e := s.t.files[blobRel(dg)]
	if importReadHook != nil { // the test build only (hook_hostile_storage.go)
		importReadHook(ctx, dg)
	}
	return &ctxReader{ctx: ctx, f: f}, e.size, nil
}

// image is the manifest of the single image the import stores: the
// pulled instance of an index, else the top-level manifest (an index when
// every instance was staged: the import chooses the platform's).
func (s *verifiedSource) image(ctx context.Context) ([]byte, string, error) {
	if s.instance != "" {
		d := digest.Digest(s.instance)
		return s.GetManifest(ctx, &d)
	}
	return s.GetManifest(ctx, nil)
}

func (s *verifiedSource) GetSignatures(context.Context, *digest.Digest) ([][]byte, error) {
	return nil, nil
}

func (s *verifiedSource) LayerInfosForCopy(context.Context, *digest.Digest) ([]types.BlobInfo, error) {
	return nil, nil
}

// blobRel is the staged name of a verified digest.
func blobRel(dg string) string {
	alg, hx, _ := splitDigest(dg)
	return "blobs/" + alg + "/" + hx
}

// importReadHook, when set (the test build), runs before a blob is served
// to the import.
var importReadHook func(ctx context.Context, blob string)

// ctxReader reads f until ctx is done.
type ctxReader struct {
	ctx context.Context
	f   *os.File
}

func (r *ctxReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.f.Read(p)
}

func (r *ctxReader) Close() error { return r.f.Close() }
