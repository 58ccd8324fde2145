package regpattern

import (
	"fmt"
	"strconv"
	"strings"
)

// Pattern is one parsed registry pattern. The zero value matches nothing.
type Pattern struct {
	raw      string
	host     string // lowercased; for a wildcard the domain after "*."
	port     string // "" = no port
	wildcard bool
}

// Parse parses "host[:port]" or "*.domain[:port]" (an IPv6 host in
// brackets, "[::1]:5000"). Errors say what is wrong without repeating
// anything but the pattern itself.
func Parse(s string) (Pattern, error) {
	bad := func(why string) (Pattern, error) {
		return Pattern{}, fmt.Errorf("registry pattern %q: %s", s, why)
	}
	if s == "" {
		return bad("empty pattern; want host[:port] or *.domain[:port]")
	}
	if strings.Contains(s, "://") {
		return bad("want host[:port] or *.domain[:port], without a scheme")
	}
	if strings.ContainsAny(s, "/@?# \t") {
		return bad("want host[:port] or *.domain[:port], without a path")
	}
	rest, wildcard := strings.CutPrefix(s, "*.")
	host, port := SplitHostPort(rest)
	if host == "" {
		return bad("no host")
	}
	inner := host
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") && !wildcard {
		inner = host[1 : len(host)-1]
	}
	if strings.ContainsAny(inner, "*?[]") {
		return bad("a wildcard is allowed only as a leading \"*.\"")
	}
	if strings.HasPrefix(host, ".") || strings.HasSuffix(host, ".") || strings.Contains(host, "..") {
		return bad("empty host label")
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return bad("the port must be a number from 1 to 65535")
		}
	} else if strings.HasSuffix(rest, ":") {
		return bad("empty port")
	}
	return Pattern{raw: s, host: strings.ToLower(host), port: port, wildcard: wildcard}, nil
}

// MustParse is Parse for patterns known to be valid; it panics otherwise.
func MustParse(s string) Pattern {
	p, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return p
}

// ParseAll parses every pattern; the error names the first bad one by its
// position (1-based), as policy validation reports entries.
func ParseAll(list []string) ([]Pattern, error) {
	out := make([]Pattern, 0, len(list))
	for i, s := range list {
		p, err := Parse(s)
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i+1, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// String is the pattern as written.
func (p Pattern) String() string { return p.raw }

// Match reports whether registry ("host[:port]"; anything from the first "/"
// on is ignored, so a repository name works too) is named by the pattern.
func (p Pattern) Match(registry string) bool {
	if p.host == "" {
		return false
	}
	registry, _, _ = strings.Cut(registry, "/")
	host, port := SplitHostPort(registry)
	if port != p.port || host == "" {
		return false
	}
	host = strings.ToLower(host)
	if !p.wildcard {
		return host == p.host
	}
	return len(host) > len(p.host)+1 && strings.HasSuffix(host, "."+p.host) && !strings.HasPrefix(host, ".")
}

// Match parses pattern and matches registry; a malformed pattern matches
// nothing (validation reports it).
func Match(pattern, registry string) bool {
	p, err := Parse(pattern)
	return err == nil && p.Match(registry)
}

// First returns the first pattern of list that matches registry.
func First(list []Pattern, registry string) (Pattern, bool) {
	for _, p := range list {
		if p.Match(registry) {
			return p, true
		}
	}
	return Pattern{}, false
}

// SplitHostPort splits "host[:port]", including "[v6]" and "[v6]:port". A
// bare IPv6 address without brackets is not a registry name and comes back
// split at its last colon, as every registry parser does.
func SplitHostPort(s string) (host, port string) {
	if strings.HasPrefix(s, "[") {
		if i := strings.Index(s, "]"); i >= 0 {
			host, rest := s[:i+1], s[i+1:]
			if p, ok := strings.CutPrefix(rest, ":"); ok {
				return host, p
			}
			return host, ""
		}
		return s, ""
	}
	if i := strings.LastIndex(s, ":"); i >= 0 {
		return s[:i], s[i+1:]
	}
	return s, ""
}
