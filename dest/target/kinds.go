package target

import (
	"fmt"
	"path/filepath"
	"strings"

	"go.podman.io/image/v5/directory"
	"go.podman.io/image/v5/docker/archive"
	"go.podman.io/image/v5/docker/reference"
	ociarchive "go.podman.io/image/v5/oci/archive"
	ocilayout "go.podman.io/image/v5/oci/layout"
	"go.podman.io/image/v5/types"
)

// Kind is one transport of DEST: its name, the form usage and errors show,
// how its rest is split, and where the copy writes the staged image.
type Kind struct {
	// Name is the transport ("oci").
	Name string
	// Form is DEST's form for this transport ("oci:PATH[:TAG]").
	Form string
	// Split: the rest after "NAME:" is PATH[:REF] (false: all of it is
	// the path, as for dir:, or the kind's parser splits it itself).
	Split bool
	// staged is where containers/image writes, in the work directory dir.
	staged func(s Spec, dir string, known []KnownBlob) (types.ImageReference, error)
}

// kinds is every DEST transport, in the order usage and errors list them.
// Adding a destination means adding its entry here and its Stage, Verify
// and Commit in package dest (which checks that each has both).
var kinds = []Kind{
	{Name: "oci", Form: "oci:PATH[:TAG]", Split: true, staged: func(s Spec, dir string, known []KnownBlob) (types.ImageReference, error) {
		return layout(dir, s.Ref, known)
	}},
	{Name: "dir", Form: "dir:PATH", staged: func(_ Spec, dir string, _ []KnownBlob) (types.ImageReference, error) {
		return directory.NewReference(filepath.Join(dir, "image"))
	}},
	{Name: "oci-archive", Form: "oci-archive:PATH[:TAG]", Split: true, staged: func(s Spec, dir string, _ []KnownBlob) (types.ImageReference, error) {
		return ociarchive.NewReference(filepath.Join(dir, "image.tar"), s.Ref)
	}},
	{Name: "docker-archive", Form: "docker-archive:PATH[:REF]", Split: true, staged: func(s Spec, dir string, _ []KnownBlob) (types.ImageReference, error) {
		var tag reference.NamedTagged
		if s.Ref != "" {
			t, err := DockerTag(s.Ref)
			if err != nil {
				return nil, err
			}
			tag = t
		}
		return archive.NewReference(filepath.Join(dir, "image.tar"), tag)
	}},
	// A store is staged as an untagged OCI layout (REF is the store's
	// name, not the layout's), imported by the parent after Verify.
	{Name: "containers-storage", Form: "containers-storage:[DRIVER@GRAPHROOT+RUNROOT]REF", staged: storeLayout},
	{Name: "containerd", Form: "containerd:REF", staged: storeLayout},
}

func storeLayout(_ Spec, dir string, known []KnownBlob) (types.ImageReference, error) {
	return layout(dir, "", known)
}

func layout(dir, tag string, known []KnownBlob) (types.ImageReference, error) {
	ref, err := ocilayout.NewReference(filepath.Join(dir, "image"), tag)
	if err != nil {
		return nil, err
	}
	return withKnown(ref, known), nil
}

// Kinds is every DEST transport, in the order usage and errors list them.
func Kinds() []Kind { return append([]Kind(nil), kinds...) }

// Lookup is the kind of transport name.
func Lookup(name string) (Kind, bool) {
	for _, k := range kinds {
		if k.Name == name {
			return k, true
		}
	}
	return Kind{}, false
}

// Forms lists every kind's form, comma-separated, in Kinds' order: the
// alternatives an error about DEST offers.
func Forms() string {
	var f []string
	for _, k := range kinds {
		f = append(f, k.Form)
	}
	return strings.Join(f, ", ")
}

// StagedReference is where containers/image writes the image for DEST s:
// dir is the work directory as the copy sees it ("/tmp/stage" in the
// child, Stage.WorkPath in process), known the blobs DEST already has,
// which the copy reports as present without reading them (oci: and the
// stores, whose staging is an OCI layout). s is a Spec that dest parsed,
// possibly Anonymous.
func StagedReference(s Spec, dir string, known []KnownBlob) (types.ImageReference, error) {
	k, ok := Lookup(s.Transport)
	if !ok || !filepath.IsAbs(s.Path) {
		return nil, fmt.Errorf("destination %q: not a parsed destination", s.Raw)
	}
	return k.staged(s, dir, known)
}

// DockerTag is docker-archive's REF as a tagged name (":latest" when it
// has no tag); a digest is refused.
func DockerTag(ref string) (reference.NamedTagged, error) {
	n, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return nil, fmt.Errorf("parsing docker-archive reference %q: %w", ref, err)
	}
	n = reference.TagNameOnly(n)
	t, ok := n.(reference.NamedTagged)
	if !ok {
		return nil, fmt.Errorf("docker-archive reference %q must be NAME[:TAG], not a digest", ref)
	}
	return t, nil
}
