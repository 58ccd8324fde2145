package pipeline

import (
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/wire"
	"github.com/pullhelper/pullhelper/pull"
)

// The result is built from the plan and what the parent verified: the
// report's claims of media type, credential and counts are not repeated as
// they are, and there is no field through which a child could name an
// image ID or a store.
func TestResultIsBuiltFromWhatWasVerified(t *testing.T) {
	man := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:` + strings.Repeat("c", 64) + `","size":2},"layers":[]}`)
	idx := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"` + digest.FromBytes(man).String() + `","size":` + "1" + `}]}`)
	p := &Plan{}
	p.Reference, p.Image, p.Retries = "reg.example:5000/app:1", "reg.example:5000/app", 2
	p.Signature = api.SignaturePolicy{Source: "system", File: "/etc/containers/policy.json"}
	p.Credentials = []wire.Credential{{Source: "pull-secret", File: "/s.json", Key: "reg.example:5000", Username: "u"}}
	p.Endpoints = []wire.Endpoint{{Host: "mirror.example"}, {Host: "reg.example:5000"}}
	verified := &dest.Stage{Counts: dest.Counts{Manifests: 1, Layers: 1, Blobs: 2, Bytes: 50}}

	rep := &pull.Report{Digest: digest.FromBytes(man).String(), MediaType: "application/vnd.hostile.claim+json",
		Layers: 3, Bytes: 100, Attempts: 1000,
		Credential: &api.Credential{Source: "pull-secret", File: "/s.json", Key: "reg.example:5000", Username: "u"},
		Endpoints: []api.EndpointUse{{Host: "reg.example:5000", Manifests: 9, Blobs: 99, Bytes: 1 << 40}, {Host: strings.Repeat("h", 300), Blobs: 1},
			{Host: "evil.attacker.example:443", Manifests: 1, Blobs: 1, Bytes: 1}, {Host: "reg.example:5000", Blobs: 1}},
		Copied: pull.Copied{Manifest: man, Served: man}}
	res, err := p.result(rep, verified)
	if err != nil {
		t.Fatal(err)
	}
	if res.MediaType != "application/vnd.oci.image.manifest.v1+json" {
		t.Errorf("media type %q: the child's claim, not the verified manifest's", res.MediaType)
	}
	if res.ImageID != "" || res.Store != nil {
		t.Errorf("image id %q, store %+v for a layout", res.ImageID, res.Store)
	}
	if res.Reference != "reg.example:5000/app@"+rep.Digest || res.Image != p.Image || res.SignaturePolicy != p.Signature {
		t.Errorf("reference %q image %q policy %+v: not the plan's", res.Reference, res.Image, res.SignaturePolicy)
	}
	if res.Attempts != 3 {
		t.Errorf("attempts %d; want at most one per retry and credential (3)", res.Attempts)
	}
	// The counts are what was verified, not the child's tally; of its
	// endpoints only a host of the plan's, once, counts at most the
	// verified ones.
	if res.Layers != 1 || res.Bytes != 50 {
		t.Errorf("layers %d bytes %d: want the verified 1 and 50, not the report's", res.Layers, res.Bytes)
	}
	if want := (api.EndpointUse{Host: "reg.example:5000", Manifests: 2, Blobs: 2, Bytes: 50}); len(res.Endpoints) != 1 || res.Endpoints[0] != want {
		t.Errorf("endpoints %+v, want [%+v]", res.Endpoints, want)
	}
	if res.Credential == rep.Credential || *res.Credential != *rep.Credential {
		t.Errorf("credential %+v: want a copy of the plan's candidate", res.Credential)
	}

	// An index: its media type, from the index bytes.
	rep.Digest, rep.InstanceDigest, rep.Copied.IndexRaw = digest.FromBytes(idx).String(), digest.FromBytes(man).String(), idx
	if res, err = p.result(rep, &dest.Stage{}); err != nil || res.MediaType != "application/vnd.oci.image.index.v1+json" {
		t.Fatalf("index: %+v, %v", res, err)
	}
	// No manifest handed over hashes to the digest: nothing to tell the
	// media type from.
	rep.Copied.IndexRaw, rep.Copied.Served, rep.Copied.Manifest = nil, man, man
	if _, err = p.result(rep, &dest.Stage{}); failure.CodeOf(err) != failure.Verification {
		t.Fatalf("no manifest of the digest: %v", err)
	}
	// A credential never handed over is refused.
	rep.Copied.IndexRaw = idx
	rep.Credential = &api.Credential{Source: "pull-secret", File: "/other.json"}
	if _, err = p.result(rep, &dest.Stage{}); failure.CodeOf(err) != failure.Isolation {
		t.Fatalf("a foreign credential: %v", err)
	}
}

// A store DEST that stored the registry's manifest (containers-storage:,
// dest.Stage.ServedStored) has no destination digest in the result, though
// the staging converted the manifest (the report names its digest).
func TestResultNoDestinationDigestWhenServedStored(t *testing.T) {
	man := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{"mediaType":"application/vnd.docker.container.image.v1+json","digest":"sha256:` + strings.Repeat("c", 64) + `","size":2},"layers":[]}`)
	p := &Plan{}
	p.Reference, p.Image = "reg.example:5000/app:1", "reg.example:5000/app"
	conv := "sha256:" + strings.Repeat("d", 64)
	rep := &pull.Report{Digest: digest.FromBytes(man).String(), DestinationDigest: conv, Copied: pull.Copied{Served: man}}
	res, err := p.result(rep, &dest.Stage{})
	if err != nil || res.DestinationDigest != conv {
		t.Fatalf("a layout: destination digest %q, %v; want %s", res.DestinationDigest, err, conv)
	}
	res, err = p.result(rep, &dest.Stage{ServedStored: true})
	if err != nil || res.DestinationDigest != "" {
		t.Fatalf("the served manifest stored: destination digest %q, %v; want none", res.DestinationDigest, err)
	}
}
