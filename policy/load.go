package policy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// File is a loaded policy file: the base policy, its profiles, and which keys
// it set.
type File struct {
	Path        string
	base        Policy
	profiles    map[string]profile
	source      []byte
	baseDefined map[string]bool
}

type profile struct {
	pol     Policy
	defined map[string]bool
}

// Loaded is a Policy plus the record of which keys were set explicitly (by
// the file, the profile or a flag). Unset keys hold built-in defaults.
type Loaded struct {
	Policy
	File    string `json:"file,omitempty"`
	Profile string `json:"profile,omitempty"`
	defined map[string]string
}

type document struct {
	Policy
	Profiles map[string]toml.Primitive `toml:"profiles"`
}

// LoadFile parses and validates the policy file at path, profiles included.
// It reads at most MaxFileSize bytes.
func LoadFile(path string) (*File, error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse parses and validates a policy document; name is used in errors. A
// document over MaxFileSize or nested deeper than MaxDepth is refused before
// it is decoded. A syntax error stops at the first one; every other problem
// (unknown keys, wrong types, bad values, bad combinations) is reported, all
// of them at once, as Errors.
func Parse(name string, data []byte) (*File, error) {
	if err := checkBounds(name, data); err != nil {
		return nil, err
	}
	f, err := parse(name, data, data)
	var df *decodeFailure
	if !errors.As(err, &df) {
		return f, err
	}
	// A value the decoder refused stops it at the first one: find each bad
	// value on its own, then check the rest of the document without them.
	bad, cleaned := valueErrors(name, data)
	if len(bad) == 0 || cleaned == nil {
		return nil, df.err
	}
	_, err = parse(name, cleaned, data)
	if errors.As(err, &df) {
		return nil, bad.result()
	}
	return nil, bad.add(err).result()
}

// decodeFailure is a decode error other than a syntax error: a wrong type
// or a value the key's type refused.
type decodeFailure struct{ err error }

func (d *decodeFailure) Error() string { return d.err.Error() }

// parse decodes data (source is the original text, for line numbers) and
// validates the base and every profile.
func parse(name string, data, source []byte) (*File, error) {
	doc := document{Policy: *Default()}
	doc.Version = 0
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&doc)
	if err != nil {
		var raw map[string]any
		if _, serr := toml.Decode(string(data), &raw); serr != nil {
			return nil, syntaxError(name, serr) // syntax: the decoder cannot go on
		}
		return nil, &decodeFailure{tomlError(name, err)}
	}
	f := &File{Path: name, base: doc.Policy, profiles: map[string]profile{}, source: source}
	names := make([]string, 0, len(doc.Profiles))
	for n := range doc.Profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		// Copy slices so a profile never aliases the base.
		p := clonePolicy(doc.Policy)
		if err := md.PrimitiveDecode(doc.Profiles[n], &p); err != nil {
			return nil, &decodeFailure{tomlError(name, err)}
		}
		f.profiles[n] = profile{pol: p}
	}
	var errs Errors
	undecoded := map[string]bool{}
	for _, k := range md.Undecoded() {
		undecoded[k.String()] = true
	}
	for _, k := range md.Undecoded() {
		if errs.full() {
			break
		}
		// Only the outermost unknown key: its sub-keys are unknown too.
		if len(k) > 1 && undecoded[k[:len(k)-1].String()] {
			continue
		}
		ks := k.String()
		line := keyLine(source, ks)
		if !inKnownSection(ks) {
			// Not a key of any section: the file may not be a policy at
			// all (a symlink to a root-only file), so its key is not
			// repeated -- only where it is.
			errs = append(errs, &Error{File: name, Line: line, Msg: "unknown key outside the policy's sections" + hint("")})
			continue
		}
		errs = append(errs, &Error{File: name, Line: line, Key: ks, Msg: "unknown key" + hint(ks)})
	}
	defined := map[string]bool{}
	profDefined := map[string]map[string]bool{}
	for _, k := range md.Keys() {
		if md.Type(k...) == "Hash" {
			continue // a table header; its keys are listed themselves
		}
		if len(k) >= 2 && k[0] == "profiles" {
			if len(k) > 2 {
				if profDefined[k[1]] == nil {
					profDefined[k[1]] = map[string]bool{}
				}
				profDefined[k[1]][k[2:].String()] = true
			}
			continue
		}
		defined[k.String()] = true
	}
	if !defined["version"] {
		errs = append(errs, &Error{File: name, Line: 1, Key: "version", Msg: "missing; this pullhelper reads version = 1"})
	} else if doc.Version != 1 {
		errs = append(errs, &Error{File: name, Line: keyLine(source, "version"), Key: "version", Msg: fmt.Sprintf("unsupported version %d; this pullhelper reads version = 1", doc.Version)})
	}
	for _, n := range names {
		pd := profDefined[n]
		if pd["version"] {
			errs = append(errs, &Error{File: name, Line: keyLine(source, "profiles."+n+".version"), Key: "profiles." + n + ".version", Msg: "a profile cannot set version"})
		}
		// Which profiles a pod may choose is the service's word: a
		// profile a pod chose cannot widen it.
		for _, k := range []string{"cri.profile_annotation", "cri.pod_profiles"} {
			if pd[k] {
				errs = append(errs, &Error{File: name, Line: keyLine(source, "profiles."+n+"."+k), Key: "profiles." + n + "." + k, Msg: "a profile cannot set " + k + " (set it in the base [cri])"})
			}
		}
	}
	for i, pp := range doc.CRI.PodProfiles {
		if _, ok := f.profiles[pp]; !ok {
			avail := strings.Join(names, ", ")
			if avail == "" {
				avail = "none"
			}
			errs = append(errs, &Error{File: name, Line: keyLine(source, "cri.pod_profiles"), Key: "cri.pod_profiles", Msg: fmt.Sprintf("entry %d: no profile %q in the policy file (profiles: %s)", i+1, pp, avail)})
		}
	}
	f.base.Version = 1
	f.baseDefined = defined
	// Validate the base and every profile now, so that `policy check` finds
	// errors in profiles nobody selected yet.
	errs = errs.add(f.validate("", f.base, defined, ""))
	for _, n := range names {
		if errs.full() {
			break
		}
		pd := map[string]bool{}
		for k := range defined {
			pd[k] = true
		}
		for k := range profDefined[n] {
			pd[k] = true
		}
		p := f.profiles[n]
		p.pol.Version = 1
		p.defined = pd
		f.profiles[n] = p
		errs = errs.add(f.validate(n, p.pol, pd, "profiles."+n+"."))
	}
	if err := errs.result(); err != nil {
		return nil, err
	}
	return f, nil
}

