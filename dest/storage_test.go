package dest_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/dest/target"
	"github.com/pullhelper/pullhelper/internal/failure"
	"go.podman.io/storage"
	"go.podman.io/storage/pkg/archive"
	"go.podman.io/storage/pkg/reexec"
	storagetypes "go.podman.io/storage/types"
)

// The store applies layers in a re-executed copy of the binary
// (storage-applyLayer), as cmd/pullhelper's main does.
// testLocks is the lock directory of the tests' stages and pull locks
// (state.Root.Locks on a node).
var testLocks string

func TestMain(m *testing.M) {
	if reexec.Init() {
		return
	}
	d, err := os.MkdirTemp("", "pullhelper-locks-")
	if err != nil {
		panic(err)
	}
	testLocks = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

// noSystemConf points storage.conf at an empty file, so that the
// parser's defaults do not depend on the host's /etc/containers.
func noSystemConf(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "storage.conf")
	must(t, os.WriteFile(f, []byte("[storage]\ndriver = \"vfs\"\nrunroot = \"/run/ph-test-run\"\ngraphroot = \"/var/lib/ph-test-graph\"\n"), 0o644))
	return f
}

func TestParseContainersStorage(t *testing.T) {
	conf := noSystemConf(t)
	for _, c := range []struct {
		raw, str, driver, graph, run, ref string
	}{
		{"containers-storage:[vfs@/g+/r]busybox", "containers-storage:[vfs@/g+/r]docker.io/library/busybox:latest", "vfs", "/g", "/r", "docker.io/library/busybox:latest"},
		{"containers-storage:[overlay@/a/b/+/r/x]127.0.0.1:5000/t/x:v1", "containers-storage:[overlay@/a/b+/r/x]127.0.0.1:5000/t/x:v1", "overlay", "/a/b", "/r/x", "127.0.0.1:5000/t/x:v1"},
		// What the specifier leaves out comes from storage.conf.
		{"containers-storage:[/g]h.example/x", "containers-storage:[vfs@/g+/run/ph-test-run]h.example/x:latest", "vfs", "/g", "/run/ph-test-run", "h.example/x:latest"},
		{"containers-storage:h.example/x:1", "containers-storage:[vfs@/var/lib/ph-test-graph+/run/ph-test-run]h.example/x:1", "vfs", "/var/lib/ph-test-graph", "/run/ph-test-run", "h.example/x:1"},
		{"containers-storage:[vfs@/g+/r:vfs.ignore_chown_errors=true]h.example/x", "containers-storage:[vfs@/g+/r:vfs.ignore_chown_errors=true]h.example/x:latest", "vfs", "/g", "/r", "h.example/x:latest"},
	} {
		d, err := dest.ParseWith(c.raw, dest.ParseOptions{StorageConf: conf})
		if err != nil {
			t.Errorf("%s: %v", c.raw, err)
			continue
		}
		s := d.Spec()
		if s.Store == nil || s.Store.Driver != c.driver || s.Store.GraphRoot != c.graph || s.Store.RunRoot != c.run || s.Ref != c.ref || s.Path != filepath.Join(c.graph, "pullhelper-import") {
			t.Errorf("%s: spec %+v store %+v", c.raw, s, s.Store)
		}
		if d.String() != c.str {
			t.Errorf("%s: String() = %s, want %s", c.raw, d.String(), c.str)
		}
		if s.Store.Conf != conf {
			t.Errorf("%s: conf %q", c.raw, s.Store.Conf)
		}
		// The child's copy of the Spec names no store (nor host path).
		a := s.Anonymous()
		b, _ := json.Marshal(a)
		if a.Store != nil || strings.Contains(string(b), c.graph+"+") {
			t.Errorf("%s: anonymous spec %s", c.raw, b)
		}
		// The child rebuilds it to write the staged OCI layout.
		if ref, err := target.StagedReference(a, "/tmp", nil); err != nil || ref.Transport().Name() != "oci" {
			t.Errorf("%s: staged reference %v, %v", c.raw, ref, err)
		}
	}
}

