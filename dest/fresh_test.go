package dest_test

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/pullhelper/pullhelper/dest"
)

// With a shared uid another process of it may hold a writable fd on a
// staged blob: FreshCopy commits a new root-created inode, so writes
// through that fd never reach DEST. Without FreshCopy the same holds for
// the one inode a descriptor is open on (no write lease: issue 22, a file
// kept or planted in the cache), while the others are committed in place.
func TestFreshCopyCommitsNewInodes(t *testing.T) {
	needRoot(t)
	for _, fresh := range []bool{false, true} {
		im := newImg("fresh")
		d := filepath.Join(t.TempDir(), "layout")
		dd := parse(t, "oci:"+d)
		st, err := dd.Stage(dest.StageOptions{Locks: testLocks, HandTo: &dest.Identity{UID: 65534, GID: 65534}, FreshCopy: fresh})
		must(t, err)
		defer st.Remove()
		e := pull(t, dd, st, source(t, im), nil)
		staged := filepath.Join(st.WorkPath, "image", "blobs", "sha256", sha(im.layer)[7:])
		before := inode(staged)
		stagedManifest := filepath.Join(st.WorkPath, "image", "blobs", "sha256", im.digest[7:])
		beforeManifest := inode(stagedManifest)
		w, err := os.OpenFile(staged, os.O_WRONLY, 0)
		must(t, err)
		defer w.Close()
		must(t, dd.Verify(bg, st, e))
		must(t, dd.Commit(bg, st))
		committed := filepath.Join(d, "blobs", "sha256", sha(im.layer)[7:])
		_, _ = w.WriteAt(bytes.Repeat([]byte("X"), 16), 0)
		got, err := os.ReadFile(committed)
		must(t, err)
		if inode(committed) == before || !bytes.Equal(got, im.layer) {
			t.Fatalf("fresh=%v: the inode a writable fd is open on was committed (same inode %v, content intact %v)", fresh, inode(committed) == before, bytes.Equal(got, im.layer))
		}
		sameM := inode(filepath.Join(d, "blobs", "sha256", im.digest[7:])) == beforeManifest
		if sameM == fresh {
			t.Fatalf("fresh=%v: the manifest's inode (no descriptor open on it) kept=%v", fresh, sameM)
		}
	}
}

// BenchmarkVerify measures take-back + verification of a 64 MiB layer:
// hashing in place versus a fresh root-owned copy hashed while copying.
func BenchmarkVerify(b *testing.B) {
	needRoot(b)
	for _, fresh := range []bool{false, true} {
		name := "hash"
		if fresh {
			name = "fresh-copy"
		}
		b.Run(name, func(b *testing.B) {
			big := make([]byte, 64<<20)
			_, _ = rand.Read(big)
			cfg := []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]},"config":{}}`)
			m := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"` + sha(cfg) + `","size":` + strconv.Itoa(len(cfg)) + `},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"` + sha(big) + `","size":` + strconv.Itoa(len(big)) + `}]}`)
			im := img{layer: big, config: cfg, manifest: m, digest: sha(m)}
			b.SetBytes(int64(len(big)))
			for b.Loop() {
				b.StopTimer()
				dd := parse(b, "oci:"+filepath.Join(b.TempDir(), "layout"))
				st, err := dd.Stage(dest.StageOptions{Locks: testLocks, FreshCopy: fresh})
				must(b, err)
				writeLayout(b, filepath.Join(st.WorkPath, "image"), im, "")
				b.StartTimer()
				must(b, dd.Verify(bg, st, dest.Expect{Digest: im.digest, Served: im.manifest}))
				b.StopTimer()
				st.Remove()
				b.StartTimer()
			}
		})
	}
}
