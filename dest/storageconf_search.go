package dest

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/memfs"
	"github.com/pullhelper/pullhelper/internal/safefile"
	"go.podman.io/storage/pkg/configfile"
	"go.podman.io/storage/pkg/unshare"
	storagetypes "go.podman.io/storage/types"
	"golang.org/x/sys/unix"
)

// The system's storage.conf, as containers/storage searches for it, read
// from a checked snapshot.
//
// Without dest.storage_conf and $CONTAINERS_STORAGE_CONF, c/storage
// (LoadStoreOptions → configfile.Read) opens the first main file of
// $XDG_CONFIG_HOME (else ~/.config)/containers/storage.conf,
// /etc/containers/storage.conf and /usr/share/containers/storage.conf,
// then every *.conf of the drop-in directories beside them
// (storage.conf.d, storage.rootful.conf.d — storage.rootless.conf.d[/UID]
// when containers/storage takes the user for rootless; of one name, the
// first directory's), then $CONTAINERS_STORAGE_CONF_OVERRIDE, each with a
// plain open(2): a FIFO there would hold the root parent, /dev/zero fill
// it.
//
// searchedStoreOptions reads those files first, as c/storage's own search
// names them (configfile.GetSearchPaths), each as root reads a caller's
// file (safefile: a regular file, bounded; a link to /dev/null, the usual
// mask, reads as the empty file it is to the library). The system's files
// and the override are copied into a private in-memory filesystem
// (internal/memfs) at the same paths below its root, and c/storage
// searches there instead (LoadOptions.RootForImplicitAbsolutePaths; the
// override through its variable, under confEnvMu); the search is asked
// again under that root and must give the same paths below it, or
// c/storage is not called.
//
// The user's directory is the one part c/storage still opens itself: its
// path comes from the environment, and changing $XDG_CONFIG_HOME, even for
// a moment, would mislead what reads it at the same time (auth.OSEnv in
// `pullhelper cri`, a credential plugin's environment). So the user's
// directory is searched only when nobody but root can change it, or what
// leads to it (userPathRootOnly: otherwise its owner could swap a checked
// file for a FIFO before the library opens it); its files are checked
// just before, as the system's are.

// Bounds on what the search may read: far above any real system's.
const (
	maxStorageDropIns  = 256                      // drop-in files, all directories together
	maxStorageConfSize = 16 << 20                 // bytes, all files together
	storageConfDirent  = 4096                     // entries listed in one drop-in directory
	storageConfRoot    = "root"                   // the snapshot's root below the memfs
	storageConfEmpty   = "empty.conf"             // what DefaultStoreOptions is primed with
	storageConfOver    = "override.conf"          // $CONTAINERS_STORAGE_CONF_OVERRIDE's copy
	storageConfInodes  = 2*maxStorageDropIns + 64 // files and directories the snapshot may hold
)

// storageSearch is c/storage's search for storage.conf (LoadStoreOptions'
// configfile.File), with its system paths below root ("" for the host's).
func storageSearch(root string) (configfile.SearchPaths, error) {
	return configfile.GetSearchPaths(&configfile.File{Name: "storage", Extension: "conf",
		EnvironmentName: storageConfEnv, UserId: unshare.GetRootlessUID(), RootForImplicitAbsolutePaths: root})
}

