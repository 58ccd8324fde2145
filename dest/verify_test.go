package dest_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/internal/failure"
)

// staged stages oci:DEST:a, lets the copy write image im into work (as the
// child would, handed to uid 65534) and returns what it reported.
func staged(t *testing.T, im img) (dest.Destination, *dest.Stage, dest.Expect, string) {
	t.Helper()
	d := filepath.Join(t.TempDir(), "layout")
	dd := parse(t, "oci:"+d+":a")
	st, err := dd.Stage(dest.StageOptions{Locks: testLocks, HandTo: &dest.Identity{UID: 65534, GID: 65534}})
	must(t, err)
	t.Cleanup(st.Remove)
	e := pull(t, dd, st, source(t, im), nil)
	return dd, st, e, d
}

func TestVerifyRefusesWhatTheChildPlanted(t *testing.T) {
	needRoot(t)
	im := newImg("x")
	blob := func(st *dest.Stage, b []byte) string {
		return filepath.Join(st.WorkPath, "image", "blobs", "sha256", sha(b)[7:])
	}
	for name, c := range map[string]struct {
		plant func(t *testing.T, st *dest.Stage, e *dest.Expect)
		want  string
	}{
		"work/image replaced by a symlink to a root-owned dir": {func(t *testing.T, st *dest.Stage, e *dest.Expect) {
			img := filepath.Join(st.WorkPath, "image")
			outside := filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(st.WorkPath))), "rootdir")
			must(t, os.Rename(img, outside))
			must(t, os.Chmod(outside, 0o700))
			must(t, os.Symlink(outside, img))
		}, "image is not a directory"},
		"a blob replaced by a symlink": {func(t *testing.T, st *dest.Stage, e *dest.Expect) {
			must(t, os.Remove(blob(st, im.layer)))
			must(t, os.Symlink("/etc/shadow", blob(st, im.layer)))
		}, "is a symbolic link"},
		"a hard link": {func(t *testing.T, st *dest.Stage, e *dest.Expect) {
			must(t, os.Link(blob(st, im.layer), filepath.Join(st.WorkPath, "image", "extra")))
		}, "hard links"},
		"a fifo": {func(t *testing.T, st *dest.Stage, e *dest.Expect) {
			must(t, mkfifo(filepath.Join(st.WorkPath, "image", "blobs", "sha256", strings.Repeat("b", 64))))
		}, "special file"},
		"an extra unreferenced file": {func(t *testing.T, st *dest.Stage, e *dest.Expect) {
			junk := []byte("junk")
			must(t, os.WriteFile(filepath.Join(st.WorkPath, "image", "blobs", "sha256", sha(junk)[7:]), junk, 0o644))
		}, "not named by the image's manifests"},
		"a blob with the wrong content": {func(t *testing.T, st *dest.Stage, e *dest.Expect) {
			must(t, os.WriteFile(blob(st, im.config), []byte(strings.Repeat("z", len(im.config))), 0o644))
		}, "digest mismatch"},
		"a wrong tag": {func(t *testing.T, st *dest.Stage, e *dest.Expect) {
			p := filepath.Join(st.WorkPath, "image", "index.json")
			b, _ := os.ReadFile(p)
			must(t, os.WriteFile(p, []byte(strings.Replace(string(b), `"a"`, `"other"`, 1)), 0o644))
		}, `tags the image "other", not the requested "a"`},
		"a second index entry": {func(t *testing.T, st *dest.Stage, e *dest.Expect) {
			p := filepath.Join(st.WorkPath, "image", "index.json")
			must(t, os.WriteFile(p, fmt.Appendf(nil, `{"schemaVersion":2,"manifests":[{"digest":%q,"size":%d,"annotations":{"org.opencontainers.image.ref.name":"a"}},{"digest":%q,"size":%d,"annotations":{"org.opencontainers.image.ref.name":"latest"}}]}`,
				im.digest, len(im.manifest), im.digest, len(im.manifest)), 0o644))
		}, "has 2 entries"},
		"a pinned digest mismatch": {func(t *testing.T, st *dest.Stage, e *dest.Expect) {
			e.Pinned = "sha256:" + strings.Repeat("1", 64)
		}, "pinned to"},
		"an instance not in the index": {func(t *testing.T, st *dest.Stage, e *dest.Expect) {
			e.IndexRaw = fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"digest":"sha256:%s","size":1}]}`, strings.Repeat("2", 64))
			e.Instance, e.Digest = e.Digest, sha(e.IndexRaw)
		}, "is not one of the manifests"},
		"a reported digest that is not sha256/sha512": {func(t *testing.T, st *dest.Stage, e *dest.Expect) {
			e.Digest = "sha384:" + strings.Repeat("3", 96)
		}, "not a sha256 or sha512 digest"},
		"an image over the size cap": {func(t *testing.T, st *dest.Stage, e *dest.Expect) {
			e.MaxBytes = int64(len(im.layer))
		}, "more than the"},
		"a nested index": {func(t *testing.T, st *dest.Stage, e *dest.Expect) {
			inner := fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":%q,"size":%d}]}`, im.digest, len(im.manifest))
			outer := fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.index.v1+json","digest":%q,"size":%d}]}`, sha(inner), len(inner))
			must(t, os.WriteFile(blob(st, inner), inner, 0o644))
			stageTop(t, st, mtOCIIndex, outer, "a")
			e.Digest, e.Served, e.AllArchitectures = sha(outer), outer, true
		}, "nested indexes are refused"},
	} {
		t.Run(name, func(t *testing.T) {
			dd, st, e, d := staged(t, im)
			c.plant(t, st, &e)
			err := dd.Verify(bg, st, e)
			wantCode(t, err, failure.Verification, c.want)
			if _, err := os.Lstat(d); !os.IsNotExist(err) {
				t.Fatalf("DEST was created: %v", err)
			}
		})
	}
}