// A containers-storage: DEST named by digest keeps REPO@DIGEST (the
// name CRI-O's PullImage stores a pull by digest under, through
// containers/image's storage reference); a tag beside the digest is
// dropped; RefDigest reports the digest, "" for a tag.
func TestParseContainersStorageDigest(t *testing.T) {
	conf := noSystemConf(t)
	dg := "sha256:" + strings.Repeat("a", 64)
	for raw, ref := range map[string]string{
		"containers-storage:[vfs@/g+/r]reg:5000/x@" + dg:   "reg:5000/x@" + dg,
		"containers-storage:[vfs@/g+/r]reg:5000/x:1@" + dg: "reg:5000/x@" + dg,
		"containers-storage:[vfs@/g+/r]busybox@" + dg:      "docker.io/library/busybox@" + dg,
		"containers-storage:[vfs@/g+/r]reg:5000/x:1":       "reg:5000/x:1",
		"containers-storage:[vfs@/g+/r]reg:5000/x":         "reg:5000/x:latest",
	} {
		d, err := dest.ParseWith(raw, dest.ParseOptions{StorageConf: conf})
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		s := d.Spec()
		if s.Ref != ref {
			t.Errorf("%s: ref %q, want %q", raw, s.Ref, ref)
		}
		want := ""
		if strings.Contains(ref, "@") {
			want = dg
		}
		if got := dest.RefDigest(s); got != want {
			t.Errorf("%s: RefDigest %q, want %q", raw, got, want)
		}
	}
	if got := dest.RefDigest(dest.Spec{Transport: "oci", Ref: "x@" + dg}); got != "" {
		t.Errorf("RefDigest of an oci: DEST %q", got)
	}
}

func TestParseContainersStorageRefusals(t *testing.T) {
	conf := noSystemConf(t)
	for raw, sub := range map[string]string{
		"containers-storage:":                                                "the image name is empty",
		"containers-storage:[vfs@/g+/r]":                                     "the image name is empty",
		"containers-storage:[vfs@/g+/r":                                      "no closing ]",
		"containers-storage:[@/g]x":                                          "the driver before @ is empty",
		"containers-storage:[vfs@]x":                                         "the graph root is empty",
		"containers-storage:[vfs@+/r]x":                                      "the graph root is empty",
		"containers-storage:[vfs@g+/r]x":                                     `"g" is not an absolute path`,
		"containers-storage:[vfs@/g+r]x":                                     `"r" is not an absolute path`,
		"containers-storage:[btrfs@/g+/r]x":                                  `graph driver "btrfs" is not supported`,
		"containers-storage:[vfs@/+/r]x":                                     "other than /",
		"containers-storage:[vfs@/g+/r]UPPER":                                `image name "UPPER"`,
		"containers-storage:[vfs@/g+/r]x@sha512:" + strings.Repeat("a", 128): "only sha256 digests",
		"containers-storage:[vfs@/g+/r]x@sha256:" + strings.Repeat("a", 63):  `image name "x@sha256:`,
		"containers-storage:[vfs@/g+/r:]x":                                   "an empty driver option",
	} {
		_, err := dest.ParseWith(raw, dest.ParseOptions{StorageConf: conf})
		if err == nil || failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), sub) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: err = %v, want a one-line usage error with %q", raw, err, sub)
		}
	}
	_, err := dest.ParseWith("containers-storage:[vfs@/g+/r]x", dest.ParseOptions{StorageConf: "/nonexistent/storage.conf"})
	wantCode(t, err, failure.Usage, "dest.storage_conf")
}

