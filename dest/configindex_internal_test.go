package dest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/internal/failure"
)

// Two handed-over configs alike are refused: the child sends each distinct
// config once, and the parent hashes each once (configIndex).
func TestConfigIndexRefusesDuplicates(t *testing.T) {
	a := []byte(`{"architecture":"amd64","os":"linux"}`)
	ci := &configIndex{}
	if _, err := ci.lookup([][]byte{a, a}, "sha256", digestOf("sha256", a)); failure.CodeOf(err) != failure.Verification || !strings.Contains(fmt.Sprint(err), "twice") {
		t.Fatalf("a config handed over twice: %v", err)
	}
	ci = &configIndex{}
	got, err := ci.lookup([][]byte{a}, "sha256", digestOf("sha256", a))
	if err != nil || string(got) != string(a) {
		t.Fatalf("lookup: %q, %v", got, err)
	}
	if got, _ := ci.lookup(nil, "sha256", digestOf("sha256", []byte("x"))); got != nil {
		t.Fatalf("a config not handed over found: %q", got)
	}
}

// The tie of a converted index stops between instances once the pull is
// done (its --timeout, a signal): an index of many instances naming one
// large config must not hold the root parent past it.
func TestTieIndexToServedStopsOnceDone(t *testing.T) {
	inst := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{"digest":"sha256:` + strings.Repeat("1", 64) + `","size":1},"layers":[]}`)
	list := fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":%q,"manifests":[{"mediaType":"application/vnd.docker.distribution.manifest.v2+json","digest":%q,"size":%d}]}`, mtDockerList, digestOf("sha256", inst), len(inst))
	stored := &manifestDoc{MediaType: mtOCIIndex, Manifests: []descriptor{{MediaType: mtOCIManifest, Digest: "sha256:" + strings.Repeat("2", 64), Size: 1}}}
	e := Expect{Digest: digestOf("sha256", list), IndexRaw: list, DestDigest: "sha256:" + strings.Repeat("3", 64), AllArchitectures: true, ServedInstances: [][]byte{inst}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	loads := 0
	load := func(descriptor) ([]byte, error) { loads++; return nil, fmt.Errorf("loaded") }
	err := tieIndexToServed(ctx, e, stored, load)
	if c := failure.CodeOf(err); c != failure.Interrupted || loads != 0 {
		t.Fatalf("with the pull done: %v (%s), %d loads", err, c, loads)
	}
	if err := tieIndexToServed(context.Background(), e, stored, load); err == nil || loads != 1 {
		t.Fatalf("with the pull going on: %v, %d loads", err, loads)
	}
}

// dir: converts no manifest: a changed index is accepted only with every
// entry the registry's in its place, its media type too (an entry retyped
// with the same digest passed the rebuild, which takes the stored types).
func TestInstancesAsServed(t *testing.T) {
	d := "sha256:" + strings.Repeat("4", 64)
	list := fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":%q,"manifests":[{"mediaType":%q,"digest":%q,"size":5}]}`, mtOCIIndex, mtDockerManifest, d)
	e := Expect{IndexRaw: list}
	for name, c := range map[string]struct {
		entry descriptor
		ok    bool
	}{
		"as served":        {descriptor{MediaType: mtDockerManifest, Digest: d, Size: 5}, true},
		"retyped":          {descriptor{MediaType: mtOCIManifest, Digest: d, Size: 5}, false},
		"another size":     {descriptor{MediaType: mtDockerManifest, Digest: d, Size: 6}, false},
		"another manifest": {descriptor{MediaType: mtDockerManifest, Digest: "sha256:" + strings.Repeat("5", 64), Size: 5}, false},
	} {
		err := instancesAsServed(e, &manifestDoc{Manifests: []descriptor{c.entry}})
		if (err == nil) != c.ok {
			t.Errorf("%s: %v", name, err)
		}
	}
}
