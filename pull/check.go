package pull

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/api"
)

// What the isolated child says is checked against these before the root
// parent keeps or repeats any of it (invariant: everything the child says
// is bounded and validated). A legitimate copy stays far inside them.
const (
	// MaxHost is a DNS name's length limit plus ":65535".
	MaxHost = 253 + len(":65535")
	// MaxEndpoints bounds the hosts one report names.
	MaxEndpoints = 64
	// MaxMediaType is RFC 6838's limit: 127 characters each side of '/'.
	MaxMediaType = 127 + 1 + 127
	// MaxLayers bounds a report's layer count (overlay stacks 128 at most;
	// an index copied whole counts every instance's).
	MaxLayers = 1 << 16
	// MaxCount bounds every byte and request count the child reports.
	MaxCount = 1 << 50
	// MaxHanded bounds the blobs one report hands over (as
	// dest.Partial.HandOver does).
	MaxHanded = 10000
	// maxCredentialField bounds each name in the credential view (the
	// parent compares it with the candidates it handed over).
	maxCredentialField = 4096
)

// ValidDigest reports whether d is a digest: a known algorithm, ':', and
// lower-case hex of that algorithm's length (sha256: 64 digits).
func ValidDigest(d string) bool {
	if len(d) > len("sha512:")+128 {
		return false
	}
	return digest.Digest(d).Validate() == nil
}

// ValidMediaType reports whether t has the form of a media type (RFC
// 6838 type/subtype, restricted names, no parameters), within MaxMediaType.
func ValidMediaType(t string) bool {
	typ, sub, ok := strings.Cut(t, "/")
	return ok && restrictedName(typ) && restrictedName(sub)
}

func restrictedName(s string) bool {
	if s == "" || len(s) > 127 || !alnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !alnum(c) && !strings.ContainsRune("!#$&-^_.+", rune(c)) {
			return false
		}
	}
	return true
}

func alnum(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' }

// ValidHost reports whether h is a host as a URL names it, lower-case (as
// hostLog records it): a DNS name, an IPv4 address or a bracketed IPv6
// one, with an optional :port, within MaxHost.
func ValidHost(h string) bool {
	if h == "" || len(h) > MaxHost {
		return false
	}
	name, port := h, ""
	if strings.HasPrefix(h, "[") {
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return false
		}
		a, err := netip.ParseAddr(h[1:end])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return false
		}
		rest := h[end+1:]
		if rest == "" {
			return true
		}
		if rest[0] != ':' {
			return false
		}
		return validPort(rest[1:])
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 {
		name, port = h[:i], h[i+1:]
		if !validPort(port) {
			return false
		}
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return strings.Count(name, ".") == 3 // IPv4; a bare IPv6 must be bracketed
	}
	return dnsName(name)
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n > 0 && n <= 65535 && p == strconv.Itoa(n)
}

// dnsName: dot-separated labels of [a-z0-9_-], 1–63 characters, not
// starting or ending with '-', 253 characters in all.
func dnsName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

func validCount(n int64) bool { return n >= 0 && n <= MaxCount }

// CheckEvent reports why e is not a progress event the copy could have
// sent, or nil: a progress type, digests (or none), a media type (or
// none), a host (or none), sizes and a layer count in range (a resolved
// event's configs within its size).
func CheckEvent(e api.Event) error {
	switch {
	case !api.IsProgress(e.Type):
		return fmt.Errorf("not a progress event type")
	case e.Digest != "" && !ValidDigest(e.Digest):
		return fmt.Errorf("digest: not algorithm:hex of the algorithm's length")
	case e.InstanceDigest != "" && !ValidDigest(e.InstanceDigest):
		return fmt.Errorf("instance digest: not algorithm:hex of the algorithm's length")
	case e.Layers < 0 || e.Layers > MaxLayers || e.Attempt < 0 || e.Attempt > MaxLayers:
		return fmt.Errorf("layers or attempt: negative or over %d", MaxLayers)
	case !validCount(e.ConfigSize) || e.ConfigSize > e.Size:
		return fmt.Errorf("config size: negative or over the size")
	case e.MediaType != "" && !ValidMediaType(e.MediaType):
		return fmt.Errorf("media type: not type/subtype of at most %d bytes", MaxMediaType)
	case e.Host != "" && !ValidHost(e.Host):
		return fmt.Errorf("host: not a host[:port] of at most %d bytes", MaxHost)
	case !validCount(e.Size) || !validCount(e.Bytes) || !validCount(e.KeptBytes):
		return fmt.Errorf("size, bytes or kept_bytes: negative or over %d", int64(MaxCount))
	}
	return nil
}

