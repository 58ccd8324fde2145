package dest

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	storagetypes "go.podman.io/storage/types"
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
