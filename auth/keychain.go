package auth

import (
	"errors"

	"github.com/pullhelper/pullhelper/hosts"
	"github.com/pullhelper/pullhelper/internal/wire"
)

// Keychain is one credential source, or a composition of sources (as
// go-containerregistry's authn.Keychain and NewMultiKeychain): Resolve
// returns the candidates it offers for one contacted host, in its order,
// and the problems it met, which the pull goes on with (the keyring makes
// each a warning). Both may be set: a failing credential provider does not
// stop the others.
type Keychain interface {
	Resolve(q hosts.Query) ([]wire.Credential, error)
}

// Multi offers every source's candidates, in order; a nil source is
// skipped.
type Multi []Keychain

// Resolve implements Keychain.
func (m Multi) Resolve(q hosts.Query) ([]wire.Credential, error) {
	var out []wire.Credential
	var errs []error
	for _, k := range m {
		if k == nil {
			continue
		}
		cs, err := k.Resolve(q)
		out = append(out, cs...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// OrElse offers First's candidates, and Then's only when First offers
// none: containerd reads configs."HOST".auth only when the kubelet sent no
// credential (pkg/cri/server/image_pull.go registryHosts).
type OrElse struct{ First, Then Keychain }

// Resolve implements Keychain.
func (o OrElse) Resolve(q hosts.Query) ([]wire.Credential, error) {
	cs, err := o.First.Resolve(q)
	if len(cs) > 0 || o.Then == nil {
		return cs, err
	}
	more, err2 := o.Then.Resolve(q)
	return more, errors.Join(err, err2)
}

// First offers the candidates of the first source that has any, and the
// problems of all only when none has: containers/image's credential
// helpers (pkg/docker/config getCredentialsWithHomeDir).
type First []Keychain

// Resolve implements Keychain.
func (f First) Resolve(q hosts.Query) ([]wire.Credential, error) {
	var errs []error
	for _, k := range f {
		cs, err := k.Resolve(q)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(cs) > 0 {
			return cs, nil
		}
	}
	return nil, errors.Join(errs...)
}

// Kubelet offers its sources' candidates only to the hosts the kubelet's
// credentials go to (q.Kubelet: every host with a containerd config, the
// image's own registry without one).
type Kubelet struct{ Keychain Keychain }

// Resolve implements Keychain.
func (k Kubelet) Resolve(q hosts.Query) ([]wire.Credential, error) {
	if !q.Kubelet || k.Keychain == nil {
		return nil, nil
	}
	return k.Keychain.Resolve(q)
}

// flatten lists the errors errors.Join put together, in order.
func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}