// searchedStoreOptions loads storage.conf as c/storage's search finds it
// below host ("" in a pull: /; a test's tree otherwise), the system's
// files from a snapshot of the checked files (see above). Errors name the
// file. The caller holds confEnvMu.
func searchedStoreOptions(host string) (storagetypes.StoreOptions, error) {
	var none storagetypes.StoreOptions
	userDir, err := configfile.UserConfigPath()
	if err != nil {
		return none, fmt.Errorf("storage.conf: the user's configuration directory: %v", err)
	}
	paths, err := storageSearch(host)
	if err != nil {
		return none, fmt.Errorf("storage.conf: %v", err)
	}
	if err := userFirst(paths, userDir); err != nil {
		return none, err
	}
	for _, d := range []string{userDir, filepath.Join(userDir, "storage.conf.d")} {
		if err := userPathRootOnly(d); err != nil {
			return none, err
		}
	}
	// tmpfs keeps each file in whole pages: the bound, and a page for
	// each file and directory it may hold.
	snap, err := memfs.New(maxStorageConfSize+storageConfInodes*4096, storageConfInodes)
	if err != nil {
		return none, failure.New(failure.Isolation, "the system's storage.conf is kept in a private in-memory filesystem and one could not be created (%v); run pullhelper as root", err)
	}
	defer snap.Close()
	root := filepath.Join(snap.Path(), storageConfRoot)
	sr := &storageSnapshot{snap: snap, host: host}
	if err := sr.copySearch(paths); err != nil {
		return none, err
	}
	empty, err := snap.WriteFile(storageConfEmpty, nil)
	if err != nil {
		return none, failure.New(failure.Internal, "keeping a copy of storage.conf: %v", failure.Reason(err))
	}
	override := ""
	if paths.ExtraOverrideFile != "" {
		override = filepath.Join(snap.Path(), storageConfOver)
	}

	// confEnvMu is held (loadStoreOptions).
	restore := setEnv(map[string]string{storageConfEnv + "_OVERRIDE": override})
	defer restore()
	// The same search below root, or c/storage would read elsewhere.
	again, err := storageSearch(root)
	if err != nil || !sr.sameSearch(paths, again, override) {
		return none, failure.New(failure.Internal, "containers/storage's search for storage.conf does not follow its snapshot (searched %q, then %q)", paths, again)
	}
	so, err := storagetypes.LoadStoreOptions(storagetypes.LoadOptions{RootForImplicitAbsolutePaths: root})
	if err != nil {
		return so, fmt.Errorf("reading storage.conf (%s): %s", describeRead(sr.read), safefile.Redact(err.Error()))
	}
	// storage.GetStore reads the defaults once more (DefaultStoreOptions,
	// cached for the process; GetStore uses them only for a store that
	// names no root, which a DEST never is): let that read be of an empty
	// snapshot, never of the host's paths.
	restoreDefault := setEnv(map[string]string{storageConfEnv: empty, storageConfEnv + "_OVERRIDE": ""})
	_, _ = storagetypes.DefaultStoreOptions()
	restoreDefault()
	return so, nil
}

// storageSnapshot copies the files of c/storage's search into snap.
type storageSnapshot struct {
	snap *memfs.FS
	host string // the search's system paths are below it ("": /)
	read []string
	size int
}

// userFirst checks that the search's first main file and first drop-in
// directory are the user's (configfile.getSearchPaths puts them first),
// which c/storage opens where they are: their paths are not below
// RootForImplicitAbsolutePaths.
func userFirst(paths configfile.SearchPaths, userDir string) error {
	main := filepath.Join(userDir, "storage.conf")
	if len(paths.MainFiles) == 0 || paths.MainFiles[0] != main || len(paths.DropInDirectories) == 0 || paths.DropInDirectories[0] != main+".d" {
		return failure.New(failure.Internal, "containers/storage's search for storage.conf does not start in the user's directory %s (searched %q)", userDir, paths)
	}
	return nil
}

// moved is paths with every system main file and drop-in directory where
// the search below root finds it (the user's, first, stay).
func (s *storageSnapshot) moved(paths configfile.SearchPaths) configfile.SearchPaths {
	move := func(ps []string) []string {
		out := slices.Clone(ps)
		for i := 1; i < len(out); i++ {
			if out[i] != "" {
				out[i] = filepath.Join(s.snap.Path(), s.below(out[i]))
			}
		}
		return out
	}
	return configfile.SearchPaths{MainFiles: move(paths.MainFiles), DropInDirectories: move(paths.DropInDirectories)}
}

