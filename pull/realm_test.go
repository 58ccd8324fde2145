package pull

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/wire"
	"github.com/pullhelper/pullhelper/registry"
	"go.podman.io/image/v5/types"
)

func TestCheckRequest(t *testing.T) {
	p := &Request{Registry: "reg.example:5000"}
	hosts := []string{"reg.example:5000"}
	ep := newEndpoints()
	ep.addOwn(&url.URL{Scheme: "https", Host: "reg.example:5000"})
	reg := &registry.Endpoint{Scheme: "https", Host: "reg.example:5000"}
	ep.approve(reg, &url.URL{Scheme: "https", Host: "reg.example:5001"}) // its realm
	for _, tc := range []struct {
		url      string
		verified bool
		refused  string
	}{
		{"https://reg.example:5000/v2/", true, ""},
		{"https://reg.example:5001/token", true, ""},
		{"https://cdn.example/blob", true, ""},
		{"https://REG.example:5000/v2/", true, ""},
		{"http://auth.example/token", true, "plain-http"},
		{"http://reg.example:5000/v2/", true, "plain-http"},
		{"http://auth.example/token", false, ""},
		{"https://reg.example:6000/v2/x", true, "another port"},
		{"https://reg.example/v2/x", true, "another port"},
		{"https://mirror.reg.example:6000/v2/x", true, "another port"},
		{"https://reg.example:6000/v2/x", false, "another port"},
	} {
		u, _ := url.Parse(tc.url)
		err := p.checkRequest(reg, u, hosts, tc.verified, ep)
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s (verified %v): refused: %v", tc.url, tc.verified, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused) || failure.CodeOf(err) != failure.TLS):
			t.Errorf("%s (verified %v): %v, want a tls refusal with %q", tc.url, tc.verified, err, tc.refused)
		}
	}
}

// Approvals are per endpoint: a realm one endpoint's challenge named lets
// that endpoint's requests through, not another's; containers/image's
// requests (no endpoint) count an https realm any endpoint named, a
// plain-http one only on that endpoint's host.
func TestRealmApprovedPerEndpoint(t *testing.T) {
	p := &Request{Registry: "reg.example:5000"}
	hosts := []string{"reg.example:5000", "mirror.example:5000"}
	ep := newEndpoints()
	a := &registry.Endpoint{Scheme: "https", Host: "reg.example:5000"}
	b := &registry.Endpoint{Scheme: "http", Host: "mirror.example:5000"}
	realmA, _ := url.Parse("https://reg.example:5001/token")
	realmB, _ := url.Parse("http://auth.example/token")
	ep.approve(a, realmA)
	ep.approve(b, realmB)
	if err := p.checkRequest(a, realmA, hosts, true, ep); err != nil {
		t.Errorf("A's own realm refused for A: %v", err)
	}
	if err := p.checkRequest(b, realmA, hosts, true, ep); err == nil {
		t.Error("A's realm on A's host at another port let B's request through")
	}
	if err := p.checkRequest(b, realmB, hosts, true, ep); err != nil {
		t.Errorf("B's plain-http realm refused for B: %v", err)
	}
	if err := p.checkRequest(a, realmB, hosts, true, ep); err == nil {
		t.Error("B's plain-http realm let a request of A (verified) through")
	}
	if err := p.checkRequest(nil, realmA, hosts, true, ep); err != nil {
		t.Errorf("containers/image refused A's realm on A's host: %v", err)
	}
	if err := p.checkRequest(nil, realmB, hosts, true, ep); err == nil {
		t.Error("containers/image got B's plain-http realm while the registry is verified")
	}
	// Docker Hub: the realm auth.docker.io is a subdomain of the registry
	// name docker.io, named by the endpoint registry-1.docker.io.
	hub := &registry.Endpoint{Scheme: "https", Host: "registry-1.docker.io"}
	hubRealm, _ := url.Parse("https://auth.docker.io/token")
	ep.approve(hub, hubRealm)
	dockerHub := &Request{Registry: "docker.io", Endpoints: []wire.Endpoint{{Host: "mirror.example"}, {Host: "docker.io"}}}
	if err := dockerHub.realmHook(newEndpoints())(hub, hubRealm); err != nil {
		t.Errorf("the realm hook refused Docker Hub's realm: %v", err)
	}
	hubHosts := []string{"docker.io", "registry-1.docker.io"}
	for _, e := range []*registry.Endpoint{hub, nil} {
		if err := p.checkRequest(e, hubRealm, hubHosts, true, ep); err != nil {
			t.Errorf("Docker Hub's realm refused (endpoint %v): %v", e, err)
		}
	}
}

