package dest

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	storagetypes "go.podman.io/storage/types"
	"golang.org/x/sys/unix"
)

// The system's storage.conf search (storageconf_search.go), on trees
// made below a temporary "host" root, against containers/storage's own
// LoadStoreOptions over the same tree.

// searchTree is a host tree and the user's configuration directory
// ($XDG_CONFIG_HOME/containers), with no storage.conf variable set.
func searchTree(t *testing.T) (host, user string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: the snapshot is a private tmpfs (fsopen needs root); run as root")
	}
	host = t.TempDir()
	xdg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", xdg)
	t.Setenv(storageConfEnv, "")
	t.Setenv(storageConfEnv+"_OVERRIDE", "")
	t.Setenv("STORAGE_DRIVER", "")
	os.Unsetenv("STORAGE_OPTS")
	return host, filepath.Join(xdg, "containers")
}

func writeConf(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
}

// searchBounded runs searchedStoreOptions(host), failing the test if it
// has not returned within 30 s (a FIFO opened without O_NONBLOCK would
// hold it until something writes).
func searchBounded(t *testing.T, host string) (storagetypes.StoreOptions, error) {
	t.Helper()
	type res struct {
		so  storagetypes.StoreOptions
		err error
	}
	ch := make(chan res, 1)
	go func() {
		so, err := searchedStoreOptions(host)
		ch <- res{so, err}
	}()
	select {
	case r := <-ch:
		return r.so, r.err
	case <-time.After(30 * time.Second):
		t.Fatal("the search did not return within 30 s: blocked opening a file")
	}
	return storagetypes.StoreOptions{}, nil
}

func TestStorageSearchAsContainersStorage(t *testing.T) {
	main := func(graph string) string {
		return fmt.Sprintf("[storage]\ndriver = \"vfs\"\ngraphroot = %q\nrunroot = \"/run/ph-main\"\n", graph)
	}
	for _, c := range []struct {
		name string
		make func(t *testing.T, host, user string)
		want func(so storagetypes.StoreOptions) string // "" when so is as the tree says
	}{
		{"the vendor's file alone", func(t *testing.T, host, _ string) {
			writeConf(t, host+"/usr/share/containers/storage.conf", main("/g/vendor"))
		}, func(so storagetypes.StoreOptions) string {
			return check(so.GraphRoot == "/g/vendor", "graphroot %s, want the vendor's", so.GraphRoot)
		}},
		{"the admin's file over the vendor's", func(t *testing.T, host, _ string) {
			writeConf(t, host+"/usr/share/containers/storage.conf", main("/g/vendor"))
			writeConf(t, host+"/etc/containers/storage.conf", main("/g/admin"))
		}, func(so storagetypes.StoreOptions) string {
			return check(so.GraphRoot == "/g/admin", "graphroot %s, want the admin's", so.GraphRoot)
		}},
		{"the user's file first", func(t *testing.T, host, user string) {
			writeConf(t, host+"/etc/containers/storage.conf", main("/g/admin"))
			writeConf(t, user+"/storage.conf", main("/g/user"))
		}, func(so storagetypes.StoreOptions) string {
			return check(so.GraphRoot == "/g/user", "graphroot %s, want the user's", so.GraphRoot)
		}},
		{"drop-ins: of one name the first directory's, read in name order", func(t *testing.T, host, user string) {
			writeConf(t, host+"/etc/containers/storage.conf", main("/g/admin"))
			// Shadowed by /etc's 10-a.conf: c/storage never opens it.
			mkfifo(t, host+"/usr/share/containers/storage.conf.d/10-a.conf")
			writeConf(t, host+"/etc/containers/storage.conf.d/10-a.conf", "[storage]\ngraphroot = \"/g/dropin-a\"\n")
			writeConf(t, host+"/etc/containers/storage.rootful.conf.d/20-b.conf", "[storage]\nrunroot = \"/run/ph-b\"\n")
			writeConf(t, host+"/usr/share/containers/storage.conf.d/25-c.conf",
				"[storage.options]\nadditionalimagestores = [\"/ais/one\"]\n")
			writeConf(t, user+"/storage.conf.d/30-d.conf",
				"[storage.options]\nadditionalimagestores = [\"/ais/two\", {append = true}]\n")
			writeConf(t, host+"/etc/containers/storage.conf.d/not-a-drop-in.toml", "this is not read")
		}, func(so storagetypes.StoreOptions) string {
			return check(so.GraphRoot == "/g/dropin-a" && so.RunRoot == "/run/ph-b" &&
				strings.Contains(strings.Join(so.GraphDriverOptions, ","), "imagestore=/ais/one,imagestore=/ais/two"),
				"graphroot %s, runroot %s, options %q: want the drop-ins'", so.GraphRoot, so.RunRoot, so.GraphDriverOptions)
		}},
		{"$CONTAINERS_STORAGE_CONF_OVERRIDE last", func(t *testing.T, host, _ string) {
			writeConf(t, host+"/etc/containers/storage.conf", main("/g/admin"))
			writeConf(t, host+"/etc/containers/storage.conf.d/10-a.conf", "[storage]\ngraphroot = \"/g/dropin-a\"\n")
			o := filepath.Join(t.TempDir(), "override.conf")
			writeConf(t, o, "[storage]\ngraphroot = \"/g/override\"\n")
			t.Setenv(storageConfEnv+"_OVERRIDE", o)
		}, func(so storagetypes.StoreOptions) string {
			return check(so.GraphRoot == "/g/override", "graphroot %s, want the override's", so.GraphRoot)
		}},
		{"no file at all", func(*testing.T, string, string) {}, func(storagetypes.StoreOptions) string { return "" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			host, user := searchTree(t)
			c.make(t, host, user)
			want, err := storagetypes.LoadStoreOptions(storagetypes.LoadOptions{RootForImplicitAbsolutePaths: host})
			if err != nil {
				t.Fatalf("containers/storage itself: %v", err)
			}
			got, err := searchBounded(t, host)
			if err != nil {
				t.Fatalf("searchedStoreOptions: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %+v\nwant (containers/storage's) %+v", got, want)
			}
			if msg := c.want(got); msg != "" {
				t.Error(msg)
			}
		})
	}
}

