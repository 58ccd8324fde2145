package main

import (
	"bytes"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/policy"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The man page sources (go-md2man markdown; make man renders them).
const (
	cliPage    = "../../docs/pullhelper.1.md"
	policyPage = "../../docs/pullhelper-policy.toml.5.md"
)

// docEntry is one definition-list entry of a page: the term line
// ("**--flag** *ARG*", "**key.path** = *type*") and its definition.
type docEntry struct{ term, body string }

var (
	termRE      = regexp.MustCompile(`^\*\*([^*]+)\*\*`)
	shortLongRE = regexp.MustCompile(`^\*\*-[A-Za-z]\*\*, \*\*(--[^*]+)\*\*`)
)

// readEntries parses a page's definition lists: a line starting with
// **NAME** followed by ":   definition" and its indented continuation
// lines. The map is keyed by NAME (for "**-h**, **--help**", by "--help").
func readEntries(t *testing.T, path string) (map[string]docEntry, string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	out := map[string]docEntry{}
	for i := 0; i < len(lines); i++ {
		m := termRE.FindStringSubmatch(lines[i])
		if m == nil || i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], ":") {
			continue
		}
		name := m[1]
		if long := shortLongRE.FindStringSubmatch(lines[i]); long != nil {
			name = long[1]
		}
		var body strings.Builder
		for j := i + 1; j < len(lines) && (strings.HasPrefix(lines[j], ":") || strings.HasPrefix(lines[j], "    ")); j++ {
			body.WriteString(lines[j] + "\n")
		}
		if _, dup := out[name]; dup {
			t.Errorf("%s: %s is documented twice", path, name)
		}
		out[name] = docEntry{term: lines[i], body: body.String()}
	}
	return out, string(b)
}

// commandTree is the CLI's real command tree, as run builds it, with the
// help command and help flags cobra adds at execution time.
func commandTree(t *testing.T) *cobra.Command {
	t.Helper()
	var root *cobra.Command
	inspectCommands = func(r *cobra.Command) { root = r }
	defer func() { inspectCommands = nil }()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"version"}, &stdout, &stderr); code != 0 || root == nil {
		t.Fatalf("pullhelper version: exit %d, %s", code, stderr.String())
	}
	root.InitDefaultHelpCmd()
	return root
}

func walk(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		walk(sub, fn)
	}
}

