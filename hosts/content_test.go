package hosts

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"go.podman.io/image/v5/types"
)

// contentMarker stands for a secret in a file root reads for the caller.
const contentMarker = "ROOTONLYMARK"

// secretShapes are documents a caller's path might lead to (a symlink to a
// root-only file): none is a valid file of any format here, and each
// carries the marker where a decoder might quote it (a key, a value, a
// bare word, the first line).
var secretShapes = []string{
	"root:" + contentMarker + ":19000:0:99999:7:::\nbin:*:19000:0:99999:7:::\n",
	contentMarker + "\n",
	contentMarker + " = 1\n[x\n",
	"password = \"" + contentMarker + "\"\n",
	"[" + contentMarker + "]\nk = 1\nk = 2\n",
	"{\"" + contentMarker + "\": 1}\n",
	"{\"kind\": \"" + contentMarker + "\", \"apiVersion\": \"v1\"}\n",
	"{\"auths\": {\"r.io\": {\"auth\": 5, \"x\": \"" + contentMarker + "\"}}}\n",
	"kind: " + contentMarker + "\napiVersion: v1\n",
	contentMarker + ": [\n",
	"- " + contentMarker + "\n- : :\n",
	"-----BEGIN PRIVATE KEY-----\n" + contentMarker + "\n-----END PRIVATE KEY-----\n",
	"version = 2\n[plugins.\"" + contentMarker + "\"]\nx = [1, \"a\"]\n",
	"server = 5\n[host.\"" + contentMarker + "\"]\ncapabilities = 7\n",
	"server = \"" + contentMarker + ":%\"\n",
	"capabilities = [\"" + contentMarker + "\"]\n",
	"[host.\"https://r.io\"]\nclient = [[\"" + contentMarker + "\", 1, 2]]\n",
	"dial_timeout = \"" + contentMarker + "\"\n",
}

func noMarker(t *testing.T, what, doc string, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), contentMarker) {
		t.Errorf("%s, file %q: the error quotes the file: %v", what, doc, err)
	}
}

// Every decoder of a file root reads for the caller keeps the file's
// content out of its errors.
func TestDecoderErrorsCarryNoContent(t *testing.T) {
	for i, doc := range secretShapes {
		dir := t.TempDir()
		f := filepath.Join(dir, "f")
		if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := loadContainerdConfig(f)
		noMarker(t, "containerd config", doc, err)
		_, err = CheckRegistriesConf(&types.SystemContext{SystemRegistriesConfPath: f, SystemRegistriesConfDirPath: filepath.Join(dir, "none")})
		noMarker(t, "registries.conf", doc, err)
		hd := filepath.Join(dir, "hosts")
		if err := os.MkdirAll(hd, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(hd, "hosts.toml"), []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		var warned []string
		_, err = loadContainerdHostDir(hd, func(s string) { warned = append(warned, s) })
		noMarker(t, "hosts.toml", doc, err)
		for _, w := range warned {
			if strings.Contains(w, contentMarker) {
				t.Errorf("hosts.toml, file %d: the warning quotes the file: %s", i, w)
			}
		}
	}
}

// The same readers refuse a FIFO at once (go test's -timeout is the hang
// guard) and a device, naming the file.
func TestReadersRefuseNonRegular(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, "/dev/zero"} {
		for what, fn := range map[string]func() error{
			"containerd": func() error { _, err := loadContainerdConfig(p); return err },
			"registries.conf": func() error {
				_, err := CheckRegistriesConf(&types.SystemContext{SystemRegistriesConfPath: p})
				return err
			},
			"client cert pair": func() error { _, err := loadX509KeyPair(p, p); return err },
		} {
			err := fn()
			if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("%s %s: want a refusal naming the file, got %v", what, p, err)
			}
		}
	}
}

// Values the decoders accept but the checks refuse, and paths a file names
// (review 3, finding 6): the errors name the key or entry, never the value.
func TestValueErrorsCarryNoContent(t *testing.T) {
	dir := t.TempDir()
	write := func(name, doc string) string {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	// containerd imports: a missing file, a bad pattern, too many matches.
	for _, doc := range []string{
		"version = 2\nimports = [\"" + filepath.Join(dir, contentMarker+".toml") + "\"]\n",
		"version = 2\nimports = [\"" + filepath.Join(dir, "["+contentMarker+"*") + "\"]\n",
	} {
		_, err := loadContainerdConfig(write("config.toml", doc))
		if err == nil {
			t.Errorf("containerd config %q: want an error", doc)
		}
		noMarker(t, "containerd config", doc, err)
	}
	many := filepath.Join(dir, "many")
	if err := os.Mkdir(many, 0o700); err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= ctrdMaxImports; i++ {
		if err := os.WriteFile(filepath.Join(many, strconv.Itoa(i)+".toml"), []byte("version = 2\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f := write("config.toml", "version = 2\nimports = [\""+filepath.Join(many, "*.toml")+"\"]\n")
	_, err := loadContainerdConfig(f)
	if err == nil || !strings.Contains(err.Error(), f) || !strings.Contains(err.Error(), strconv.Itoa(ctrdMaxImports)) {
		t.Errorf("%d imports: %v; want a refusal naming the config and the bound", ctrdMaxImports+1, err)
	}
}

// $CONTAINERS_REGISTRIES_CONF names the one main file, which must exist, as
// configfile's search has it (ignoreENOENT false for the variable's path,
// as for SystemRegistriesConfPath); a missing one is an error naming it,
// not the defaults.
func TestRegistriesConfFromEnvironmentMustExist(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "r.conf")
	t.Setenv("CONTAINERS_REGISTRIES_CONF", missing)
	if _, err := CheckRegistriesConf(&types.SystemContext{}); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("a missing $CONTAINERS_REGISTRIES_CONF: %v; want an error naming it", err)
	}
}