// keep reads p as root reads a caller's file and copies it to rel below the
// snapshot ("": a file of the user's directory, only checked). A missing
// file is false, nil unless mustExist.
func (s *storageSnapshot) keep(p, rel string, mustExist bool) (bool, error) {
	var data []byte
	err := error(nil)
	if !isDevNull(p) {
		data, err = safefile.ReadFile(p, safefile.MaxConfig)
	}
	if !mustExist && errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		what := "the system's search; dest.storage_conf names another"
		if rel == storageConfOver {
			what = storageConfEnv + "_OVERRIDE"
		}
		return false, fmt.Errorf("storage.conf %s (%s) is not a readable file: %s", p, what, safefile.Reason(err))
	}
	if s.size += len(data); s.size > maxStorageConfSize {
		return false, fmt.Errorf("storage.conf %s (the system's search): its files together are over %d MiB", p, maxStorageConfSize>>20)
	}
	if rel == "" {
		// The user's, which the library reads again: root's alone, so
		// that nobody else can make it what was not checked.
		if err := userPathRootOnly(p); err != nil {
			return false, err
		}
		s.read = append(s.read, p)
		return true, nil
	}
	s.read = append(s.read, p)
	if checkedHook != nil { // the test build: the library reads only the copy
		checkedHook(p)
	}
	if _, err := s.snap.WriteFile(rel, data); err != nil {
		return false, failure.New(failure.Internal, "keeping a copy of storage.conf %s: %v", p, failure.Reason(err))
	}
	return true, nil
}

// isDevNull reports whether p is (or leads to) /dev/null, which a
// storage.conf masks with: the library reads it as empty, and so does the
// snapshot (nothing is opened).
func isDevNull(p string) bool {
	var st, null unix.Stat_t
	return unix.Stat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR &&
		unix.Stat("/dev/null", &null) == nil && null.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == null.Rdev
}

// userPathRootOnly refuses a path of the user's configuration directory
// (the first the search reads: the directory, its storage.conf.d, a file
// in either) unless nobody but root can change what the library will
// find there: walking the path from /, following links as open(2) does,
// every directory, link and file on it is root's, each in a directory
// nobody else may write, or may write only with the sticky bit (which
// keeps others from renaming root's entries). Where the path ends early,
// its deepest directory must be writable by root alone (else another user
// could create the rest).
func userPathRootOnly(dir string) error {
	refuse := func(why string, a ...any) error {
		return fmt.Errorf("storage.conf: the search reads the user's %s ($XDG_CONFIG_HOME, else $HOME/.config), and %s; refusing to read storage.conf where another user can swap it: name one in dest.storage_conf, or run with root's own $HOME", dir, fmt.Sprintf(why, a...))
	}
	if !filepath.IsAbs(dir) {
		return refuse("it is not an absolute path")
	}
	var (
		todo  = strings.Split(strings.TrimPrefix(filepath.Clean(dir), "/"), "/")
		cur   string
		curSt unix.Stat_t
		links int
	)
	// at moves the walk to directory d, by path.
	at := func(d string) error {
		cur = d
		if err := unix.Stat(d, &curSt); err != nil {
			return refuse("%s cannot be examined: %v", d, err)
		}
		return nil
	}
	if err := at("/"); err != nil {
		return err
	}
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		if c == "" || c == "." {
			continue
		}
		if c == ".." {
			if err := at(filepath.Dir(cur)); err != nil {
				return err
			}
			continue
		}
		next := filepath.Join(cur, c)
		others := curSt.Mode&0o022 != 0
		var st unix.Stat_t
		err := unix.Lstat(next, &st)
		if errors.Is(err, unix.ENOENT) {
			if others {
				return refuse("%s does not exist in %s, which others may write (mode %o)", c, cur, curSt.Mode&0o7777)
			}
			return nil
		}
		if err != nil {
			return refuse("%s cannot be examined: %v", next, err)
		}
		if st.Uid != 0 {
			return refuse("%s is owned by uid %d, not root", next, st.Uid)
		}
		if others && curSt.Mode&unix.S_ISVTX == 0 {
			return refuse("%s is writable by others (mode %o)", cur, curSt.Mode&0o7777)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			if links++; links > 40 {
				return refuse("%s: too many links", next)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return refuse("%s cannot be read: %v", next, err)
			}
			if filepath.IsAbs(target) {
				if err := at("/"); err != nil {
					return err
				}
			}
			todo = append(strings.Split(target, "/"), todo...)
		case unix.S_IFDIR:
			cur, curSt = next, st
		default:
			return nil // a file of root's (or what the search fails on by itself)
		}
	}
	if curSt.Mode&0o022 != 0 {
		return refuse("%s is writable by others (mode %o)", cur, curSt.Mode&0o7777)
	}
	return nil
}

