package dest

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/pullhelper/pullhelper/dest/target"
	"github.com/pullhelper/pullhelper/internal/safefs"
	"golang.org/x/sys/unix"
)

// storeRootScanMax bounds the entries prepareRoot looks at in an existing
// root's first two levels.
const storeRootScanMax = 100000

// prepareRoot makes sure dir is a directory nobody but root can change,
// before anything opens it by path (containers/storage opens its lock files
// with O_CREAT, following symbolic links, and creates its directories as
// root): every ancestor is checked as DEST's are (openAncestors: root's, not
// writable by group or others unless sticky, a symbolic link followed only
// when root's); missing components are created with mkdirat(2) beneath the
// held descriptor of the last existing one (root, 0700, each opened with
// O_NOFOLLOW and checked to be root's); an existing dir must be root's, not
// writable by group or others, and — with scan — hold nothing owned by
// another uid in its first two levels (where the store's lock files, JSON
// and driver directories are; pullhelper's own .pullhelper-* entries are
// checked by their own code, and a layer's own directory, overlay/<id>,
// belongs to the layer's root). what names the setting in errors ("graph
// root"). Without create, missing components are left missing (a check
// only, to refuse before anything is created). Errors are plain (the
// caller makes them failure.Destination).
func prepareRoot(dir, what string, scan, create bool) error {
	clean := filepath.Clean(dir)
	if !filepath.IsAbs(clean) || clean == "/" {
		return fmt.Errorf("%s %s: must be an absolute path other than /", what, dir)
	}
	// The longest prefix that exists (by path only to find where to
	// start: everything below is checked through descriptors).
	existing, missing := clean, []string(nil)
	for existing != "/" {
		var st unix.Stat_t
		err := unix.Lstat(existing, &st)
		if err == nil {
			break
		}
		if err != unix.ENOENT {
			return fmt.Errorf("%s %s: %s: %s", what, dir, existing, safefs.ErrnoText(err))
		}
		missing = append([]string{filepath.Base(existing)}, missing...)
		existing = filepath.Dir(existing)
	}
	fd, err := openAncestors(existing, false)
	if err != nil {
		return fmt.Errorf("%s %s: %v", what, dir, err)
	}
	defer func() { unix.Close(fd) }()
	st, err := safefs.Fstat(fd)
	if err != nil {
		return fmt.Errorf("%s %s: %v", what, dir, err)
	}
	if len(missing) > 0 {
		// An ancestor of the root: as DEST's parent.
		if err := safefs.RootOnly(st, existing, true); err != nil {
			return fmt.Errorf("%s %s: %v", what, dir, err)
		}
	}
	if !create && len(missing) > 0 {
		return nil
	}
	at := existing
	for _, m := range missing {
		at = filepath.Join(at, m)
		if err := unix.Mkdirat(fd, m, 0o700); err != nil && err != unix.EEXIST {
			return fmt.Errorf("%s %s: creating %s: %s", what, dir, at, safefs.ErrnoText(err))
		}
		nfd, err := safefs.OpenDirAt(fd, m)
		if err != nil {
			return fmt.Errorf("%s %s: %s: %s", what, dir, at, safefs.ErrnoText(err))
		}
		unix.Close(fd)
		fd = nfd
		if st, err = safefs.Fstat(fd); err != nil {
			return fmt.Errorf("%s %s: %v", what, dir, err)
		}
		// Made by this process, or by someone who raced it (refused).
		if err := safefs.RootOnly(st, at, at != clean); err != nil {
			return fmt.Errorf("%s %s: %v", what, dir, err)
		}
	}
	if len(missing) > 0 {
		return nil // created here: empty
	}
	if err := safefs.RootOnly(st, clean, false); err != nil {
		return fmt.Errorf("%s %v", what, err)
	}
	if !scan {
		return nil
	}
	if err := scanRoot(fd, clean); err != nil {
		return fmt.Errorf("%s %s: %v; refusing to open the store there as root", what, clean, err)
	}
	return nil
}

// scanRoot refuses an entry of another owner in the first two levels of
// the directory held as fd.
func scanRoot(fd int, path string) error {
	n := 0
	var walk func(dfd int, rel string, depth int) error
	walk = func(dfd int, rel string, depth int) error {
		names, err := safefs.ReadDirNames(dfd)
		if err != nil {
			return err
		}
		for _, name := range names {
			if depth == 0 && strings.HasPrefix(name, ".pullhelper-") {
				continue // staging and the partial-blob cache: checked where they are used
			}
			if n++; n > storeRootScanMax {
				return fmt.Errorf("more than %d entries in its first two levels", storeRootScanMax)
			}
			r := filepath.Join(rel, name)
			st, err := safefs.FstatAt(dfd, name)
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			if err != nil {
				return fmt.Errorf("%s: %s", r, safefs.ErrnoText(err))
			}
			if depth == 1 && safefs.IsDir(st) && target.IsHex("sha256", name) {
				// A layer's or container's own directory (the driver's
				// overlay/<id>): owned by its root, which a user namespace
				// mapping may make another uid; the store opens files
				// only below it.
				continue
			}
			if st.Uid != 0 {
				return fmt.Errorf("it holds %s, owned by uid %d", r, st.Uid)
			}
			if depth == 0 && safefs.IsDir(st) {
				cfd, err := safefs.OpenDirAt(dfd, name)
				if err != nil {
					return fmt.Errorf("%s: %s", r, safefs.ErrnoText(err))
				}
				err = walk(cfd, r, 1)
				unix.Close(cfd)
				if err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(fd, "", 0)
}
