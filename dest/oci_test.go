package dest_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/dest/target"
	"github.com/pullhelper/pullhelper/internal/failure"
	"go.podman.io/image/v5/types"
	"golang.org/x/sys/unix"
)

func TestOCINewThenMergeReusesKnownBlobs(t *testing.T) {
	needRoot(t)
	d := filepath.Join(t.TempDir(), "layout")
	a, b := newImg("a"), newImg("b")
	must(t, fullPull(t, "oci:"+d+":a", a, dest.StageOptions{Locks: testLocks}))

	// b shares a's config? no: b has its own layer and config; pull a
	// again under tag c to see every blob reused.
	dd := parse(t, "oci:"+d+":c")
	st, err := dd.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	defer st.Remove()
	if len(st.Known) != 3 {
		t.Fatalf("Known = %v, want a's 3 blobs", st.Known)
	}
	progress := make(chan types.ProgressProperties, 64)
	e := pull(t, dd, st, source(t, a), progress)
	skipped := 0
	for p := range progress {
		if p.Event == types.ProgressEventSkipped {
			skipped++
		}
	}
	if skipped != 1 {
		t.Fatalf("%d blobs reported skipped, want the layer", skipped)
	}
	if _, err := os.Lstat(filepath.Join(st.WorkPath, "image", "blobs", "sha256", sha(a.layer)[7:])); !os.IsNotExist(err) {
		t.Fatalf("the known layer was written into staging: %v", err)
	}
	must(t, dd.Verify(bg, st, e))
	must(t, dd.Commit(bg, st))
	must(t, fullPull(t, "oci:"+d+":b", b, dest.StageOptions{Locks: testLocks}))
	idx := readIndex(t, d)
	if idx["a"] != a.digest || idx["c"] != a.digest || idx["b"] != b.digest || len(idx) != 3 {
		t.Fatalf("index = %v", idx)
	}
}

func TestOCIEmptyDestDirGetsCompleteLayout(t *testing.T) {
	needRoot(t)
	d := filepath.Join(t.TempDir(), "empty")
	must(t, os.Mkdir(d, 0o755))
	must(t, fullPull(t, "oci:"+d+":a", newImg("a"), dest.StageOptions{Locks: testLocks}))
	if readIndex(t, d)["a"] == "" {
		t.Fatal("no index entry for a")
	}
	if _, err := os.Stat(filepath.Join(d, "oci-layout")); err != nil {
		t.Fatal(err)
	}
}

func TestOCIMountPoint(t *testing.T) {
	needRoot(t)
	d := filepath.Join(t.TempDir(), "mnt")
	must(t, os.Mkdir(d, 0o755))
	if err := unix.Mount("tmpfs", d, "tmpfs", 0, "size=16m"); err != nil {
		t.Skipf("cannot mount a tmpfs (needs CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(d, unix.MNT_DETACH) })
	must(t, fullPull(t, "oci:"+d+":a", newImg("a"), dest.StageOptions{Locks: testLocks}))
	must(t, fullPull(t, "oci:"+d+":b", newImg("b"), dest.StageOptions{Locks: testLocks}))
	if idx := readIndex(t, d); len(idx) != 2 {
		t.Fatalf("index = %v", idx)
	}
	ents, _ := os.ReadDir(d)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".pullhelper-staging-") {
			t.Fatalf("staging %s left in DEST", e.Name())
		}
	}
}

// An unprivileged user pre-creates DEST and plants symlinks; root must
// never write through them.
func TestOCIPlantedSymlinksInDest(t *testing.T) {
	needRoot(t)
	for _, entry := range []string{"blobs", "blobs/sha256", "index.json", "oci-layout"} {
		t.Run(entry, func(t *testing.T) {
			top := t.TempDir()
			d := filepath.Join(top, "layout")
			writeLayout(t, d, newImg("old"), "old")
			outside := filepath.Join(top, "outside")
			must(t, os.MkdirAll(filepath.Join(outside, "sha256"), 0o755))
			must(t, os.WriteFile(filepath.Join(outside, "victim"), []byte("precious"), 0o600))
			must(t, filepath.Walk(d, func(p string, _ os.FileInfo, err error) error { return os.Lchown(p, 65534, 65534) }))

			// Without the policy opt-in, another user's DEST is refused.
			_, err := parse(t, "oci:"+d+":a").Stage(dest.StageOptions{Locks: testLocks})
			wantCode(t, err, failure.Destination, "owned by uid 65534")

			dd := parse(t, "oci:"+d+":a")
			st, err := dd.Stage(dest.StageOptions{Locks: testLocks, AllowOtherOwner: true})
			must(t, err)
			defer st.Remove()
			e := pull(t, dd, st, source(t, newImg("a")), nil)
			must(t, dd.Verify(bg, st, e))
			// Planted after Stage, before Commit.
			p := filepath.Join(d, entry)
			must(t, os.RemoveAll(p))
			target := outside
			if entry == "index.json" || entry == "oci-layout" {
				target = filepath.Join(outside, "victim")
			}
			must(t, os.Symlink(target, p))
			err = dd.Commit(bg, st)
			wantCode(t, err, failure.Destination, entry)
			if b, _ := os.ReadFile(filepath.Join(outside, "victim")); string(b) != "precious" {
				t.Fatalf("root wrote through the symlink: %q", b)
			}
			if ents, _ := os.ReadDir(filepath.Join(outside, "sha256")); len(ents) != 0 {
				t.Fatalf("root moved blobs outside DEST: %v", ents)
			}
		})
	}
}

