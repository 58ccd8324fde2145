package pull

import (
	"context"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/internal/failure"
	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/manifest"
	"go.podman.io/image/v5/types"
	"golang.org/x/sys/unix"
)

// checkSpace is the pre-flight space check, run after the tag is resolved
// and before any blob is fetched: the declared sizes of what the copy will
// write (the manifests, the config and the layers of the selected instance,
// or of every instance with --all-architectures), less the blobs DEST
// already has (st.Known: the copy skips them), must fit in the space an
// unprivileged writer has on the staging area's filesystem, which is DEST's
// (staging is beside DEST so that the commit is a rename). An archive DEST
// needs about twice: containers/image writes temporary files there before
// the archive itself. Declared sizes are compressed sizes: a docker-archive
// (uncompressed layers) may still fill the disk; ENOSPC during the copy is
// exit 9 too.
//
// Instance manifests are read through the attempt's guarded source, whose
// cache (manifestCache) keeps them for the copy: nothing is fetched twice.
//
// It returns what the copy is about to copy, as declared (the resolved
// event): the instance chosen, the distinct layers and the sizes of the
// distinct configs and layers, DEST's included.
func (p *Request) checkSpace(ctx context.Context, sys *types.SystemContext, named reference.Named, top digest.Digest, raw []byte, mime string, g *guard, remote func(types.ImageReference) types.ImageSource, st *Stage) (*declared, error) {
	decl := &declared{}
	seen := map[digest.Digest]bool{}
	declare := func(bi types.BlobInfo, config bool) {
		if seen[bi.Digest] {
			return
		}
		seen[bi.Digest] = true
		if !config {
			decl.layers++
		}
		if bi.Size > 0 {
			decl.size += bi.Size
			if config {
				decl.configSize += bi.Size
			}
		}
	}
	known := map[digest.Digest]bool{}
	for _, k := range st.Known {
		known[digest.Digest(k.Digest)] = true
	}
	need := int64(len(raw))
	counted := map[digest.Digest]bool{}
	add := func(bi types.BlobInfo) {
		if bi.Size > 0 && !known[bi.Digest] && !counted[bi.Digest] {
			counted[bi.Digest] = true
			need += bi.Size
		}
	}
	addImage := func(raw []byte, mime string) error {
		m, err := manifest.FromBlob(raw, mime)
		if err != nil {
			return verification(errBadDescriptor, "parsing the manifest (%s): %v", mime, err)
		}
		add(m.ConfigInfo())
		declare(m.ConfigInfo(), true)
		for _, l := range m.LayerInfos() {
			add(l.BlobInfo)
			declare(l.BlobInfo, false)
		}
		return nil
	}
	if manifest.MIMETypeIsMultiImage(mime) {
		list, err := manifest.ListFromBlob(raw, mime)
		if err != nil {
			return nil, verification(errBadDescriptor, "parsing the index: %v", err)
		}
		instances := list.Instances()
		if !p.AllArchitectures {
			d, err := list.ChooseInstance(sys)
			if err != nil {
				return nil, failure.Wrap(failure.NotFound, err, "choosing the instance of %s for %s", p.Reference, p.platformName())
			}
			instances = []digest.Digest{d}
			decl.instance = d
		}
		pinned, err := reference.WithDigest(reference.TrimNamed(named), top)
		if err != nil {
			return nil, failure.Wrap(failure.Internal, err, "")
		}
		ref, err := docker.NewReference(pinned)
		if err != nil {
			return nil, failure.Wrap(failure.Internal, err, "")
		}
		src, err := guardedRef{ImageReference: ref, g: g, remote: remote}.NewImageSource(ctx, sys)
		if err != nil {
			return nil, err
		}
		defer src.Close()
		for _, d := range instances {
			raw, mime, err := src.GetManifest(ctx, &d)
			if err != nil {
				return nil, err
			}
			need += int64(len(raw))
			if err := addImage(raw, mime); err != nil {
				return nil, err
			}
		}
	} else if err := addImage(raw, mime); err != nil {
		return nil, err
	}
	factor := ""
	switch p.Destination.Transport {
	case "oci-archive", "docker-archive":
		need *= 2
		factor = ", twice for an archive's temporary files"
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(st.Work, &fs); err != nil {
		return nil, failure.Wrap(failure.Destination, err, "reading the free space of DEST's filesystem")
	}
	free := int64(fs.Bavail) * int64(fs.Bsize)
	if need > free {
		return nil, failure.New(failure.Destination,
			"not enough space for %s: the image needs %d bytes (declared sizes of what DEST does not have yet%s), DEST's filesystem has %d free; free space there or choose another DEST",
			p.Reference, need, factor, free)
	}
	st.spare = free - need
	return decl, nil
}

// declared is what an attempt copies, as its manifests declare it (see
// checkSpace).
type declared struct {
	instance         digest.Digest // the instance chosen from an index ("" otherwise)
	layers           int
	size, configSize int64
}
