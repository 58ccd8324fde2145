package target

import (
	"os"
	"strings"
	"testing"
)

// The usage text, the man page and the README list every kind of Kinds:
// the table is the one list of DEST's transports.
func TestKindsDocumented(t *testing.T) {
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	man, usage, readme := read("../../docs/pullhelper.1.md"), read("../../cmd/pullhelper/main.go"), read("../../README.md")
	for _, k := range Kinds() {
		if !strings.Contains(man, "\n**"+k.Name+":**") {
			t.Errorf("docs/pullhelper.1.md has no entry **%s:**", k.Name)
		}
		if !strings.Contains(usage, k.Form) {
			t.Errorf("pull's usage text does not list %s", k.Form)
		}
		if !strings.Contains(readme, "`"+k.Name+":") {
			t.Errorf("README.md does not list %s:", k.Name)
		}
		if !strings.Contains(Forms(), k.Form) {
			t.Errorf("Forms() leaves out %s", k.Form)
		}
	}
}

// Every kind has a staged reference, and the copy's Spec (Anonymous) is
// enough to build it.
func TestStagedReference(t *testing.T) {
	w := t.TempDir()
	for _, c := range []struct {
		s                 Spec
		transport, within string
	}{
		{Spec{Transport: "oci", Path: "/d", Ref: "v1"}, "oci", "W/image:v1"},
		{Spec{Transport: "dir", Path: "/d"}, "dir", "W/image"},
		{Spec{Transport: "oci-archive", Path: "/d"}, "oci-archive", "W/image.tar:"},
		{Spec{Transport: "docker-archive", Path: "/d", Ref: "x"}, "docker-archive", "W/image.tar:docker.io/library/x:latest"},
		{Spec{Transport: "containers-storage", Path: "/g/pullhelper-import", Ref: "r.example/x:1"}, "oci", "W/image:"},
		{Spec{Transport: "containerd", Path: "/s/image", Ref: "r.example/x:1"}, "oci", "W/image:"},
	} {
		ref, err := StagedReference(c.s.Anonymous(), w, []KnownBlob{{Digest: "sha256:" + strings.Repeat("a", 64), Size: 1}})
		if err != nil {
			t.Errorf("%s: %v", c.s.Transport, err)
			continue
		}
		if want := strings.Replace(c.within, "W", w, 1); ref.Transport().Name() != c.transport || ref.StringWithinTransport() != want {
			t.Errorf("%s: %s:%s, want %s:%s", c.s.Transport, ref.Transport().Name(), ref.StringWithinTransport(), c.transport, want)
		}
	}
	if _, err := StagedReference(Spec{Transport: "nope", Path: "/d"}, "/w", nil); err == nil {
		t.Error("an unknown transport has a staged reference")
	}
	if got := PartialEntry("sha256", strings.Repeat("0", 64)); !IsPartialEntry(got) || IsPartialEntry("x"+got) {
		t.Errorf("PartialEntry %q", got)
	}
}
