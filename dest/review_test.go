package dest_test

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/internal/failure"
	"golang.org/x/sys/unix"
)

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

// DEST's path is resolved from / one component at a time: an ancestor of
// another user, or a symlink another user planted, is refused; root's own
// symlinks are followed.
func TestStageChecksEveryAncestor(t *testing.T) {
	needRoot(t)
	base := t.TempDir()
	victim := filepath.Join(base, "victim")
	must(t, os.Mkdir(victim, 0o755))
	// 1. An ancestor owned by another user, DEST's parent root's.
	must(t, os.MkdirAll(filepath.Join(base, "anc", "images"), 0o755))
	must(t, os.Chown(filepath.Join(base, "anc"), 65534, 65534))
	_, err := parse(t, "oci-archive:"+filepath.Join(base, "anc", "images", "app.tar")).Stage(dest.StageOptions{Locks: testLocks})
	wantCode(t, err, failure.Destination, "ancestor")
	// 2. A symlink owned by another user on the way.
	must(t, os.Mkdir(filepath.Join(base, "r"), 0o755))
	must(t, os.Symlink(victim, filepath.Join(base, "r", "link")))
	must(t, os.Lchown(filepath.Join(base, "r", "link"), 65534, 65534))
	_, err = parse(t, "oci-archive:"+filepath.Join(base, "r", "link", "app.tar")).Stage(dest.StageOptions{Locks: testLocks})
	wantCode(t, err, failure.Destination, "symbolic link owned by uid 65534")
	// 3. Root's symlink is followed (as /var/run → /run is).
	must(t, os.Symlink(victim, filepath.Join(base, "r", "rootlink")))
	st, err := parse(t, "oci-archive:"+filepath.Join(base, "r", "rootlink", "app.tar")).Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	st.Remove()
	entries, err := os.ReadDir(victim)
	must(t, err)
	if len(entries) != 0 {
		t.Fatalf("staging left in %s: %v", victim, entries)
	}
}

// Another user holding an flock on DEST (any user can open a directory and
// lock it) does not hold up a commit: the commit lock is a root-only file.
func TestCommitIgnoresAnotherUsersFlock(t *testing.T) {
	needRoot(t)
	old, im := newImg("old"), newImg("new")
	d := filepath.Join(t.TempDir(), "layout")
	writeLayout(t, d, old, "prod")
	f, err := os.Open(d)
	must(t, err)
	defer f.Close()
	must(t, unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB))
	dd := parse(t, "oci:"+d+":a")
	st, err := dd.Stage(dest.StageOptions{Locks: testLocks, HandTo: &dest.Identity{UID: 65534, GID: 65534}})
	must(t, err)
	defer st.Remove()
	e := pull(t, dd, st, source(t, im), nil)
	must(t, dd.Verify(bg, st, e))
	must(t, dd.Commit(bg, st))
	if got := readIndex(t, d); got["a"] != im.digest || got["prod"] != old.digest {
		t.Fatalf("index after commit: %v", got)
	}
	var sd unix.Stat_t
	must(t, unix.Stat(d, &sd))
	if _, err := os.Stat(filepath.Join(testLocks, fmt.Sprintf("%d-%d.lock", sd.Dev, sd.Ino))); !os.IsNotExist(err) {
		t.Errorf("the commit lock file of %s is left (%v)", d, err)
	}
}

// A staging tree deeper than the descriptor limit (a child can build one)
// is still removed: removal holds one directory fd at a time.
func TestRemoveDeepTree(t *testing.T) {
	needRoot(t)
	dd := parse(t, "oci:"+filepath.Join(t.TempDir(), "layout"))
	st, err := dd.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	// 400 levels below work/, built relative to fds (paths would grow
	// past PATH_MAX).
	fd, err := unix.Dup(int(st.Work.Fd()))
	must(t, err)
	for range 400 {
		must(t, unix.Mkdirat(fd, "d", 0o755))
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		must(t, err)
		unix.Close(fd)
		fd = next
	}
	unix.Close(fd)
	var lim unix.Rlimit
	must(t, unix.Getrlimit(unix.RLIMIT_NOFILE, &lim))
	low := lim
	low.Cur = 128 // far fewer than the tree's depth
	must(t, unix.Setrlimit(unix.RLIMIT_NOFILE, &low))
	st.Remove()
	must(t, unix.Setrlimit(unix.RLIMIT_NOFILE, &lim))
	left, err := filepath.Glob(filepath.Join(filepath.Dir(dd.Spec().Path), ".pullhelper-staging-*"))
	must(t, err)
	if len(left) != 0 {
		t.Fatalf("staging left after Remove: %v", left)
	}
}

// A docker-archive's legacy members carry no image content: a layer.tar
// symlink pointing anywhere but a verified layer is refused.
func TestDockerArchiveLegacyMembersAreBounded(t *testing.T) {
	needRoot(t)
	p := filepath.Join(t.TempDir(), "img.tar")
	dd := parse(t, "docker-archive:"+p)
	st, err := dd.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	defer st.Remove()
	e := pull(t, dd, st, source(t, newImg("a")), nil)
	staged := filepath.Join(st.WorkPath, st.Name)
	in, err := os.ReadFile(staged)
	must(t, err)
	var out bytes.Buffer
	tr, tw := tar.NewReader(bytes.NewReader(in)), tar.NewWriter(&out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		must(t, err)
		must(t, tw.WriteHeader(h))
		_, err = io.Copy(tw, tr)
		must(t, err)
	}
	must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: strings.Repeat("e", 64) + "/layer.tar", Linkname: "/etc/shadow", Mode: 0o777}))
	must(t, tw.Close())
	must(t, os.WriteFile(staged, out.Bytes(), 0o644))
	wantCode(t, dd.Verify(bg, st, e), failure.Verification, "not to a verified layer")
}