// Every command and every flag of every command (local, persistent and
// inherited) has an entry in pullhelper(1); every setting flag's entry names
// its policy key; and the page documents no flag the CLI lacks.
func TestManPageCoversCLI(t *testing.T) {
	entries, text := readEntries(t, cliPage)
	root := commandTree(t)
	keyOf := map[string]string{}
	for _, f := range settingFlags {
		keyOf[f.name] = f.key
	}
	// Each flag once, with the commands that take it.
	flags := map[string]*pflag.Flag{}
	takenBy := map[string][]string{}
	walk(root, func(c *cobra.Command) {
		// Hidden commands are cobra's shell-completion machinery
		// (__complete), not a user surface.
		if c.Hidden {
			return
		}
		if c != root {
			heading := regexp.MustCompile(`(?m)^### ` + regexp.QuoteMeta(c.CommandPath()) + `( |$)`)
			if !heading.MatchString(text) {
				t.Errorf("%s: command %q has no \"### %s\" section", cliPage, c.CommandPath(), c.CommandPath())
			}
		}
		c.InitDefaultHelpFlag()
		add := func(f *pflag.Flag) {
			// Hidden flags are not part of the documented surface
			// (none exist today; a deprecated alias would be one).
			if f.Hidden {
				return
			}
			flags[f.Name] = f
			if by := takenBy[f.Name]; len(by) == 0 || by[len(by)-1] != c.CommandPath() {
				takenBy[f.Name] = append(by, c.CommandPath())
			}
		}
		// Flags() holds the local and persistent flags (and, once
		// parsed, the inherited ones: the same flag again).
		c.Flags().VisitAll(add)
		c.InheritedFlags().VisitAll(add)
	})
	names := make([]string, 0, len(flags))
	for n := range flags {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f := flags[n]
		e, ok := entries["--"+n]
		if !ok {
			t.Errorf("%s: flag --%s (%s) is not documented (want a \"**--%s**\" entry)", cliPage, n, strings.Join(takenBy[n], ", "), n)
			continue
		}
		if f.Shorthand != "" && !strings.HasPrefix(e.term, "**-"+f.Shorthand+"**, ") {
			t.Errorf("%s: flag --%s: its shorthand -%s is not documented", cliPage, n, f.Shorthand)
		}
		// A flag's own default (the setting flags' defaults are the
		// policy's, documented with its keys) is in its entry.
		if d := f.DefValue; d != "" && d != "false" && d != "[]" && !strings.Contains(e.body, d) {
			t.Errorf("%s: flag --%s: its entry does not give its default %q", cliPage, n, d)
		}
		if k := keyOf[n]; k != "" && !strings.Contains(e.body, "**"+k+"**") {
			t.Errorf("%s: flag --%s: its entry does not name its policy key **%s**", cliPage, n, k)
		}
	}
	for name := range entries {
		if n, ok := strings.CutPrefix(name, "--"); ok && flags[n] == nil {
			t.Errorf("%s: documents --%s, which no command has", cliPage, n)
		}
	}
	// Exit codes and the policy's environment variable.
	for _, code := range []failure.Code{failure.Internal, failure.Usage, failure.Unauthorized, failure.TLS, failure.NotFound,
		failure.Network, failure.Isolation, failure.Verification, failure.Destination, failure.Interrupted} {
		re := regexp.MustCompile(`(?m)^\*\*` + regexp.QuoteMeta(strconv.Itoa(code.Exit())) + `\*\*.*\(\*\*` + string(code) + `\*\*\)$`)
		if !re.MatchString(text) {
			t.Errorf("%s: exit status %d (%s) is not documented", cliPage, code.Exit(), code)
		}
	}
	if _, ok := entries[policy.EnvPolicy]; !ok {
		t.Errorf("%s: ENVIRONMENT does not document %s", cliPage, policy.EnvPolicy)
	}
}

// policyKeys lists every key path of the policy schema from its toml tags,
// recursively: "cgroup.memory_max", "network.dns.policy", and for an array
// of tables both the array ("trust.ca_files") and its keys
// ("trust.ca_files.registry").
func policyKeys(t reflect.Type, prefix string) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if tag == "" || tag == "-" {
			continue
		}
		key := prefix + tag
		ft := f.Type
		switch {
		case ft.Kind() == reflect.Struct:
			out = append(out, policyKeys(ft, key+".")...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			out = append(out, key)
			out = append(out, policyKeys(ft.Elem(), key+".")...)
		default:
			out = append(out, key)
		}
	}
	return out
}

// Every policy key has an entry in pullhelper-policy.toml(5); the entry of a
// key a flag sets names the flag; and the page documents no key the schema
// lacks.
func TestManPageCoversPolicy(t *testing.T) {
	entries, _ := readEntries(t, policyPage)
	keys := policyKeys(reflect.TypeOf(policy.Policy{}), "")
	if len(keys) < 60 {
		t.Fatalf("found only %d policy keys: %v", len(keys), keys)
	}
	flagOf := map[string]string{}
	for _, f := range settingFlags {
		flagOf[f.key] = f.name
	}
	known := map[string]bool{}
	for _, k := range keys {
		known[k] = true
		e, ok := entries[k]
		if !ok {
			t.Errorf("%s: policy key %s is not documented (want a \"**%s** = *type*\" entry)", policyPage, k, k)
			continue
		}
		if !strings.HasPrefix(e.term, "**"+k+"** = ") {
			t.Errorf("%s: policy key %s: the entry's term %q does not give its type", policyPage, k, e.term)
		}
		if fl := flagOf[k]; fl != "" && !strings.Contains(e.body, "**--"+fl+"**") {
			t.Errorf("%s: policy key %s: its entry does not name its flag **--%s**", policyPage, k, fl)
		}
	}
	var stale []string
	for name := range entries {
		if strings.Contains(name, ".") && !strings.HasSuffix(name, ".") && !known[name] {
			stale = append(stale, name)
		}
	}
	sort.Strings(stale)
	for _, k := range stale {
		t.Errorf("%s: documents %s, which is not a policy key", policyPage, k)
	}
}