func check(ok bool, format string, a ...any) string {
	if ok {
		return ""
	}
	return fmt.Sprintf(format, a...)
}

// A FIFO, a device, an oversized file or a FIFO for a drop-in directory,
// anywhere the search reads, is refused at once with the path named.
func TestStorageSearchRefusesWhatIsNotAFile(t *testing.T) {
	for _, c := range []struct {
		name, want string
		make       func(t *testing.T, host, user string) string // the path the error names
	}{
		{"a FIFO as the admin's storage.conf", "not a regular file", func(t *testing.T, host, _ string) string {
			p := host + "/etc/containers/storage.conf"
			mkfifo(t, p)
			return p
		}},
		{"a FIFO as a drop-in", "not a regular file", func(t *testing.T, host, _ string) string {
			p := host + "/usr/share/containers/storage.conf.d/50-x.conf"
			mkfifo(t, p)
			return p
		}},
		{"a FIFO as the user's storage.conf", "not a regular file", func(t *testing.T, _, user string) string {
			p := user + "/storage.conf"
			mkfifo(t, p)
			return p
		}},
		{"a FIFO as a drop-in directory", "cannot be listed", func(t *testing.T, host, _ string) string {
			p := host + "/etc/containers/storage.rootful.conf.d"
			mkfifo(t, p)
			return p
		}},
		{"/dev/zero as the vendor's storage.conf", "not a regular file", func(t *testing.T, host, _ string) string {
			p := host + "/usr/share/containers/storage.conf"
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("/dev/zero", p); err != nil {
				t.Fatal(err)
			}
			return p
		}},
		{"an oversized drop-in", "larger than", func(t *testing.T, host, _ string) string {
			p := host + "/etc/containers/storage.conf.d/big.conf"
			writeConf(t, p, "# "+strings.Repeat("x", 5<<20)+"\n")
			return p
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			host, user := searchTree(t)
			p := c.make(t, host, user)
			_, err := searchBounded(t, host)
			if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one naming %s (%s)", err, p, c.want)
			}
		})
	}
}

