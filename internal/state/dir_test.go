package state

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Missing components are created 0700; the descriptor is the directory's.
func TestOpenDirCreates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "root", "bandwidth")
	fd, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var held, now unix.Stat_t
	if err := unix.Fstat(fd, &held); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(dir, &now); err != nil {
		t.Fatal(err)
	}
	if held.Ino != now.Ino || held.Dev != now.Dev {
		t.Error("the descriptor is not the directory's")
	}
	for _, p := range []string{dir, filepath.Dir(dir)} {
		st, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if !st.IsDir() || st.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, want a directory 0700", p, st.Mode())
		}
	}
	if err := CheckDir(dir); err != nil {
		t.Errorf("CheckDir of an existing good directory: %v", err)
	}
}

// Everything above the directory may be sticky and writable by all (/tmp);
// the directory itself may not, nor a non-sticky ancestor.
func TestOpenDirRefuses(t *testing.T) {
	for _, c := range []struct {
		name, want string
		setup      func(t *testing.T, top string) string
	}{
		{"relative", "absolute path", func(t *testing.T, top string) string { return "run/pullhelper" }},
		{"root", "absolute path", func(t *testing.T, top string) string { return "/" }},
		{"a file", "not a directory", func(t *testing.T, top string) string {
			p := filepath.Join(top, "f")
			must(t, os.WriteFile(p, nil, 0o600))
			return filepath.Join(p, "sub")
		}},
		{"writable ancestor", "writable by group or others (mode 777)", func(t *testing.T, top string) string {
			must(t, os.Chmod(top, 0o777))
			return filepath.Join(top, "state", "locks")
		}},
		{"sticky directory itself", "writable by group or others (mode 1777)", func(t *testing.T, top string) string {
			must(t, os.Chmod(top, 0o777|os.ModeSticky))
			return top
		}},
		{"symbolic link", "symbolic link", func(t *testing.T, top string) string {
			must(t, os.Mkdir(filepath.Join(top, "real"), 0o700))
			must(t, os.Symlink("real", filepath.Join(top, "link")))
			return filepath.Join(top, "link", "locks")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			top := t.TempDir()
			fd, err := OpenDir(c.setup(t, top))
			if err == nil {
				unix.Close(fd)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("OpenDir: %v, want an error saying %q", err, c.want)
			}
			if _, err := os.Lstat(filepath.Join(top, "state")); err == nil {
				t.Error("created below a refused ancestor")
			}
		})
	}
	t.Run("sticky ancestor", func(t *testing.T) {
		top := t.TempDir()
		must(t, os.Chmod(top, 0o777|os.ModeSticky))
		if err := CheckDir(filepath.Join(top, "state")); err != nil {
			t.Errorf("below a sticky directory: %v", err)
		}
	})
}

// Another uid's directory, or one below another uid's, is refused (as root:
// the test gives them to uid 65534).
func TestOpenDirRefusesOtherOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: directories are given to uid 65534")
	}
	top := t.TempDir()
	mine := filepath.Join(top, "mine")
	must(t, os.Mkdir(mine, 0o700))
	must(t, os.Chown(mine, 65534, 65534))
	if err := CheckDir(mine); err == nil || !strings.Contains(err.Error(), "owned by uid 65534, not 0") {
		t.Errorf("another uid's directory: %v", err)
	}
	if err := CheckDir(filepath.Join(mine, "locks")); err == nil || !strings.Contains(err.Error(), "owned by uid 65534, not root") {
		t.Errorf("below another uid's directory: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(mine, "locks")); err == nil {
		t.Error("created below another uid's directory")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