// validate checks one profile (prof "" for the base) and points each
// problem at the line that set it: the profile's when the profile set the
// key, else the base's.
func (f *File) validate(prof string, p Policy, defined map[string]bool, prefix string) error {
	l := &Loaded{Policy: p, File: f.Path, Profile: prof, defined: map[string]string{}}
	for k := range defined {
		l.defined[k] = "file"
	}
	err := l.Validate()
	if err == nil {
		return nil
	}
	var out Errors
	for _, pe := range Errors(nil).add(err) {
		if pe.File == "" && pe.Key != "" && !strings.HasPrefix(pe.Key, "-") {
			k := prefix + pe.Key
			line := keyLine(f.source, k)
			if line == 0 {
				k, line = pe.Key, keyLine(f.source, pe.Key)
			}
			pe = &Error{File: f.Path, Line: line, Key: k, Msg: pe.Msg}
		}
		out = append(out, pe)
	}
	return out
}

// valueErrors decodes every value of data on its own, so that each one the
// decoder refuses is reported, and returns data re-encoded without them.
func valueErrors(name string, data []byte) (Errors, []byte) {
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		return nil, nil
	}
	var bad Errors
	var walk func(m map[string]any, path []string)
	walk = func(m map[string]any, path []string) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if bad.full() {
				return
			}
			p := append(append([]string(nil), path...), k)
			if sub, ok := m[k].(map[string]any); ok && (len(p) != 1 || k != "version") {
				walk(sub, p)
				continue
			}
			if err := decodeOne(p, m[k]); err != nil {
				key := strings.Join(p, ".")
				e := &Error{File: name, Line: keyLine(data, key), Key: key, Msg: err.Msg}
				bad = append(bad, e)
				delete(m, k)
			}
		}
	}
	walk(raw, nil)
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(raw); err != nil {
		return bad, nil
	}
	return bad, buf.Bytes()
}

// decodeOne decodes the single value v at path into a fresh policy (a
// profile's keys into a policy of their own) and returns the decoder's
// complaint, if any.
func decodeOne(path []string, v any) *Error {
	if len(path) >= 2 && path[0] == "profiles" {
		path = path[2:]
		if len(path) == 0 {
			return nil
		}
	}
	if !knownKeys()[strings.Join(path, ".")] {
		return nil // an unknown key: reported as such, nothing to decode
	}
	var m any = v
	for i := len(path) - 1; i >= 0; i-- {
		m = map[string]any{path[i]: m}
	}
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(m); err != nil {
		return nil
	}
	p := *Default()
	if _, err := toml.Decode(buf.String(), &p); err != nil {
		var pe *Error
		if errors.As(tomlError("", err), &pe) {
			return pe
		}
	}
	return nil
}