// Every system file swapped for a FIFO right after it was checked:
// containers/storage reads the checked bytes from the snapshot, never the
// path again.
func TestStorageSearchReadsWhatWasChecked(t *testing.T) {
	host, _ := searchTree(t)
	writeConf(t, host+"/etc/containers/storage.conf", "[storage]\ndriver = \"vfs\"\ngraphroot = \"/g/admin\"\nrunroot = \"/run/ph-admin\"\n")
	writeConf(t, host+"/etc/containers/storage.conf.d/10-a.conf", "[storage]\nrunroot = \"/run/ph-dropin\"\n")
	want, err := storagetypes.LoadStoreOptions(storagetypes.LoadOptions{RootForImplicitAbsolutePaths: host})
	if err != nil {
		t.Fatal(err)
	}
	var swapped []string
	checkedHook = func(p string) {
		tmp := p + ".fifo"
		if err := syscall.Mkfifo(tmp, 0o644); err != nil {
			t.Errorf("mkfifo: %v", err)
			return
		}
		if err := os.Rename(tmp, p); err != nil {
			t.Errorf("rename: %v", err)
		}
		swapped = append(swapped, p)
	}
	defer func() { checkedHook = nil }()
	got, err := searchBounded(t, host)
	if err != nil {
		t.Fatal(err)
	}
	if len(swapped) != 2 {
		t.Fatalf("swapped %q, want the main file and the drop-in", swapped)
	}
	if !reflect.DeepEqual(got, want) || got.GraphRoot != "/g/admin" || got.RunRoot != "/run/ph-dropin" {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestStorageSearchBoundsDropIns(t *testing.T) {
	host, _ := searchTree(t)
	for i := range maxStorageDropIns + 1 {
		writeConf(t, fmt.Sprintf("%s/etc/containers/storage.conf.d/%03d.conf", host, i), "")
	}
	if _, err := searchBounded(t, host); err == nil || !strings.Contains(err.Error(), "more than 256 files") {
		t.Fatalf("err = %v, want more than 256 files", err)
	}
}

// The user's directory, which the library reads itself, is searched only
// when nobody but root can change it or what leads to it.
func TestStorageSearchUserDirectoryRootOnly(t *testing.T) {
	const nobody = 65534
	for _, c := range []struct {
		name, want string
		make       func(t *testing.T, xdg string) // xdg: $XDG_CONFIG_HOME, root's 0700
	}{
		{"root's, with files", "", func(t *testing.T, xdg string) {
			writeConf(t, xdg+"/containers/storage.conf", "[storage]\ndriver = \"vfs\"\n")
		}},
		{"missing below a directory of root's", "", func(*testing.T, string) {}},
		{"another user's directory", "owned by uid 65534", func(t *testing.T, xdg string) {
			noErr(t, os.Mkdir(xdg+"/containers", 0o755))
			noErr(t, os.Chown(xdg+"/containers", nobody, nobody))
		}},
		{"another user's file in root's directory", "owned by uid 65534", func(t *testing.T, xdg string) {
			writeConf(t, xdg+"/containers/storage.conf", "[storage]\ndriver = \"vfs\"\n")
			noErr(t, os.Chown(xdg+"/containers/storage.conf", nobody, nobody))
		}},
		{"another user's drop-in directory", "owned by uid 65534", func(t *testing.T, xdg string) {
			noErr(t, os.MkdirAll(xdg+"/containers/storage.conf.d", 0o755))
			noErr(t, os.Chown(xdg+"/containers/storage.conf.d", nobody, nobody))
		}},
		{"missing in a directory others may write", "does not exist in", func(t *testing.T, xdg string) {
			noErr(t, unix.Chmod(xdg, 0o1777)) // os.Chmod drops the sticky bit given as 0o1000
		}},
		{"root's, through a sticky directory others may write", "", func(t *testing.T, xdg string) {
			noErr(t, unix.Chmod(xdg, 0o1777)) // os.Chmod drops the sticky bit given as 0o1000
			noErr(t, os.Mkdir(xdg+"/containers", 0o755))
		}},
		{"writable by others, not sticky", "writable by others", func(t *testing.T, xdg string) {
			noErr(t, os.Mkdir(xdg+"/containers", 0o777))
			noErr(t, os.Chmod(xdg+"/containers", 0o777))
		}},
		{"another user's link in a sticky directory", "owned by uid 65534", func(t *testing.T, xdg string) {
			noErr(t, unix.Chmod(xdg, 0o1777)) // os.Chmod drops the sticky bit given as 0o1000
			target := t.TempDir()
			noErr(t, os.Symlink(target, xdg+"/containers"))
			noErr(t, os.Lchown(xdg+"/containers", nobody, nobody))
		}},
		{"root's link to a directory of root's", "", func(t *testing.T, xdg string) {
			target := t.TempDir()
			writeConf(t, target+"/storage.conf", "[storage]\ndriver = \"vfs\"\n")
			noErr(t, os.Symlink(target, xdg+"/containers"))
		}},
		{"root's link to another user's directory", "owned by uid 65534", func(t *testing.T, xdg string) {
			target := t.TempDir()
			noErr(t, os.Chown(target, nobody, nobody))
			noErr(t, os.Symlink(target, xdg+"/containers"))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			host, user := searchTree(t)
			c.make(t, filepath.Dir(user))
			_, err := searchBounded(t, host)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "dest.storage_conf")):
				t.Fatalf("err = %v, want a refusal (%s) that names dest.storage_conf", err, c.want)
			}
		})
	}
}

