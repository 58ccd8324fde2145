package target

import "strings"

// PartialEntry is the name of blob alg:hex in DEST's partial-blob cache:
// the copy writes it, the parent adopts, restricts and hands over only
// entries so named.
func PartialEntry(alg, hex string) string { return alg + "-" + hex + ".partial" }

// IsPartialEntry says whether name is a partial-blob cache entry's name,
// the only name one may have: sha256-<64 hex>.partial or
// sha512-<128 hex>.partial, the hex lowercase.
func IsPartialEntry(name string) bool {
	rest, ok := strings.CutSuffix(name, ".partial")
	if !ok {
		return false
	}
	alg, hx, ok := strings.Cut(rest, "-")
	return ok && IsHex(alg, hx)
}

// IsHex says whether s is the hex of an alg digest as a pull accepts it:
// sha256, 64 characters, or sha512, 128, each one of 0-9a-f. (A loop, not
// the regular expressions ^[0-9a-f]{64}$ and ^[0-9a-f]{128}$, whose
// compilation, at every process's start, cost more than all their uses.)
func IsHex(alg, s string) bool {
	n := 0
	switch alg {
	case "sha256":
		n = 64
	case "sha512":
		n = 128
	}
	if n == 0 || len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
