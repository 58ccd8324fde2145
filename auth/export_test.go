package auth

import (
	"strings"

	"github.com/pullhelper/pullhelper/hosts"
	"github.com/pullhelper/pullhelper/internal/wire"
)

// Lookup is, for the tests, the ordered credential candidates for host
// when pulling repository (the image's normalized name, no tag or digest),
// as if host served that repository under the same path and were one of
// its endpoints: the kubelet's credentials to any host with a containerd
// config and to the image's own registry only without one, containerd's
// configs."host".auth, the service-account token, then the containers
// auth files / credential-helpers.
func (k *Keyring) Lookup(host, repository string) []wire.Credential {
	domain, rest, ok := strings.Cut(repository, "/")
	q := hosts.Query{Host: host, Logical: repository, Physical: host}
	if ok {
		q.Physical += "/" + rest
	}
	q.Kubelet = k.hosts.Containerd() || host == domain
	if k.hosts.Containerd() {
		q.ContainerdKey = host
	}
	return k.credentials(q)
}

// TrustFor is, for the tests, the trust of host.
func (k *Keyring) TrustFor(host string) wire.Trust { return k.hosts.TrustFor(host) }