// A storage.conf masked by a link to /dev/null reads as empty, as the
// library reads it.
func TestStorageSearchDevNullMask(t *testing.T) {
	host, _ := searchTree(t)
	writeConf(t, host+"/usr/share/containers/storage.conf", "[storage]\ndriver = \"vfs\"\ngraphroot = \"/g/vendor\"\nrunroot = \"/run/ph-vendor\"\n")
	noErr(t, os.MkdirAll(host+"/etc/containers/storage.conf.d", 0o755))
	noErr(t, os.Symlink("/dev/null", host+"/etc/containers/storage.conf"))
	noErr(t, os.Symlink("/dev/null", host+"/etc/containers/storage.conf.d/10-masked.conf"))
	want, err := storagetypes.LoadStoreOptions(storagetypes.LoadOptions{RootForImplicitAbsolutePaths: host})
	if err != nil {
		t.Fatal(err)
	}
	got, err := searchBounded(t, host)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || got.GraphRoot == "/g/vendor" {
		t.Errorf("got %+v\nwant %+v (the vendor's file masked)", got, want)
	}
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Loads at the same time (`pullhelper cri` parses a DEST per request)
// each get the storage.conf the search finds: none reads the variables
// another load has pointed at its own snapshot.
func TestStorageSearchConcurrentLoads(t *testing.T) {
	_, user := searchTree(t)
	writeConf(t, user+"/storage.conf", "[storage]\ndriver = \"vfs\"\ngraphroot = \"/g/user\"\nrunroot = \"/run/ph-user\"\n")
	want, err := storagetypes.LoadStoreOptions(storagetypes.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const loaders, loads = 8, 50
	errs := make(chan error, loaders*loads)
	var wg sync.WaitGroup
	for range loaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range loads {
				got, err := loadStoreOptions("")
				if err == nil && !reflect.DeepEqual(got, want) {
					err = fmt.Errorf("got %+v, want %+v", got, want)
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 3 {
			t.Error(err)
		}
	}
	if n > 0 {
		t.Errorf("%d of %d loads went wrong", n, loaders*loads)
	}
}
