package safefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// procFD is where a descriptor is reopened (a variable for the test of the
// fallback without /proc).
var procFD = "/proc/self/fd/"

// MaxConfig is the bound for a configuration file or a secret: 4 MiB, far
// above any real one.
const MaxConfig = 4 << 20

// Open opens path for reading, following symlinks, and returns it only if
// it is a regular file. See the package comment.
func Open(path string) (*os.File, error) { return open(path, false) }

// ReadFile reads the regular file at path, following symlinks, refusing one
// larger than limit bytes without reading the rest.
func ReadFile(path string, limit int64) ([]byte, error) { return read(path, limit, false) }

// ReadFileNoFollow is ReadFile refusing a symlink at the last component.
func ReadFileNoFollow(path string, limit int64) ([]byte, error) { return read(path, limit, true) }

func open(path string, nofollow bool) (*os.File, error) {
	fd, _, err := openAt(unix.AT_FDCWD, path, path, nofollow)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// openAt opens name, relative to dirfd (or AT_FDCWD), for reading as the
// package comment says, and returns the descriptor and its fstat. path is
// the name errors give it.
func openAt(dirfd int, name, path string, nofollow bool) (int, *unix.Stat_t, error) {
	flags := unix.O_PATH | unix.O_CLOEXEC
	if nofollow {
		flags |= unix.O_NOFOLLOW
	}
	pfd, err := openRetry(dirfd, name, flags)
	if err != nil {
		return -1, nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return -1, nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if err := regular(path, st.Mode); err != nil {
		return -1, nil, err
	}
	// Reopen the inode O_PATH holds: nothing can swap it in between.
	const rd = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY
	fd, err := openRetry(unix.AT_FDCWD, procFD+strconv.Itoa(pfd), rd)
	if err == unix.ENOENT {
		// No /proc: open the path again (O_NONBLOCK: a FIFO swapped in
		// meanwhile does not block) and require the same inode below.
		rflags := rd
		if nofollow {
			rflags |= unix.O_NOFOLLOW
		}
		fd, err = openRetry(dirfd, name, rflags)
	}
	if err != nil {
		if err == unix.ENOENT {
			return -1, nil, &Error{Path: path, Msg: "changed while it was opened"}
		}
		return -1, nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st2 unix.Stat_t
	if err := unix.Fstat(fd, &st2); err != nil || st2.Dev != st.Dev || st2.Ino != st.Ino || !isRegular(st2.Mode) {
		unix.Close(fd)
		return -1, nil, &Error{Path: path, Msg: "changed while it was opened"}
	}
	return fd, &st2, nil
}

func openRetry(dirfd int, name string, flags int) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

func read(path string, limit int64, nofollow bool) ([]byte, error) {
	fd, st, err := openAt(unix.AT_FDCWD, path, path, nofollow)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return readLimited(fd, st.Size, path, limit, nil)
}

// FileID is a file's device and inode: two names of one file have the same.
type FileID struct{ Dev, Ino uint64 }

// ReadFileOnce is ReadFile for a caller that reads many files, each once:
// unless done holds the file's FileID (it was read under another name), it
// reads it into buf (grown when too small; nil allocates) and adds it to
// done. read is false when the file was not read again.
func ReadFileOnce(path string, limit int64, buf []byte, done map[FileID]bool) (b []byte, read bool, err error) {
	return readOnce(unix.AT_FDCWD, path, path, limit, buf, done)
}

// readOnce is ReadFileOnce of name relative to dirfd, path the name errors
// give it.
func readOnce(dirfd int, name, path string, limit int64, buf []byte, done map[FileID]bool) ([]byte, bool, error) {
	fd, st, err := openAt(dirfd, name, path, false)
	if err != nil {
		return nil, false, err
	}
	defer unix.Close(fd)
	id := FileID{Dev: st.Dev, Ino: st.Ino}
	if done[id] {
		return buf[:0], false, nil
	}
	done[id] = true
	b, err := readLimited(fd, st.Size, path, limit, buf)
	return b, err == nil, err
}

// readLimited reads fd whole, at most limit bytes (one more is an error),
// into buf. The buffer is sized from the file's size (plus one byte, so
// that the read that sees the end needs no more room), as os.ReadFile sizes
// it, and grows if the file does (a procfs file's size says 0); io.ReadAll
// would start at 512 bytes and copy it while it doubles.
func readLimited(fd int, size int64, name string, limit int64, buf []byte) ([]byte, error) {
	if size > limit {
		return nil, tooBig(name, limit)
	}
	want := int(min(max(512, size+1), limit+1))
	b := buf[:0]
	if cap(b) < want {
		b = make([]byte, 0, want)
	}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		room := b[len(b):cap(b)]
		if over := int64(len(b)) + int64(len(room)) - (limit + 1); over > 0 {
			room = room[:int64(len(room))-over]
		}
		n, err := unix.Read(fd, room)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: name, Err: err}
		}
		if n == 0 {
			break
		}
		b = b[:len(b)+n]
		if int64(len(b)) > limit {
			return nil, tooBig(name, limit)
		}
	}
	return b, nil
}

// Error is a refusal of a file that exists: not a regular file, too big.
type Error struct {
	Path  string
	Msg   string
	Limit int64 // the bound, when the file is larger
}

func (e *Error) Error() string { return e.Path + ": " + e.Msg }

// Reason is the message without the path, for callers that name the file
// themselves.
func (e *Error) Reason() string { return e.Msg }

func tooBig(name string, limit int64) error {
	return &Error{Path: name, Limit: limit, Msg: fmt.Sprintf("larger than %s, the limit for this file", size(limit))}
}

func size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

