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
// each a warning), unless one is a *LookupError (the owner fails the lookup
// with it). Both may be set: a failing credential provider does not stop
// the others.
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

// Fallback offers First's candidates, then Then's; a LookupError of Then
// is only a problem (a warning) when First offered candidates: CRI-O hands
// the kubelet's credential to containers/image as DockerAuthConfig, and
// getCredentialsWithHomeDir then reads no auth file and runs no helper.
type Fallback struct{ First, Then Keychain }

// Resolve implements Keychain.
func (f Fallback) Resolve(q hosts.Query) ([]wire.Credential, error) {
	cs, err := f.First.Resolve(q)
	more, err2 := f.Then.Resolve(q)
	if len(cs) > 0 {
		var errs []error
		for _, e := range flatten(err2) {
			var le *LookupError
			if errors.As(e, &le) {
				e = le.Err
			}
			errs = append(errs, e)
		}
		err2 = errors.Join(errs...)
	}
	return append(cs, more...), errors.Join(err, err2)
}

// First offers the candidates of the first source that has any, and the
// problems of all only when none has: containers/image's credential
// helpers (pkg/docker/config getCredentialsWithHomeDir). A source that
// only says what it would do (explain: a helper not run) does not stop the
// walk: its placeholder is listed and the next source asked too.
type First []Keychain

// placeholder is a source whose candidates stand for a lookup not made.
type placeholder interface{ placeholder() bool }

// Resolve implements Keychain.
func (f First) Resolve(q hosts.Query) ([]wire.Credential, error) {
	var errs []error
	var tentative []wire.Credential
	for _, k := range f {
		cs, err := k.Resolve(q)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if p, ok := k.(placeholder); ok && p.placeholder() {
			tentative = append(tentative, cs...)
			continue
		}
		if len(cs) > 0 {
			return append(tentative, cs...), nil
		}
	}
	if len(tentative) > 0 {
		return tentative, nil
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

// LookupError is a credential lookup that fails, as its owner fails it:
// containers/image's getCredentialsWithHomeDir on an auth file that does not
// parse, an "auth" field that is not padded base64 or a credential helper
// that fails (when no later helper has a credential), containerd's
// ParseAuth on a configs."HOST".auth that does not decode. Where the owner
// fails only the endpoint (a mirror: containers/image and containerd try the
// next one), Fill drops the endpoint with a warning; on the primary it is
// Fill's error. The message names the file and the key, never a value.
type LookupError struct{ Err error }

func (e *LookupError) Error() string { return e.Err.Error() }
func (e *LookupError) Unwrap() error { return e.Err }

// lookupFailed marks err (nil stays nil) as a LookupError.
func lookupFailed(err error) error {
	if err == nil {
		return nil
	}
	return &LookupError{Err: err}
}
