package registry

// Fuzz targets for what the client parses from a registry: the
// WWW-Authenticate challenges, the error body of a failed request, and the
// Content-Range, Retry-After and digest values. A registry is untrusted:
// none of this may panic, and what reaches an error message is bounded and
// printable.

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fuzzQuote is a quoted-string (RFC 7230 3.2.6) of s.
func fuzzQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// fuzzToken: s is a non-empty token (no separators, no space or control).
func fuzzToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r >= 0x7f || strings.ContainsRune(`()<>@,;:\"/[]?={}`, r) {
			return false
		}
	}
	return true
}

// FuzzParseChallenges: any header value parses without panicking into a
// lower-case scheme and lower-case keys, one challenge per value of at most
// 8 KiB; a challenge written with quoted values parses back to them.
func FuzzParseChallenges(f *testing.F) {
	f.Add(`Bearer realm="https://auth.example.com/token",service="registry.example.com",scope="repository:a\"b:pull"`, "Bearer", "realm", "https://a/t", "scope", `repository:x:pull,push`)
	f.Add(`Basic realm=plain`, "Basic", "realm", "", "service", `\`)
	f.Add(`Bearer realm="unterminated\`, "bearer", "Realm", "a\"b", "SERVICE", "c\\d")
	f.Add(`Bearer ,,, =x, realm = "a" junk, k=`, "Negotiate", "k", ", =", "j", "\t")
	f.Add("", "x", "a", "", "b", "")
	f.Fuzz(func(t *testing.T, raw, scheme, k1, v1, k2, v2 string) {
		h := http.Header{}
		h.Add("WWW-Authenticate", raw)
		h.Add("WWW-Authenticate", raw+", "+raw)
		chs := parseChallenges(h)
		want := 0
		for _, v := range h.Values("WWW-Authenticate") {
			if len(v) <= 8<<10 {
				want++
			}
		}
		if len(chs) != want {
			t.Fatalf("%d challenges from %d header values", len(chs), want)
		}
		for _, c := range chs {
			if c.scheme != strings.ToLower(c.scheme) {
				t.Fatalf("scheme %q not lower case", c.scheme)
			}
			for k := range c.params {
				if k != strings.ToLower(strings.TrimSpace(k)) {
					t.Fatalf("key %q not lower case and trimmed", k)
				}
			}
		}
		_, _ = supported(chs)

		// The round trip of a well-formed challenge.
		if !fuzzToken(scheme) || !fuzzToken(k1) || !fuzzToken(k2) || strings.EqualFold(k1, k2) {
			return
		}
		v := scheme + " " + k1 + "=" + fuzzQuote(v1) + ", " + k2 + "=" + fuzzQuote(v2)
		if len(v) > 8<<10 {
			return
		}
		chs = parseChallenges(http.Header{"Www-Authenticate": {v}})
		if len(chs) != 1 {
			t.Fatalf("%q: %d challenges", v, len(chs))
		}
		c := chs[0]
		if c.scheme != strings.ToLower(scheme) || len(c.params) != 2 ||
			c.params[strings.ToLower(k1)] != v1 || c.params[strings.ToLower(k2)] != v2 {
			t.Fatalf("%q parsed to %q %q", v, c.scheme, c.params)
		}
	})
}

// fuzzBody counts what is read of it and whether it was closed.
type fuzzBody struct {
	r      io.Reader
	read   int
	closed bool
}

func (b *fuzzBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read += n
	return n, err
}

func (b *fuzzBody) Close() error { b.closed = true; return nil }

// FuzzResponseError: any error response becomes a one-line StatusError
// with the status, a code of at most 64 bytes (upper case), a printable
// message of at most 200 bytes (plus the ellipsis), a Retry-After of at most
// an hour; at most maxErrorBody bytes are read and the body is closed.
func FuzzResponseError(f *testing.F) {
	f.Add(401, `{"errors":[{"code":"UNAUTHORIZED","message":"bad credential"}]}`, "")
	f.Add(404, `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}`, "")
	f.Add(429, `toomanyrequests`, "120")
	f.Add(503, "<html>\n<body>down\x00\x1b[31m</body>\n</html>", "Wed, 21 Oct 2015 07:28:00 GMT")
	f.Add(500, `{"errors":[]}`, "-5")
	f.Add(418, `"DENIED"`, "99999999999999999999")
	f.Add(0, `{"errors":[{"code":"a\nb","message":"`+strings.Repeat("é", 300)+`"}]}`, "Mon, 01 Jan 2091 00:00:00 GMT")
	f.Fuzz(func(t *testing.T, status int, body, retry string) {
		b := &fuzzBody{r: strings.NewReader(body + strings.Repeat(" ", maxErrorBody))}
		res := &http.Response{StatusCode: status, Header: http.Header{}, Body: b}
		if retry != "" {
			res.Header.Set("Retry-After", retry)
		}
		err := responseError(res, "reg.example:5000", "fetching the manifest latest")
		var se *StatusError
		if !errors.As(err, &se) {
			t.Fatalf("not a StatusError: %v", err)
		}
		if !b.closed {
			t.Fatal("body not closed")
		}
		if b.read > maxErrorBody {
			t.Fatalf("read %d bytes of the body, bound %d", b.read, maxErrorBody)
		}
		if se.StatusCode != status {
			t.Fatalf("status %d, want %d", se.StatusCode, status)
		}
		msg := err.Error()
		if strings.ContainsAny(msg, "\n\r") {
			t.Fatalf("error is not one line: %q", msg)
		}
		if len(se.Code) > 64+len("…") || se.Code != strings.ToUpper(se.Code) {
			t.Fatalf("code %q", se.Code)
		}
		if len(se.Message) > 200+len("…") {
			t.Fatalf("message of %d bytes", len(se.Message))
		}
		for _, s := range []string{se.Code, se.Message} {
			for _, r := range strings.TrimSuffix(s, "…") {
				if r < 0x20 || r > 0x7e {
					t.Fatalf("unprintable %q in %q", r, s)
				}
			}
		}
		if se.RetryAfter < 0 || se.RetryAfter > time.Hour {
			t.Fatalf("Retry-After %q gave %v", retry, se.RetryAfter)
		}
	})
}

// FuzzHeaderValues: Content-Range, Retry-After and a digest reference:
// never a panic; a start is non-negative and round-trips; a Retry-After is
// within [0, 1h]; a parsed digest validates.
func FuzzHeaderValues(f *testing.F) {
	f.Add("bytes 100-199/200")
	f.Add("bytes -1-5/6")
	f.Add("120")
	f.Add("Wed, 21 Oct 2015 07:28:00 GMT")
	f.Add("sha256:" + strings.Repeat("a", 64))
	f.Add("sha256:abc")
	f.Fuzz(func(t *testing.T, v string) {
		if n, total, ok := contentRange(v); ok {
			if n < 0 || total < -1 {
				t.Fatalf("Content-Range %q: start %d, total %d", v, n, total)
			}
			if m, tot, ok := contentRange("bytes " + strconv.FormatInt(n, 10) + "-/" + strconv.FormatInt(total, 10)); !ok || m != n || (total >= 0 && tot != total) {
				t.Fatalf("start %d total %d do not round-trip (%d, %d, %v)", n, total, m, tot, ok)
			}
		}
		if d := retryAfter(v); d < 0 || d > time.Hour {
			t.Fatalf("Retry-After %q: %v", v, d)
		}
		if d, ok := parseDigest(v); ok {
			if err := d.Validate(); err != nil || d.String() != v {
				t.Fatalf("digest %q parsed to %q: %v", v, d, err)
			}
		}
	})
}
