package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/pullhelper/pullhelper/internal/failure"
)

// explainText writes explain's result (the JSON document, read back as
// generic values so that it follows the plan's JSON exactly) as a readable
// summary: one line per subject, the endpoints in order, each host once.
func explainText(w io.Writer, doc any) error {
	b, err := json.Marshal(doc)
	if err != nil {
		return failure.Wrap(failure.Internal, err, "rendering the plan")
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		return failure.Wrap(failure.Internal, err, "rendering the plan")
	}
	plan, _ := v["plan"].(map[string]any)
	t := &textOut{w: w}
	ref := str(plan, "reference")
	if how := str(plan, "short_name_resolved_by"); how != "" {
		ref += " (short name, resolved by " + how + ")"
	}
	t.line("image", ref)
	if d, _ := plan["destination"].(map[string]any); str(d, "raw") != "" {
		t.line("destination", str(d, "raw"))
	}
	t.line("endpoints", fmt.Sprintf("in order, chosen by %s", orDash(str(plan, "endpoint_rules"))))
	seen := map[string]bool{}
	n := 0
	for _, e := range list(plan, "endpoints") {
		ep, _ := e.(map[string]any)
		url := str(ep, "scheme") + "://" + str(ep, "host") + str(ep, "path")
		key := url + " " + str(ep, "repository")
		if seen[key] {
			continue // the same host twice (hosts.toml's host and server)
		}
		seen[key] = true
		n++
		role := "registry"
		if b, _ := ep["mirror"].(bool); b {
			role = "mirror"
		}
		src := str(ep, "source")
		if f := str(ep, "file"); f != "" {
			src += " " + f
		}
		t.item(fmt.Sprintf("%d. %s  %s  repository %s  (%s)", n, url, role, str(ep, "repository"), src))
		if caps := strs(ep, "capabilities"); len(caps) > 0 {
			t.sub("capabilities " + strings.Join(caps, ", "))
		}
		creds := list(ep, "credentials")
		if len(creds) == 0 {
			t.sub("credentials  anonymous")
		}
		for _, c := range creds {
			cm, _ := c.(map[string]any)
			parts := []string{str(cm, "source")}
			for _, k := range []string{"file", "key", "username"} {
				if s := str(cm, k); s != "" {
					parts = append(parts, k+" "+s)
				}
			}
			t.sub("credential   " + strings.Join(parts, ", "))
		}
		if tr, _ := ep["trust"].(map[string]any); tr != nil {
			t.sub("trust        " + trustText(tr))
		}
	}
	if sp, _ := plan["signature_policy"].(map[string]any); sp != nil {
		s := str(sp, "source")
		if f := str(sp, "file"); f != "" {
			s += " " + f
		}
		t.line("signatures", s)
	}
	iso, _ := plan["isolation"].(map[string]any)
	mode := str(iso, "mode")
	if r := str(iso, "reason"); r != "" {
		mode += " (" + r + ")"
	}
	if b, _ := iso["enabled"].(bool); b {
		sec := "off"
		if s, _ := iso["seccomp"].(bool); s {
			sec = "on"
		}
		mode += fmt.Sprintf(": user %s, seccomp %s", orDash(str(iso, "user")), sec)
	}
	t.line("isolation", mode)
	if cg, _ := iso["cgroup"].(map[string]any); cg != nil {
		s := "driver " + orDash(str(cg, "driver"))
		if p := str(cg, "path"); p != "" {
			s += ", joins " + p
		} else {
			s += ", under " + orDash(str(cg, "parent"))
		}
		if l, _ := cg["limits"].(map[string]any); len(l) > 0 {
			s += ", limits " + kv(l)
		}
		t.sub("cgroup       " + s)
	}
	if nw, _ := iso["network"].(map[string]any); nw != nil {
		s := orDash(str(nw, "mode"))
		if ns := str(nw, "netns"); ns != "" {
			s += ", namespace " + ns
		}
		if dns, _ := nw["dns"].(map[string]any); dns != nil {
			s += ", nameservers " + strings.Join(strs(dns, "nameservers"), " ")
			if sr := strs(dns, "search"); len(sr) > 0 {
				s += ", search " + strings.Join(sr, " ")
			}
		}
		t.sub("network      " + s)
	}
	t.sub("state root   " + orDash(str(iso, "state_root")))
	pull := []string{fmt.Sprintf("retries %v", plan["retries"]), "timeout " + dur(plan["timeout_ns"]), "stall timeout " + dur(plan["stall_timeout_ns"]),
		fmt.Sprintf("parallel layers %v", plan["parallel_layers"])}
	if bw, ok := plan["max_bandwidth"].(float64); ok && bw > 0 {
		pull = append(pull, fmt.Sprintf("max bandwidth %.0f B/s", bw))
	}
	if b, _ := plan["all_architectures"].(bool); b {
		pull = append(pull, "all architectures")
	}
	if pl, _ := plan["platform"].(map[string]any); pl != nil {
		v := str(pl, "os") + "/" + str(pl, "architecture")
		if va := str(pl, "variant"); va != "" {
			v += "/" + va
		}
		pull = append(pull, "platform "+v)
	}
	t.line("pull", strings.Join(pull, ", "))
	if pol, _ := plan["policy"].(map[string]any); str(pol, "file") != "" {
		s := str(pol, "file")
		if p := str(pol, "profile"); p != "" {
			s += ", profile " + p
		}
		t.line("policy", s)
	}
	for _, w := range strs(plan, "warnings") {
		t.line("warning", w)
	}
	return t.err
}

// trustText is one endpoint's trust in a line.
func trustText(tr map[string]any) string {
	var parts []string
	if v, ok := tr["verify"].(bool); ok && !v {
		parts = append(parts, "certificates NOT verified")
	} else {
		parts = append(parts, "certificates verified")
	}
	if d := str(tr, "cert_dir"); d != "" {
		parts = append(parts, "cert dir "+d)
	}
	if ca := strs(tr, "ca_files"); len(ca) > 0 {
		parts = append(parts, "CA "+strings.Join(ca, " "))
	}
	return strings.Join(parts, ", ")
}

type textOut struct {
	w   io.Writer
	err error
}

func (t *textOut) printf(format string, args ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.w, format, args...)
	}
}

func (t *textOut) line(k, v string) { t.printf("%-12s %s\n", k, v) }
func (t *textOut) item(v string)    { t.printf("  %s\n", v) }
func (t *textOut) sub(v string)     { t.printf("     %s\n", v) }

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

func list(m map[string]any, k string) []any {
	l, _ := m[k].([]any)
	return l
}

func strs(m map[string]any, k string) []string {
	var out []string
	for _, v := range list(m, k) {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// kv is a JSON object's scalar members as k=v, sorted by key.
func kv(m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		switch v := m[k].(type) {
		case float64:
			parts = append(parts, fmt.Sprintf("%s=%.10g", k, v))
		case string, bool:
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	return strings.Join(parts, " ")
}

// dur is a nanosecond count from the JSON as a Go duration (0: none).
func dur(v any) string {
	f, _ := v.(float64)
	if f == 0 {
		return "none"
	}
	return time.Duration(f).String()
}
