package reexec

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pullhelper/pullhelper/internal/safefs"
	"golang.org/x/sys/unix"
)

// childBuildID is the Go build ID of the child-only binary
// (cmd/pullhelper-child) that make build writes beside this one, as
// THIS-child, written into this binary by make build (-ldflags -X). Empty
// (go build, go test): the child is this binary, re-executed.
var childBuildID string

// selfExe is the path the child is executed from when it is this binary.
const selfExe = "/proc/self/exe"

// goBuildIDNote is the type of the ELF note, named "Go", that holds a Go
// binary's build ID (cmd/link's ELF_NOTE_GOBUILDID_TAG), read as
// cmd/internal/buildid reads it: from the program's PT_NOTE segments.
const goBuildIDNote = 4

// maxNoteSegment bounds the note segment read (a Go binary's is 100 bytes).
const maxNoteSegment = 64 << 10

// openChildExe opens the child-only binary for the fork to execute by
// descriptor (/proc/self/fd/N: the file checked is the one executed), held
// above the fork's files (heldAbove), or says why the child is this binary
// instead. It is used only when it is
// the build this binary was made with (its build ID is childBuildID) and
// it is as trusted as this binary's own file is: a regular, executable
// file of root's, writable by nobody else, in directories of root's that
// nobody else can write to, from / down, no symbolic link on the way (the
// path is the kernel's name of this binary's file, plus "-child"), on a
// file system that allows exec. A node that has only pullhelper, or a
// pullhelper-child of another build, another owner or a writable
// directory, gets the child re-executed from this binary, as before: the
// same code, only its start is slower (the CRI, gRPC and containerd
// packages' inits).
func openChildExe(want string, files []*os.File) (*os.File, string) {
	if want == "" {
		return nil, "this binary was built without the child-only binary (make build builds both)"
	}
	self, err := os.Readlink(selfExe)
	if err != nil {
		return nil, "reading " + selfExe + ": " + err.Error()
	}
	exe, why := openChildAt(self+"-child", want)
	if exe == nil {
		return nil, why
	}
	if exe, err = heldAbove(exe, files); err != nil {
		return nil, "holding the child-only binary above the child's files: " + err.Error()
	}
	return exe, ""
}

// openChildAt is openChildExe for the binary at path, whose build ID must
// be want.
func openChildAt(path, want string) (*os.File, string) {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return nil, path + " is not a clean absolute path"
	}
	dir, name := filepath.Split(path)
	dfd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, "/: " + err.Error()
	}
	defer func() { unix.Close(dfd) }()
	at := "/"
	if why := rootsAlone(dfd, at); why != "" {
		return nil, why
	}
	for _, c := range strings.Split(strings.Trim(dir, "/"), "/") {
		if c == "" {
			continue
		}
		at = filepath.Join(at, c)
		nfd, err := unix.Openat(dfd, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, at + ": " + err.Error()
		}
		unix.Close(dfd)
		dfd = nfd
		if why := rootsAlone(dfd, at); why != "" {
			return nil, why
		}
	}
	// O_PATH first: nothing is opened for reading (a device's open has
	// effects) before it is known to be a regular file.
	pfd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, path + ": " + err.Error()
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, path + ": " + err.Error()
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, path + " is not a regular file"
	case st.Uid != 0:
		return nil, fmt.Sprintf("%s is owned by uid %d, not root", path, st.Uid)
	case st.Mode&0o022 != 0:
		return nil, fmt.Sprintf("%s is writable by group or others (mode %o)", path, st.Mode&0o7777)
	case st.Mode&0o100 == 0:
		return nil, path + " is not executable by its owner"
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(pfd, &sfs); err != nil {
		return nil, path + ": " + err.Error()
	}
	if sfs.Flags&unix.ST_NOEXEC != 0 {
		return nil, path + " is on a file system mounted noexec"
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", pfd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, path + ": " + err.Error()
	}
	f := os.NewFile(uintptr(fd), path)
	var st2 unix.Stat_t
	if err := unix.Fstat(fd, &st2); err != nil || st2.Dev != st.Dev || st2.Ino != st.Ino {
		f.Close()
		return nil, path + " changed while it was opened"
	}
	if got := buildID(f); got != want {
		f.Close()
		if got == "" {
			return nil, path + " has no Go build ID"
		}
		return nil, fmt.Sprintf("%s is another build (build ID %.128q, this binary's child is %s)", path, got, want)
	}
	return f, ""
}

// heldAbove moves exe (closing the descriptor it had, also when it fails) to the least free
// descriptor the fork cannot write over while it lays out the child's
// files (the first len(files) of them at 0, 1, 2, …): syscall's
// forkAndExecInChild first moves its error pipe and every file below its
// own index to max(len(files), the highest file's descriptor)+1 and up, one
// each, dup3 replacing whatever is there; exe's descriptor, executed
// after, must not be among those.
func heldAbove(exe *os.File, files []*os.File) (*os.File, error) {
	top := len(files)
	for _, f := range files {
		top = max(top, int(f.Fd()))
	}
	least := top + 1 + 1 + len(files) + 1 // the first free slot, the error pipe, each file, and one to spare
	hi, err := unix.FcntlInt(exe.Fd(), unix.F_DUPFD_CLOEXEC, least)
	if err != nil {
		exe.Close()
		return nil, err
	}
	name := exe.Name()
	exe.Close()
	return os.NewFile(uintptr(hi), name), nil
}

// rootsAlone says why the directory held as fd (at) could let someone but
// root replace what is below it, or "" (safefs.RootOnly, no sticky bit).
func rootsAlone(fd int, at string) string {
	st, err := safefs.Fstat(fd)
	if err != nil {
		return at + ": " + err.Error()
	}
	if err := safefs.RootOnly(st, at, false); err != nil {
		return err.Error()
	}
	return ""
}

// buildID is the Go build ID in an ELF binary's notes, or "".
func buildID(f *os.File) string {
	ef, err := elf.NewFile(f)
	if err != nil {
		return ""
	}
	for _, p := range ef.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz > maxNoteSegment {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := f.ReadAt(b, int64(p.Off)); err != nil {
			continue
		}
		for len(b) >= 12 {
			namesz, descsz, typ := ef.ByteOrder.Uint32(b), ef.ByteOrder.Uint32(b[4:]), ef.ByteOrder.Uint32(b[8:])
			name, desc := 12+align4(namesz), 12+align4(namesz)+align4(descsz)
			if name > uint64(len(b)) || desc > uint64(len(b)) {
				break
			}
			if typ == goBuildIDNote && namesz == 4 && string(b[12:15]) == "Go\x00" {
				return string(b[12+align4(namesz) : 12+align4(namesz)+uint64(descsz)])
			}
			b = b[desc:]
		}
	}
	return ""
}

func align4(n uint32) uint64 { return (uint64(n) + 3) &^ 3 }
