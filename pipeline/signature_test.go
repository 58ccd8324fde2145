package pipeline

import (
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/wire"
	"github.com/pullhelper/pullhelper/pull"
)

// The parent's re-check of the signature policy: the scope is the plan's
// reference (never the child's), a sigstore requirement elsewhere in the
// policy does not disarm it, and the manifest must be the reported one.
func TestRecheckSignature(t *testing.T) {
	served := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",` +
		`"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:` + strings.Repeat("a", 64) + `","size":2},"layers":[]}`)
	d := digest.FromBytes(served).String()
	const rejectButBusybox = `{"default":[{"type":"reject"}],"transports":{"docker":{"docker.io/library/busybox":[{"type":"insecureAcceptAnything"}]}}}`
	const sigstoreElsewhere = `{"default":[{"type":"reject"}],"transports":{"docker":{"quay.io/other":[{"type":"sigstoreSigned","keyPath":"/k.pub"}]}}}`
	const sigstoreHere = `{"default":[{"type":"reject"}],"transports":{"docker":{"reg.example:5000/secure":[{"type":"sigstoreSigned","keyPath":"/k.pub"}]}}}`
	const acceptHere = `{"default":[{"type":"reject"}],"transports":{"docker":{"reg.example:5000/secure/app":[{"type":"insecureAcceptAnything"}]}}}`
	// Scopes of the tag as requested (containers/image judges a pull of
	// docker://NAME:TAG by NAME:TAG, not by the digest it resolved to).
	const rejectTag = `{"default":[{"type":"insecureAcceptAnything"}],"transports":{"docker":{"reg.example:5000/secure/app:1":[{"type":"reject"}]}}}`
	const acceptTag = `{"default":[{"type":"reject"}],"transports":{"docker":{"reg.example:5000/secure/app:1":[{"type":"insecureAcceptAnything"}]}}}`
	for _, tc := range []struct {
		name, policy, childRef string
		served                 []byte
		wantErr                bool
	}{
		{"the child names another image to reach an accepting scope", rejectButBusybox, "docker.io/library/busybox@" + d, served, true},
		{"a sigstore requirement for another scope does not disarm the check", sigstoreElsewhere, "reg.example:5000/secure/app@" + d, served, true},
		{"a sigstore requirement for this image (refused before the pull) fails closed here too", sigstoreHere, "reg.example:5000/secure/app@" + d, served, true},
		{"this image's scope accepts", acceptHere, "reg.example:5000/secure/app@" + d, served, false},
		{"a manifest other than the reported one", acceptHere, "reg.example:5000/secure/app@" + d, append([]byte(" "), served...), true},
		{"the tag's scope rejects", rejectTag, "", served, true},
		{"the tag's scope accepts", acceptTag, "", served, false},
		{"a digest pull is not the tag's", acceptTag, "reg.example:5000/secure/app@" + d, served, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Plan{}
			p.Reference = "reg.example:5000/secure/app:1"
			if strings.Contains(tc.childRef, "@") && strings.Contains(tc.policy, "app:1") {
				p.Reference = tc.childRef // pulled by digest
			}
			p.Signature = api.SignaturePolicy{Source: "flag", File: "/policy.json"}
			err := p.recheckSignature(t.Context(), &pull.Material{SignaturePolicy: []byte(tc.policy)},
				&pull.Report{Digest: d, Copied: pull.Copied{Served: tc.served}})
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v; want error %v", err, tc.wantErr)
			}
			if err != nil && failure.CodeOf(err) != failure.Verification {
				t.Fatalf("code %s, want verification: %v", failure.CodeOf(err), err)
			}
		})
	}
}

// The result's credential must be one the parent handed over (or
// anonymous): a child cannot name another.
func TestCredentialView(t *testing.T) {
	p := &Plan{}
	p.Credentials = []wire.Credential{{Source: "pull-secret", File: "/s.json", Key: "reg", Username: "u"}}
	for _, ok := range []*api.Credential{nil, {Source: "anonymous"}, {Source: "pull-secret", File: "/s.json", Key: "reg", Username: "u"}} {
		got, err := p.credentialView(ok)
		if err != nil || got == nil || ok != nil && *got != *ok {
			t.Errorf("%+v: %+v, %v", ok, got, err)
		}
	}
	for _, bad := range []*api.Credential{{Source: "pull-secret", File: "/other.json", Key: "reg", Username: "u"}, {Source: "anonymous", Username: "x"}} {
		if _, err := p.credentialView(bad); err == nil || failure.CodeOf(err) != failure.Isolation {
			t.Errorf("%+v: err = %v, want an isolation error", bad, err)
		}
	}
}
