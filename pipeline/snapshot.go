package pipeline

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/pullhelper/pullhelper/hosts"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/memfs"
	"go.podman.io/image/v5/pkg/sysregistriesv2"
	"go.podman.io/image/v5/types"
)

// snapshotSize bounds the registries.conf snapshot: the main file and
// hosts.MaxRegistriesConfDropIns drop-ins, each at most safefile.MaxConfig,
// are far below it in practice; a bigger set is refused, naming the bound.
const snapshotSize = 64 << 20

// snapshotSeq makes each snapshot's paths new to this process:
// containers/image caches a parsed registries.conf by its paths, and a
// later snapshot may get the same descriptor number.
var snapshotSeq atomic.Int64

// regSnapshot is the registries.conf the parent checked, as bytes in a
// private in-memory filesystem (internal/memfs: mounted nowhere, gone with
// its descriptor): the main file as registries.conf and the drop-ins, then
// the override file, in containers/image's order, in registries.conf.d.
// Every types.SystemContext the parent builds names it (sys), never the
// caller's paths, which another user may have swapped (a FIFO root would
// block on) since the check. It lives until the pull ends (Plan.Close).
type regSnapshot struct {
	fs        *memfs.FS
	conf, dir string
	// names maps a snapshot path to the caller's file, for messages.
	names map[string]string
}

// snapshotRegistriesConf checks the registries.conf files sys names
// (hosts.CheckRegistriesConf) and snapshots them. Without root (explain run
// by a user) there is no private filesystem and nothing to protect: the
// snapshot is nil and sys the caller's.
func snapshotRegistriesConf(sys *types.SystemContext) (*regSnapshot, error) {
	files, err := hosts.CheckRegistriesConf(sys)
	if err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, nil
	}
	fs, err := memfs.New(snapshotSize, 2*hosts.MaxRegistriesConfDropIns+16)
	if err != nil {
		return nil, failure.New(failure.Isolation, "the checked registries.conf is kept in a private in-memory filesystem and one could not be created (%w); run pullhelper as root", err)
	}
	s := &regSnapshot{fs: fs, names: map[string]string{}}
	base := fmt.Sprintf("registries-%d", snapshotSeq.Add(1))
	write := func(rel, orig string, data []byte) (string, error) {
		p, err := fs.WriteFile(filepath.Join(base, rel), data)
		if err != nil {
			return "", failure.New(failure.Usage, "registries.conf %s: keeping a copy of what was checked: %v (the files together exceed %d MiB?)", orig, failure.Reason(err), snapshotSize>>20)
		}
		s.names[p] = orig
		return p, nil
	}
	// No main file: containers/image's defaults, which an empty file keeps.
	main, orig := []byte{}, "registries.conf"
	if files.Main != nil {
		main, orig = files.Main.Data, files.Main.Path
	}
	if s.conf, err = write("registries.conf", orig, main); err != nil {
		s.Close()
		return nil, err
	}
	s.dir = filepath.Join(fs.Path(), base, "registries.conf.d")
	if err := os.Mkdir(s.dir, 0o700); err != nil {
		s.Close()
		return nil, failure.New(failure.Internal, "registries.conf snapshot: %w", err)
	}
	for i, f := range files.DropIns {
		// Named by position: containers/image reads a drop-in directory
		// in name order.
		if _, err := write(filepath.Join("registries.conf.d", fmt.Sprintf("%05d.conf", i)), f.Path, f.Data); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// sys is the SystemContext that reads the snapshot (orig without one).
func (s *regSnapshot) sys(orig string) *types.SystemContext {
	if s == nil {
		return &types.SystemContext{SystemRegistriesConfPath: orig}
	}
	return &types.SystemContext{SystemRegistriesConfPath: s.conf, SystemRegistriesConfDirPath: s.dir}
}

// name is the caller's file for a snapshot path (p itself otherwise).
func (s *regSnapshot) name(p string) string {
	if s != nil {
		if o, ok := s.names[p]; ok {
			return o
		}
	}
	return p
}

// describe replaces the snapshot's paths in msg by the caller's files.
func (s *regSnapshot) describe(msg string) string {
	if s == nil {
		return msg
	}
	paths := make([]string, 0, len(s.names))
	for p := range s.names {
		paths = append(paths, p)
	}
	// Longest first: the main file's path is a prefix of the drop-ins'.
	sort.Slice(paths, func(i, j int) bool { return len(paths[i]) > len(paths[j]) })
	for _, p := range paths {
		msg = strings.ReplaceAll(msg, p, s.names[p])
	}
	return strings.ReplaceAll(msg, s.dir, "registries.conf.d")
}

// Close drops the snapshot (a nil one, or a second Close, does nothing)
// and containers/image's parsed copies of it. sysregistriesv2 keeps every
// registries.conf it parsed, by its paths, for the life of the process,
// and each snapshot's paths are new: without this a long-lived
// `pullhelper cri` kept each pull's (about 28 KiB with Debian's short-name
// aliases, more with more). The cache is one for the process: the entries
// of plans still running go too, and are parsed again from their own
// snapshots when next asked.
func (s *regSnapshot) Close() {
	if s != nil {
		s.fs.Close()
		sysregistriesv2.InvalidateCache()
	}
}