// Issue 22 review, finding 6: a mirror on a host name of its own names a
// realm on a subdomain of the verified registry's host, at another port
// (where Go forwards the registry's Authorization on a redirect). The realm
// hook refuses it (sameHostName, not only the exact name), and an approval
// by the mirror does not let containers/image's requests (no endpoint)
// through to that destination; the registry's own realm under its name
// still works for both.
func TestRealmOnRegistrySubdomainNotForAnotherEndpoint(t *testing.T) {
	p := &Request{Registry: "reg.example:5000", Endpoints: []wire.Endpoint{{Host: "reg.example:5000"}, {Host: "mirror.other:5000"}}}
	hosts := []string{"reg.example:5000", "mirror.other:5000"}
	reg := &registry.Endpoint{Scheme: "https", Host: "reg.example:5000"}
	mirror := &registry.Endpoint{Scheme: "https", Host: "mirror.other:5000"}
	sub, _ := url.Parse("https://sub.reg.example:6000/token")
	regRealm, _ := url.Parse("https://auth.reg.example/token")
	mirrorRealm, _ := url.Parse("https://auth.mirror.other:7000/token")

	ep := newEndpoints()
	hook := p.realmHook(ep)
	if err := hook(mirror, sub); err == nil || failure.CodeOf(err) != failure.TLS {
		t.Errorf("the mirror's realm on a subdomain of the registry's host: %v, want a tls refusal", err)
	}
	if err := hook(reg, regRealm); err != nil {
		t.Errorf("the registry's realm under its own name refused: %v", err)
	}
	if err := hook(mirror, mirrorRealm); err != nil {
		t.Errorf("the mirror's realm under its own name refused: %v", err)
	}
	for _, c := range []struct {
		e    *registry.Endpoint
		u    *url.URL
		want bool
	}{{nil, regRealm, true}, {reg, regRealm, true}, {nil, mirrorRealm, true}, {mirror, mirrorRealm, true}} {
		if err := p.checkRequest(c.e, c.u, hosts, true, ep); (err == nil) != c.want {
			t.Errorf("request to %s (endpoint %v): %v", c.u, c.e, err)
		}
	}

	// Even approved by the mirror (however it came to be), the subdomain
	// of the registry's host stays closed to containers/image's requests.
	ep.approve(mirror, sub)
	if err := p.checkRequest(nil, sub, hosts, true, ep); err == nil || failure.CodeOf(err) != failure.TLS {
		t.Errorf("containers/image's request to %s, approved only by the mirror: %v, want a tls refusal", sub, err)
	}
	// Approved by the registry itself, it is the registry's to name.
	ep.approve(reg, sub)
	if err := p.checkRequest(nil, sub, hosts, true, ep); err != nil {
		t.Errorf("containers/image's request to the registry's own realm %s: %v", sub, err)
	}
}

// tokenServer is a realm that records who asked it for a token (the
// Basic user) and grants "tok-USER".
type tokenServer struct {
	mu    sync.Mutex
	users []string
}

func (s *tokenServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u, _, _ := r.BasicAuth()
	s.mu.Lock()
	s.users = append(s.users, u)
	s.mu.Unlock()
	_ = json.NewEncoder(w).Encode(map[string]string{"token": "tok-" + u})
}

func (s *tokenServer) asked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.users...)
}

