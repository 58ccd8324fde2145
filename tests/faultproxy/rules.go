package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Rule is one entry of the rules file: a match, how many matching requests
// it applies to, and exactly one action.
type Rule struct {
	Match Match `json:"match"`
	// Count is how many matching requests the rule applies to; -1 (or
	// absent) means every one, 0 disables the rule.
	Count *int `json:"count,omitempty"`

	// status: answer with this code instead of forwarding (with
	// require_header: the refusal's code, default 403).
	Status int `json:"status,omitempty"`
	// RetryAfter is the Retry-After value: a number of seconds or a string
	// (an HTTP date) sent as is.
	RetryAfter any               `json:"retry_after,omitempty"`
	Body       string            `json:"body,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`

	ResetAfter    *int64 `json:"reset_after,omitempty"`
	StallAfter    *int64 `json:"stall_after,omitempty"`
	CloseAfter    *int64 `json:"close_after,omitempty"`
	FlipByte      *int64 `json:"flip_byte,omitempty"`
	ContentLength *int64 `json:"content_length,omitempty"`
	Trickle       int64  `json:"trickle,omitempty"`
	RequireHeader string `json:"require_header,omitempty"`
	IgnoreRange   bool   `json:"ignore_range,omitempty"`
	Drop          bool   `json:"drop,omitempty"`

	action string
	path   *regexp.Regexp
}

// Match selects requests. Every field that is set must hold.
type Match struct {
	Method string `json:"method,omitempty"`
	// Path is a Go regexp searched in the request path (unanchored: use
	// ^...$ for a whole path).
	Path string `json:"path,omitempty"`
	// Query lists query parameter names that must be present ("!name":
	// absent).
	Query []string `json:"query,omitempty"`
	// Header lists request header names that must be present ("!Name":
	// absent).
	Header []string `json:"header,omitempty"`
}

// Action names the rule's action (the key used in the rules file).
func (r *Rule) Action() string { return r.action }

// Limit is the number of body bytes a reset_after, stall_after, close_after
// or content_length rule lets through, or -1.
func (r *Rule) Limit() int64 {
	for _, p := range []*int64{r.ResetAfter, r.StallAfter, r.CloseAfter, r.ContentLength} {
		if p != nil {
			return *p
		}
	}
	return -1
}

// ParseRules decodes a rules file: a JSON array of rules. Unknown keys, a
// rule with no or several actions, a bad regexp or a negative byte count
// are errors (the file fails closed).
func ParseRules(data []byte) ([]Rule, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var rules []Rule
	if err := dec.Decode(&rules); err != nil {
		return nil, fmt.Errorf("decoding rules: %w", err)
	}
	if dec.More() {
		return nil, errors.New("decoding rules: trailing data after the array")
	}
	for i := range rules {
		if err := rules[i].check(); err != nil {
			return nil, fmt.Errorf("rule %d: %w", i, err)
		}
	}
	return rules, nil
}

func (r *Rule) check() error {
	var set []string
	add := func(cond bool, name string) {
		if cond {
			set = append(set, name)
		}
	}
	add(r.ResetAfter != nil, "reset_after")
	add(r.StallAfter != nil, "stall_after")
	add(r.CloseAfter != nil, "close_after")
	add(r.FlipByte != nil, "flip_byte")
	add(r.ContentLength != nil, "content_length")
	add(r.Trickle != 0, "trickle")
	add(r.RequireHeader != "", "require_header")
	add(r.IgnoreRange, "ignore_range")
	add(r.Drop, "drop")
	if len(set) == 0 && r.Status != 0 {
		set = append(set, "status")
	}
	if len(set) != 1 {
		return fmt.Errorf("needs exactly one action (status, reset_after, stall_after, close_after, flip_byte, content_length, trickle, require_header, ignore_range, drop), has %d: %v", len(set), set)
	}
	r.action = set[0]
	if (r.Status != 0 || r.RetryAfter != nil || r.Body != "" || r.Headers != nil) &&
		r.action != "status" && r.action != "require_header" {
		return fmt.Errorf("status, retry_after, body and headers go only with status or require_header, not %s", r.action)
	}
	if r.Status != 0 && (r.Status < 100 || r.Status > 599) {
		return fmt.Errorf("status %d is not an HTTP status code", r.Status)
	}
	switch v := r.RetryAfter.(type) {
	case nil, string:
	case float64:
		if v < 0 || v != float64(int64(v)) {
			return fmt.Errorf("retry_after %v is not a whole number of seconds", v)
		}
	default:
		return fmt.Errorf("retry_after must be seconds or a string, not %T", v)
	}
	for _, p := range []*int64{r.ResetAfter, r.StallAfter, r.CloseAfter, r.ContentLength, r.FlipByte} {
		if p != nil && *p < 0 {
			return fmt.Errorf("%s must not be negative", r.action)
		}
	}
	if r.Trickle < 0 {
		return errors.New("trickle must be a positive number of bytes per second")
	}
	if r.action == "require_header" {
		name, _, _ := strings.Cut(r.RequireHeader, "=")
		if name == "" {
			return fmt.Errorf("require_header %q: want NAME=VALUE or NAME", r.RequireHeader)
		}
	}
	if r.Count != nil && *r.Count < -1 {
		return fmt.Errorf("count %d: want -1 (always), 0 (off) or N", *r.Count)
	}
	var err error
	if r.path, err = regexp.Compile(r.Match.Path); err != nil {
		return fmt.Errorf("match.path: %w", err)
	}
	return nil
}

