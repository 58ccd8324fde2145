package pull

import (
	"fmt"
	"maps"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// LookasideScope is one namespace of a registries.d file
// (containers-registries.d(5)): default-docker, or a docker scope, and the
// lookaside it names (or the older name sigstore).
type LookasideScope struct {
	Scope     string // "" for default-docker
	Default   bool
	Lookaside string
	SigStore  string
}

// URL is the lookaside containers/image reads from: lookaside, else
// sigstore (registries_d.go registryNamespace.signatureTopLevel).
func (s LookasideScope) URL() string {
	if s.Lookaside != "" {
		return s.Lookaside
	}
	return s.SigStore
}

// LookasideScopes are the namespaces of the registries.d files, file by
// file in name order (containers/image's order). A file that does not
// parse names none here (containers/image then refuses it itself).
func LookasideScopes(files map[string][]byte) []LookasideScope {
	type namespace struct {
		Lookaside string `yaml:"lookaside"`
		SigStore  string `yaml:"sigstore"`
	}
	var out []LookasideScope
	for _, n := range slices.Sorted(maps.Keys(files)) {
		var conf struct {
			DefaultDocker *namespace           `yaml:"default-docker"`
			Docker        map[string]namespace `yaml:"docker"`
		}
		if yaml.Unmarshal(files[n], &conf) != nil {
			continue
		}
		if ns := conf.DefaultDocker; ns != nil {
			out = append(out, LookasideScope{Default: true, Lookaside: ns.Lookaside, SigStore: ns.SigStore})
		}
		for _, k := range slices.Sorted(maps.Keys(conf.Docker)) {
			ns := conf.Docker[k]
			out = append(out, LookasideScope{Scope: k, Lookaside: ns.Lookaside, SigStore: ns.SigStore})
		}
	}
	return out
}

// lookasideBases are the http and https signature lookaside locations the
// registries.d files name (lookaside or sigstore, of default-docker and of
// every docker namespace).
func lookasideBases(files map[string][]byte) []*url.URL {
	var out []*url.URL
	for _, ns := range LookasideScopes(files) {
		for _, s := range []string{ns.Lookaside, ns.SigStore} {
			if u, err := url.Parse(s); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
				out = append(out, u)
			}
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

// Lookaside are the signatures of a file:// lookaside, read by the parent:
// the isolated copy runs as another uid with a private /tmp and may not
// read the directory registries.d names (or containers/image's built-in
// default, root's /var/lib/containers/sigstore, which as another uid it
// would not even look in). Base is the lookaside as registries.d names it
// ("" for the built-in default); Files are its signature files for the
// image's repository, by path below it (REPO@sha256=HEX/signature-N).
type Lookaside struct {
	Base  string            `json:"base"`
	Files map[string][]byte `json:"files"`
}

// lookasideFile is a signature file's path below a lookaside: what
// containers/image's lookasideStorageURL makes of a repository and a
// digest.
var lookasideFile = regexp.MustCompile(`^[a-z0-9][a-z0-9._/-]*@(?:sha256=[0-9a-f]{64}|sha512=[0-9a-f]{128})/signature-[1-9][0-9]*$`)

// ValidLookasideFile reports whether rel is such a path (and no other:
// no "..", no absolute path).
func ValidLookasideFile(rel string) bool {
	return lookasideFile.MatchString(rel) && path.Clean(rel) == rel && !strings.Contains(rel, "..")
}

// writeLookaside writes l's files under dir/lookaside and returns the
// registries.d files with l.Base replaced by that directory, as
// containers/image will read them: every lookaside (or sigstore) value
// equal to Base, or, for the built-in default, a default-docker entry of
// its own.
func writeLookaside(l *Lookaside, dir string, regD map[string][]byte) (map[string][]byte, error) {
	root := filepath.Join(dir, "lookaside")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	for rel, b := range l.Files {
		if !ValidLookasideFile(rel) {
			return nil, fmt.Errorf("a lookaside signature named %q", rel)
		}
		f := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(f, b, 0o600); err != nil {
			return nil, err
		}
	}
	local := (&url.URL{Scheme: "file", Path: root}).String()
	out := make(map[string][]byte, len(regD)+1)
	for n, b := range regD {
		out[n] = b
	}
	if l.Base == "" {
		// The built-in default: default-docker names no lookaside. Its
		// lookaside is set where it is defined (a second default-docker
		// would be an error), else in a file of its own.
		for n, b := range regD {
			nb, ok, err := rewriteYAML(b, func(doc *yaml.Node) bool { return setDefaultLookaside(doc, local) })
			if err != nil {
				return nil, err
			}
			if ok {
				out[n] = nb
				return out, nil
			}
		}
		out["zz-pullhelper-lookaside.yaml"] = []byte("default-docker:\n  lookaside: " + local + "\n")
		return out, nil
	}
	for n, b := range regD {
		nb, ok, err := rewriteYAML(b, func(doc *yaml.Node) bool { return replaceLookaside(doc, l.Base, local) })
		if err != nil {
			return nil, err
		}
		if ok {
			out[n] = nb
		}
	}
	return out, nil
}

// rewriteYAML applies change to the YAML document b and returns it again
// when change changed it (a document that does not parse is left as it is:
// containers/image refuses it itself).
func rewriteYAML(b []byte, change func(*yaml.Node) bool) ([]byte, bool, error) {
	var doc yaml.Node
	if yaml.Unmarshal(b, &doc) != nil || !change(&doc) {
		return nil, false, nil
	}
	nb, err := yaml.Marshal(&doc)
	return nb, err == nil, err
}

// replaceLookaside sets every lookaside or sigstore value equal to from
// to to, anywhere in the document; it reports whether it changed one.
func replaceLookaside(n *yaml.Node, from, to string) bool {
	changed := false
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if (k.Value == "lookaside" || k.Value == "sigstore") && v.Kind == yaml.ScalarNode && v.Value == from {
				v.Value, v.Tag, v.Style, changed = to, "!!str", 0, true
			}
		}
	}
	for _, c := range n.Content {
		if replaceLookaside(c, from, to) {
			changed = true
		}
	}
	return changed
}

// setDefaultLookaside sets the lookaside of the document's default-docker
// entry, when it has one (a mapping); it reports whether it did.
func setDefaultLookaside(doc *yaml.Node, to string) bool {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return false
	}
	top := doc.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value != "default-docker" {
			continue
		}
		ns := top.Content[i+1]
		if ns.Kind != yaml.MappingNode {
			if ns.Tag != "!!null" {
				return false
			}
			ns.Kind, ns.Tag, ns.Value = yaml.MappingNode, "!!map", ""
		}
		for j := 0; j+1 < len(ns.Content); j += 2 {
			if ns.Content[j].Value == "lookaside" {
				v := ns.Content[j+1]
				v.Kind, v.Tag, v.Style, v.Value = yaml.ScalarNode, "!!str", 0, to
				return true
			}
		}
		ns.Content = append(ns.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "lookaside"},
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: to})
		return true
	}
	return false
}
