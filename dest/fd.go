package dest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// resolveFlags: beneath the held descriptor, never through a symbolic link
// (a symlink anywhere in the name fails with ELOOP), never a magic link.
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openat2Missing is set when the kernel has no openat2 (ENOSYS); openAt
// then walks the name one component at a time with O_NOFOLLOW.
var openat2Missing bool

// openAt opens name beneath dirfd. name is relative, "/"-separated, with no
// "." or ".." component. O_NOFOLLOW and O_CLOEXEC are always added.
func openAt(dirfd int, name string, flags int, mode uint32) (int, error) {
	if err := checkRel(name); err != nil {
		return -1, err
	}
	flags |= unix.O_NOFOLLOW | unix.O_CLOEXEC
	if !openat2Missing {
		// EAGAIN is openat2's "a rename raced the resolution, try again"
		// — and also EWOULDBLOCK, an O_NONBLOCK open of a file under
		// another process's lease: a few tries, never a spin.
		for tries := 0; ; tries++ {
			fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{Flags: uint64(flags), Mode: uint64(mode), Resolve: resolveFlags})
			if err == unix.EINTR || (err == unix.EAGAIN && tries < 3) {
				continue
			}
			if err != unix.ENOSYS {
				return fd, err
			}
			openat2Missing = true
			break
		}
	}
	return walkOpen(dirfd, name, flags, mode)
}

