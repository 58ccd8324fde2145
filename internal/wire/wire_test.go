package wire

import (
	"encoding/json"
	"testing"
)

// Capabilities marshal as containerd's names, zero (all) as omitted, and
// read back the same.
func TestCapabilitiesJSON(t *testing.T) {
	for _, tc := range []struct {
		c    Capabilities
		want string
	}{
		{0, `{}`},
		{CapabilityPull | CapabilityResolve, `{"c":["pull","resolve"]}`},
		{CapabilityPush, `{"c":["push"]}`},
	} {
		b, err := json.Marshal(struct {
			C Capabilities `json:"c,omitempty"`
		}{tc.c})
		if err != nil || string(b) != tc.want {
			t.Errorf("%b: %s %v, want %s", tc.c, b, err, tc.want)
		}
		var back struct {
			C Capabilities `json:"c"`
		}
		if err := json.Unmarshal(b, &back); err != nil || back.C != tc.c {
			t.Errorf("%s read back as %b (%v)", b, back.C, err)
		}
	}
	if !Capabilities(0).Has(CapabilityResolve) || CapabilityPull.Has(CapabilityResolve) {
		t.Error("Has: zero must allow everything, pull alone not resolve")
	}
	if _, err := ParseCapability("Resolve"); err != nil {
		t.Error(err)
	}
	if _, err := ParseCapability("delete"); err == nil {
		t.Error("an unknown capability must be refused")
	}
}

func TestParsePlatform(t *testing.T) {
	for in, want := range map[string]Platform{
		"linux/arm64":  {OS: "linux", Architecture: "arm64"},
		"linux/arm/v7": {OS: "linux", Architecture: "arm", Variant: "v7"},
		"linux/amd64":  {OS: "linux", Architecture: "amd64"},
	} {
		got, err := ParsePlatform(in)
		if err != nil || got != want || got.String() != in {
			t.Errorf("ParsePlatform(%q) = %+v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "linux", "a/b/c/d", "Linux/AMD64", "linux/", "/arm64", "linux//v7", "linux/arm 64", "linux/arm64\n"} {
		if _, err := ParsePlatform(bad); err == nil {
			t.Errorf("ParsePlatform(%q) accepted", bad)
		}
	}
}

// containerd's Resolve asks a host for a tag only when it has both pull and
// resolve (filterHosts(HostCapabilityPull|HostCapabilityResolve)).
func TestResolvesTags(t *testing.T) {
	for c, want := range map[Capabilities]bool{
		0:                                  true,
		CapabilityPull | CapabilityResolve: true,
		CapabilityPull | CapabilityResolve | CapabilityPush: true,
		CapabilityResolve:                  false,
		CapabilityResolve | CapabilityPush: false,
		CapabilityPull:                     false,
		CapabilityPush:                     false,
	} {
		if got := c.ResolvesTags(); got != want {
			t.Errorf("%v.ResolvesTags() = %v, want %v", c.Names(), got, want)
		}
	}
}