// below is where a system file p goes in the snapshot.
func (s *storageSnapshot) below(p string) string {
	return filepath.Join(storageConfRoot, strings.TrimPrefix(p, s.host))
}

// copySearch copies what c/storage's search (paths, the user's first)
// would read: the first main file that exists, the drop-ins the
// directories give (of one name, the earliest directory's, as
// configfile.readDropInsFromPaths keeps), and the override at
// storageConfOver. The user's files are only checked.
func (s *storageSnapshot) copySearch(paths configfile.SearchPaths) error {
	for i, p := range paths.MainFiles {
		if p == "" {
			continue
		}
		rel := ""
		if i > 0 {
			rel = s.below(p)
		}
		ok, err := s.keep(p, rel, false)
		if err != nil {
			return err
		}
		if ok {
			break
		}
	}
	type dropIn struct {
		dir  string
		user bool
	}
	dropIns := map[string]dropIn{} // name → the directory it is read from
	for i, d := range slices.Backward(paths.DropInDirectories) {
		names, err := listStorageDropIns(d)
		if err != nil {
			return err
		}
		for _, n := range names {
			dropIns[n] = dropIn{d, i == 0}
		}
		if len(dropIns) > maxStorageDropIns {
			return fmt.Errorf("storage.conf drop-ins (the system's search): more than %d files", maxStorageDropIns)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(dropIns)) {
		p, rel := filepath.Join(dropIns[n].dir, n), ""
		if !dropIns[n].user {
			rel = s.below(p)
		}
		if _, err := s.keep(p, rel, false); err != nil {
			return err
		}
	}
	if o := paths.ExtraOverrideFile; o != "" {
		if _, err := s.keep(o, storageConfOver, true); err != nil {
			return err
		}
	}
	return nil
}

// listStorageDropIns lists the *.conf entries of a drop-in directory
// that are not directories (configfile.readDropInsFromPaths' choice): none
// when it does not exist. Listed by safefile.ReadDirAtMost (a FIFO in its
// place is an error, not a wait), at most storageConfDirent entries.
func listStorageDropIns(dir string) ([]string, error) {
	entries, err := safefile.ReadDirAtMost(dir, storageConfDirent+1)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("storage.conf drop-in directory %s (the system's search) cannot be listed: %s", dir, safefile.Reason(err))
	}
	if len(entries) > storageConfDirent {
		return nil, fmt.Errorf("storage.conf drop-in directory %s (the system's search): more than %d entries", dir, storageConfDirent)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".conf") {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// sameSearch reports whether again, the search below root, is paths
// moved there (moved), with the override at override.
func (s *storageSnapshot) sameSearch(paths, again configfile.SearchPaths, override string) bool {
	m := s.moved(paths)
	return slices.Equal(m.MainFiles, again.MainFiles) && slices.Equal(m.DropInDirectories, again.DropInDirectories) &&
		again.ExtraOverrideFile == override && len(again.ModuleDirectories) == 0
}

// describeRead names the files a failed load read, for its error.
func describeRead(read []string) string {
	if len(read) == 0 {
		return "the system's search found none"
	}
	return "the system's search: " + strings.Join(read, ", ")
}