// Today's fixed temporary name is a target: a symlink there must not be
// followed (the names are random and O_EXCL now).
func TestOCIPlantedTempName(t *testing.T) {
	needRoot(t)
	top := t.TempDir()
	d := filepath.Join(top, "layout")
	writeLayout(t, d, newImg("old"), "old")
	victim := filepath.Join(top, "victim")
	must(t, os.WriteFile(victim, []byte("precious"), 0o600))
	must(t, os.Symlink(victim, filepath.Join(d, ".index.json.pullhelper-tmp")))
	must(t, fullPull(t, "oci:"+d+":a", newImg("a"), dest.StageOptions{Locks: testLocks}))
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Fatalf("root wrote through the planted temporary name: %q", b)
	}
	if idx := readIndex(t, d); idx["a"] == "" || idx["old"] == "" {
		t.Fatalf("index = %v", idx)
	}
}

func TestDestOwnedByAnotherUser(t *testing.T) {
	needRoot(t)
	for _, raw := range []string{"oci:%s", "dir:%s", "oci-archive:%s", "docker-archive:%s"} {
		d := filepath.Join(t.TempDir(), "d")
		if strings.HasPrefix(raw, "oci:") || strings.HasPrefix(raw, "dir:") {
			must(t, os.Mkdir(d, 0o755))
		} else {
			must(t, os.WriteFile(d, nil, 0o644))
		}
		must(t, os.Chown(d, 1000, 1000))
		_, err := parse(t, strings.Replace(raw, "%s", d, 1)).Stage(dest.StageOptions{Locks: testLocks})
		wantCode(t, err, failure.Destination, "owned by uid 1000")
		if failure.CodeOf(err).Exit() != 9 {
			t.Fatal("not exit 9")
		}
	}
	// The parent owned by another user, and a parent anyone can write.
	p := filepath.Join(t.TempDir(), "p")
	must(t, os.Mkdir(p, 0o755))
	must(t, os.Chown(p, 1000, 1000))
	_, err := parse(t, "oci:"+p+"/d").Stage(dest.StageOptions{Locks: testLocks})
	wantCode(t, err, failure.Destination, "owned by uid 1000")
	w := filepath.Join(t.TempDir(), "w")
	must(t, os.Mkdir(w, 0o777))
	must(t, os.Chmod(w, 0o777))
	_, err = parse(t, "oci:"+w+"/d").Stage(dest.StageOptions{Locks: testLocks})
	wantCode(t, err, failure.Destination, "not sticky")
	must(t, os.Chmod(w, os.ModeSticky|0o777))
	must(t, fullPull(t, "oci:"+w+"/d", newImg("a"), dest.StageOptions{Locks: testLocks}))
}

func TestParse(t *testing.T) {
	for raw, want := range map[string]string{
		"foo:/x":                  `unknown transport "foo"; use one of oci:PATH[:TAG], dir:PATH, oci-archive:PATH[:TAG], docker-archive:PATH[:REF], containers-storage:[DRIVER@GRAPHROOT+RUNROOT]REF, containerd:REF`,
		"oci:":                    "the path is empty",
		"docker-archive:/x:a@sha": "docker-archive reference",
		"oci:/x:BAD TAG":          "",
	} {
		_, err := dest.Parse(raw)
		if err == nil || failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want a usage error with %q", raw, err, want)
		}
	}
	// Every kind of target's table is one dest parses.
	for _, k := range target.Kinds() {
		if _, err := dest.Parse(k.Name + ":/x"); err != nil && strings.Contains(err.Error(), "unknown transport") {
			t.Errorf("%s: %v", k.Name, err)
		}
	}
	d, err := dest.Parse("dir:rel:x")
	must(t, err)
	if !filepath.IsAbs(d.Spec().Path) || !strings.HasSuffix(d.Spec().Path, "rel:x") || d.String() != "dir:"+d.Spec().Path {
		t.Fatalf("spec %+v %s", d.Spec(), d)
	}
	d, err = dest.Parse("oci:/x:tag")
	must(t, err)
	if d.Spec().Ref != "tag" || d.String() != "oci:/x:tag" {
		t.Fatalf("spec %+v", d.Spec())
	}
}

