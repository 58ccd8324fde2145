package dest

import (
	"context"
	"encoding/json"
	"slices"
	"strings"

	"github.com/pullhelper/pullhelper/dest/target"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/storage/pkg/regexp"
)

func init() {
	register("docker-archive", kind{new: func(s Spec) (Destination, error) {
		d := &dockerArchiveDest{archiveBase: archiveBase{base{s}, dockerArchiveKind}}
		if s.Ref != "" {
			t, err := target.DockerTag(s.Ref)
			if err != nil {
				return nil, err
			}
			d.tag = t
		}
		return d, nil
	}})
}

// dockerArchiveKind: a manifest.json member that is a JSON array, without
// which containers/image's docker/internal/tarfile Reader refuses an
// archive (and `docker load` too).
var dockerArchiveKind = archiveKind{what: "a docker-archive (a `docker save` tar)", member: "manifest.json", valid: func(b []byte) bool {
	var items []json.RawMessage
	return json.Unmarshal(b, &items) == nil && items != nil
}}

// dockerArchiveDest is docker-archive:PATH[:REF], a `docker save` tar
// holding one image; a commit replaces the file.
type dockerArchiveDest struct {
	archiveBase
	tag reference.NamedTagged
}

func (d *dockerArchiveDest) Stage(o StageOptions) (*Stage, error) { return d.stage(o) }

// Compiled when a docker-archive: DEST first needs them, not at every
// process's start (the hex repetitions make large programs).
var (
	dockerBlobRE   = regexp.Delayed(`^([0-9a-f]{64})\.(json|tar)$`)
	dockerLegacyRE = regexp.Delayed(`^[0-9a-f]{64}/(VERSION|json|layer\.tar)$`)
)

// Verify checks the archive's manifest.json (exactly one image, tagged with
// REF or untagged) against the stored manifest the copy reported, whose
// digest must be the expected one: its config and layers are the
// archive's, each hashing to its name. The legacy per-layer entries and
// repositories file that `docker save` also writes are accepted unverified
// (they carry no image content: symlinks to the layers and small JSON).
func (d *dockerArchiveDest) Verify(ctx context.Context, s *Stage, e Expect) error {
	if err := checkExpect(e); err != nil {
		return err
	}
	if e.Manifest == nil {
		return verr(badStaged("no stored manifest to check the docker-archive against"))
	}
	want := e.want()
	alg, _, _ := splitDigest(want)
	if got := digestOf(alg, e.Manifest); got != want {
		return verr(badStaged("the stored manifest is %s, not the reported %s", got, want))
	}
	m, err := parseManifest("the stored manifest", e.Manifest)
	if err != nil {
		return verr(err)
	}
	if m.isIndex() {
		return verr(badStaged("a docker-archive holds one image, not an index"))
	}
	f, err := takeBackFile(s)
	if err != nil {
		return verr(err)
	}
	defer f.Close()
	ts, err := readTar(f, func(n string) string {
		if dockerBlobRE.MatchString(n) {
			return "sha256"
		}
		return ""
	}, e.MaxBytes)
	if err != nil {
		return verr(err)
	}
	for n := range ts.symlinks {
		if !dockerLegacyRE.MatchString(n) {
			return verr(badStaged("archive member %s is a symbolic link", n))
		}
	}
	b, err := ts.load("manifest.json", maxJSON)
	if err != nil {
		return verr(err)
	}
	var items []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(b, &items); err != nil {
		return verr(badStaged("parsing manifest.json: %v", err))
	}
	if len(items) != 1 {
		return verr(badStaged("manifest.json holds %d images; exactly one is accepted", len(items)))
	}
	it := items[0]
	if err := d.checkRepoTags(it.RepoTags); err != nil {
		return verr(err)
	}
	want2 := append([]descriptor{*m.Config}, m.Layers...)
	names := append([]string{it.Config}, it.Layers...)
	if len(names) != len(want2) {
		return verr(badStaged("manifest.json names %d layers, the stored manifest %d", len(it.Layers), len(m.Layers)))
	}
	var total int64
	for i, dsc := range want2 {
		dalg, hx, err := splitDigest(dsc.Digest)
		if err != nil || dalg != "sha256" {
			return verr(badStaged("the stored manifest names %q, not a sha256 digest", dsc.Digest))
		}
		ext := ".tar"
		if i == 0 {
			ext = ".json"
		}
		if names[i] != hx+ext {
			return verr(badStaged("manifest.json names %s where the stored manifest has %s", names[i], dsc.Digest))
		}
		size, ok := ts.has(names[i])
		if !ok {
			return verr(badStaged("the archive has no %s", names[i]))
		}
		if size != dsc.Size {
			return verr(badStaged("%s is %d bytes, its descriptor says %d", names[i], size, dsc.Size))
		}
		got, err := ts.sum(names[i], "sha256")
		if err != nil {
			return verr(err)
		}
		if got != hx {
			return verr(badStaged("digest mismatch: %s hashes to sha256:%s", names[i], got))
		}
		total += size
	}
	if e.MaxBytes > 0 && total > e.MaxBytes {
		return verr(badStaged("the image is %d bytes, more than the %d allowed", total, e.MaxBytes))
	}
	if err := tieToServed(e, m, func(descriptor) ([]byte, error) { return ts.load(it.Config, maxJSON) }); err != nil {
		return verr(err)
	}
	if err := checkDockerLegacy(ts, it.Layers); err != nil {
		return verr(err)
	}
	err = ts.unused(func(n string) bool { return n == "repositories" || dockerLegacyRE.MatchString(n) })
	if err != nil {
		return verr(err)
	}
	s.verified = &verified{}
	blobs, layers := map[string]int64{}, map[string]bool{}
	for i, dsc := range want2 {
		blobs[dsc.Digest] = dsc.Size
		if i > 0 {
			layers[dsc.Digest] = true
		}
	}
	s.Counts.Manifests, s.Counts.Layers, s.Counts.Blobs = 1, len(layers), len(blobs)
	for _, size := range blobs {
		s.Counts.Bytes += size
	}
	return nil
}

