package reexec

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// trustedTemp is a directory of root's, 0700, below directories of root's
// that nobody else can write (/run): where openChildAt accepts a binary.
func trustedTemp(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the child-only binary is trusted only in directories of root's")
	}
	dir, err := os.MkdirTemp("/run", "pullhelper-childexe-test-")
	if err != nil {
		t.Skipf("needs a directory of root's in /run: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if why := rootsAlone(mustOpenPath(t, "/run"), "/run"); why != "" {
		t.Skipf("/run is not root's alone here: %s", why)
	}
	return dir
}

func mustOpenPath(t *testing.T, p string) int {
	t.Helper()
	fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// copySelf copies this test binary (a Go ELF binary with a build ID) to
// path, mode 0755.
func copySelf(t *testing.T, path string) {
	t.Helper()
	in, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func selfBuildID(t *testing.T) string {
	t.Helper()
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	id := buildID(f)
	if id == "" {
		t.Fatal("no build ID read from this test binary")
	}
	return id
}

// buildID reads what `go tool buildid` prints.
func TestBuildIDIsGoToolBuildID(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to compare with: %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(goTool, "tool", "buildid", self).Output()
	if err != nil {
		t.Fatalf("go tool buildid: %v", err)
	}
	if got, want := selfBuildID(t), strings.TrimSpace(string(out)); got != want {
		t.Fatalf("buildID %q, go tool buildid %q", got, want)
	}
	// Not an ELF binary, or one without the note: no build ID.
	dir := t.TempDir()
	for name, content := range map[string]string{"script": "#!/bin/sh\n", "empty": ""} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if id := buildID(f); id != "" {
			t.Errorf("%s: build ID %q, want none", name, id)
		}
		f.Close()
	}
}

// The child-only binary is used only when it is that build, root's, not
// writable by anyone else, in directories nobody else can write, no link on
// the way, executable, on a file system that allows exec; else why not.
func TestOpenChildAt(t *testing.T) {
	base := trustedTemp(t)
	want := selfBuildID(t)
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string) string // returns the path to open
		want  string                                // build ID asked for
		why   string                                // "" = accepted
	}{
		{"accepted", func(t *testing.T, dir string) string {
			return placed(t, dir)
		}, want, ""},
		{"another build", func(t *testing.T, dir string) string {
			return placed(t, dir)
		}, "not/this/build", "is another build"},
		{"not a Go binary", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "pullhelper-child")
			if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			return p
		}, want, "has no Go build ID"},
		{"missing", func(t *testing.T, dir string) string {
			return filepath.Join(dir, "pullhelper-child")
		}, want, "no such file"},
		{"group-writable file", func(t *testing.T, dir string) string {
			p := placed(t, dir)
			must(t, unix.Chmod(p, 0o775))
			return p
		}, want, "writable by group or others (mode 775)"},
		{"file of another owner", func(t *testing.T, dir string) string {
			p := placed(t, dir)
			must(t, os.Chown(p, 65534, 65534))
			return p
		}, want, "owned by uid 65534, not root"},
		{"not executable", func(t *testing.T, dir string) string {
			p := placed(t, dir)
			must(t, unix.Chmod(p, 0o644))
			return p
		}, want, "not executable"},
		{"directory writable by others", func(t *testing.T, dir string) string {
			p := placed(t, dir, "bin")
			must(t, unix.Chmod(filepath.Dir(p), 0o1777)) // sticky: still refused
			return p
		}, want, "bin is writable by group or others (mode 1777)"},
		{"directory of another owner", func(t *testing.T, dir string) string {
			p := placed(t, dir, "bin")
			must(t, os.Chown(filepath.Dir(p), 65534, 65534))
			return p
		}, want, "bin is owned by uid 65534, not root"},
		{"symbolic link to it", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "pullhelper-child")
			must(t, os.Symlink(placed(t, dir, "real"), p))
			return p
		}, want, "not a regular file"},
		{"directory through a symbolic link", func(t *testing.T, dir string) string {
			placed(t, dir, "real")
			must(t, os.Symlink(filepath.Join(dir, "real"), filepath.Join(dir, "bin")))
			return filepath.Join(dir, "bin", "pullhelper-child")
		}, want, "not a directory"},
		{"FIFO", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "pullhelper-child")
			must(t, unix.Mkfifo(p, 0o755))
			return p
		}, want, "not a regular file"},
		{"relative path", func(t *testing.T, dir string) string {
			return "bin/pullhelper-child"
		}, want, "not a clean absolute path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := os.MkdirTemp(base, "case-")
			if err != nil {
				t.Fatal(err)
			}
			path := tc.setup(t, dir)
			f, why := openChildAt(path, tc.want)
			if tc.why == "" {
				if f == nil {
					t.Fatalf("refused: %s", why)
				}
				defer f.Close()
				if f.Name() != path {
					t.Errorf("named %q, want %q", f.Name(), path)
				}
				var st, want syscall.Stat_t
				if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
					t.Fatal(err)
				}
				if err := syscall.Stat(path, &want); err != nil {
					t.Fatal(err)
				}
				if st.Ino != want.Ino || st.Dev != want.Dev {
					t.Errorf("holds inode %d, the path is %d", st.Ino, want.Ino)
				}
				if fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC == 0 {
					t.Errorf("not close-on-exec (flags %d, %v): every program this process runs would inherit it", fl, err)
				}
				return
			}
			if f != nil {
				f.Close()
				t.Fatalf("accepted; want refused with %q", tc.why)
			}
			if !strings.Contains(why, tc.why) {
				t.Fatalf("refused with %q, want it to say %q", why, tc.why)
			}
		})
	}
}