// Profiles lists the profile names, sorted.
func (f *File) Profiles() []string {
	var out []string
	for n := range f.profiles {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Select returns the policy of profile name ("" for the base).
func (f *File) Select(name string) (*Loaded, error) {
	var (
		p       Policy
		defined map[string]bool
	)
	if name == "" {
		p, defined = f.base, f.baseDefined
	} else {
		pr, ok := f.profiles[name]
		if !ok {
			avail := strings.Join(f.Profiles(), ", ")
			if avail == "" {
				avail = "none"
			}
			return nil, &Error{File: f.Path, Key: "--profile", Msg: fmt.Sprintf("no profile %q in the policy file (profiles: %s)", name, avail)}
		}
		p, defined = pr.pol, pr.defined
	}
	l := &Loaded{Policy: clonePolicy(p), File: f.Path, Profile: name, defined: map[string]string{}}
	for k := range defined {
		l.defined[k] = "file"
	}
	return l, nil
}

// Defaults returns the built-in policy with nothing defined.
func Defaults() *Loaded {
	return &Loaded{Policy: *Default(), defined: map[string]string{}}
}

// Resolve finds the policy file the way the CLI does: explicit path (from
// --policy), else $PULLHELPER_POLICY, else DefaultPath when it exists, else
// the built-in defaults. An explicit or environment path that does not exist
// is an error; a missing DefaultPath is not.
func Resolve(explicit, profileName string) (*Loaded, error) {
	path, must := explicit, true
	if path == "" {
		path = os.Getenv(EnvPolicy)
	}
	if path == "" {
		path, must = DefaultPath, false
	}
	if _, err := os.Stat(path); err != nil && !must && errors.Is(err, os.ErrNotExist) {
		if profileName != "" {
			return nil, &Error{Key: "--profile", Msg: fmt.Sprintf("profile %q requested but no policy file is in use (%s does not exist)", profileName, DefaultPath)}
		}
		return Defaults(), nil
	}
	f, err := LoadFile(path)
	if err != nil {
		return nil, err
	}
	return f.Select(profileName)
}

// Defined reports whether key (dotted, e.g. "cgroup.memory_max") was set, and
// by what: "file" or the flag name.
func (l *Loaded) Defined(key string) (string, bool) {
	s, ok := l.defined[key]
	return s, ok
}

// DefaultCertsD sets trust.certs_d to search when neither the policy file
// nor a flag set it. The CLI passes hosts.DefaultCertsD (the linked
// containers/image's own search), which policy, importing no
// containers/image, cannot compute.
func (l *Loaded) DefaultCertsD(search []string) {
	if _, ok := l.defined["trust.certs_d"]; !ok && l.Trust.CertsD == nil {
		l.Trust.CertsD = search
	}
}

// DefinedUnder lists the defined keys under a dotted prefix, sorted.
func (l *Loaded) DefinedUnder(prefix string) []string {
	var out []string
	for k := range l.defined {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func clonePolicy(p Policy) Policy {
	cl := func(s []string) []string {
		if s == nil {
			return nil
		}
		return append([]string(nil), s...)
	}
	p.Auth.PullSecrets = cl(p.Auth.PullSecrets)
	p.Trust.CertsD = cl(p.Trust.CertsD)
	p.Trust.InsecureRegistries = cl(p.Trust.InsecureRegistries)
	p.Trust.CAFiles = append([]CAFile(nil), p.Trust.CAFiles...)
	p.Cgroup.IOReadBPS = cl(p.Cgroup.IOReadBPS)
	p.Cgroup.IOWriteBPS = cl(p.Cgroup.IOWriteBPS)
	p.Cgroup.IOReadIOPS = cl(p.Cgroup.IOReadIOPS)
	p.Cgroup.IOWriteIOPS = cl(p.Cgroup.IOWriteIOPS)
	p.Network.DNS.Nameservers = cl(p.Network.DNS.Nameservers)
	p.Network.DNS.Search = cl(p.Network.DNS.Search)
	p.Network.DNS.Options = cl(p.Network.DNS.Options)
	p.Network.DNS.Hosts = cl(p.Network.DNS.Hosts)
	p.CRI.PodProfiles = cl(p.CRI.PodProfiles)
	return p
}