// Check reports why r is not a report the copy could have sent, or nil:
// digests that are digests, a media type of bounded length, counts in range, at most
// MaxHanded handed-over digests, and the manifests (at most
// MaxServedInstances instances as served, MaxManifestBytes in all),
// configs (MaxServedConfigBytes in all) and signatures within the sizes
// the copy itself enforces. The endpoints are only bounded
// (BoundEndpoints): they are informational.
func (r *Report) Check() error {
	switch {
	case !ValidDigest(r.Digest):
		return fmt.Errorf("the report's digest is not a digest")
	case r.InstanceDigest != "" && !ValidDigest(r.InstanceDigest):
		return fmt.Errorf("the report's instance digest is not a digest")
	case r.DestinationDigest != "" && !ValidDigest(r.DestinationDigest):
		return fmt.Errorf("the report's destination digest is not a digest")
	case len(r.MediaType) > MaxMediaType:
		// Only bounded: a registry's Content-Type may carry parameters,
		// and the parent takes the media type from the verified manifest.
		return fmt.Errorf("the report's media type is over %d bytes", MaxMediaType)
	case r.Layers < 0 || r.Layers > MaxLayers || !validCount(r.Bytes) || !validCount(r.KeptBytes) || r.Attempts < 0 || r.Attempts > MaxLayers:
		return fmt.Errorf("the report's counts are negative or out of range")
	case len(r.Copied.Manifest) > MaxManifestBytes || len(r.Copied.IndexRaw) > MaxManifestBytes || len(r.Copied.Served) > MaxManifestBytes:
		return fmt.Errorf("the report carries a manifest over %d bytes", MaxManifestBytes)
	case len(r.Copied.Handed) > MaxHanded:
		return fmt.Errorf("the report hands over %d blobs, more than %d", len(r.Copied.Handed), MaxHanded)
	case len(r.Copied.ServedInstances) > MaxServedInstances:
		return fmt.Errorf("the report hands over %d instances as served, more than %d", len(r.Copied.ServedInstances), MaxServedInstances)
	}
	if overBytes(r.Copied.ServedInstances, MaxManifestBytes) {
		return fmt.Errorf("the report's instances as served are over %d bytes in all", MaxManifestBytes)
	}
	if len(r.Copied.ServedConfigs) > MaxServedInstances+1 {
		return fmt.Errorf("the report hands over %d configs as served, more than %d", len(r.Copied.ServedConfigs), MaxServedInstances+1)
	}
	if overBytes(r.Copied.ServedConfigs, MaxServedConfigBytes) {
		return fmt.Errorf("the report's configs as served are over %d bytes in all", MaxServedConfigBytes)
	}
	if c := r.Credential; c != nil && (len(c.Source) > maxCredentialField || len(c.File) > maxCredentialField || len(c.Key) > maxCredentialField || len(c.Username) > maxCredentialField) {
		return fmt.Errorf("the report's credential view is over %d bytes a field", maxCredentialField)
	}
	for _, d := range r.Copied.Handed {
		if !ValidDigest(d) {
			return fmt.Errorf("the report hands over a blob whose name is not a digest")
		}
	}
	if err := checkSignatures(r.Copied.Signatures); err != nil {
		return fmt.Errorf("the report carries too many signatures")
	}
	return nil
}

// overBytes: bs are more than max bytes in all.
func overBytes(bs [][]byte, max int) bool {
	total := 0
	for _, b := range bs {
		if total += len(b); total > max {
			return true
		}
	}
	return false
}

// BoundEndpoints is what may be repeated of the copy's endpoints: entries
// with a valid host and counts in range, at most MaxEndpoints of them.
func BoundEndpoints(in []api.EndpointUse) []api.EndpointUse {
	var out []api.EndpointUse
	for _, e := range in {
		if len(out) == MaxEndpoints {
			break
		}
		if !ValidHost(e.Host) || !validCount(int64(e.Manifests)) || !validCount(int64(e.Blobs)) || !validCount(e.Bytes) {
			continue
		}
		out = append(out, e)
	}
	return out
}

// MaxAttempts is the most attempts a Copy of p makes: one per retry, in
// each credential round. A report claiming more is bounded to it.
func (p *Request) MaxAttempts() int {
	return (max(p.Retries, 0) + 1) * p.candidates()
}

// Printable is s as the parent may repeat it on a terminal or in a log:
// every rune that is not printable (C0 and C1 controls, ESC, DEL,
// U+0085, U+2028/2029, other format characters) and every byte that is
// not UTF-8 is escaped as strconv.Quote would (\x1b, \u2028, \n), so a
// string of the child's can neither move the cursor, retitle the window
// nor start a line of its own. Everything the parent repeats of the
// child's text goes through it.
func Printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !strconv.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case strconv.IsPrint(r):
			b.WriteString(s[i : i+n])
		default:
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}
