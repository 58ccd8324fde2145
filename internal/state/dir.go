package state

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// OpenDir opens dir, one of the state root's directories (or the root
// itself), for the caller to create, lock and remove entries in, held as a
// descriptor. It is walked from / one component at a time with O_NOFOLLOW
// (a symbolic link anywhere is refused), and every component is checked on
// the descriptor opened:
//
//   - each ancestor is root's or this process's euid's, and not writable by
//     group or others unless sticky (/tmp): nobody else can swap what
//     follows it;
//   - dir itself is a directory of the euid's that nobody else can write,
//     so every entry in it was put there by root (a pull of this node).
//
// Missing components are created 0700 with mkdirat(2) beneath the held
// descriptor of the one before, and then checked like the rest (one made
// by someone who raced this process is refused). Errors name the path and
// what to fix; they are plain (the caller wraps them).
func OpenDir(dir string) (int, error) { return openDir(dir, true) }

// OpenExistingDir is OpenDir creating nothing: a missing component is an
// error that errors.Is(err, fs.ErrNotExist) reports (a sweep then has
// nothing to do).
func OpenExistingDir(dir string) (int, error) { return openDir(dir, false) }

func openDir(dir string, create bool) (int, error) {
	clean := filepath.Clean(dir)
	if !filepath.IsAbs(dir) || clean == "/" {
		return -1, fmt.Errorf("state directory %q: must be an absolute path other than /", dir)
	}
	fd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("state directory %s: opening /: %v", clean, err)
	}
	parts := strings.Split(strings.TrimPrefix(clean, "/"), "/")
	at := ""
	// fail names the component at fault, and dir when that is above it.
	fail := func(format string, args ...any) (int, error) {
		unix.Close(fd)
		msg := fmt.Sprintf(format, args...)
		if at != clean {
			msg = "state directory " + clean + ": " + msg
		}
		return -1, errors.New(msg)
	}
	for i, c := range parts {
		at += "/" + c
		const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		next, err := unix.Openat(fd, c, flags, 0)
		if err == unix.ENOENT && !create {
			unix.Close(fd)
			return -1, fmt.Errorf("state directory %s: %s: %w", clean, at, fs.ErrNotExist)
		}
		if err == unix.ENOENT {
			if err := unix.Mkdirat(fd, c, 0o700); err != nil && err != unix.EEXIST {
				return fail("creating %s: %v", at, err)
			}
			next, err = unix.Openat(fd, c, flags, 0)
		}
		if err == unix.ELOOP || err == unix.ENOTDIR {
			var st unix.Stat_t
			if unix.Fstatat(fd, c, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return fail("%s is a symbolic link; refusing (name the directory it points to)", at)
			}
			return fail("%s is not a directory", at)
		}
		if err != nil {
			return fail("%s: %v", at, err)
		}
		unix.Close(fd)
		fd = next
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fail("%s: %v", at, err)
		}
		if err := checkComponent(st, at, i == len(parts)-1); err != nil {
			return fail("%v", err)
		}
	}
	return fd, nil
}

// CheckDir is OpenDir for a caller that goes on by path: once it returns
// nil, nobody but root (and the euid) can change dir or any directory
// above it, unless one of them is sticky and removed by root meanwhile (a
// state root under /tmp; the default, /run/pullhelper, has none).
func CheckDir(dir string) error {
	fd, err := OpenDir(dir)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

// checkComponent checks one component OpenDir opened: an ancestor (last
// false) or dir itself.
func checkComponent(st unix.Stat_t, path string, last bool) error {
	euid := uint32(os.Geteuid())
	switch {
	case last && st.Uid != euid:
		return fmt.Errorf("%s is owned by uid %d, not %d; refusing (remove it: pullhelper recreates it)", path, st.Uid, euid)
	case !last && st.Uid != 0 && st.Uid != euid:
		return fmt.Errorf("%s is owned by uid %d, not root; refusing (its owner could swap the path below it)", path, st.Uid)
	case st.Mode&0o022 != 0 && (last || st.Mode&unix.S_ISVTX == 0):
		return fmt.Errorf("%s is writable by group or others (mode %o); refusing (chmod go-w it)", path, st.Mode&0o7777)
	}
	return nil
}

// RemoveIfUnheld is how a state directory's lock files are reclaimed (the
// uid locks, the commit and pull locks, the bandwidth registrations): the
// entry name in the directory held as dfd is removed when nobody holds its
// flock (its pull is gone) — only when it is what a pull makes, a regular
// file of the euid's with one link, and still the file at name once
// locked. held reports that someone holds it (a live pull); anything else
// is neither held nor removed, and never followed or blocked on (a FIFO).
func RemoveIfUnheld(dfd int, name string) (held, removed bool) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || st.Uid != uint32(os.Geteuid()) {
		return false, false
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return err == unix.EWOULDBLOCK, false
	}
	var now unix.Stat_t
	if unix.Fstatat(dfd, name, &now, unix.AT_SYMLINK_NOFOLLOW) != nil || now.Dev != st.Dev || now.Ino != st.Ino {
		return false, false
	}
	return false, unix.Unlinkat(dfd, name, 0) == nil
}
