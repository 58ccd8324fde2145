package safefile

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const marker = "S3CRET-MARKER-7f3a"

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func noContent(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("want an error")
	}
	if strings.Contains(err.Error(), marker) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("error carries content or is not one line: %q", err)
	}
}

func TestReadFileRegular(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	write(t, p, "hello")
	b, err := ReadFile(p, 10)
	if err != nil || string(b) != "hello" {
		t.Fatalf("ReadFile = %q, %v", b, err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The descriptor reads as usual (O_NONBLOCK means nothing for a
	// regular file) and is not inherited.
	if fl, err := fcntl(f.Fd(), syscall.F_GETFD); err != nil || fl&syscall.FD_CLOEXEC == 0 {
		t.Fatalf("FD_CLOEXEC not set: %v %v", fl, err)
	}
}

func fcntl(fd uintptr, cmd int) (int, error) {
	r, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, uintptr(cmd), 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

func TestReadFileMissingIsNotExist(t *testing.T) {
	_, err := ReadFile(filepath.Join(t.TempDir(), "nope"), 10)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("want fs.ErrNotExist, got %v", err)
	}
}

// A FIFO nobody writes to is refused at once: opening it neither blocks
// nor waits for a writer. The context is only a hang guard.
func TestFIFODoesNotBlock(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, fn := range map[string]func() error{
		"ReadFile":         func() error { _, err := ReadFile(p, MaxConfig); return err },
		"ReadFileNoFollow": func() error { _, err := ReadFileNoFollow(p, MaxConfig); return err },
		"Open":             func() error { f, err := Open(p); f.Close(); return err },
	} {
		done := make(chan error, 1)
		go func() { done <- fn() }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "FIFO") || !strings.Contains(err.Error(), p) {
				t.Fatalf("FIFO: want a refusal naming the file and the kind, got %v", err)
			}
		case <-ctx.Done():
			t.Fatal("reading a FIFO blocked")
		}
	}
}

func TestDevZeroRefused(t *testing.T) {
	_, err := ReadFile("/dev/zero", MaxConfig)
	if err == nil || !strings.Contains(err.Error(), "character device") {
		t.Fatalf("/dev/zero: want a refusal, got %v", err)
	}
	if _, err := ReadFile(t.TempDir(), MaxConfig); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Fatalf("a directory: want a refusal, got %v", err)
	}
}

func TestOversizedRefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big")
	write(t, p, marker+strings.Repeat("x", 100))
	_, err := ReadFile(p, 64)
	noContent(t, err)
	if !strings.Contains(err.Error(), "larger than 64 bytes") || !strings.Contains(err.Error(), p) {
		t.Fatalf("want the file and the bound: %v", err)
	}
	if b, err := ReadFile(p, int64(len(marker)+100)); err != nil || len(b) != len(marker)+100 {
		t.Fatalf("at the bound: %d bytes, %v", len(b), err)
	}
	if got := size(MaxConfig); got != "4 MiB" {
		t.Fatalf("size(MaxConfig) = %q", got)
	}
}

