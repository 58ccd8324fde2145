package dest_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/dest/target"
	"github.com/pullhelper/pullhelper/internal/failure"
)

// containerd:REF is a reference, not a path: normalised as the CRI names
// images, staged in the configured directory, and it survives the trip to
// the child (Anonymous, target.StagedReference) without its settings.
func TestContainerdParse(t *testing.T) {
	d, err := dest.Parse("containerd:busybox")
	must(t, err)
	if got := d.Spec().Ref; got != "docker.io/library/busybox:latest" {
		t.Fatalf("ref %q", got)
	}
	if got := d.String(); got != "containerd:docker.io/library/busybox:latest" {
		t.Fatalf("String %q", got)
	}
	// The staging name is the reference's own (sha256 of
	// docker.io/library/busybox:latest, 16 hex digits).
	const name = "image-de68ccc327e508f4"
	if got := d.Spec().Path; got != dest.DefaultContainerdStaging+"/"+name {
		t.Fatalf("path %q", got)
	}
	set, ok, err := dest.ConfigureContainerd(d, dest.ContainerdSettings{Staging: "/srv/stage", Address: "/x/c.sock", Pin: true})
	must(t, err)
	if !ok || set.Namespace != "k8s.io" || set.Snapshotter != "overlayfs" || set.Address != "/x/c.sock" || !set.Pin {
		t.Fatalf("settings %+v ok=%v", set, ok)
	}
	if got := d.Spec().Path; got != "/srv/stage/"+name {
		t.Fatalf("configured path %q", got)
	}
	c := d.Spec().Anonymous()
	if c.Ref != d.Spec().Ref || c.Path != dest.HiddenPath {
		t.Fatalf("child spec %+v", c)
	}
	ref, err := target.StagedReference(c, "/tmp", nil)
	must(t, err)
	if got := ref.StringWithinTransport(); got != "/tmp/image:" {
		t.Fatalf("staged reference %q (want an untagged layout)", got)
	}
}

// containerd:REPO:TAG@DIGEST is REPO@DIGEST, as the CRI names a pull by
// digest (CRIImageService.PullImage: reference.ParseDockerRef drops the
// tag): no REPO:TAG@DIGEST record; its digest must be the one pulled.
func TestContainerdRefByDigestDropsTheTag(t *testing.T) {
	dg := "sha256:" + strings.Repeat("a", 64)
	for _, raw := range []string{"containerd:r.io/app:1@" + dg, "containerd:r.io/app@" + dg} {
		d, err := dest.Parse(raw)
		must(t, err)
		if got := d.Spec().Ref; got != "r.io/app@"+dg {
			t.Errorf("%s: ref %q, want r.io/app@%s", raw, got, dg)
		}
		if got := dest.RefDigest(d.Spec()); got != dg {
			t.Errorf("%s: RefDigest %q", raw, got)
		}
	}
}

// Each image stages under a name of its own in the shared staging
// directory, so its partial-blob cache is its own: concurrent pulls of two
// images (pullhelper cri) each keep their bytes across a kill. The same
// image, however it is written, shares its name (the one DEST).
func TestContainerdStageNamePerImage(t *testing.T) {
	path := func(raw string) string {
		d, err := dest.Parse(raw)
		must(t, err)
		_, _, err = dest.ConfigureContainerd(d, dest.ContainerdSettings{Staging: "/srv/stage", Address: "/x/c.sock"})
		must(t, err)
		return d.Spec().Path
	}
	a, b := path("containerd:busybox"), path("containerd:r.io/app:1")
	if a == b {
		t.Fatalf("two images share the staging name %q", a)
	}
	if again := path("containerd:docker.io/library/busybox:latest"); again != a {
		t.Fatalf("busybox stages as %q and %q", a, again)
	}
}

