package dest_test

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/internal/failure"
)

func tarNames(t *testing.T, p string) []string {
	f, err := os.Open(p)
	must(t, err)
	defer f.Close()
	var out []string
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		must(t, err)
		out = append(out, h.Name)
	}
}

func TestArchives(t *testing.T) {
	needRoot(t)
	for _, tr := range []string{"oci-archive", "docker-archive"} {
		for _, fresh := range []bool{false, true} {
			t.Run(tr, func(t *testing.T) {
				p := filepath.Join(t.TempDir(), "img.tar")
				ref := ":a"
				if tr == "docker-archive" {
					ref = ":example.com/a:1"
				}
				must(t, fullPull(t, tr+":"+p+ref, newImg("a"), dest.StageOptions{Locks: testLocks, FreshCopy: fresh, HandTo: &dest.Identity{UID: 65534, GID: 65534}}))
				names := strings.Join(tarNames(t, p), " ")
				if !strings.Contains(names, "manifest.json") && !strings.Contains(names, "index.json") {
					t.Fatalf("archive members: %s", names)
				}
				fi, err := os.Stat(p)
				must(t, err)
				if statOwner(fi) != 0 || fi.Mode().Perm() != 0o644 {
					t.Fatalf("archive owned by %d mode %v", statOwner(fi), fi.Mode())
				}
				// A second pull replaces the file.
				must(t, fullPull(t, tr+":"+p+ref, newImg("b"), dest.StageOptions{Locks: testLocks, FreshCopy: fresh}))
			})
		}
	}
}

func TestArchiveRefusesASymlinkedImage(t *testing.T) {
	needRoot(t)
	for _, tr := range []string{"oci-archive", "docker-archive"} {
		p := filepath.Join(t.TempDir(), "img.tar")
		dd := parse(t, tr+":"+p)
		st, err := dd.Stage(dest.StageOptions{Locks: testLocks, HandTo: &dest.Identity{UID: 65534, GID: 65534}})
		must(t, err)
		defer st.Remove()
		e := pull(t, dd, st, source(t, newImg("a")), nil)
		victim := filepath.Join(t.TempDir(), "victim")
		must(t, os.WriteFile(victim, []byte("secret"), 0o600))
		tarp := filepath.Join(st.WorkPath, "image.tar")
		must(t, os.Remove(tarp))
		must(t, os.Symlink(victim, tarp))
		wantCode(t, dd.Verify(bg, st, e), failure.Verification, "not a regular file")
		fi, _ := os.Stat(victim)
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("victim mode changed to %v", fi.Mode())
		}
	}
}

func TestDockerArchiveNeedsTheStoredManifest(t *testing.T) {
	needRoot(t)
	p := filepath.Join(t.TempDir(), "img.tar")
	dd := parse(t, "docker-archive:"+p)
	st, err := dd.Stage(dest.StageOptions{Locks: testLocks})
	must(t, err)
	defer st.Remove()
	e := pull(t, dd, st, source(t, newImg("a")), nil)
	other := newImg("other")
	e.Manifest, e.DestDigest = other.manifest, other.digest
	wantCode(t, dd.Verify(bg, st, e), failure.Verification, "manifest.json names")
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

// A config of more than 1 MiB (a big label, say; containers/image takes
// configs up to 4 MiB) lands in a docker-archive: its fields are copied
// into the top layer's legacy HEX/json, which was bounded at 1 MiB (exit 8).
func TestDockerArchiveBigConfig(t *testing.T) {
	needRoot(t)
	im := newImg("big")
	label := strings.Repeat("l", 3<<20)
	im.config = bytes.Replace(im.config, []byte(`"config":{}`), fmt.Appendf(nil, `"config":{"Labels":{"big":%q}}`, label), 1)
	im.manifest = fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":%q,"size":%d},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":%q,"size":%d}]}`,
		sha(im.config), len(im.config), sha(im.layer), len(im.layer))
	im.digest = sha(im.manifest)
	p := filepath.Join(t.TempDir(), "img.tar")
	must(t, fullPull(t, "docker-archive:"+p+":example.com/big:1", im, dest.StageOptions{Locks: testLocks}))
}

// writeTar writes a tar of the members (name, content) to p.
func writeTar(t *testing.T, p string, members [][2]string) {
	f, err := os.Create(p)
	must(t, err)
	tw := tar.NewWriter(f)
	for _, m := range members {
		must(t, tw.WriteHeader(&tar.Header{Name: m[0], Mode: 0o644, Size: int64(len(m[1])), Typeflag: tar.TypeReg}))
		_, err := tw.Write([]byte(m[1]))
		must(t, err)
	}
	must(t, tw.Close())
	must(t, f.Close())
}

// An existing file is replaced only when it is empty or its kind's
// archive, recognised within the bounds: an oci-layout past the first
// 4096 members is not looked for.
func TestArchiveRecognisesItsOwn(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	layout := [2]string{"./oci-layout", `{"imageLayoutVersion":"1.0.0"}`}
	var many [][2]string
	for i := 0; i < 4096; i++ {
		many = append(many, [2]string{fmt.Sprintf("blobs/x%d", i), ""})
	}
	for _, c := range []struct {
		name    string
		members [][2]string
		ok      bool
	}{
		{"layout", [][2]string{{"blobs/sha256/aa", "x"}, layout, {"index.json", "{}"}}, true},
		{"bad-layout", [][2]string{{"oci-layout", `{"other":1}`}}, false},
		{"docker", [][2]string{{"manifest.json", "[]"}}, false},
		{"late-layout", append(append([][2]string(nil), many...), layout), false},
	} {
		p := filepath.Join(dir, c.name+".tar")
		writeTar(t, p, c.members)
		st, err := parse(t, "oci-archive:"+p).Stage(dest.StageOptions{Locks: testLocks})
		if st != nil {
			st.Remove()
		}
		if c.ok != (err == nil) || err != nil && failure.CodeOf(err) != failure.Destination {
			t.Errorf("%s: Stage: %v", c.name, err)
		}
	}
	p := filepath.Join(dir, "docker.tar")
	st, err := parse(t, "docker-archive:"+p).Stage(dest.StageOptions{Locks: testLocks})
	if err != nil {
		t.Fatalf("docker-archive over its own: %v", err)
	}
	st.Remove()
	must(t, os.WriteFile(p, nil, 0o644))
	st, err = parse(t, "docker-archive:"+p).Stage(dest.StageOptions{Locks: testLocks})
	if err != nil {
		t.Fatalf("docker-archive over an empty file: %v", err)
	}
	st.Remove()
}
