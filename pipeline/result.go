package pipeline

import (
	"strings"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/pull"
	"go.podman.io/image/v5/manifest"
)

// result builds the caller's api.Result once the image is verified and
// committed, field by field, from the plan and what the parent verified
// itself; nothing of the copy's report (in the isolated child, the child's
// claims) is taken whole. By source:
//
//   - the plan: Image, Destination (a store's own name for it), the
//     SignaturePolicy, and the credential view (the plan's own candidate
//     that the report names; a credential it never handed over is refused);
//   - verified: Digest, InstanceDigest and DestinationDigest (Verify tied the
//     staged image to them; no DestinationDigest when the store DEST stored
//     the registry's manifest: dest.Stage.ServedStored), Reference (the plan's name with that digest),
//     MediaType (read from the top-level manifest bytes that hash to
//     Digest), ImageID and Store (what the store DEST reported after its
//     commit; nothing for oci:, dir: and the archives);
//   - verified: Layers and Bytes, the staged image's distinct layers and
//     the declared sizes of its distinct blobs (dest.Stage.Counts);
//   - the copy's tally, informational and bounded: Attempts (at most one
//     per retry and credential), Endpoints (only the plan's own
//     endpoint hosts, counts at most what was verified: planned) and
//     KeptBytes (at most Bytes).
//
// The caller adds Isolation, Usage, DurationMS and Timings, its own.
func (p *Plan) result(rep *pull.Report, st *dest.Stage) (*api.Result, error) {
	ref, err := p.byDigest(rep.Digest)
	if err != nil {
		return nil, err
	}
	cred, err := p.credentialView(rep.Credential)
	if err != nil {
		return nil, err
	}
	mt, err := topMediaType(rep)
	if err != nil {
		return nil, err
	}
	res := &api.Result{
		Image: p.Image, Reference: ref, Destination: p.Destination.String(), SignaturePolicy: p.Signature,
		Digest: rep.Digest, InstanceDigest: rep.InstanceDigest, DestinationDigest: rep.DestinationDigest,
		MediaType: mt, Credential: cred,
		Layers: st.Counts.Layers, Bytes: st.Counts.Bytes,
		Attempts:  min(max(rep.Attempts, 0), p.MaxAttempts()),
		Endpoints: p.planned(pull.BoundEndpoints(rep.Endpoints), st.Counts, rep.InstanceDigest != ""),
		KeptBytes: min(max(rep.KeptBytes, 0), st.Counts.Bytes),
	}
	p.reportStore(res)
	if st.ImageID != "" {
		res.ImageID = st.ImageID
	}
	if st.ServedStored {
		// The store holds the registry's manifest, not the staging's
		// conversion of it.
		res.DestinationDigest = ""
	}
	return res, nil
}

// topMediaType is the media type of the top-level manifest (or index) as
// its verified bytes say: the manifest the report hands over whose digest
// is the verified Digest (the index for an index, else the one served).
// The media type the registry's response claimed is not repeated.
func topMediaType(rep *pull.Report) (string, error) {
	for _, raw := range [][]byte{rep.Copied.IndexRaw, rep.Copied.Served, rep.Copied.Manifest} {
		if raw == nil {
			continue
		}
		if d, err := manifest.Digest(raw); err != nil || d.String() != rep.Digest {
			continue
		}
		if mt := manifest.GuessMIMEType(raw); mt != "" {
			return mt, nil
		}
		// Bytes that do not say their type (no mediaType field, and no
		// shape GuessMIMEType knows): the type the copy names, if they
		// parse as it.
		if mt := manifest.NormalizedMIMEType(rep.MediaType); pull.ValidMediaType(mt) && parsesAs(raw, mt) {
			return mt, nil
		}
		return "", failure.New(failure.Verification, "the manifest %s is of no known media type", rep.Digest)
	}
	return "", failure.New(failure.Verification, "the copy handed over no manifest whose digest is %s", rep.Digest)
}

// parsesAs reports whether raw parses as a manifest or an index of type mt.
func parsesAs(raw []byte, mt string) bool {
	if manifest.MIMETypeIsMultiImage(mt) {
		_, err := manifest.ListFromBlob(raw, mt)
		return err == nil
	}
	_, err := manifest.FromBlob(raw, mt)
	return err == nil
}

// credentialView is the plan's own candidate that c names, or anonymous;
// a credential the parent never handed over (only the primary endpoint's
// candidates can be reported) is refused.
func (p *Plan) credentialView(c *api.Credential) (*api.Credential, error) {
	if c == nil || (c.Source == "anonymous" && c.File == "" && c.Key == "" && c.Username == "") {
		return &api.Credential{Source: "anonymous"}, nil
	}
	for _, k := range p.Credentials {
		if k.Source == c.Source && k.File == c.File && k.Key == c.Key && k.Username == c.Username {
			return &api.Credential{Source: k.Source, File: k.File, Key: k.Key, Username: k.Username}, nil
		}
	}
	return nil, failure.New(failure.Isolation, "the pull child reported a credential (%s %s) it was never given", pull.Printable(cut(c.Source, 64)), pull.Printable(cut(c.File, 256)))
}

// cut is s up to n bytes, on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// planned keeps of the copy's endpoints only the hosts the plan contacts
// (its endpoints: hosts.toml hosts, mirrors, the registry), each once, with
// counts at most what the parent verified: two manifest requests (tag and
// digest) per verified manifest (and the index an instance was picked
// from), the verified blobs and their bytes.
func (p *Plan) planned(in []api.EndpointUse, c dest.Counts, instance bool) []api.EndpointUse {
	allowed := map[string]bool{}
	for _, e := range p.Endpoints {
		h := strings.ToLower(e.Host)
		allowed[h] = true
		if h == "docker.io" || h == "index.docker.io" {
			allowed["registry-1.docker.io"] = true
		}
	}
	manifests := c.Manifests
	if instance {
		manifests++
	}
	var out []api.EndpointUse
	seen := map[string]bool{}
	for _, e := range in {
		if seen[e.Host] || !allowed[e.Host] && !allowed[strings.TrimSuffix(e.Host, ":443")] {
			continue
		}
		seen[e.Host] = true
		e.Manifests = min(e.Manifests, 2*manifests)
		e.Blobs = min(e.Blobs, c.Blobs)
		e.Bytes = min(e.Bytes, c.Bytes)
		out = append(out, e)
	}
	return out
}
