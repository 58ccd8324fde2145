package dest_test

import (
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