// The child replaces its image with a symlink to a root-owned directory
// outside: the parent must not chown or chmod through it.
func TestTakeBackDoesNotChownThroughSymlink(t *testing.T) {
	needRoot(t)
	dd, st, e, _ := staged(t, newImg("x"))
	victim := filepath.Join(t.TempDir(), "victim")
	must(t, os.WriteFile(victim, []byte("s"), 0o4755))
	must(t, os.Chmod(victim, os.ModeSetuid|0o755))
	must(t, os.RemoveAll(filepath.Join(st.WorkPath, "image")))
	must(t, os.Symlink(filepath.Dir(victim), filepath.Join(st.WorkPath, "image")))
	wantCode(t, dd.Verify(bg, st, e), failure.Verification, "not a directory")
	fi, err := os.Stat(victim)
	must(t, err)
	if fi.Mode() != os.ModeSetuid|0o755 {
		t.Fatalf("victim mode changed to %v", fi.Mode())
	}
}

func TestVerifyAcceptsAndOwnsFiles(t *testing.T) {
	needRoot(t)
	dd, st, e, d := staged(t, newImg("x"))
	fi, err := os.Stat(st.WorkPath)
	must(t, err)
	if statOwner(fi) != 65534 || fi.Mode().Perm() != 0o700 {
		t.Fatalf("work was not handed to 65534 0700: %d %v", statOwner(fi), fi.Mode())
	}
	must(t, dd.Verify(bg, st, e))
	im := newImg("x")
	// The counts are the verified graph's: one manifest, one layer, two
	// blobs (config and layer) of their declared sizes.
	if want := (dest.Counts{Manifests: 1, Layers: 1, Blobs: 2, Bytes: int64(len(im.config) + len(im.layer))}); st.Counts != want {
		t.Errorf("counts %+v, want %+v", st.Counts, want)
	}
	must(t, dd.Commit(bg, st))
	err = filepath.Walk(d, func(p string, fi os.FileInfo, err error) error {
		must(t, err)
		if want := os.FileMode(0o644); fi.Mode().IsRegular() && fi.Mode().Perm() != want {
			t.Errorf("%s mode %v", p, fi.Mode())
		}
		if fi.IsDir() && fi.Mode().Perm() != 0o755 {
			t.Errorf("%s mode %v", p, fi.Mode())
		}
		if st := statOwner(fi); st != 0 {
			t.Errorf("%s owned by %d", p, st)
		}
		return nil
	})
	must(t, err)
}