// bearerRegistry serves /v2/app/manifests/latest (and 404 for blobs when
// noBlobs) behind a bearer challenge naming realm, to "Bearer tok-USER".
func bearerRegistry(t *testing.T, realm *string, user string, noBlobs bool) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok-"+user {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="%s",service="s"`, *realm))
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch {
		case strings.Contains(r.URL.Path, "/manifests/"):
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			_, _ = w.Write([]byte(`{"schemaVersion":2}`))
		case noBlobs:
			w.WriteHeader(http.StatusNotFound)
		default:
			_, _ = w.Write([]byte("blob"))
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// The attack of issue 22, finding 15: endpoint A (the registry) names its
// token realm on its own host at another port; endpoint B (a mirror, on
// another host name) names the same realm. A's token request goes there;
// B's credential must not: B's request is refused (exit 4) before its
// credential is sent, though the realm was approved — for A.
func TestRealmOfOneEndpointGetsNoOtherCredential(t *testing.T) {
	tokens := &tokenServer{}
	rs := httptest.NewServer(tokens)
	defer rs.Close()
	realm := rs.URL + "/token" // http://127.0.0.1:PR: A's host name
	a := bearerRegistry(t, &realm, "usera", true)
	b := bearerRegistry(t, &realm, "userb", false)
	aHost := strings.TrimPrefix(a.URL, "http://")
	bHost := "localhost:" + b.URL[strings.LastIndex(b.URL, ":")+1:] // another host name, same loopback
	conf := filepath.Join(t.TempDir(), "registries.conf")
	if err := os.WriteFile(conf, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p := &Request{Registry: aHost, Reference: aHost + "/app:latest", Endpoints: []wire.Endpoint{
		{Host: aHost, Scheme: "http", Repository: aHost + "/app"},
		{Host: bHost, Scheme: "http", Repository: aHost + "/app"},
	}}
	sys := &types.SystemContext{SystemRegistriesConfPath: conf, SystemRegistriesConfDirPath: "/nonexistent"}
	ep := newEndpoints()
	p.guardedSystemContext(sys, ep)
	c := registry.New([]registry.Endpoint{
		{Scheme: "http", Host: aHost, Path: "/v2", Repository: "app", Resolve: true, Credential: &registry.Credential{Username: "usera", Password: "pa"}},
		{Scheme: "http", Host: bHost, Path: "/v2", Repository: "app", Resolve: true, Credential: &registry.Credential{Username: "userb", Password: "pb"}},
	}, registry.Hooks{Proxy: p.endpointProxy(ep, newHostLog()), Realm: p.realmHook(ep)})
	defer c.Close()
	if _, _, served, err := c.Manifest(context.Background(), "latest", nil, 1<<20); err != nil || served != aHost {
		t.Fatalf("manifest from A: served by %q, %v", served, err)
	}
	// A has no blobs: the blob is asked of B next, whose challenge names
	// the realm approved for A.
	_, _, err := c.Blob(context.Background(), digest.Digest("sha256:"+strings.Repeat("a", 64)), -1)
	if err == nil {
		t.Fatal("the blob was served: B's token came from A's realm")
	}
	if got := failure.CodeOf(err); got != failure.TLS {
		t.Errorf("B's refused realm: %v (code %s), want a tls refusal", err, got)
	}
	for _, u := range tokens.asked() {
		if u != "usera" {
			t.Errorf("the realm approved for A received the credential of %q", u)
		}
	}
	if got := tokens.asked(); len(got) == 0 {
		t.Error("A never asked its own realm")
	}
}

// containers/image reads lookaside signatures with no credential, so a
// plain-http lookaside registries.d names is read as skopeo reads it, also
// while the registry is verified over https, and on the registry's host
// name at another port; only a signature's exact URL below a configured
// base passes (a realm's request has a query; the registry client's own
// requests never count).
func TestLookasideSignaturesPassTheGuard(t *testing.T) {
	p := &Request{Registry: "reg.example:5000"}
	hosts := []string{"reg.example:5000"}
	ep := newEndpoints()
	ep.addOwn(&url.URL{Scheme: "https", Host: "reg.example:5000"})
	ep.lookaside = lookasideBases(map[string][]byte{
		"default.yaml": []byte("default-docker:\n  lookaside: http://sigs.example:8080/store/\n"),
		"reg.yaml":     []byte("docker:\n  reg.example:5000/app:\n    sigstore: http://reg.example:9000\n  other.example:\n    lookaside: file:///var/lib/sigs\n"),
		"bad.yaml":     []byte("default-docker: [\n"),
	})
	if len(ep.lookaside) != 2 {
		t.Fatalf("lookaside bases %v, want the two http ones", ep.lookaside)
	}
	hex := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		url  string
		pass bool
	}{
		{"http://sigs.example:8080/store/app@sha256=" + hex + "/signature-1", true},
		{"http://sigs.example:8080/store/ns/app@sha256=" + hex + "/signature-12", true},
		{"http://reg.example:9000/app@sha256=" + hex + "/signature-1", true},
		{"http://sigs.example:8080/store/app@sha256=" + hex + "/signature-1?scope=repository:app:pull", false},
		{"http://sigs.example:8080/token", false},
		{"http://sigs.example:8080/other/app@sha256=" + hex + "/signature-1", false},
		{"http://sigs.example:8081/store/app@sha256=" + hex + "/signature-1", false},
		{"http://sigs.example:8080/store/app@sha256=" + hex + "/signature-0", false},
		{"http://reg.example:9000/v2/app/manifests/latest", false},
	} {
		u, _ := url.Parse(tc.url)
		err := p.checkRequest(nil, u, hosts, true, ep)
		if (err == nil) != tc.pass {
			t.Errorf("%s: %v, want passed %v", tc.url, err, tc.pass)
		}
		// The registry client's own requests are never lookaside reads.
		if tc.pass {
			if err := p.checkRequest(&registry.Endpoint{Scheme: "https", Host: "reg.example:5000"}, u, hosts, true, ep); err == nil {
				t.Errorf("%s passed for the registry client", tc.url)
			}
		}
	}
}