// DEST removed between Stage and Commit: the held fd is a deleted
// directory, and committing into it would report success for nothing.
func TestOCIDestRemovedDuringPull(t *testing.T) {
	needRoot(t)
	d := filepath.Join(t.TempDir(), "layout")
	writeLayout(t, d, newImg("old"), "old")
	dd := parse(t, "oci:"+d+":a")
	st, err := dd.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	defer st.Remove()
	e := pull(t, dd, st, source(t, newImg("a")), nil)
	must(t, dd.Verify(bg, st, e))
	must(t, os.Rename(d, d+".moved"))
	must(t, os.Mkdir(d, 0o755))
	wantCode(t, dd.Commit(bg, st), failure.Destination, "removed or replaced during the pull")
}

// The committed index.json entry is the parent's own: a staged entry that
// says one thing to Go (keys match case-insensitively, the last wins) and
// another to exact readers never reaches DEST, nor a negative size.
func TestCommitWritesItsOwnIndexEntry(t *testing.T) {
	needRoot(t)
	old, good := newImg("old-prod"), newImg("good")
	d := filepath.Join(t.TempDir(), "layout")
	writeLayout(t, d, old, "prod")
	dd := parse(t, "oci:"+d+":a")
	st, err := dd.Stage(dest.StageOptions{Locks: testLocks, HandTo: &dest.Identity{UID: 65534, GID: 65534}})
	must(t, err)
	defer st.Remove()
	e := pull(t, dd, st, source(t, good), nil)
	p := filepath.Join(st.WorkPath, "image", "index.json")
	must(t, os.WriteFile(p, fmt.Appendf(nil,
		`{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":%q,"size":%d,`+
			`"annotations":{"org.opencontainers.image.ref.name":"prod"},"DIGEST":%q,"Annotations":{"org.opencontainers.image.ref.name":"a"}}]}`,
		old.digest, len(old.manifest), good.digest), 0o644))
	must(t, dd.Verify(bg, st, e))
	must(t, dd.Commit(bg, st))
	b, err := os.ReadFile(filepath.Join(d, "index.json"))
	must(t, err)
	// Read it the exact way (no case folding): exactly prod→old, a→good.
	var idx struct {
		Manifests []map[string]json.RawMessage `json:"manifests"`
	}
	must(t, json.Unmarshal(b, &idx))
	tags := map[string]string{}
	for _, m := range idx.Manifests {
		for k := range m {
			if k != "mediaType" && k != "digest" && k != "size" && k != "annotations" {
				t.Fatalf("committed entry has key %q: %s", k, b)
			}
		}
		var ann map[string]string
		var dg string
		must(t, json.Unmarshal(m["annotations"], &ann))
		must(t, json.Unmarshal(m["digest"], &dg))
		tags[ann["org.opencontainers.image.ref.name"]] = dg
	}
	if len(tags) != 2 || tags["prod"] != old.digest || tags["a"] != good.digest {
		t.Fatalf("committed tags %v, want prod=%s a=%s: %s", tags, old.digest, good.digest, b)
	}
	if strings.Contains(string(b), "DIGEST") {
		t.Fatalf("the child's bytes were committed: %s", b)
	}
}

// An existing layout whose index.json does not parse is refused at Stage,
// before anything is fetched; one that stops parsing during the pull is
// refused at the commit with no blob moved into DEST.
func TestOCIIndexThatDoesNotParse(t *testing.T) {
	needRoot(t)
	d := filepath.Join(t.TempDir(), "layout")
	writeLayout(t, d, newImg("old"), "old")
	good, err := os.ReadFile(filepath.Join(d, "index.json"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(d, "index.json"), []byte(`{"manifests": [`), 0o644))
	dd := parse(t, "oci:"+d+":a")
	_, err = dd.Stage(dest.StageOptions{Locks: testLocks})
	wantCode(t, err, failure.Destination, "index.json does not parse")

	must(t, os.WriteFile(filepath.Join(d, "index.json"), good, 0o644))
	st, err := dd.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	defer st.Remove()
	img := newImg("a")
	e := pull(t, dd, st, source(t, img), nil)
	must(t, dd.Verify(bg, st, e))
	must(t, os.WriteFile(filepath.Join(d, "index.json"), []byte(`{"manifests": [`), 0o644))
	wantCode(t, dd.Commit(bg, st), failure.Destination, "index.json does not parse")
	if _, err := os.Stat(filepath.Join(d, "blobs", "sha256", sha(img.layer)[7:])); !os.IsNotExist(err) {
		t.Fatalf("a blob was moved into DEST before the index was refused: %v", err)
	}
}
