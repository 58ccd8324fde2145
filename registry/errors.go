package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// maxErrorBody bounds the part of an error response that is read.
const maxErrorBody = 64 << 10

// StatusError is an answer other than the one asked for: the HTTP status
// and, when the body is the distribution spec's error format (or a bare
// code such as UNAUTHORIZED), the first error code and its message.
type StatusError struct {
	Host       string
	Op         string // "fetching the manifest latest", "fetching blob sha256:…"
	StatusCode int
	Code       string // upper case, "" when the body names none
	Message    string // the registry's message, sanitized, at most 200 bytes
	RetryAfter time.Duration
}

func (e *StatusError) Error() string {
	s := fmt.Sprintf("%s: %s: %d %s", e.Host, e.Op, e.StatusCode, http.StatusText(e.StatusCode))
	if e.Code != "" {
		s += ": " + e.Code
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// TokenError is a failure to obtain a token from a realm.
type TokenError struct {
	Host, Realm string
	Err         error

	secrets []string // redacted from the text
}

func (e *TokenError) Error() string {
	return fmt.Sprintf("%s: obtaining a token from %s: %s", e.Host, clean(e.Realm, e.secrets, maxRealmText), clean(e.Err.Error(), e.secrets, maxErrorText))
}

func (e *TokenError) Unwrap() error { return e.Err }

// HostError is a failure to reach an endpoint at all, or a body that broke
// off: the host named.
type HostError struct {
	Host string
	Op   string
	Err  error

	secrets []string // redacted from the text
}

func (e *HostError) Error() string {
	return fmt.Sprintf("%s: %s: %s", e.Host, e.Op, clean(e.Err.Error(), e.secrets, maxErrorText))
}
func (e *HostError) Unwrap() error { return e.Err }

// FallbackError is every endpoint's failure, in the order they were asked.
// It unwraps to the last one: the registry's (or the last endpoint's), the
// answer a runtime reports after its mirrors failed.
type FallbackError struct {
	What string
	Errs []error
}

func (e *FallbackError) Error() string {
	if len(e.Errs) == 1 {
		return e.Errs[0].Error()
	}
	var also []string
	for _, err := range e.Errs[:len(e.Errs)-1] {
		also = append(also, err.Error())
	}
	return fmt.Sprintf("%v (earlier failures: %s)", e.Errs[len(e.Errs)-1], strings.Join(also, "; "))
}

func (e *FallbackError) Unwrap() error { return e.Errs[len(e.Errs)-1] }

// ErrNoEndpoint: no endpoint may be asked (a tag, and no endpoint may
// resolve).
var ErrNoEndpoint = errors.New("no endpoint may be asked")

// Bounds of the text of a cause and of a realm in an error message: a
// server's text can reach them (Go quotes a malformed header line, a
// Content-Range, a Location in its errors).
const (
	maxErrorText = 1024
	maxRealmText = 256
)

// clean is s for an error message: every secret replaced (before the text
// is cut, so that no prefix of one shows), printable ASCII, at most n
// bytes.
func clean(s string, secrets []string, n int) string {
	return sanitize(redact(s, secrets), n)
}

// redact replaces every secret in s, the longest first, as sent and in
// each form a server's echo or an error's quoting gives it: Go's %q (net/http
// and url errors quote what the server sent), a JSON string's escapes
// (encoding/json writes <, > and & as \u escapes) and a URL query's or
// form's percent-encoding (a token POST's body).
func redact(s string, secrets []string) string {
	var forms []string
	for _, sec := range secrets {
		if sec == "" {
			continue
		}
		forms = append(forms, sec)
		q := strconv.Quote(sec)
		j, _ := json.Marshal(sec)
		for _, f := range []string{q[1 : len(q)-1], string(j[1 : len(j)-1]), url.QueryEscape(sec)} {
			if f != sec {
				forms = append(forms, f)
			}
		}
	}
	sort.Slice(forms, func(i, j int) bool { return len(forms[i]) > len(forms[j]) })
	for _, f := range forms {
		s = strings.ReplaceAll(s, f, "[redacted]")
	}
	return s
}

// responseError reads (a bounded part of) res's body into a StatusError and
// closes it; the secrets (what was sent to the server, which it may echo)
// never reach the message.
func responseError(res *http.Response, host, op string, secrets ...string) error {
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	b = []byte(redact(string(b), secrets))
	e := &StatusError{Host: host, Op: op, StatusCode: res.StatusCode, RetryAfter: retryAfter(res.Header.Get("Retry-After"))}
	var body struct {
		Errors []struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"errors"`
	}
	// Decoding undoes the body's escapes (a secret the server echoed as
	// \u0026 or \u0054 is whole again): what was decoded is redacted too.
	if json.Unmarshal(b, &body) == nil && len(body.Errors) > 0 {
		e.Code, e.Message = strings.ToUpper(clean(body.Errors[0].Code, secrets, 64)), clean(body.Errors[0].Message, secrets, 200)
		return e
	}
	// A body longer than what is read (a message of a megabyte) is cut
	// short and no longer parses: its first error's code, and its message
	// as far as it was read, still say what the registry meant.
	if code, msg, ok := firstError(b); ok {
		e.Code, e.Message = strings.ToUpper(clean(code, secrets, 64)), clean(msg, secrets, 200)
		return e
	}
	t := strings.Trim(strings.TrimSpace(string(b)), `"`)
	if isCode(t) {
		e.Code = strings.ToUpper(t)
		return e
	}
	e.Message = sanitize(strings.TrimSpace(string(b)), 200)
	return e
}

// firstError reads the code and message of the first entry of a
// distribution-spec error body ({"errors":[{"code":…,"message":…},…]})
// that may be cut short anywhere: the code must be read whole; of a
// message cut short, what was read (escapes left as sent).
func firstError(b []byte) (code, msg string, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	expect := func(want json.Delim) bool {
		t, err := dec.Token()
		d, isDelim := t.(json.Delim)
		return err == nil && isDelim && d == want
	}
	if !expect('{') {
		return "", "", false
	}
	for {
		t, err := dec.Token()
		key, isKey := t.(string)
		if err != nil || !isKey {
			return "", "", false
		}
		if key == "errors" {
			break
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return "", "", false
		}
	}
	if !expect('[') || !expect('{') {
		return "", "", false
	}
	for dec.More() {
		t, err := dec.Token()
		key, isKey := t.(string)
		if err != nil || !isKey {
			break
		}
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			if key == "message" { // cut off inside: keep what was read
				rest := strings.TrimLeft(string(b[dec.InputOffset():]), " \t\r\n:")
				if m, ok := strings.CutPrefix(rest, `"`); ok {
					msg = m
				}
			}
			break
		}
		var s string
		if json.Unmarshal(v, &s) != nil {
			continue
		}
		switch key {
		case "code":
			code = s
		case "message":
			msg = s
		}
	}
	if !isCode(code) {
		return "", "", false
	}
	return code, msg, true
}

// isCode: a bare registry error code (MANIFEST_UNKNOWN, toomanyrequests).
func isCode(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r == '_') {
			return false
		}
	}
	return true
}

// sanitize keeps printable ASCII of s, at most n bytes: a registry's text
// goes into one-line error messages and terminals.
func sanitize(s string, n int) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= n {
			b.WriteString("…")
			break
		}
		if r < 0x20 || r > 0x7e {
			r = ' '
		}
		b.WriteRune(r)
	}
	return strings.TrimSpace(b.String())
}

// retryAfter parses a Retry-After header (seconds or an HTTP date); 0 when
// absent or unparsable.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
		if s < 0 {
			return 0
		}
		return time.Duration(min(s, 3600)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return min(d, time.Hour)
		}
	}
	return 0
}
