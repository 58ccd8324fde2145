package pipeline

import (
	"errors"
	"io/fs"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/safefile"
	"github.com/pullhelper/pullhelper/pull"
	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/docker/reference"
)

// defaultLookaside is containers/image's built-in lookaside for root
// (registries_d.go builtinDefaultLookasideStorageDir), where skopeo and
// podman run as root look when registries.d names none.
const defaultLookaside = "file:///var/lib/containers/sigstore"

// Bounds on the signatures read from a file:// lookaside for one image's
// repository (every digest's: the pull's is not known yet). A simple
// signing signature is about a kilobyte; the copy's private /tmp holds
// 16 MiB and 4096 inodes.
const (
	maxLookasideFile  = 1 << 20
	maxLookasideTotal = 4 << 20
	maxLookasideFiles = 1024
	maxLookasideSigs  = 64 // signature-1 … signature-64 of one digest
	// maxLookasideEntries bounds the listing of the repository's parent
	// directory, which holds the other repositories' digests too.
	maxLookasideEntries = 1 << 16
)

// loadFileLookaside reads the signatures of the lookaside the image's
// signatures are looked up in, when the signature policy needs signatures
// and that lookaside is a file:// one (the copy, another uid with a private
// /tmp, may not read it, and would not look in root's default at all): the
// registries.d lookup containers/image makes for the image's repository
// (its namespaces, then default-docker, then the built-in default). Every
// digest's signatures of the repository are read, through safefile,
// bounded; the copy's registries.d then points at its own copy of them.
func (p *Plan) loadFileLookaside(m *pull.Material) error {
	if !pull.NeedsSignatures(m.SignaturePolicy) {
		return nil
	}
	named, err := reference.ParseNormalizedNamed(p.Reference)
	if err != nil {
		return failure.Wrap(failure.Internal, err, "")
	}
	base, configured := lookasideFor(m.RegistriesD, reference.TrimNamed(named))
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "file" {
		return nil // an http(s) lookaside the copy reads itself; a bad one containers/image refuses
	}
	l := &pull.Lookaside{Files: map[string][]byte{}}
	if configured {
		l.Base = base
	}
	repo := reference.Path(named)
	dir := path.Join(u.Path, path.Dir(repo))
	ents, err := safefile.ReadDirAtMost(dir, maxLookasideEntries+1)
	if errors.Is(err, fs.ErrNotExist) {
		m.Lookaside = l // nothing signed: the copy finds no signature, as skopeo would
		return nil
	}
	if err != nil {
		return failure.New(failure.Usage, "signature lookaside %s: %w", dir, reason(err))
	}
	if len(ents) > maxLookasideEntries {
		return failure.New(failure.Usage, "signature lookaside %s: more than %d entries; pullhelper lists at most that many for %s (serve the lookaside over http(s))", dir, maxLookasideEntries, repo)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	total := 0
	for _, n := range names {
		// This repository's digests only: REPO@ALGO=HEX, as the copy
		// will name its signature files (pull.ValidLookasideFile).
		if !strings.HasPrefix(n, path.Base(repo)+"@") || !pull.ValidLookasideFile(path.Join(path.Dir(repo), n, "signature-1")) {
			continue
		}
		for i := 1; i <= maxLookasideSigs; i++ {
			rel := path.Join(path.Dir(repo), n, "signature-"+strconv.Itoa(i))
			f := path.Join(u.Path, rel)
			b, err := safefile.ReadFile(f, maxLookasideFile)
			if errors.Is(err, fs.ErrNotExist) {
				break // containers/image reads signature-N until the first missing one
			}
			if err != nil {
				return failure.New(failure.Usage, "signature lookaside %s: %w", f, reason(err))
			}
			total += len(b)
			if total > maxLookasideTotal || len(l.Files) >= maxLookasideFiles {
				return failure.New(failure.Usage, "signature lookaside %s: the signatures of %s are more than %d files or %d MiB; pullhelper hands the copy at most that (serve the lookaside over http(s))", u.Path, repo, maxLookasideFiles, maxLookasideTotal>>20)
			}
			l.Files[rel] = b
		}
	}
	m.Lookaside = l
	return nil
}

// lookasideFor is the lookaside containers/image reads repo's signatures
// from (registries_d.go signatureTopLevel for reading): a docker entry for
// one of repo's namespaces (the repository first), then default-docker,
// else the built-in default (configured false). Its lookaside, or the
// older name sigstore.
func lookasideFor(files map[string][]byte, repo reference.Named) (string, bool) {
	// The first of each scope, and of default-docker, counts (a second is
	// containers/image's error).
	scopes := map[string]pull.LookasideScope{}
	var def *pull.LookasideScope
	for _, ns := range pull.LookasideScopes(files) {
		switch _, seen := scopes[ns.Scope]; {
		case ns.Default && def == nil:
			def = &ns
		case !ns.Default && !seen:
			scopes[ns.Scope] = ns
		}
	}
	if ref, err := docker.NewReference(reference.TagNameOnly(repo)); err == nil {
		for _, ns := range ref.PolicyConfigurationNamespaces() {
			if v, ok := scopes[ns]; ok && v.URL() != "" {
				return v.URL(), true
			}
		}
	}
	if def != nil && def.URL() != "" {
		return def.URL(), true
	}
	return defaultLookaside, false
}