// A whole pull into a vfs store: the image is listed under REF with the
// manifest's digest and the config digest as its ID; a second pull is
// told the layer is in the store (the copy skips it) and still imports.
func TestContainersStorageCommit(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	graph, run := filepath.Join(dir, "graph"), filepath.Join(dir, "run")
	raw := "containers-storage:[vfs@" + graph + "+" + run + "]h.example/t/x:v1"
	im := newImg("storage")
	d, err := dest.ParseWith(raw, dest.ParseOptions{StorageConf: noSystemConf(t)})
	must(t, err)
	for round := 0; round < 2; round++ {
		st, err := d.Stage(dest.StageOptions{Locks: testLocks})
		must(t, err)
		if round == 1 && len(st.Known) == 0 {
			t.Fatal("the second pull was told of no layer in the store")
		}
		e := pull(t, d, st, source(t, im), nil)
		must(t, d.Verify(bg, st, e))
		must(t, d.Commit(bg, st))
		var cfg struct {
			Config struct{ Digest string } `json:"config"`
		}
		must(t, json.Unmarshal(im.manifest, &cfg))
		if st.ImageID != cfg.Config.Digest {
			t.Fatalf("image id %q, config %s", st.ImageID, cfg.Config.Digest)
		}
		st.Remove()
		store, err := storage.GetStore(storagetypes.StoreOptions{GraphRoot: graph, RunRoot: run, GraphDriverName: "vfs"})
		must(t, err)
		img, err := store.Image("h.example/t/x:v1")
		must(t, err)
		found := false
		for _, dg := range img.Digests {
			found = found || dg.String() == im.digest
		}
		if !found || "sha256:"+img.ID != st.ImageID {
			t.Fatalf("image %s digests %v, want %s", img.ID, img.Digests, im.digest)
		}
		imgs, _ := store.Images()
		if len(imgs) != 1 {
			t.Fatalf("%d images in the store", len(imgs))
		}
		_, _ = store.Shutdown(true)
		// Staging (in GRAPHROOT) is gone; no OCI layout was left there.
		ents, _ := os.ReadDir(graph)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".pullhelper-staging-") || e.Name() == "pullhelper-import" {
				t.Fatalf("left in the graph root: %s", e.Name())
			}
		}
	}
}

