package dest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/internal/wire"
)

// The parent chooses the instance itself, with the copy's function
// (containers/image's manifest.List.ChooseInstance on SystemContext
// OSChoice/ArchitectureChoice/VariantChoice): an instance of the index that
// is another platform's is refused.
func TestCheckPlatform(t *testing.T) {
	d := func(c string) string { return "sha256:" + strings.Repeat(c, 64) }
	index := []byte(fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[
{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":%q,"size":10,"platform":{"os":"linux","architecture":"amd64"}},
{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":%q,"size":10,"platform":{"os":"linux","architecture":"arm64"}},
{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":%q,"size":10,"platform":{"os":"linux","architecture":"arm","variant":"v7"}}]}`,
		d("a"), d("b"), d("c")))
	arm64 := &wire.Platform{OS: "linux", Architecture: "arm64"}
	armv7 := &wire.Platform{OS: "linux", Architecture: "arm", Variant: "v7"}
	for _, tc := range []struct {
		pl       *wire.Platform
		instance string
		ok       bool
	}{
		{arm64, d("b"), true},
		{armv7, d("c"), true},
		{arm64, d("a"), false},
		{armv7, d("b"), false},
		{&wire.Platform{OS: "linux", Architecture: "s390x"}, d("a"), false},
	} {
		err := checkPlatform(Expect{Digest: d("f"), Instance: tc.instance, IndexRaw: index, Platform: tc.pl})
		if (err == nil) != tc.ok {
			t.Errorf("%s, instance %s: %v", tc.pl, tc.instance, err)
		}
	}
}

// A copy that stores a pinned index whole, reporting no instance, is
// refused unless the plan copies every architecture (review finding: the
// instance check ran only when the child named an instance).
func TestWholeIndexOnlyWithAllArchitectures(t *testing.T) {
	d := func(c string) string { return "sha256:" + strings.Repeat(c, 64) }
	index := []byte(fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[
{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":%q,"size":10,"platform":{"os":"linux","architecture":"amd64"}},
{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":%q,"size":10,"platform":{"os":"linux","architecture":"arm64"}}]}`,
		d("a"), d("b")))
	top := digestOf("sha256", index)
	for _, all := range []bool{false, true} {
		for _, withIndex := range []bool{false, true} {
			e := Expect{Digest: top, Pinned: top, Served: index, AllArchitectures: all}
			if withIndex {
				e.IndexRaw = index
			}
			err := checkExpect(e)
			if all && err != nil {
				t.Errorf("--all-architectures, index stored whole (IndexRaw %v): %v", withIndex, err)
			}
			if !all && (err == nil || !strings.Contains(err.Error(), "whole index")) {
				t.Errorf("one platform, index stored whole (IndexRaw %v): %v, want refused", withIndex, err)
			}
		}
	}
}
