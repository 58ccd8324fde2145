package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"io"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/pull"
	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/image"
	"go.podman.io/image/v5/manifest"
	"go.podman.io/image/v5/signature"
	"go.podman.io/image/v5/types"
)

// recheckSignature judges the image again, in the parent, with the
// signature policy the copy was given: the copy (the child, which talked to
// the registry) might have skipped its check. The manifest must be the one
// whose digest the copy reported, so the child cannot swap it; signatures
// are verified here, cryptographically. What the parent cannot re-check: a
// requirement needing signatures the child did not hand over (sigstore
// attachments); then the child's check stands and a warning says so.
func (p *Plan) recheckSignature(ctx context.Context, m *pull.Material, res *pull.Report) error {
	if m.SignaturePolicy == nil {
		return nil // the built-in policy accepts anything
	}
	c := &res.Copied
	if c.Served == nil {
		return failure.New(failure.Verification, "the copy did not hand over the manifest the signature policy %s judged", p.Signature.File)
	}
	want := res.Digest
	if res.InstanceDigest != "" {
		want = res.InstanceDigest
	}
	got, err := manifest.Digest(c.Served)
	if err != nil || got.String() != want {
		return failure.New(failure.Verification, "the manifest handed over for the signature check is %s, the copy reported %s", got, want)
	}
	pol, err := signature.NewPolicyFromBytes(m.SignaturePolicy)
	if err != nil {
		return failure.New(failure.Usage, "signature policy %s: %w", p.Signature.File, err)
	}
	pc, err := signature.NewPolicyContext(pol)
	if err != nil {
		return failure.Wrap(failure.Usage, err, "signature policy %s", p.Signature.File)
	}
	defer func() { _ = pc.Destroy() }()
	// The reference is the plan's, as requested (its tag, or its digest,
	// which the parent verified), as containers/image's copy from
	// docker://REF judges it: the child does not choose the scope the
	// policy is looked up for nor the identity a signature must claim.
	// The manifest judged is the one verified above.
	named, err := reference.ParseNormalizedNamed(p.Reference)
	if err != nil {
		return failure.Wrap(failure.Internal, err, "")
	}
	pinned := pull.PolicyReference(named)
	ref, err := docker.NewReference(pinned)
	if err != nil {
		return failure.Wrap(failure.Internal, err, "")
	}
	src := &servedSource{ref: ref, raw: c.Served, sigs: c.Signatures}
	var instance *digest.Digest
	if res.InstanceDigest != "" {
		d := digest.Digest(res.InstanceDigest)
		instance = &d
		src.instance = d
	}
	// A policy whose requirements for this image are sigstoreSigned was
	// refused before the pull (LoadMaterial: neither the copy nor this
	// check sees sigstore signatures); every requirement is judged here
	// and fails closed.
	allowed, err := pc.IsRunningImageAllowed(ctx, image.UnparsedInstance(src, instance))
	if allowed {
		return nil
	}
	fe := failure.New(failure.Verification, "signature policy %s rejects %s: %s", p.Signature.File, pinned, errString(err))
	fe.Reason = failure.ReasonSignatureValidationFailed
	return fe
}

// needsSigstore reports whether the requirements that apply to ref (the
// lookup containers/image's PolicyContext does: the transport's scopes by
// identity, then by namespace, then "", then the default) include a
// sigstoreSigned one.
func needsSigstore(pol *signature.Policy, ref types.ImageReference) bool {
	reqs := pol.Default
	if scopes, ok := pol.Transports[ref.Transport().Name()]; ok {
		found := false
		if r, ok := scopes[ref.PolicyConfigurationIdentity()]; ok {
			reqs, found = r, true
		}
		for _, ns := range ref.PolicyConfigurationNamespaces() {
			if found {
				break
			}
			if r, ok := scopes[ns]; ok {
				reqs, found = r, true
			}
		}
		if r, ok := scopes[""]; ok && !found {
			reqs = r
		}
	}
	for _, r := range reqs {
		b, err := json.Marshal(r)
		if err != nil {
			return false
		}
		var t struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(b, &t) == nil && t.Type == "sigstoreSigned" {
			return true
		}
	}
	return false
}

func errString(err error) string {
	if err == nil {
		return "not allowed"
	}
	return err.Error()
}

// servedSource is the image as the copy reported it: the served manifest
// and its signatures, nothing else (no blob is read by a policy check).
type servedSource struct {
	ref      types.ImageReference
	raw      []byte
	instance digest.Digest
	sigs     [][]byte
}

var errNoBlobs = errors.New("the signature re-check reads no blob")

func (s *servedSource) Reference() types.ImageReference { return s.ref }
func (s *servedSource) Close() error                    { return nil }
func (s *servedSource) GetManifest(_ context.Context, d *digest.Digest) ([]byte, string, error) {
	if d != nil && *d != s.instance {
		return nil, "", errors.New("the signature re-check has only the pulled instance's manifest")
	}
	return s.raw, manifest.GuessMIMEType(s.raw), nil
}
func (s *servedSource) HasThreadSafeGetBlob() bool { return false }
func (s *servedSource) GetBlob(context.Context, types.BlobInfo, types.BlobInfoCache) (io.ReadCloser, int64, error) {
	return nil, 0, errNoBlobs
}
func (s *servedSource) GetSignatures(context.Context, *digest.Digest) ([][]byte, error) {
	return s.sigs, nil
}
func (s *servedSource) LayerInfosForCopy(context.Context, *digest.Digest) ([]types.BlobInfo, error) {
	return nil, nil
}
