package wire

import (
	"fmt"
	"strings"
)

// Platform is the platform whose instance of an index a pull copies,
// verifies and unpacks (--platform OS/ARCH[/VARIANT]: as skopeo's
// --override-os, --override-arch and --override-variant, and crictl's
// --platform); nil in a request means this machine's.
type Platform struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Variant      string `json:"variant,omitempty"`
}

// String is OS/ARCH[/VARIANT].
func (p Platform) String() string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// ParsePlatform parses OS/ARCH[/VARIANT]: two or three non-empty parts of
// lower-case letters, digits, '_', '-' and '.' (an index's platform fields
// as the OCI image spec and GOOS/GOARCH spell them: linux/arm64,
// linux/arm/v7), at most 64 bytes each. Unlike containerd's
// platforms.Parse it neither defaults a missing architecture nor
// normalises case or aliases: the value is the one matched.
func ParsePlatform(s string) (Platform, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 {
		return Platform{}, fmt.Errorf("want OS/ARCH[/VARIANT] (e.g. linux/arm64, linux/arm/v7), not %q", s)
	}
	for _, p := range parts {
		if !platformPart(p) {
			return Platform{}, fmt.Errorf("want OS/ARCH[/VARIANT] in lower case (e.g. linux/arm64, linux/arm/v7), not %q", s)
		}
	}
	p := Platform{OS: parts[0], Architecture: parts[1]}
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	return p, nil
}

func platformPart(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}
