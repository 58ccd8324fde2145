package hosts

import (
	"bytes"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/pullhelper/pullhelper/internal/wire"
	"go.podman.io/image/v5/pkg/sysregistriesv2"
)

// childRegistriesConf is what the copy's registries.conf holds: the
// endpoints, nothing of short names (the copy gets a qualified reference)
// and no credential helper (credentials are resolved in the parent and
// handed over per host).
type childRegistriesConf struct {
	Registries        []sysregistriesv2.Registry `toml:"registry"`
	CredentialHelpers []string                   `toml:"credential-helpers"`
}

// RenderRegistriesConf renders the registries.conf the copy's
// containers/image reads for a pull of registry through eps (the
// endpoints in order, the primary last). base is the registries.conf in
// effect (the file and its drop-ins, merged by containers/image as the
// parent sees them) under registries.conf rules, and nil under containerd
// rules: then one entry for the image's registry whose location is the
// hosts.toml server (or the registry) and whose mirrors are the [host]
// entries, in order, a mirror without the resolve capability by digest
// only. Either way an endpoint whose trust is off
// (trust.insecure_registries, containerd skip_verify or http) is insecure
// for that host alone.
func RenderRegistriesConf(registry string, eps []wire.Endpoint, base *sysregistriesv2.V2RegistriesConf) ([]byte, error) {
	out := &childRegistriesConf{CredentialHelpers: []string{sysregistriesv2.AuthenticationFileHelper}}
	if base == nil {
		// containerd asks every host other than the image's registry with
		// ?ns=<registry> (Endpoints sets NamespaceProxy by containerd's
		// isProxy rule).
		primary := eps[len(eps)-1]
		reg := sysregistriesv2.Registry{Prefix: registry, Endpoint: sysregistriesv2.Endpoint{
			Location: containerdLocation(primary), Insecure: insecure(primary), NamespaceProxy: primary.NamespaceProxy}}
		for _, e := range eps[:len(eps)-1] {
			mirror := sysregistriesv2.Endpoint{Location: containerdLocation(e), Insecure: insecure(e), NamespaceProxy: e.NamespaceProxy}
			if !e.Capabilities.ResolvesTags() {
				mirror.PullFromMirror = sysregistriesv2.MirrorByDigestOnly
			}
			reg.Mirrors = append(reg.Mirrors, mirror)
		}
		out.Registries = []sysregistriesv2.Registry{reg}
	} else {
		// A copy: base is containers/image's cached parse, which the
		// parent goes on reading (FindRegistry), not this rendering's.
		out.Registries = make([]sysregistriesv2.Registry, len(base.Registries))
		for i, r := range base.Registries {
			r.Mirrors = slices.Clone(r.Mirrors)
			out.Registries[i] = r
		}
		for _, e := range eps {
			if !insecure(e) || e.Insecure {
				continue // secure, or registries.conf already says so
			}
			marked := false
			for i := range out.Registries {
				r := &out.Registries[i]
				if r.Location == e.Host {
					r.Insecure, marked = true, true
				}
				for j := range r.Mirrors {
					if hostOf(r.Mirrors[j].Location) == e.Host {
						r.Mirrors[j].Insecure, marked = true, true
					}
				}
			}
			if !marked {
				out.Registries = append(out.Registries, sysregistriesv2.Registry{Prefix: e.Host,
					Endpoint: sysregistriesv2.Endpoint{Location: e.Host, Insecure: true}})
			}
		}
	}
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(out); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// insecure: containers/image must not verify this endpoint's certificate
// (and may fall back to plain http).
func insecure(e wire.Endpoint) bool { return e.Insecure || !e.Trust.Verify || e.Scheme == "http" }

// containerdLocation is the registries.conf location of a containerd
// endpoint: its host, which serves the image under the same repository
// path (containerd's rule for server and [host] entries).
func containerdLocation(e wire.Endpoint) string { return e.Host }

func hostOf(location string) string {
	h, _, _ := strings.Cut(location, "/")
	return h
}