// checkRepoTags: manifest.json tags the image with REF, and only with it
// (untagged without REF). Tags are compared normalised, as containers/image
// reads them (docker/internal/tarfile's Reader.ChooseManifestItem parses
// each RepoTag with reference.ParseNormalizedNamed); its Writer records
// the fully qualified name ("docker.io/library/app:1" for "app:1").
func (d *dockerArchiveDest) checkRepoTags(tags []string) error {
	var want []string
	if d.tag != nil {
		want = []string{d.tag.String()}
	}
	var got []string
	for _, t := range tags {
		n, err := reference.ParseNormalizedNamed(t)
		if err != nil {
			return badStaged("manifest.json tags the image %q, not a reference: %v", t, err)
		}
		got = append(got, n.String())
	}
	if !slices.Equal(got, want) {
		return badStaged("manifest.json tags the image %q, not %q", tags, want)
	}
	return nil
}

func (d *dockerArchiveDest) Commit(ctx context.Context, s *Stage) error { return d.commitFile(s) }

// checkDockerLegacy bounds the legacy members containers/image writes
// beside manifest.json (for old loaders): HEX/layer.tar must be a symlink
// to one of the verified layers ("../HEX.tar"), HEX/VERSION a few bytes,
// HEX/json JSON documents at most maxJSON (the top layer's carries the
// config's fields, re-marshalled) and repositories a small one. They carry no image
// content, so nothing else may hide there.
func checkDockerLegacy(ts *tarStore, layers []string) error {
	verified := map[string]bool{}
	for _, l := range layers {
		verified["../"+l] = true
	}
	for n, target := range ts.symlinks {
		if !strings.HasSuffix(n, "/layer.tar") || !verified[target] {
			return badStaged("archive member %s is a symbolic link to %q, not to a verified layer", n, target)
		}
	}
	for n := range ts.members {
		limit := int64(-1)
		switch {
		case n == "repositories":
			limit = 1 << 20
		case strings.HasSuffix(n, "/json") && dockerLegacyRE.MatchString(n):
			// The top layer's carries the config's fields, marshalled
			// again (the writer's writeLegacyMetadataLocked, which
			// HTML-escapes <, > and & into six bytes each): bounded by
			// maxJSON, the bound of a config, so a config that escapes
			// past it (a label of a megabyte of '&') is refused.
			limit = maxJSON
		case strings.HasSuffix(n, "/VERSION") && dockerLegacyRE.MatchString(n):
			limit = 16
		case strings.HasSuffix(n, "/layer.tar") && dockerLegacyRE.MatchString(n):
			return badStaged("archive member %s is a file, not a symlink to a verified layer", n)
		}
		if limit < 0 {
			continue
		}
		b, err := ts.load(n, limit)
		if err != nil {
			return err
		}
		if !strings.HasSuffix(n, "/VERSION") && !json.Valid(b) {
			return badStaged("archive member %s is not JSON", n)
		}
	}
	return nil
}
