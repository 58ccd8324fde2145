package dest

import (
	"encoding/json"
	"reflect"
	"testing"
)

// mergeIndex is containers/image's ociImageDestination.addManifest: a tag
// moves to the new entry and the old image stays, untagged; an untagged
// entry of the same digest is replaced, not duplicated; other entries and
// their fields are kept.
func TestMergeIndexAsAddManifest(t *testing.T) {
	d := func(dg, name string) string {
		if name == "" {
			return `{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"` + dg + `","size":1}`
		}
		return `{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"` + dg + `","size":1,"annotations":{"org.opencontainers.image.ref.name":"` + name + `"}}`
	}
	const a, b = "sha256:aaaa", "sha256:bbbb"
	for _, tc := range []struct {
		name  string
		old   []string
		entry string
		want  []string // digest:name of each entry, in order
	}{
		{"retag keeps the old image untagged", []string{d(a, "v1")}, d(b, "v1"), []string{a + ":", b + ":v1"}},
		{"a tag on an untagged image of the same digest replaces it", []string{d(a, "")}, d(a, "v1"), []string{a + ":v1"}},
		{"the same tag again is one entry", []string{d(a, "v1")}, d(a, "v1"), []string{a + ":v1"}},
		{"an untagged image already there is not added twice", []string{d(a, "")}, d(a, ""), []string{a + ":"}},
		{"other tags are kept", []string{d(a, "v0"), d(b, "v2")}, d(b, "v1"), []string{a + ":v0", b + ":v2", b + ":v1"}},
	} {
		old := `{"schemaVersion":2,"manifests":[`
		for i, e := range tc.old {
			if i > 0 {
				old += ","
			}
			old += e
		}
		old += `]}`
		out, err := mergeIndex([]byte(old), json.RawMessage(tc.entry))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var idx struct {
			Manifests []descriptor `json:"manifests"`
		}
		if err := json.Unmarshal(out, &idx); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range idx.Manifests {
			got = append(got, m.Digest+":"+m.Annotations[refNameAnnot])
			if m.MediaType == "" || m.Size != 1 {
				t.Errorf("%s: an entry lost its fields: %+v", tc.name, m)
			}
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
