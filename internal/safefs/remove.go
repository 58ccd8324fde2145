package safefs

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"
)

// removeMaxDepth bounds the directory descriptors RemoveTree holds at once
// (one per level): a deeper level is moved up into the tree's top
// directory (renamed, beneath the held descriptors) and removed from
// there, so that no depth of tree a child built can exhaust the parent's
// descriptors and leave staging behind.
const removeMaxDepth = 32

// removeMaxWork bounds the work of one RemoveTree: the entries it visits
// and the directories it moves up, together. Past it the removal stops
// with an error naming the tree, which is left for pullhelper gc: a tree
// someone is still extending (a process of a pull whose parent was
// killed, holding a directory descriptor inside it) would otherwise keep
// the removal going for as long as they like. A variable for the tests.
var removeMaxWork = 1_000_000

// removeHook, when set (tests only), is called each time RemoveTree has
// opened a directory, with its depth (1: name itself), before it reads it:
// a test moves the tree there, as a user racing the removal would.
var removeHook func(depth int)

// RemoveTree removes name (one component) beneath dirfd and everything
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
func RemoveTree(dirfd int, name string, handed ...int) error {
	return removeTreeWith(rmOpts{}, dirfd, name, handed...)
}

// RemoveTreeCtx is RemoveTree that stops once ctx is done (the pull's
// SIGTERM or --timeout), with its error.
func RemoveTreeCtx(ctx context.Context, dirfd int, name string, handed ...int) error {
	return removeTreeWith(rmOpts{ctx: ctx}, dirfd, name, handed...)
}

// rmOpts are RemoveTree's options.
type rmOpts struct {
	// ctx, when set, stops the removal once done (the pull's SIGTERM or
	// --timeout), with its error.
	ctx context.Context
	// held, when hold is set, is a descriptor of the top directory that
	// this process made or checked (a root-owned 0700 staging or cache
	// directory): when name is still that inode, root's and 0700, it is
	// removed whoever owns dirfd (a DEST's parent of another user, with
	// dest.allow_other_owner). Below it the owner rules are unchanged.
	held int
	hold bool
}

// RemoveHeld is RemoveTree of a root-owned 0700 directory this process
// holds as held (its own staging root, a cache it checked), allowed
// beneath a parent of any owner.
func RemoveHeld(dirfd int, name string, held int, handed ...int) error {
	return removeTreeWith(rmOpts{held: held, hold: true}, dirfd, name, handed...)
}

// removeTreeWith is RemoveTree with options.
func removeTreeWith(o rmOpts, dirfd int, name string, handed ...int) error {
	if err := CheckRel(name); err != nil {
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
	pst, err := Fstat(dirfd)
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
	// trusted: the top directory is the one the caller holds, root's 0700.
	trusted := func(st unix.Stat_t) bool {
		if !o.hold {
			return false
		}
		h, err := Fstat(o.held)
		return err == nil && IsDir(h) && h.Dev == st.Dev && h.Ino == st.Ino &&
			st.Uid == 0 && st.Mode&0o7777 == 0o700
	}
	open := func(at int, atUID uint32, n string, top bool) (*level, error) {
		st, err := FstatAt(at, n)
		if err != nil {
			return nil, err
		}
		if !IsDir(st) {
			return nil, fmt.Errorf("%s: %s", n, unix.EPERM)
		}
		if !ok(atUID, st.Uid) && !(top && trusted(st)) {
			return nil, fmt.Errorf("%s is owned by uid %d; refusing to remove what is in it", n, st.Uid)
		}
		fd, err := OpenDirAt(at, n)
		if err != nil {
			return nil, err
		}
		got, err := Fstat(fd)
		if err == nil && (got.Dev != st.Dev || got.Ino != st.Ino || got.Uid != st.Uid) {
			err = fmt.Errorf("%s changed while it was removed", n)
		}
		if err != nil {
			unix.Close(fd)
			return nil, err
		}
		return &level{fd: fd, name: n, uid: got.Uid}, nil
	}
	top, err := open(dirfd, pst.Uid, name, true)
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
	work := 0
	for len(stack) > 0 {
		if work++; work > removeMaxWork {
			return fmt.Errorf("%s: more than %d entries to remove (is something still adding to it?); stopped, left for pullhelper gc", name, removeMaxWork)
		}
		if o.ctx != nil && work%1024 == 0 {
			if err := context.Cause(o.ctx); err != nil {
				return fmt.Errorf("%s: removal stopped: %w", name, err)
			}
		}
		l := stack[len(stack)-1]
		if !l.read {
			if l.names, err = ReadDirNames(l.fd); err != nil {
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
				st, err := FstatAt(l.fd, n)
				if err != nil {
					return err
				}
				if !IsDir(st) || !ok(l.uid, st.Uid) || !ok(top.uid, st.Uid) {
					return fmt.Errorf("%s is owned by uid %d; refusing to remove what is in it", n, st.Uid)
				}
				moved := ".pullhelper-rm-" + RandSuffix()
				if err := unix.Renameat2(l.fd, n, top.fd, moved, unix.RENAME_NOREPLACE); err != nil {
					return err
				}
				top.names = append(top.names, moved)
				continue
			}
			child, err := open(l.fd, l.uid, n, false)
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
