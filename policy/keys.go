package policy

import (
	"bufio"
	"bytes"
	"reflect"
	"strings"
	"sync"

	"github.com/BurntSushi/toml"
)

// knownKeys is every dotted key of the schema (from Policy's toml tags).
var knownKeys = sync.OnceValue(func() map[string]bool {
	keys := map[string]bool{}
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name := strings.Split(f.Tag.Get("toml"), ",")[0]
			if name == "" || name == "-" {
				continue
			}
			keys[prefix+name] = true
			if f.Type.Kind() == reflect.Struct && !reflect.PointerTo(f.Type).Implements(unmarshalerType) {
				walk(f.Type, prefix+name+".")
			}
		}
	}
	walk(reflect.TypeOf(Policy{}), "")
	return keys
})

var unmarshalerType = reflect.TypeOf((*toml.Unmarshaler)(nil)).Elem()

// schemaKey reports whether k is a key of the schema (inside a profile or
// not), whose name an error may repeat.
func schemaKey(k string) bool {
	if k == "" {
		return false
	}
	if parts := strings.SplitN(k, ".", 3); len(parts) == 3 && parts[0] == "profiles" {
		k = parts[2]
	}
	return knownKeys()[k] || k == "profiles"
}

// inKnownSection reports whether the unknown key k lies in one of the
// schema's sections (a profile's included): a misspelt key of a policy
// file, whose name the error repeats.
func inKnownSection(k string) bool {
	if parts := strings.SplitN(k, ".", 3); len(parts) == 3 && parts[0] == "profiles" {
		k = parts[2]
	}
	first := strings.SplitN(k, ".", 2)[0]
	for _, s := range knownSections {
		if first == s && s != "profiles" {
			return strings.Contains(k, ".")
		}
	}
	return false
}

// knownSections are the schema's sections.
var knownSections = []string{"pull", "auth", "trust", "cgroup", "network", "network.dns", "privileges", "dest", "cri", "profiles"}

// hint is what an unknown key's error adds: where to find the keys of its
// section, or the sections there are.
func hint(k string) string {
	for _, s := range knownSections {
		if k == s {
			return ""
		}
	}
	first := strings.SplitN(k, ".", 2)[0]
	for _, s := range knownSections {
		if first == s {
			return " (see pullhelper-policy.toml(5) for the keys of [" + s + "])"
		}
	}
	return " (sections are [pull], [auth], [trust], [cgroup], [network], [network.dns], [privileges], [dest], [cri], [profiles.NAME])"
}

// keyLine finds the line on which the dotted key is set, or 0. It follows
// table headers and dotted keys; it is used only to point at lines the TOML
// decoder does not report (unknown keys, cross-field checks).
func keyLine(data []byte, key string) int {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	table, line, tableLine := "", 0, 0
	for sc.Scan() {
		line++
		t := strings.TrimSpace(sc.Text())
		if t == "" || t[0] == '#' {
			continue
		}
		if strings.HasPrefix(t, "[") {
			h := strings.Trim(strings.SplitN(t, "]]", 2)[0], "[] ")
			if i := strings.Index(t, "]"); i > 0 && !strings.HasPrefix(t, "[[") {
				h = strings.TrimSpace(t[1:i])
			}
			table = normKey(h)
			tableLine = line
			if table == key {
				return line
			}
			continue
		}
		eq := strings.Index(t, "=")
		if eq <= 0 {
			continue
		}
		k := normKey(t[:eq])
		if table != "" {
			k = table + "." + k
		}
		if k == key || strings.HasPrefix(key, k+".") {
			return line
		}
	}
	if tableLine > 0 && table == key {
		return tableLine
	}
	return 0
}

// normKey is a dotted key as written (spaces, quotes) in its plain form.
func normKey(s string) string {
	parts := strings.Split(s, ".")
	for i, p := range parts {
		parts[i] = strings.Trim(strings.TrimSpace(p), `"'`)
	}
	return strings.Join(parts, ".")
}
