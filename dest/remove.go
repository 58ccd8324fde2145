package dest

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// removeMaxDepth bounds the directory descriptors removeTree holds at once
// (one per level): a deeper level is moved up into the tree's top
// directory (renamed, beneath the held descriptors) and removed from
// there, so that no depth of tree a child built can exhaust the parent's
// descriptors and leave staging behind.
const removeMaxDepth = 32

// removeHook, when set (tests only), is called each time removeTree has
// opened a directory, with its depth (1: name itself), before it reads it:
// a test moves the tree there, as a user racing the removal would.
var removeHook func(depth int)

// removeTree removes name (one component) beneath dirfd and everything
// below it, and never climbs: it holds a stack of directory descriptors,
// one per level, opens each level beneath the one above it without
// following a symbolic link, and never opens "..". A directory moved
// elsewhere meanwhile is emptied where it now is (its own entries, held
// by descriptor) and nothing outside it is touched.
//
// Each level's owner is checked before anything in it is removed: beneath
// a root-owned directory only root's directories and those of handed (the
// uids the caller gave parts of the tree to: a pull uid, DEST's parent's
// owner) are entered; beneath a directory of a handed uid only handed
// uids' (never root's: a root directory there may have been moved in by
// that uid). Anything else stops the removal with an error naming it,
// and is left as it is.
func removeTree(dirfd int, name string, handed ...int) error {
	if err := checkRel(name); err != nil {
		return err
	}
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err != unix.EISDIR && err != unix.EPERM {
		return err
	}
	ok := func(parent, uid uint32) bool {
		if uid == 0 {
			return parent == 0
		}
		for _, h := range handed {
			if h >= 0 && uint32(h) == uid {
				return true
			}
		}
		return false
	}
	pst, err := fstat(dirfd)
	if err != nil {
		return err
	}
	type level struct {
		fd    int
		name  string // in the level above (dirfd for the first)
		uid   uint32
		names []string
		next  int
		read  bool
	}
	open := func(at int, atUID uint32, n string) (*level, error) {
		st, err := fstatAt(at, n)
		if err != nil {
			return nil, err
		}
		if !isDir(st) {
			return nil, fmt.Errorf("%s: %s", n, unix.EPERM)
		}
		if !ok(atUID, st.Uid) {
			return nil, fmt.Errorf("%s is owned by uid %d; refusing to remove what is in it", n, st.Uid)
		}
		fd, err := openDirAt(at, n)
		if err != nil {
			return nil, err
		}
		got, err := fstat(fd)
		if err == nil && (got.Dev != st.Dev || got.Ino != st.Ino || got.Uid != st.Uid) {
			err = fmt.Errorf("%s changed while it was removed", n)
		}
		if err != nil {
			unix.Close(fd)
			return nil, err
		}
		return &level{fd: fd, name: n, uid: got.Uid}, nil
	}
	top, err := open(dirfd, pst.Uid, name)
	if err != nil {
		return err
	}
	stack := []*level{top}
	defer func() {
		for _, l := range stack {
			unix.Close(l.fd)
		}
	}()
	if removeHook != nil {
		removeHook(1)
	}
	for len(stack) > 0 {
		l := stack[len(stack)-1]
		if !l.read {
			if l.names, err = readDirNames(l.fd); err != nil {
				return err
			}
			l.read = true
		}
		if l.next < len(l.names) {
			n := l.names[l.next]
			l.next++
			err := unix.Unlinkat(l.fd, n, 0)
			if err == nil || err == unix.ENOENT {
				continue
			}
			if err != unix.EISDIR && err != unix.EPERM {
				return err
			}
			if len(stack) >= removeMaxDepth {
				// Too deep to hold another descriptor: move it up into
				// the top directory, which lists it again at its end.
				st, err := fstatAt(l.fd, n)
				if err != nil {
					return err
				}
				if !isDir(st) || !ok(l.uid, st.Uid) || !ok(top.uid, st.Uid) {
					return fmt.Errorf("%s is owned by uid %d; refusing to remove what is in it", n, st.Uid)
				}
				moved := ".pullhelper-rm-" + randSuffix()
				if err := unix.Renameat2(l.fd, n, top.fd, moved, unix.RENAME_NOREPLACE); err != nil {
					return err
				}
				top.names = append(top.names, moved)
				continue
			}
			child, err := open(l.fd, l.uid, n)
			if err != nil {
				return err
			}
			stack = append(stack, child)
			if removeHook != nil {
				removeHook(len(stack))
			}
			continue
		}
		// Empty as read: remove it from the level above, by the name it
		// had there (gone already when it was moved away: ENOENT).
		stack = stack[:len(stack)-1]
		unix.Close(l.fd)
		at := dirfd
		if len(stack) > 0 {
			at = stack[len(stack)-1].fd
		}
		if err := unix.Unlinkat(at, l.name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
			return err
		}
	}
	return nil
}