// Every accepted shape: a single manifest, an instance chosen from an index
// the parent resolved, and a whole index (all architectures).
func TestVerifyAcceptsIndexShapes(t *testing.T) {
	needRoot(t)
	im := newImg("x")
	index := fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":%q,"size":%d,"platform":{"architecture":"amd64","os":"linux"}}]}`, im.digest, len(im.manifest))
	t.Run("instance of a resolved index", func(t *testing.T) {
		dd, st, e, d := staged(t, im)
		e.IndexRaw, e.Instance, e.Digest, e.Pinned = index, im.digest, sha(index), sha(index)
		must(t, dd.Verify(bg, st, e))
		must(t, dd.Commit(bg, st))
		if readIndex(t, d)["a"] != im.digest {
			t.Fatal("the instance is not tagged a")
		}
	})
	// An index naming one manifest three times: it is loaded and hashed
	// once (the counts are distinct manifests).
	t.Run("whole index naming one manifest thrice", func(t *testing.T) {
		dd, st, e, _ := staged(t, im)
		entry := fmt.Sprintf(`{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":%q,"size":%d}`, im.digest, len(im.manifest))
		thrice := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[` + entry + "," + entry + "," + entry + `]}`)
		stageTop(t, st, mtOCIIndex, thrice, "a")
		e.Digest, e.IndexRaw, e.Served, e.AllArchitectures = sha(thrice), thrice, thrice, true
		must(t, dd.Verify(bg, st, e))
		if want := (dest.Counts{Manifests: 2, Layers: 1, Blobs: 2, Bytes: int64(len(im.config) + len(im.layer))}); st.Counts != want {
			t.Errorf("counts %+v, want %+v", st.Counts, want)
		}
	})
	t.Run("whole index", func(t *testing.T) {
		dd, st, e, d := staged(t, im)
		stageTop(t, st, mtOCIIndex, index, "a")
		e.Digest, e.IndexRaw, e.Served, e.AllArchitectures = sha(index), index, index, true
		must(t, dd.Verify(bg, st, e))
		if want := (dest.Counts{Manifests: 2, Layers: 1, Blobs: 2, Bytes: int64(len(im.config) + len(im.layer))}); st.Counts != want {
			t.Errorf("counts %+v, want %+v", st.Counts, want)
		}
		must(t, dd.Commit(bg, st))
		if readIndex(t, d)["a"] != sha(index) {
			t.Fatal("the index is not tagged a")
		}
	})
}

// A blob the copy skipped because DEST had it must still be in DEST when
// the tag is moved to the new image.
func TestOCIKnownBlobRemovedBeforeCommit(t *testing.T) {
	needRoot(t)
	d := filepath.Join(t.TempDir(), "layout")
	im := newImg("shared")
	must(t, fullPull(t, "oci:"+d+":a", im, dest.StageOptions{Locks: testLocks}))
	dd := parse(t, "oci:"+d+":b")
	st, err := dd.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	defer st.Remove()
	e := pull(t, dd, st, source(t, im), nil)
	must(t, dd.Verify(bg, st, e))
	must(t, os.Remove(filepath.Join(d, "blobs", "sha256", sha(im.layer)[7:])))
	wantCode(t, dd.Commit(bg, st), failure.Destination, "is gone or changed")
	if _, ok := readIndex(t, d)["b"]; ok {
		t.Fatal("the tag was moved to an image whose layer is missing")
	}
}

// A layer with foreign "urls" (issue 22 item 8) is refused, naming it: the
// parent never fetches, and commits nothing that would lead a later reader
// to. The child rewrote the staged manifest and reported it as served.
func TestVerifyRefusesForeignURLs(t *testing.T) {
	needRoot(t)
	im := newImg("urls")
	dd, st, e, _ := staged(t, im)
	var doc map[string]any
	must(t, json.Unmarshal(im.manifest, &doc))
	doc["layers"].([]any)[0].(map[string]any)["urls"] = []string{"http://192.0.2.1/layer"}
	nb, err := json.Marshal(doc)
	must(t, err)
	bl := filepath.Join(st.WorkPath, "image", "blobs", "sha256")
	must(t, os.Remove(filepath.Join(bl, im.digest[7:])))
	must(t, os.WriteFile(filepath.Join(bl, sha(nb)[7:]), nb, 0o644))
	must(t, os.WriteFile(filepath.Join(st.WorkPath, "image", "index.json"), fmt.Appendf(nil,
		`{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":%q,"size":%d,"annotations":{"org.opencontainers.image.ref.name":"a"}}]}`, sha(nb), len(nb)), 0o644))
	e.Digest, e.Served, e.Manifest = sha(nb), nb, nb
	err = dd.Verify(bg, st, e)
	wantCode(t, err, failure.Verification, sha(im.layer))
	wantCode(t, err, failure.Verification, "foreign urls")
}

// A compromised child pulls IMAGE@GOOD, stages EVIL and reports EVIL as the
// converted manifest (DestDigest) or as an instance of GOOD without the
// index: nothing ties EVIL to GOOD, so the parent must refuse it.
func TestVerifyTiesTheStoredImageToThePinnedOne(t *testing.T) {
	needRoot(t)
	good, evil := newImg("good"), newImg("evil")
	for name, lie := range map[string]func(*dest.Expect){
		"a converted manifest that is another image": func(e *dest.Expect) { e.DestDigest = evil.digest },
		"an instance without its index":              func(e *dest.Expect) { e.Instance = evil.digest },
		"an instance with the evil manifest as served": func(e *dest.Expect) {
			e.Instance, e.Served = evil.digest, evil.manifest
		},
	} {
		t.Run(name, func(t *testing.T) {
			d := filepath.Join(t.TempDir(), "layout")
			dd := parse(t, "oci:"+d+":a")
			st, err := dd.Stage(dest.StageOptions{Locks: testLocks, HandTo: &dest.Identity{UID: 65534, GID: 65534}})
			must(t, err)
			defer st.Remove()
			_ = pull(t, dd, st, source(t, evil), nil) // what the child staged
			e := dest.Expect{Digest: good.digest, Pinned: good.digest, Served: good.manifest}
			lie(&e)
			err = dd.Verify(bg, st, e)
			if err == nil || failure.CodeOf(err) != failure.Verification {
				t.Fatalf("Verify = %v, want a verification error", err)
			}
			if _, err := os.Stat(d); err == nil {
				t.Fatal("DEST exists")
			}
		})
	}
}