// Matches reports whether the request is one the rule selects (ignoring its
// count).
func (r *Rule) Matches(req *http.Request) bool {
	if r.Match.Method != "" && !strings.EqualFold(r.Match.Method, req.Method) {
		return false
	}
	if !r.path.MatchString(req.URL.Path) {
		return false
	}
	q := req.URL.Query()
	for _, name := range r.Match.Query {
		if neg, ok := strings.CutPrefix(name, "!"); ok {
			if q.Has(neg) {
				return false
			}
		} else if !q.Has(name) {
			return false
		}
	}
	for _, name := range r.Match.Header {
		if neg, ok := strings.CutPrefix(name, "!"); ok {
			if len(req.Header.Values(neg)) > 0 {
				return false
			}
		} else if len(req.Header.Values(name)) == 0 {
			return false
		}
	}
	return true
}

// Satisfied reports whether the request carries the header a
// require_header rule asks for.
func (r *Rule) Satisfied(req *http.Request) bool {
	name, value, hasValue := strings.Cut(r.RequireHeader, "=")
	for _, v := range req.Header.Values(name) {
		if !hasValue || v == value {
			return true
		}
	}
	return false
}

// RetryAfterValue is the Retry-After header to send, or "".
func (r *Rule) RetryAfterValue() string {
	switch v := r.RetryAfter.(type) {
	case string:
		return v
	case float64:
		return strconv.FormatInt(int64(v), 10)
	}
	return ""
}

// RuleSet holds the rules of a file and how often each has applied. The file
// is re-read when its inode, size or mtime change; the counts start again
// from the file's values then. Replace the file by renaming a new one over
// it (the new inode always differs from the old, so no change is missed and
// no half-written file is read). A missing file means no rules.
type RuleSet struct {
	path string

	mu    sync.Mutex
	key   fileKey
	rules []Rule
	left  []int
	err   error
}

type fileKey struct {
	ino, size int64
	mtime     time.Time
	exists    bool
}

// NewRuleSet returns the rules of path (read on first use).
func NewRuleSet(path string) *RuleSet { return &RuleSet{path: path, key: fileKey{ino: -1}} }

// Pick returns the first rule that matches req and has applications left,
// taking one, with its index; nil and -1 when none does. A rules file that
// does not parse is an error until it is replaced.
func (s *RuleSet) Pick(req *http.Request) (*Rule, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.reload(); err != nil {
		return nil, -1, err
	}
	for i := range s.rules {
		if s.left[i] == 0 || !s.rules[i].Matches(req) {
			continue
		}
		if s.left[i] > 0 {
			s.left[i]--
		}
		return &s.rules[i], i, nil
	}
	return nil, -1, nil
}

func (s *RuleSet) reload() error {
	if s.path == "" {
		return nil
	}
	var key fileKey
	fi, err := os.Stat(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("reading rules file: %w", err)
	default:
		key = fileKey{size: fi.Size(), mtime: fi.ModTime(), exists: true}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			key.ino = int64(st.Ino)
		}
	}
	if key == s.key {
		return s.err
	}
	s.key, s.rules, s.left, s.err = key, nil, nil, nil
	if !key.exists {
		return nil
	}
	data, err := os.ReadFile(s.path)
	if err == nil {
		s.rules, err = ParseRules(data)
	}
	if err != nil {
		s.err = fmt.Errorf("rules file %s: %w", s.path, err)
		return s.err
	}
	s.left = make([]int, len(s.rules))
	for i, r := range s.rules {
		s.left[i] = -1
		if r.Count != nil {
			s.left[i] = *r.Count
		}
	}
	return nil
}