func TestContainerdBadSettings(t *testing.T) {
	for _, raw := range []string{"containerd:", "containerd:UPPER/x", "containerd:a b"} {
		if _, err := dest.Parse(raw); failure.CodeOf(err) != failure.Usage {
			t.Errorf("%s: %v, want a usage error", raw, err)
		}
	}
	for _, s := range []dest.ContainerdSettings{{Namespace: "bad/ns"}, {Staging: "rel"}, {Staging: "/"}, {Address: "c.sock"}} {
		d, err := dest.Parse("containerd:registry.example/x:1")
		must(t, err)
		if _, _, err := dest.ConfigureContainerd(d, s); err == nil {
			t.Errorf("%+v accepted", s)
		}
	}
	o, err := dest.Parse("oci:/tmp/x")
	must(t, err)
	if _, ok, err := dest.ConfigureContainerd(o, dest.ContainerdSettings{Pin: true}); ok || err != nil {
		t.Errorf("oci: configured as containerd (ok=%v err=%v)", ok, err)
	}
}

// The containerd import writes the manifest the registry served, as
// containerd's own pull does (remotes.FetchHandler stores the fetched
// bytes), not the OCI one the staging converted a Docker schema 2 manifest
// to: Verify keeps the served bytes with the served media type, digest and
// size. A served manifest that names the staged blobs with other sizes (or
// other blobs: a conversion that changed a layer) is refused at Verify,
// as the import would read blobs that were not staged (servedIsStaged).
// The stage is an oci: DEST's (Stage needs containerd's socket; Verify
// does not).
func TestContainerdVerifyKeepsTheServedManifest(t *testing.T) {
	needRoot(t)
	im := newImg("served")
	m := descOf(t, im)
	const v2s2 = "application/vnd.docker.distribution.manifest.v2+json"
	docker := func(layerDigest string, layerSize int) []byte { return dockerManifest(m, layerDigest, layerSize) }
	// staged is what the child staged (the conversion of served).
	verify := func(staged img, served []byte) (dest.Destination, error) {
		d := parse(t, "containerd:h.example/t/docker:v1")
		od := parse(t, "oci:"+filepath.Join(t.TempDir(), "layout"))
		st, err := od.Stage(dest.StageOptions{Locks: testLocks})
		must(t, err)
		t.Cleanup(st.Remove)
		writeLayout(t, filepath.Join(st.WorkPath, "image"), staged, "") // target.StagedReference's layout
		e := dest.Expect{Digest: sha(served), Served: served, DestDigest: staged.digest}
		return d, d.Verify(bg, st, e)
	}

	_, err := verify(im, docker(m.Layers[0].Digest, m.Layers[0].Size+1))
	wantCode(t, err, failure.Verification, "names blob")
	// A conversion that stored the layer uncompressed (tieToServed
	// accepts the config's diff_id) staged no blob the served manifest
	// names.
	raw := layer("served")
	un := im
	un.layer = raw
	un.manifest = fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":%q,"size":%d},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":%q,"size":%d}]}`,
		m.Config.Digest, m.Config.Size, sha(raw), len(raw))
	un.digest = sha(un.manifest)
	_, err = verify(un, docker(m.Layers[0].Digest, m.Layers[0].Size))
	wantCode(t, err, failure.Verification, "names blob")

	served := docker(m.Layers[0].Digest, m.Layers[0].Size)
	// A DEST named by another digest than the one pulled.
	other := parse(t, "containerd:h.example/t/docker@"+im.digest)
	od := parse(t, "oci:"+filepath.Join(t.TempDir(), "layout"))
	st, err := od.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	t.Cleanup(st.Remove)
	writeLayout(t, filepath.Join(st.WorkPath, "image"), im, "")
	wantCode(t, other.Verify(bg, st, dest.Expect{Digest: sha(served), Served: served, DestDigest: im.digest}), failure.Verification, "names digest")

	d, err := verify(im, served)
	must(t, err)
	desc, raw, ok := dest.CtrdServed(d)
	if !ok || desc.MediaType != v2s2 || desc.Digest.String() != sha(served) || desc.Size != int64(len(served)) || string(raw) != string(served) {
		t.Fatalf("the import writes %+v (%s), want the served %s %s of %d bytes (the staged conversion is %s)", desc, raw, v2s2, sha(served), len(served), im.digest)
	}
}