// The store's roots are checked before containers/storage opens anything
// in them (issue 22 items 12, 13): a root of another user's, one beneath a
// directory of theirs, or one holding their entry where the store opens
// its locks is refused (failure.Destination, naming the owner), and the
// victim a planted link points to is untouched; missing roots are created
// root 0700.
func TestContainersStorageRootsCheckedFirst(t *testing.T) {
	needRoot(t)
	victimData := []byte("a root-only file\n")
	lchown := func(t *testing.T, paths ...string) {
		for _, p := range paths {
			must(t, os.Lchown(p, 65534, 65534))
		}
	}
	for name, c := range map[string]struct {
		plant func(t *testing.T, dir, victim string) (graph, run string)
		want  string
	}{
		"a graph root of another user's, storage.lock linked to a root file": {func(t *testing.T, dir, victim string) (string, string) {
			g := filepath.Join(dir, "graph")
			must(t, os.Mkdir(g, 0o755))
			must(t, os.Symlink(victim, filepath.Join(g, "storage.lock")))
			lchown(t, g, filepath.Join(g, "storage.lock"))
			return g, filepath.Join(dir, "run")
		}, "graph root " + "%s/graph is owned by uid 65534"},
		"a run root of another user's, vfs-layers/mountpoints.lock linked to a root file": {func(t *testing.T, dir, victim string) (string, string) {
			r := filepath.Join(dir, "run")
			must(t, os.MkdirAll(filepath.Join(r, "vfs-layers"), 0o755))
			must(t, os.Symlink(victim, filepath.Join(r, "vfs-layers", "mountpoints.lock")))
			lchown(t, r, filepath.Join(r, "vfs-layers"), filepath.Join(r, "vfs-layers", "mountpoints.lock"))
			return filepath.Join(dir, "graph"), r
		}, "run root %s/run is owned by uid 65534"},
		"root's run root holding another user's link": {func(t *testing.T, dir, victim string) (string, string) {
			r := filepath.Join(dir, "run")
			must(t, os.MkdirAll(filepath.Join(r, "vfs-layers"), 0o700))
			must(t, os.Symlink(victim, filepath.Join(r, "vfs-layers", "mountpoints.lock")))
			lchown(t, filepath.Join(r, "vfs-layers", "mountpoints.lock"))
			return filepath.Join(dir, "graph"), r
		}, "vfs-layers/mountpoints.lock, owned by uid 65534"},
		"a missing graph root beneath another user's directory": {func(t *testing.T, dir, victim string) (string, string) {
			u := filepath.Join(dir, "user")
			must(t, os.Mkdir(u, 0o755))
			lchown(t, u)
			return filepath.Join(u, "graph"), filepath.Join(dir, "run")
		}, "%s/user is owned by uid 65534"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			victim := filepath.Join(dir, "victim")
			must(t, os.WriteFile(victim, victimData, 0o600))
			graph, run := c.plant(t, dir, victim)
			entries := func() map[string]bool {
				out := map[string]bool{}
				for _, p := range []string{graph, run} {
					_ = filepath.Walk(p, func(path string, _ os.FileInfo, err error) error {
						if err == nil {
							out[path] = true
						}
						return nil
					})
				}
				return out
			}
			before := entries()
			d, err := dest.ParseWith("containers-storage:[vfs@"+graph+"+"+run+"]h.example/t/x:v1", dest.ParseOptions{StorageConf: noSystemConf(t)})
			must(t, err)
			st, err := d.Stage(dest.StageOptions{Locks: testLocks})
			if err == nil {
				st.Remove()
			}
			wantCode(t, err, failure.Destination, strings.ReplaceAll(c.want, "%s", dir))
			if b, _ := os.ReadFile(victim); string(b) != string(victimData) {
				t.Fatalf("the victim was changed: %q", b)
			}
			for p := range entries() {
				if !before[p] {
					t.Errorf("%s was created for the refused store", p)
				}
			}
		})
	}
	// Fresh roots: created root's, 0700, beneath held descriptors.
	dir := t.TempDir()
	graph, run := filepath.Join(dir, "a", "graph"), filepath.Join(dir, "b", "run")
	d, err := dest.ParseWith("containers-storage:[vfs@"+graph+"+"+run+"]h.example/t/x:v1", dest.ParseOptions{StorageConf: noSystemConf(t)})
	must(t, err)
	st, err := d.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	st.Remove()
	for _, p := range []string{filepath.Dir(graph), graph, filepath.Dir(run), run} {
		fi, err := os.Lstat(p)
		must(t, err)
		if !fi.IsDir() || fi.Mode().Perm() != 0o700 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("%s: mode %v uid %d, want a root 0700 directory", p, fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid)
		}
	}
	// A layer's own directory owned by a user namespace's root
	// (overlay/<id>) is the store's: accepted.
	layerDir := filepath.Join(graph, "overlay", strings.Repeat("ab", 32))
	must(t, os.MkdirAll(layerDir, 0o700))
	must(t, os.Lchown(layerDir, 100000, 100000))
	st, err = d.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	st.Remove()
}

