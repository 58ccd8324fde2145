package state

import "testing"

func TestPaths(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Root("").Path(), "/run/pullhelper"},
		{Root("").Locks(), "/run/pullhelper/locks"},
		{Default.UIDs(), "/run/pullhelper/uids"},
		{Default.CgroupParents(), "/run/pullhelper/parents"},
		{Default.Bandwidth(), "/run/pullhelper/bandwidth"},
		{Root("/tmp/x").ProviderCache(), "/tmp/x/credential-provider-cache"},
	} {
		if c.got != c.want {
			t.Errorf("got %s, want %s", c.got, c.want)
		}
	}
}
