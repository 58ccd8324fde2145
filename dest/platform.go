package dest

import (
	"github.com/containerd/platforms"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/pullhelper/pullhelper/internal/wire"
	"go.podman.io/image/v5/manifest"
	"go.podman.io/image/v5/types"
)

// platformContext is the containers/image settings that choose pl's
// instance of an index (nil: this machine's).
func platformContext(pl *wire.Platform, sys *types.SystemContext) *types.SystemContext {
	if sys == nil {
		sys = &types.SystemContext{}
	}
	if pl != nil {
		sys.OSChoice, sys.ArchitectureChoice, sys.VariantChoice = pl.OS, pl.Architecture, pl.Variant
	}
	return sys
}

// platformName names the platform of e's instance.
func platformName(pl *wire.Platform) string {
	if pl == nil {
		return "this platform"
	}
	return "platform " + pl.String()
}

// checkPlatform checks that the instance the copy reported of the index
// it resolved is the one the parent chooses itself for the pull's
// platform, with the function the copy chose it with (containers/image's
// manifest.List.ChooseInstance): a copy cannot substitute another
// platform's image, however valid.
func checkPlatform(e Expect) error {
	list, err := manifest.ListFromBlob(e.IndexRaw, manifest.GuessMIMEType(e.IndexRaw))
	if err != nil {
		return badStaged("parsing the resolved index %s: %v", e.Digest, err)
	}
	want, err := list.ChooseInstance(platformContext(e.Platform, nil))
	if err != nil {
		return badStaged("index %s has no instance for %s: %v", e.Digest, platformName(e.Platform), err)
	}
	if want.String() != e.Instance {
		return badStaged("the copy stored instance %s of index %s, but %s's is %s", e.Instance, e.Digest, platformName(e.Platform), want)
	}
	return nil
}

// ctrdPlatform is the matcher containerd unpacks pl's image with (the
// CRI's, containerd's platforms.Only).
func ctrdPlatform(pl *wire.Platform) platforms.MatchComparer {
	return platforms.Only(ocispec.Platform{OS: pl.OS, Architecture: pl.Architecture, Variant: pl.Variant})
}