// The pre-apply's two ways to a layer — the tar its DiffID pass wrote, in
// gzip stored blocks, or the blob inflated by the store when there is no
// room for that tar — give the store the same layer record, the one
// containers/storage makes from the blob (compression gzip included).
func TestContainersStoragePreApplyTarOrBlob(t *testing.T) {
	needRoot(t)
	im := newImg("storage-tar-or-blob")
	records := map[bool]string{}
	for _, viaTar := range []bool{true, false} {
		dir := t.TempDir()
		graph, run := filepath.Join(dir, "graph"), filepath.Join(dir, "run")
		d, err := dest.ParseWith("containers-storage:[vfs@"+graph+"+"+run+"]h.example/t/x:v1", dest.ParseOptions{StorageConf: noSystemConf(t)})
		must(t, err)
		if !viaTar {
			defer dest.NoPreApplyTar()()
		}
		st, err := d.Stage(dest.StageOptions{Locks: testLocks})
		must(t, err)
		e := pull(t, d, st, source(t, im), nil)
		must(t, d.Verify(bg, st, e))
		before := dest.TarApplied()
		must(t, d.Commit(bg, st))
		if used := dest.TarApplied() - before; used != map[bool]int64{true: 1, false: 0}[viaTar] {
			t.Fatalf("via tar %v: %d layers applied from their tar", viaTar, used)
		}
		st.Remove()
		store, err := storage.GetStore(storagetypes.StoreOptions{GraphRoot: graph, RunRoot: run, GraphDriverName: "vfs"})
		must(t, err)
		layers, err := store.Layers()
		must(t, err)
		if len(layers) != 1 {
			t.Fatalf("%d layers in the store", len(layers))
		}
		l := layers[0]
		records[viaTar] = fmt.Sprintf("id=%s compressed=%s/%d compression=%d diff=%s/%d uids=%v gids=%v",
			l.ID, l.CompressedDigest, l.CompressedSize, l.CompressionType, l.UncompressedDigest, l.UncompressedSize, l.UIDs, l.GIDs)
		if l.CompressedDigest.String() != sha(im.layer) || l.CompressedSize != int64(len(im.layer)) || l.CompressionType != archive.Gzip {
			t.Errorf("via tar %v: %s, want the blob %s of %d bytes, gzip", viaTar, records[viaTar], sha(im.layer), len(im.layer))
		}
		_, _ = store.Shutdown(true)
	}
	if records[true] != records[false] {
		t.Fatalf("the two ways differ:\ntar:  %s\nblob: %s", records[true], records[false])
	}
}

// The store gets the manifest the registry served, not the OCI one the
// staging converted a Docker schema 2 manifest to (containers/image's copy
// from the registry stores the served bytes: the image's Digest, its
// "manifest" big data); a served manifest that names the staged blobs with
// other sizes is refused at Verify (the import would read blobs that were
// not verified as such).
func TestContainersStorageStoresTheServedManifest(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	graph, run := filepath.Join(dir, "graph"), filepath.Join(dir, "run")
	raw := "containers-storage:[vfs@" + graph + "+" + run + "]h.example/t/docker:v1"
	im := newImg("served")
	m := descOf(t, im)
	docker := func(layerSize int) []byte { return dockerManifest(m, m.Layers[0].Digest, layerSize) }
	d, err := dest.ParseWith(raw, dest.ParseOptions{StorageConf: noSystemConf(t)})
	must(t, err)
	// What the child reports for a Docker manifest it staged converted.
	stage := func(served []byte) (*dest.Stage, dest.Expect) {
		st, err := d.Stage(dest.StageOptions{Locks: testLocks})
		must(t, err)
		t.Cleanup(st.Remove)
		e := pull(t, d, st, source(t, im), nil)
		e.Digest, e.Served, e.DestDigest = sha(served), served, im.digest
		return st, e
	}

	st, e := stage(docker(m.Layers[0].Size + 1))
	wantCode(t, d.Verify(bg, st, e), failure.Verification, "names blob")
	st.Remove()

	served := docker(m.Layers[0].Size)
	st, e = stage(served)
	must(t, d.Verify(bg, st, e))
	must(t, d.Commit(bg, st))
	st.Remove()
	store, err := storage.GetStore(storagetypes.StoreOptions{GraphRoot: graph, RunRoot: run, GraphDriverName: "vfs"})
	must(t, err)
	defer func() { _, _ = store.Shutdown(true) }()
	img, err := store.Image("h.example/t/docker:v1")
	must(t, err)
	if img.Digest.String() != sha(served) {
		t.Errorf("image digest %s, want the served %s (the staged conversion is %s)", img.Digest, sha(served), im.digest)
	}
	b, err := store.ImageBigData(img.ID, storage.ImageDigestBigDataKey)
	must(t, err)
	if string(b) != string(served) {
		t.Errorf("stored manifest %s, want the served one", b)
	}
}
