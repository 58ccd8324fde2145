package pull

import (
	"path/filepath"
	"strings"

	"github.com/pullhelper/pullhelper/internal/failure"
)

// Destination is DEST split into its transport and path.
type Destination struct {
	Raw       string `json:"raw"`
	Transport string `json:"transport"`
	Path      string `json:"path"`
	Ref       string `json:"ref,omitempty"`
}

// String renders the destination with its absolute path.
func (d Destination) String() string {
	s := d.Transport + ":" + d.Path
	if d.Ref != "" {
		s += ":" + d.Ref
	}
	return s
}

// Transports lists the destinations pullhelper writes.
var Transports = []string{"oci", "dir", "oci-archive", "docker-archive"}

// ParseDestination splits DEST ("oci:PATH[:TAG]", "dir:PATH",
// "oci-archive:PATH[:TAG]", "docker-archive:PATH[:REF]") and makes PATH
// absolute.
func ParseDestination(dest string) (Destination, error) {
	tr, rest, ok := strings.Cut(dest, ":")
	known := false
	for _, t := range Transports {
		known = known || tr == t
	}
	if !ok || !known {
		return Destination{}, failure.New(failure.Usage, "destination %q: unknown transport %q; use one of oci:PATH[:TAG], dir:PATH, oci-archive:PATH[:TAG], docker-archive:PATH[:REF]", dest, tr)
	}
	d := Destination{Raw: dest, Transport: tr, Path: rest}
	if tr != "dir" {
		d.Path, d.Ref, _ = strings.Cut(rest, ":")
	}
	if d.Path == "" {
		return Destination{}, failure.New(failure.Usage, "destination %q: the path is empty", dest)
	}
	abs, err := filepath.Abs(d.Path)
	if err != nil {
		return Destination{}, failure.New(failure.Usage, "destination %q: %v", dest, err)
	}
	d.Path = abs
	if d.Ref != "" {
		// Validate the tag/reference alone ("/" always exists; DEST's own
		// parent is checked, as a destination error, when the pull starts).
		if _, err := d.reference("/"); err != nil {
			return Destination{}, failure.New(failure.Usage, "destination %q: %v", dest, err)
		}
	}
	return d, nil
}
