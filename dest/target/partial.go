package target

import "regexp"

// PartialEntry is the name of blob alg:hex in DEST's partial-blob cache:
// the copy writes it, the parent adopts, restricts and hands over only
// entries so named.
func PartialEntry(alg, hex string) string { return alg + "-" + hex + ".partial" }

// partialEntryRE is the only name a cache entry may have.
var partialEntryRE = regexp.MustCompile(`^(sha256-[0-9a-f]{64}|sha512-[0-9a-f]{128})\.partial$`)

// IsPartialEntry says whether name is a partial-blob cache entry's name.
func IsPartialEntry(name string) bool { return partialEntryRE.MatchString(name) }