func TestSymlinks(t *testing.T) {
	d := t.TempDir()
	target := filepath.Join(d, "target")
	write(t, target, marker)
	link := filepath.Join(d, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(link, 100); err != nil || string(b) != marker {
		t.Fatalf("ReadFile follows a symlink: %q %v", b, err)
	}
	_, err := ReadFileNoFollow(link, 100)
	noContent(t, err)
	if !strings.Contains(Reason(err), "symlink") {
		t.Fatalf("NoFollow: want a symlink refusal, got %v", err)
	}
	// A symlink to a FIFO is refused like the FIFO.
	fifo := filepath.Join(d, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	l2 := filepath.Join(d, "l2")
	if err := os.Symlink(fifo, l2); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(l2, 100); err == nil || !strings.Contains(err.Error(), "FIFO") {
		t.Fatalf("symlink to a FIFO: %v", err)
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"expected '.' or '=', but got 'S' instead":             "expected (…) or (…), but got (…) instead",
		"invalid character 'S' looking for beginning of value": "invalid character (…) looking for beginning of value",
		"line 1: cannot unmarshal !!str `" + marker + "` into": "line 1: cannot unmarshal !!str (…) into",
		`unknown key "` + marker + `"`:                         "unknown key (…)",
		"unterminated \"" + marker:                             "unterminated (…)",
		"can't parse\nline 2":                                  "can't parse line 2",
		// An escaped quote: what follows it may be the value still.
		`bad value "A\"` + marker + `" at line 3`: "bad value (…)",
		// A backtick excerpt holding a backtick.
		"cannot unmarshal !!str `A`" + marker + "` into int": "cannot unmarshal !!str (…) into int",
		// A bare number: the value, not a position.
		"line 3: 4242424242" + "4242424242 is out of range for int64": "line 3: (…) is out of range for int64",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// Without /proc the path is opened again, O_NONBLOCK, and must still be
// the same regular file.
func TestWithoutProc(t *testing.T) {
	old := procFD
	procFD = filepath.Join(t.TempDir(), "no-proc") + "/"
	defer func() { procFD = old }()
	p := filepath.Join(t.TempDir(), "f")
	write(t, p, "x")
	if b, err := ReadFile(p, 10); err != nil || string(b) != "x" {
		t.Fatalf("ReadFile = %q, %v", b, err)
	}
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(fifo, 10); err == nil || !strings.Contains(err.Error(), "FIFO") {
		t.Fatalf("FIFO: %v", err)
	}
}

// ReadDirAtMost lists at most n entries, and a FIFO in the directory's
// place fails (ENOTDIR) instead of blocking the open: a writer is never
// needed for it to return.
func TestReadDirAtMost(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if ents, err := ReadDirAtMost(dir, 2); err != nil || len(ents) != 2 {
		t.Fatalf("at most 2: %d entries, %v", len(ents), err)
	}
	if ents, err := ReadDirAtMost(dir, 10); err != nil || len(ents) != 3 {
		t.Fatalf("at most 10: %d entries, %v", len(ents), err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadDirAtMost(fifo, 10); !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("a FIFO: %v, want ENOTDIR", err)
	}
	if _, err := ReadDirAtMost(filepath.Join(dir, "missing"), 10); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: %v, want ErrNotExist", err)
	}
}

// A file whose size says 0 (procfs) is read whole, and its bound still
// holds: the buffer is sized from the size but grows past it.
func TestReadFileSizeUnderstated(t *testing.T) {
	want, err := os.ReadFile("/proc/cpuinfo")
	if err != nil || len(want) < 1024 {
		t.Skipf("no /proc/cpuinfo of at least 1 KiB to read here (%d bytes, %v)", len(want), err)
	}
	if st, err := os.Stat("/proc/cpuinfo"); err != nil || st.Size() != 0 {
		t.Fatalf("/proc/cpuinfo: size %v, %v: want a file whose size says 0", st, err)
	}
	got, err := ReadFile("/proc/cpuinfo", int64(len(want))*2)
	if err != nil || string(got) != string(want) {
		t.Fatalf("ReadFile(/proc/cpuinfo) = %d bytes, %v; os.ReadFile read %d", len(got), err, len(want))
	}
	if _, err := ReadFile("/proc/cpuinfo", 600); !TooBig(err) {
		t.Fatalf("ReadFile(/proc/cpuinfo, 600) = %v, want too big", err)
	}
}

// ReadFileOnce reads a file once whatever names it is reached by (a
// symlink, a hard link, a Dir's entry), reads another file, and refuses
// what ReadFile refuses, a FIFO without blocking; the buffer is reused.
func TestReadFileOnce(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	write(t, a, "first")
	write(t, b, "second file")
	if err := os.Symlink("a", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(a, filepath.Join(dir, "hard")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := map[FileID]bool{}
	buf, read, err := ReadFileOnce(a, 64, nil, done)
	if err != nil || !read || string(buf) != "first" {
		t.Fatalf("a: %q, %v, %v", buf, read, err)
	}
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, name := range []string{"a", "link", "hard"} {
		if got, read, err := d.ReadFileOnce(name, 64, buf, done); err != nil || read || len(got) != 0 {
			t.Fatalf("%s, the same file again: %q, read %v, %v", name, got, read, err)
		}
	}
	got, read, err := d.ReadFileOnce("b", 64, buf, done)
	if err != nil || !read || string(got) != "second file" {
		t.Fatalf("b: %q, %v, %v", got, read, err)
	}
	if &got[:1][0] != &buf[:1][0] {
		t.Fatal("b was not read into the buffer given")
	}
	if _, _, err := d.ReadFileOnce("b", 4, nil, map[FileID]bool{}); !TooBig(err) {
		t.Fatalf("b past 4 bytes: %v, want too big", err)
	} else if want := filepath.Join(dir, "b") + ": "; !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error %q does not name %s", err, want)
	}
	if _, _, err := d.ReadFileOnce("fifo", 64, nil, done); err == nil || !strings.Contains(err.Error(), "FIFO") {
		t.Fatalf("fifo: %v, want refused as a FIFO", err)
	}
	if target, err := d.Readlink("link"); err != nil || target != "a" {
		t.Fatalf("Readlink(link) = %q, %v", target, err)
	}
	if _, err := d.Readlink("a"); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("Readlink of a regular file: %v, want EINVAL", err)
	}
	if _, _, err := d.ReadFileOnce("missing", 64, nil, done); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: %v, want ErrNotExist", err)
	}
}
