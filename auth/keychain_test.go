package auth

import (
	"errors"
	"reflect"
	"testing"

	"github.com/pullhelper/pullhelper/hosts"
	"github.com/pullhelper/pullhelper/internal/wire"
)

// fixed is a source that always offers the same candidates and problem.
type fixed struct {
	users []string
	err   error
}

func (f fixed) Resolve(hosts.Query) ([]wire.Credential, error) {
	var out []wire.Credential
	for _, u := range f.users {
		out = append(out, wire.Credential{Username: u})
	}
	return out, f.err
}

func users(cs []wire.Credential) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Username)
	}
	return out
}

// The combinators NewKeyring composes: Multi concatenates and keeps every
// problem, OrElse asks Then only when First offers none, First stops at the
// first source with a candidate and reports problems only when none has
// one, Kubelet answers only the hosts the kubelet's credentials go to.
func TestKeychainCombinators(t *testing.T) {
	errA, errB := errors.New("a failed"), errors.New("b failed")
	q := hosts.Query{Host: "r.io", Logical: "r.io/x", Physical: "r.io/x", Kubelet: true}
	for _, tc := range []struct {
		name  string
		k     Keychain
		q     hosts.Query
		users []string
		errs  []error
	}{
		{"multi: all, in order", Multi{fixed{users: []string{"1"}}, nil, fixed{users: []string{"2", "3"}, err: errA}}, q, []string{"1", "2", "3"}, []error{errA}},
		{"or-else: first offers", OrElse{First: fixed{users: []string{"k"}}, Then: fixed{users: []string{"c"}}}, q, []string{"k"}, nil},
		{"or-else: first offers none", OrElse{First: fixed{err: errA}, Then: fixed{users: []string{"c"}, err: errB}}, q, []string{"c"}, []error{errA, errB}},
		{"or-else: no then", OrElse{First: fixed{}}, q, nil, nil},
		{"first: the first with a candidate, its problems dropped", First{fixed{err: errA}, fixed{users: []string{"h"}}, fixed{users: []string{"late"}}}, q, []string{"h"}, nil},
		{"first: none, every problem", First{fixed{err: errA}, fixed{}, fixed{err: errB}}, q, nil, []error{errA, errB}},
		{"kubelet: its host", Kubelet{fixed{users: []string{"s"}}}, q, []string{"s"}, nil},
		{"kubelet: another host", Kubelet{fixed{users: []string{"s"}}}, hosts.Query{Host: "mirror.io"}, nil, nil},
	} {
		cs, err := tc.k.Resolve(tc.q)
		if got := users(cs); !reflect.DeepEqual(got, tc.users) {
			t.Errorf("%s: candidates %q, want %q", tc.name, got, tc.users)
		}
		if got := flatten(err); !reflect.DeepEqual(got, tc.errs) {
			t.Errorf("%s: problems %v, want %v", tc.name, got, tc.errs)
		}
	}
}
