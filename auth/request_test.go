package auth_test

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/pullhelper/pullhelper/auth"
	"github.com/pullhelper/pullhelper/internal/wire"
)

// credsByHost maps each endpoint host to who(its candidates).
func credsByHost(eps []wire.Endpoint) map[string][]string {
	out := map[string][]string{}
	for _, e := range eps {
		out[e.Host] = who(e.Credentials)
	}
	return out
}

// A CRI request's credential (auth.Request) goes to its one registry host:
// never to a hosts.toml mirror on another host (containerd's ParseAuth with
// server_address set; INVARIANTS.md 5), carrying an identity token as one
// (the child exchanges it at the realm, as containerd's FetchTokenWithOAuth
// does with grant_type=refresh_token). containerd's configs."HOST".auth are
// not read for any host then (registryHosts reads them only when the CRI
// request has no auth); the node's auth files still are, for the other
// hosts.
func TestRequestOnlyToItsHost(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "hosts")
	write(t, root, "reg.example.com:5000/hosts.toml", "[host.\"https://mirror.example.com:6000\"]\ncapabilities = [\"pull\", \"resolve\"]\n")
	c := hermetic(t, dir)
	c.ContainerdConfig = write(t, dir, "config.toml", "version = 2\n["+ctrdCRI+"]\nconfig_path = \""+root+"\"\n"+
		"["+ctrdCRI+".configs.\"mirror.example.com:6000\".auth]\nusername = \"ctrd-mirror\"\npassword = \"cp\"\n"+
		"["+ctrdCRI+".configs.\"reg.example.com:5000\".auth]\nusername = \"ctrd-reg\"\npassword = \"cp\"\n")
	c.Request = &auth.Request{Host: "reg.example.com:5000", IdentityToken: "id-tok"}
	eps := endpoints(t, newKeyring(t, c), "reg.example.com:5000/ns/app:v1")
	want := map[string][]string{"mirror.example.com:6000": {}, "reg.example.com:5000": {"cri-request:reg.example.com:5000:"}}
	if got := credsByHost(eps); !reflect.DeepEqual(got, want) {
		t.Fatalf("credentials %q, want %q", got, want)
	}
	if got := eps[1].Credentials[0]; got.IdentityToken != "id-tok" || got.Password != "" {
		t.Fatalf("the request's identity token did not reach the registry's candidate: %+v", got)
	}

	// Without a request: the node's containerd configs, each host its own.
	c.Request = nil
	want = map[string][]string{
		"mirror.example.com:6000": {`containerd-config:configs."mirror.example.com:6000".auth:ctrd-mirror`},
		"reg.example.com:5000":    {`containerd-config:configs."reg.example.com:5000".auth:ctrd-reg`},
	}
	if got := credsByHost(endpoints(t, newKeyring(t, c), "reg.example.com:5000/ns/app:v1")); !reflect.DeepEqual(got, want) {
		t.Fatalf("node credentials %q, want %q", got, want)
	}

	// A request for another host (server_address named it) goes nowhere
	// here; Docker Hub's names are one host.
	c.Request = &auth.Request{Host: "other.example.com", Username: "u", Password: "p"}
	want = map[string][]string{"mirror.example.com:6000": {}, "reg.example.com:5000": {}}
	if got := credsByHost(endpoints(t, newKeyring(t, c), "reg.example.com:5000/ns/app:v1")); !reflect.DeepEqual(got, want) {
		t.Fatalf("another host's request: %q, want %q", got, want)
	}
	c.Request = &auth.Request{Host: "docker.io", Username: "u", Password: "p"}
	for _, e := range endpoints(t, newKeyring(t, c), "docker.io/library/busybox:latest") {
		if got := who(e.Credentials); !reflect.DeepEqual(got, []string{"cri-request:docker.io:u"}) {
			t.Errorf("%s: %q", e.Host, got)
		}
	}
}

// registries.conf (CRI-O's node): a mirror on another host gets the node's
// auth-file entry for it, never the request's credential; the primary gets
// the request's alone (CRI-O's DockerAuthConfig: containers/image reads no
// auth file), so a refused request credential never falls back to the
// node's.
func TestRequestNotToRegistriesConfMirror(t *testing.T) {
	dir := t.TempDir()
	c := hermetic(t, dir)
	c.RegistriesConf = write(t, dir, "registries.conf", "[[registry]]\nlocation = \"reg.example.com\"\n[[registry.mirror]]\nlocation = \"mirror.example.com:5000\"\n")
	c.Authfile = write(t, dir, "a.json", `{"auths":{"mirror.example.com:5000":{"auth":"`+b64("mir:mp")+`"},"reg.example.com":{"auth":"`+b64("af:ap")+`"}}}`)
	c.Request = &auth.Request{Host: "reg.example.com", Username: "req", Password: "rp"}
	want := map[string][]string{
		"mirror.example.com:5000": {"containers-auth.json:mirror.example.com:5000:mir"},
		"reg.example.com":         {"cri-request:reg.example.com:req"},
	}
	if got := credsByHost(endpoints(t, newKeyring(t, c), "reg.example.com/ns/app:v1")); !reflect.DeepEqual(got, want) {
		t.Fatalf("credentials %q, want %q", got, want)
	}
}

// A hosts.toml server stands for the image's registry: the request's
// credential for that registry goes there (containerd's ParseAuth without
// server_address gives it every host), still not to a mirror before it;
// a request naming another host (server_address) does not.
func TestRequestToContainerdServer(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "hosts")
	write(t, root, "reg.example.com/hosts.toml", "server = \"https://backend.example.com:7000\"\n[host.\"https://mirror.example.com\"]\ncapabilities = [\"pull\"]\n")
	c := hermetic(t, dir)
	c.ContainerdConfig = write(t, dir, "config.toml", "version = 2\n["+ctrdCRI+"]\nconfig_path = \""+root+"\"\n")
	c.Request = &auth.Request{Host: "reg.example.com", Username: "u", Password: "p"}
	want := map[string][]string{"mirror.example.com": {}, "backend.example.com:7000": {"cri-request:reg.example.com:u"}}
	if got := credsByHost(endpoints(t, newKeyring(t, c), "reg.example.com/ns/app:v1")); !reflect.DeepEqual(got, want) {
		t.Fatalf("credentials %q, want %q", got, want)
	}
	c.Request = &auth.Request{Host: "mirror.example.com", Username: "u", Password: "p"}
	want = map[string][]string{"mirror.example.com": {"cri-request:mirror.example.com:u"}, "backend.example.com:7000": {}}
	if got := credsByHost(endpoints(t, newKeyring(t, c), "reg.example.com/ns/app:v1")); !reflect.DeepEqual(got, want) {
		t.Fatalf("server_address = the mirror: %q, want %q", got, want)
	}
}
