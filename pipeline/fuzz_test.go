package pipeline

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/types"

	"github.com/pullhelper/pullhelper/internal/failure"
)

// FuzzResolveImage: an IMAGE argument resolves to a fully qualified
// reference with a tag or a digest, keeping the tag and digest it was
// given (a qualified one resolves to itself), or fails as a usage error of
// one line. registries.conf has one unqualified-search registry and an
// alias, as the short-name table tests.
func FuzzResolveImage(f *testing.F) {
	for _, s := range []string{
		"registry.example.com/repo:tag", "localhost/x", "localhost:5000/a/b@sha256:" + strings.Repeat("a", 64),
		"busybox", "busybox:1.36", "alias", "alias:v2", "library/busybox@sha256:" + strings.Repeat("b", 64),
		"https://reg/x", "", "UPPER/case", "reg.io/x:tag@sha256:" + strings.Repeat("c", 64), "a:b:c", "[::1]:5000/x",
	} {
		f.Add(s)
	}
	dir := f.TempDir()
	conf := filepath.Join(dir, "registries.conf")
	if err := os.WriteFile(conf, []byte("unqualified-search-registries = [\"search.example\"]\n[aliases]\n\"alias\" = \"alias.example/team/alias\"\n"), 0o644); err != nil {
		f.Fatal(err)
	}
	sys := &types.SystemContext{
		SystemRegistriesConfPath:    conf,
		SystemRegistriesConfDirPath: filepath.Join(dir, "none.d"),
		UserShortNameAliasConfPath:  filepath.Join(dir, "aliases.conf"),
	}
	f.Fuzz(func(t *testing.T, image string) {
		named, _, err := resolveImage(image, nil, sys)
		if err != nil {
			if failure.CodeOf(err) != failure.Usage || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q (%s), want a one-line usage error", err, failure.CodeOf(err))
			}
			return
		}
		s := named.String()
		again, err := reference.ParseNormalizedNamed(s)
		if err != nil || again.String() != s {
			t.Fatalf("%q resolved to %q, which does not parse back (%v)", image, s, err)
		}
		_, tagged := named.(reference.Tagged)
		_, digested := named.(reference.Digested)
		if !tagged && !digested {
			t.Fatalf("%q resolved to %q without a tag or digest", image, s)
		}
		if reference.Domain(named) == "" {
			t.Fatalf("%q resolved to %q without a registry", image, s)
		}
		in, _ := reference.ParseNormalizedNamed(image)
		if tg, ok := in.(reference.Tagged); ok && (!tagged || named.(reference.Tagged).Tag() != tg.Tag()) {
			t.Fatalf("%q resolved to %q: tag lost", image, s)
		}
		if dg, ok := in.(reference.Digested); ok && (!digested || named.(reference.Digested).Digest() != dg.Digest()) {
			t.Fatalf("%q resolved to %q: digest lost", image, s)
		}
		first, _, slash := strings.Cut(image, "/")
		if slash && (strings.ContainsAny(first, ".:") || first == "localhost") {
			if want := reference.TagNameOnly(in).String(); s != want {
				t.Fatalf("qualified %q resolved to %q, want %q", image, s, want)
			}
		}
	})
}