func isRegular(mode uint32) bool { return mode&unix.S_IFMT == unix.S_IFREG }

func regular(path string, mode uint32) error {
	if isRegular(mode) {
		return nil
	}
	kind := "not a regular file"
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		kind = "a directory, not a regular file"
	case unix.S_IFIFO:
		kind = "a FIFO, not a regular file"
	case unix.S_IFCHR:
		kind = "a character device, not a regular file"
	case unix.S_IFBLK:
		kind = "a block device, not a regular file"
	case unix.S_IFSOCK:
		kind = "a socket, not a regular file"
	case unix.S_IFLNK:
		kind = "a symlink, which is not followed here"
	}
	return &Error{Path: path, Msg: kind}
}

// TooBig reports whether err refuses a file larger than its bound.
func TooBig(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Limit > 0
}

// Reason is err's message without the path: the *Error's or the
// *fs.PathError's own reason, else err's text.
func Reason(err error) string {
	switch e := err.(type) {
	case *Error:
		return e.Msg
	case *fs.PathError:
		if e.Err == unix.ELOOP && e.Op == "open" {
			return "a symlink, which is not followed here"
		}
		return e.Err.Error()
	}
	return err.Error()
}

// Cause is err's reason as an error without the path, for a caller that
// names the file itself: a *fs.PathError's errno (errors.Is still matches
// fs.ErrNotExist), a safefile *Error's message, else err.
func Cause(err error) error {
	var pe *fs.PathError
	var se *Error
	switch {
	case errors.As(err, &pe):
		return pe.Err
	case errors.As(err, &se):
		return errors.New(se.Msg)
	}
	return err
}

// Redact removes what a decoder's message quotes ('x', "x", `x`, up to the
// end of the message for an unterminated quote or one whose text holds a
// backslash-escaped quote, to the last backtick for a backtick excerpt,
// which may hold backticks) and bare long numbers (RedactNumbers), and folds it onto one line, so that it
// says where and what kind of error a file has without repeating the
// file's bytes.
func Redact(msg string) string {
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c == '\'' || c == '"' || c == '`' {
			// An apostrophe inside a word ("can't") is not a quote.
			if c == '\'' && i > 0 && isLetter(msg[i-1]) && i+1 < len(msg) && isLetter(msg[i+1]) {
				b.WriteByte(c)
				continue
			}
			var j int
			if c == '`' {
				j = strings.LastIndexByte(msg[i+1:], c)
			} else {
				j = strings.IndexByte(msg[i+1:], c)
			}
			b.WriteString("(…)")
			if j < 0 || strings.IndexByte(msg[i+1:i+1+j], '\\') >= 0 {
				// Unterminated, or an escaped quote may end it later
				// than it seems: nothing after it is safe to repeat.
				break
			}
			i += j + 1
			continue
		}
		b.WriteByte(c)
	}
	return strings.Join(strings.Fields(RedactNumbers(b.String())), " ")
}

// RedactNumbers replaces the bare numbers (between spaces) of 10 digits or
// more in msg (a
// value a decoder repeats, "4242… is out of range for int64", never a line
// or a column) by "(…)", for a message that may name the value otherwise.
func RedactNumbers(msg string) string {
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		if c := msg[i]; c < '0' || c > '9' {
			b.WriteByte(c)
			continue
		}
		j := i
		for j < len(msg) && msg[j] >= '0' && msg[j] <= '9' {
			j++
		}
		bare := (i == 0 || msg[i-1] == ' ') && (j == len(msg) || msg[j] == ' ' || msg[j] == ',' || msg[j] == ';' || msg[j] == ':')
		if bare && j-i >= 10 {
			b.WriteString("(…)")
		} else {
			b.WriteString(msg[i:j])
		}
		i = j - 1
	}
	return b.String()
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// ReadDirAtMost lists at most n entries of the directory at path (a
// directory of millions is not listed whole to find out it has more than
// n), following symlinks. It opens with O_DIRECTORY, as os.ReadDir does:
// a FIFO or a device named here fails at once (ENOTDIR) instead of
// blocking the open.
func ReadDirAtMost(path string, n int) ([]fs.DirEntry, error) {
	d, err := OpenDir(path)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Entries(n)
}

// Dir is a directory the caller names, opened once as ReadDirAtMost opens
// it, whose entries are then listed, read and their links read relative to
// it: a caller that reads every file of a directory walks its path once.
type Dir struct {
	f    *os.File
	fd   int
	path string
	link []byte
}

// OpenDir opens the directory at path, following symlinks, O_DIRECTORY.
func OpenDir(path string) (*Dir, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	return &Dir{f: f, fd: int(f.Fd()), path: path}, nil
}

// Close closes the directory.
func (d *Dir) Close() { d.f.Close() }

// Entries lists at most n entries of the directory (the first call; a
// second lists the ones after them).
func (d *Dir) Entries(n int) ([]fs.DirEntry, error) {
	ents, err := d.f.ReadDir(n)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return ents, nil
}

// ReadFileOnce is ReadFileOnce of the directory's entry name (a name, not
// a path), following symlinks.
func (d *Dir) ReadFileOnce(name string, limit int64, buf []byte, done map[FileID]bool) ([]byte, bool, error) {
	return readOnce(d.fd, name, d.path+"/"+name, limit, buf, done)
}

// Readlink is os.Readlink of the directory's entry name.
func (d *Dir) Readlink(name string) (string, error) {
	if d.link == nil {
		d.link = make([]byte, unix.PathMax) // a link's target is shorter (PATH_MAX with its NUL)
	}
	n, err := unix.Readlinkat(d.fd, name, d.link)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: d.path + "/" + name, Err: err}
	}
	return string(d.link[:n]), nil
}