// walkOpen is openAt without openat2: every intermediate component is
// opened O_PATH|O_DIRECTORY|O_NOFOLLOW relative to the previous one.
func walkOpen(dirfd int, name string, flags int, mode uint32) (int, error) {
	parts := strings.Split(name, "/")
	cur := dirfd
	for i, p := range parts {
		if i == len(parts)-1 {
			fd, err := unix.Openat(cur, p, flags, mode)
			if cur != dirfd {
				unix.Close(cur)
			}
			return fd, err
		}
		next, err := unix.Openat(cur, p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOTDIR {
			// A symlink opened O_NOFOLLOW|O_DIRECTORY reports ENOTDIR
			// (checked before cur is closed: its number may be reused).
			var st unix.Stat_t
			if unix.Fstatat(cur, p, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				err = unix.ELOOP
			}
		}
		if cur != dirfd {
			unix.Close(cur)
		}
		if err != nil {
			return -1, err
		}
		cur = next
	}
	return -1, unix.EINVAL
}

func checkRel(name string) error {
	if name == "" || strings.HasPrefix(name, "/") {
		return fmt.Errorf("%q: not a relative name", name)
	}
	for _, p := range strings.Split(name, "/") {
		if p == "" || p == "." || p == ".." {
			return fmt.Errorf("%q: not a plain relative name", name)
		}
	}
	return nil
}

// openDirAt opens a directory beneath dirfd for reading its entries.
func openDirAt(dirfd int, name string) (int, error) {
	return openAt(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
}

// fileAt opens name beneath dirfd as an *os.File.
func fileAt(dirfd int, name string, flags int, mode uint32) (*os.File, error) {
	fd, err := openAt(dirfd, name, flags, mode)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// fstatAt lstat()s name relative to dirfd (never follows a symlink).
func fstatAt(dirfd int, name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

func fstat(fd int) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstat(fd, &st)
	return st, err
}

func isDir(st unix.Stat_t) bool  { return st.Mode&unix.S_IFMT == unix.S_IFDIR }
func isReg(st unix.Stat_t) bool  { return st.Mode&unix.S_IFMT == unix.S_IFREG }
func isLink(st unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFLNK }

// readDirNames lists a directory held as fd (the fd stays open).
func readDirNames(fd int) ([]string, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	if _, err := unix.Seek(dup, 0, io.SeekStart); err != nil {
		return nil, err
	}
	return f.Readdirnames(-1)
}

// readAtMost reads a regular file beneath dirfd, at most max bytes.
func readAtMost(dirfd int, name string, max int64) ([]byte, error) {
	f, err := fileAt(dirfd, name, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := fstat(int(f.Fd()))
	if err != nil {
		return nil, err
	}
	if !isReg(st) {
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	if st.Size > max {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d allowed", name, st.Size, max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is more than the %d bytes allowed", name, max)
	}
	return b, nil
}

func randSuffix() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// createTemp creates a new regular file beneath dirfd under a random name
// with O_EXCL (a planted name or symlink makes it fail, never followed).
func createTemp(dirfd int, prefix string) (*os.File, string, error) {
	for range 16 {
		name := prefix + randSuffix()
		f, err := fileAt(dirfd, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o600)
		if err == nil {
			return f, name, nil
		}
		if !errors.Is(err, unix.EEXIST) {
			return nil, "", err
		}
	}
	return nil, "", fmt.Errorf("creating a temporary file: too many collisions")
}

// writeFileAt writes data to name beneath dirfd atomically: an O_EXCL
// random temporary name, fchown/fchmod on its fd, fsync, renameat.
func writeFileAt(dirfd int, name string, data []byte, owner Identity, noReplace bool) error {
	f, tmp, err := createTemp(dirfd, "."+name+".pullhelper-")
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		f.Close()
		if !ok {
			_ = unix.Unlinkat(dirfd, tmp, 0)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := setOwner(int(f.Fd()), owner, 0o644); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	var flags uint
	if noReplace {
		flags = unix.RENAME_NOREPLACE
	}
	if err := unix.Renameat2(dirfd, tmp, dirfd, name, flags); err != nil {
		return &os.PathError{Op: "rename", Path: name, Err: err}
	}
	ok = true
	return nil
}

// setOwner sets owner and mode on an fd the caller opened with O_NOFOLLOW.
func setOwner(fd int, owner Identity, mode uint32) error {
	if err := unix.Fchown(fd, owner.UID, owner.GID); err != nil {
		return err
	}
	return unix.Fchmod(fd, mode)
}

// mkdirAt creates (or opens an existing, non-symlink) directory beneath
// dirfd and returns its fd; a new one gets owner and 0755.
func mkdirAt(dirfd int, name string, owner Identity) (int, error) {
	err := unix.Mkdirat(dirfd, name, 0o700)
	created := err == nil
	if err != nil && err != unix.EEXIST {
		return -1, err
	}
	fd, err := openDirAt(dirfd, name)
	if err != nil {
		return -1, err
	}
	if created {
		if err := setOwner(fd, owner, 0o755); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

// LockDir holds the commit locks: one root-only file per locked directory
// (named by its device and inode), so that no other user can hold a
// pull's lock (any user may flock a directory it can open, and so could
// stall every commit into a shared parent until LockTimeout).
var LockDir = "/run/pullhelper/locks"

// lockInode takes the commit lock of the directory held as fd, waiting at
// most d (and not past ctx: SIGINT, SIGTERM, the --timeout deadline), and
// returns the function that releases it. The lock file is
// removed on release, under the lock; a waiter that then holds a removed
// file notices (its inode is no longer the path's) and tries again.
func lockInode(ctx context.Context, fd int, d time.Duration) (func(), error) {
	st, err := fstat(fd)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(LockDir, 0o700); err != nil {
		return nil, err
	}
	_, unlock, err := lockFile(ctx, filepath.Join(LockDir, fmt.Sprintf("%d-%d.lock", st.Dev, st.Ino)), d)
	return unlock, err
}

// lockFile takes an exclusive flock on the lock file path (created 0600),
// waiting at most d and not past ctx (then ctx's error: the caller checks
// ctxErr first), and returns its descriptor and the function that
// releases it. The file is removed on release, under the lock; a waiter
// that then holds a removed file notices (its inode is no longer the
// path's) and tries again.
func lockFile(ctx context.Context, path string, d time.Duration) (int, func(), error) {
	deadline := time.Now().Add(d)
	for {
		lfd, err := unix.Open(path, unix.O_CREAT|unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return -1, nil, err
		}
		if err := flockWait(ctx, lfd, time.Until(deadline)); err != nil {
			unix.Close(lfd)
			return -1, nil, err
		}
		held, err1 := fstat(lfd)
		var now unix.Stat_t
		err2 := unix.Stat(path, &now)
		if err1 == nil && err2 == nil && held.Dev == now.Dev && held.Ino == now.Ino {
			return lfd, func() {
				_ = unix.Unlink(path)
				_ = unix.Flock(lfd, unix.LOCK_UN)
				unix.Close(lfd)
			}, nil
		}
		unix.Close(lfd) // removed by the holder we waited for: again
	}
}

// errStillLocked: flockWait's bound passed with the lock still held.
var errStillLocked = errors.New("still locked by another pull")

// flockWait takes an exclusive flock on fd, waiting at most d and not past
// ctx (context.Cause(ctx) then).
func flockWait(ctx context.Context, fd int, d time.Duration) error {
	deadline := time.Now().Add(d)
	wait := 5 * time.Millisecond
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w after %s", errStillLocked, d)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
		if wait < 200*time.Millisecond {
			wait *= 2
		}
	}
}

// errnoText renders an error as its errno text (no Go "op" words).
func errnoText(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Path + ": " + errnoText(pe.Err)
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		switch errno {
		case unix.ELOOP:
			return "is a symbolic link (refused)"
		case unix.EXDEV:
			return "resolves outside the directory (refused)"
		}
	}
	return err.Error()
}

// statBeneath stats name beneath dirfd; a symlink anywhere in it fails.
func statBeneath(dirfd int, name string) (unix.Stat_t, error) {
	fd, err := openAt(dirfd, name, unix.O_PATH, 0)
	if err != nil {
		return unix.Stat_t{}, err
	}
	defer unix.Close(fd)
	return fstat(fd)
}
