package safefs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Owner is a uid/gid pair: the owner SetOwner, WriteFileAt and MkdirAt
// give what they create.
type Owner struct {
	UID int `json:"uid"`
	GID int `json:"gid"`
}

// resolveFlags: beneath the held descriptor, never through a symbolic link
// (a symlink anywhere in the name fails with ELOOP), never a magic link.
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openat2Missing is set when the kernel has no openat2 (ENOSYS) or a test
// asked for it (ForceWalk); OpenAt then walks the name one component at a time with O_NOFOLLOW.
var openat2Missing bool

// OpenAt opens name beneath dirfd. name is relative, "/"-separated, with no
// "." or ".." component. O_NOFOLLOW and O_CLOEXEC are always added.
func OpenAt(dirfd int, name string, flags int, mode uint32) (int, error) {
	if err := CheckRel(name); err != nil {
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

// ForceWalk makes OpenAt use the O_NOFOLLOW component walk (as on a kernel
// without openat2) until the returned function is called. For tests.
func ForceWalk() func() {
	openat2Missing = true
	return func() { openat2Missing = false }
}

// walkOpen is OpenAt without openat2: every intermediate component is
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

func CheckRel(name string) error {
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

// OpenDirAt opens a directory beneath dirfd for reading its entries.
func OpenDirAt(dirfd int, name string) (int, error) {
	return OpenAt(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
}

// FileAt opens name beneath dirfd as an *os.File.
func FileAt(dirfd int, name string, flags int, mode uint32) (*os.File, error) {
	fd, err := OpenAt(dirfd, name, flags, mode)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// FstatAt lstat()s name relative to dirfd (never follows a symlink).
func FstatAt(dirfd int, name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

func Fstat(fd int) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstat(fd, &st)
	return st, err
}

func IsDir(st unix.Stat_t) bool  { return st.Mode&unix.S_IFMT == unix.S_IFDIR }
func IsReg(st unix.Stat_t) bool  { return st.Mode&unix.S_IFMT == unix.S_IFREG }
func IsLink(st unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFLNK }

// ReadDirNames lists a directory held as fd (the fd stays open).
func ReadDirNames(fd int) ([]string, error) { return ReadDirNamesAtMost(fd, -1) }

// ReadDirNamesAtMost lists at most n entries (all when n <= 0) of a
// directory held as fd, from its start (the fd stays open; its offset is
// shared with the dup(2) read here, so one reader at a time).
func ReadDirNamesAtMost(fd, n int) ([]string, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	if _, err := unix.Seek(dup, 0, io.SeekStart); err != nil {
		return nil, err
	}
	return f.Readdirnames(n)
}

// ReadAtMost reads a regular file beneath dirfd, at most max bytes.
func ReadAtMost(dirfd int, name string, max int64) ([]byte, error) {
	// O_NONBLOCK: a FIFO (or a device) planted under the name is refused
	// below instead of blocking the open until someone writes to it; on
	// the regular file it lets through, reads ignore the flag.
	f, err := FileAt(dirfd, name, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := Fstat(int(f.Fd()))
	if err != nil {
		return nil, err
	}
	if !IsReg(st) {
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

func RandSuffix() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// CreateTemp creates a new regular file beneath dirfd under a random name
// with O_EXCL (a planted name or symlink makes it fail, never followed).
func CreateTemp(dirfd int, prefix string) (*os.File, string, error) {
	for range 16 {
		name := prefix + RandSuffix()
		f, err := FileAt(dirfd, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o600)
		if err == nil {
			return f, name, nil
		}
		if !errors.Is(err, unix.EEXIST) {
			return nil, "", err
		}
	}
	return nil, "", fmt.Errorf("creating a temporary file: too many collisions")
}

// WriteFileAt writes data to name beneath dirfd atomically: an O_EXCL
// random temporary name, fchown/fchmod on its fd, fsync, renameat.
func WriteFileAt(dirfd int, name string, data []byte, owner Owner, noReplace bool) error {
	f, tmp, err := CreateTemp(dirfd, "."+name+".pullhelper-")
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
	if err := SetOwner(int(f.Fd()), owner, 0o644); err != nil {
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

// SetOwner sets owner and mode on an fd the caller opened with O_NOFOLLOW.
func SetOwner(fd int, owner Owner, mode uint32) error {
	if err := unix.Fchown(fd, owner.UID, owner.GID); err != nil {
		return err
	}
	return unix.Fchmod(fd, mode)
}

// MkdirAt creates (or opens an existing, non-symlink) directory beneath
// dirfd and returns its fd; a new one gets owner and 0755.
func MkdirAt(dirfd int, name string, owner Owner) (int, error) {
	err := unix.Mkdirat(dirfd, name, 0o700)
	created := err == nil
	if err != nil && err != unix.EEXIST {
		return -1, err
	}
	fd, err := OpenDirAt(dirfd, name)
	if err != nil {
		return -1, err
	}
	if created {
		if err := SetOwner(fd, owner, 0o755); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

// RootOnly: st (of path) is a directory of root's that nobody else can
// write (sticky allows it for an ancestor: nobody can then rename or
// remove root's entries), so that only root can replace what is in it.
func RootOnly(st unix.Stat_t, path string, sticky bool) error {
	if !IsDir(st) {
		return fmt.Errorf("%s is not a directory", path)
	}
	if st.Uid != 0 {
		return fmt.Errorf("%s is owned by uid %d, not root; refusing (its owner could plant links root would follow)", path, st.Uid)
	}
	if st.Mode&0o022 != 0 && !(sticky && st.Mode&unix.S_ISVTX != 0) {
		return fmt.Errorf("%s is writable by group or others (mode %o); refusing", path, st.Mode&0o7777)
	}
	return nil
}

// ErrnoText renders an error as its errno text (no Go "op" words).
func ErrnoText(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Path + ": " + ErrnoText(pe.Err)
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

// StatBeneath stats name beneath dirfd; a symlink anywhere in it fails.
func StatBeneath(dirfd int, name string) (unix.Stat_t, error) {
	fd, err := OpenAt(dirfd, name, unix.O_PATH, 0)
	if err != nil {
		return unix.Stat_t{}, err
	}
	defer unix.Close(fd)
	return Fstat(fd)
}
