package pull

import (
	"net/url"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// lookasideBases are the http and https signature lookaside locations the
// registries.d files name (containers-registries.d(5): lookaside, or the
// older sigstore, of default-docker and of every docker namespace), as
// containers/image's registries_d.go reads them. A file that does not
// parse names none here (containers/image then refuses it itself).
func lookasideBases(files map[string][]byte) []*url.URL {
	type namespace struct {
		Lookaside string `yaml:"lookaside"`
		SigStore  string `yaml:"sigstore"`
	}
	var out []*url.URL
	add := func(ns namespace) {
		for _, s := range []string{ns.Lookaside, ns.SigStore} {
			if u, err := url.Parse(s); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
				out = append(out, u)
			}
		}
	}
	for _, b := range files {
		var conf struct {
			DefaultDocker *namespace           `yaml:"default-docker"`
			Docker        map[string]namespace `yaml:"docker"`
		}
		if yaml.Unmarshal(b, &conf) != nil {
			continue
		}
		if conf.DefaultDocker != nil {
			add(*conf.DefaultDocker)
		}
		for _, ns := range conf.Docker {
			add(ns)
		}
	}
	return out
}

// signaturePath is the rest of a lookaside signature's URL below its base
// (containers/image's lookasideStorageURL: REPO@ALGO=HEX/signature-N).
var signaturePath = regexp.MustCompile(`^/[a-z0-9._/-]+@sha256=[0-9a-f]{64}/signature-[1-9][0-9]*$`)

// isLookasideSignature reports whether u is a signature read from one of
// bases: a GET containers/image makes with no credential (lookaside
// servers are read anonymously, and signatures verify themselves), so the
// request guard need not keep it off plain http. Only the exact shape
// counts: the base's origin, a path below its path ending in a
// signature's name, and no query (a token realm's request has one).
func isLookasideSignature(u *url.URL, bases []*url.URL) bool {
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return false
	}
	for _, b := range bases {
		if !strings.EqualFold(u.Scheme, b.Scheme) || !strings.EqualFold(u.Host, b.Host) {
			continue
		}
		rest, ok := strings.CutPrefix(u.Path, strings.TrimSuffix(b.Path, "/"))
		if ok && signaturePath.MatchString(rest) {
			return true
		}
	}
	return false
}