// placed copies this test binary to DIR/[SUB/]pullhelper-child (SUB made
// 0755) and returns its path.
func placed(t *testing.T, dir string, sub ...string) string {
	t.Helper()
	if len(sub) > 0 {
		dir = filepath.Join(dir, sub[0])
		must(t, os.Mkdir(dir, 0o755))
	}
	p := filepath.Join(dir, "pullhelper-child")
	copySelf(t, p)
	return p
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A binary built without the child-only binary's build ID re-executes
// itself, and says so.
func TestOpenChildExeWithoutBuildID(t *testing.T) {
	f, why := openChildExe("", nil)
	if f != nil {
		f.Close()
		t.Fatal("opened a child-only binary with no build ID to match")
	}
	if !strings.Contains(why, "built without the child-only binary") {
		t.Fatalf("why: %q", why)
	}
}

// The child-only binary's descriptor survives the fork's layout of the
// child's files: with the protocol pipes at 62 and 63 and free slots below
// (where the fork's error pipe lands, to be moved to 64 and up), a program
// held at 64 is replaced by the pipe before the exec (the control: the
// exec fails), one held by heldAbove runs.
func TestHeldAboveSurvivesTheFork(t *testing.T) {
	prog := "/bin/true"
	if _, err := os.Stat(prog); err != nil {
		t.Skipf("no %s to run: %v", prog, err)
	}
	// Every slot up to 90 taken, then the pipes put at 62 and 63 and a few
	// low slots freed.
	var filler []int
	for {
		fd, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if fd >= 90 {
			unix.Close(fd)
			break
		}
		filler = append(filler, fd)
	}
	t.Cleanup(func() {
		for _, fd := range filler {
			unix.Close(fd)
		}
	})
	var p [2]int
	must(t, unix.Pipe2(p[:], unix.O_CLOEXEC))
	must(t, unix.Dup3(p[0], 62, unix.O_CLOEXEC))
	must(t, unix.Dup3(p[1], 63, unix.O_CLOEXEC))
	unix.Close(p[0])
	unix.Close(p[1])
	planR, evW := os.NewFile(62, "planR"), os.NewFile(63, "evW")
	defer planR.Close()
	defer evW.Close()
	var freed []int
	for i, fd := range filler {
		if fd >= 20 && fd < 26 || fd == 64 || fd == 65 {
			unix.Close(fd)
			freed = append(freed, fd)
			filler[i] = -1
		}
	}
	devNull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	extra := []*os.File{planR, evW}
	start := func(exe *os.File) error {
		cmd := &exec.Cmd{Path: fmt.Sprintf("/proc/self/fd/%d", exe.Fd()), Args: []string{"true"},
			Stdin: devNull, Stdout: devNull, Stderr: os.Stderr, ExtraFiles: extra}
		if err := cmd.Start(); err != nil {
			return err
		}
		return cmd.Wait()
	}
	open := func() *os.File {
		f, err := os.Open(prog)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	// The control: at 64, just above the highest file, the fork's error
	// pipe is moved onto it.
	naive := open()
	fd64, err := unix.FcntlInt(naive.Fd(), unix.F_DUPFD_CLOEXEC, 64)
	naive.Close()
	must(t, err)
	if fd64 != 64 {
		t.Fatalf("the control's program is at %d, not 64 (free slots %v)", fd64, freed)
	}
	at64 := os.NewFile(uintptr(fd64), prog)
	err = start(at64)
	at64.Close()
	if err == nil {
		t.Fatal("the control ran: the fork did not move its error pipe onto 64 here, so this test proves nothing")
	}
	held, err := heldAbove(open(), append([]*os.File{devNull, devNull, os.Stderr}, extra...))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := start(held); err != nil {
		t.Fatalf("held at %d: %v", held.Fd(), err)
	}
	if fl, err := unix.FcntlInt(held.Fd(), unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC == 0 {
		t.Errorf("not close-on-exec (flags %d, %v): every program this process runs would inherit it", fl, err)
	}
}
