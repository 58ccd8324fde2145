package dest

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"hash"
	"io"
	"os"
	"path"
	"runtime"
	"sort"
	"sync"

	"github.com/pullhelper/pullhelper/dest/target"
	"github.com/pullhelper/pullhelper/internal/safefs"
	"golang.org/x/sys/unix"
)

// entry is one file of a taken-back tree.
type entry struct {
	size int64
	ino  uint64
	used bool   // named by the verified graph: committed
	sum  string // hex digest once hashed
	alg  string
	// fresh: another descriptor was open on the inode when it was taken
	// back (no write lease): it is never committed itself, only a fresh
	// root-created copy, hashed while copying.
	fresh bool
}

// tree is a staged directory the parent has taken back: every directory is
// held open (root- or owner-owned 0755, so nobody else can change its
// entries), every file was a regular file with one link.
type tree struct {
	dirs  map[string]int // "" is the image directory itself
	files map[string]*entry
	owner Identity
	fresh bool
	// presums are digests computed ahead (Prehash), by inode.
	presums Presums
	// storeChecks: the store checks the layers' digests (Stage.storeChecks).
	storeChecks bool
	// noSync: no staged file or directory is synced (Stage.NoSync).
	noSync bool
}

// sync fsyncs f, unless the tree is noSync.
func (t *tree) sync(f *os.File) error {
	if t.noSync {
		return nil
	}
	return syncFile(f)
}

// syncFile is (*os.File).Sync and syncDir unix.Fsync; the tests count
// the calls.
var (
	syncFile = (*os.File).Sync
	syncDir  = unix.Fsync
)

func (t *tree) close() {
	for _, fd := range t.dirs {
		unix.Close(fd)
	}
	t.dirs = nil
}

func hasher(alg string) hash.Hash {
	switch alg {
	case "sha256":
		return sha256.New()
	case "sha512":
		return sha512.New()
	}
	return nil
}

// open opens a staged file and checks it is the inode taken back; one to
// be committed itself must still be held by no other descriptor (a write
// lease, taken and let go, as takeBack took it): if it is, only a fresh
// copy is committed (and what was hashed ahead of it is forgotten).
func (t *tree) open(rel string) (*os.File, *entry, error) {
	e, ok := t.files[rel]
	if !ok {
		return nil, nil, badStaged("%s is missing", rel)
	}
	dfd, ok := t.dirs[dirOf(rel)]
	if !ok {
		return nil, nil, badStaged("%s is missing", rel)
	}
	// O_NONBLOCK: a FIFO swapped in under the name (its inode number may
	// be the freed one) fails the checks below instead of blocking the
	// open.
	f, err := safefs.FileAt(dfd, path.Base(rel), unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, badStaged("%s: %v", rel, safefs.ErrnoText(err))
	}
	if st, err := safefs.Fstat(int(f.Fd())); err != nil || st.Ino != e.ino || !safefs.IsReg(st) {
		f.Close()
		return nil, nil, badStaged("%s changed after it was taken back", rel)
	}
	if !e.fresh && !alone(int(f.Fd())) {
		e.fresh, e.sum, e.alg = true, "", ""
	}
	return f, e, nil
}

func dirOf(rel string) string {
	d := path.Dir(rel)
	if d == "." {
		return ""
	}
	return d
}

// has reports whether a file is staged, and its size.
func (t *tree) has(rel string) (int64, bool) {
	e, ok := t.files[rel]
	if !ok {
		return 0, false
	}
	return e.size, true
}

// load reads a staged file (at most max bytes) and marks it committed;
// with fresh, the committed file is a new root-created inode holding
// exactly the bytes returned.
func (t *tree) load(rel string, max int64) ([]byte, error) {
	f, e, err := t.open(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if e.size > max {
		return nil, badStaged("%s is %d bytes, more than the %d allowed", rel, e.size, max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != e.size {
		return nil, badStaged("%s changed size after it was taken back", rel)
	}
	if err := t.commitContent(rel, e, f, b); err != nil {
		return nil, err
	}
	return b, nil
}

// sum hashes a staged file with alg, marks it committed and returns the hex
// digest. With fresh, the hash is computed while copying into the new
// inode, so the digest is the committed bytes' digest.
func (t *tree) sum(rel, alg string) (string, error) {
	f, e, err := t.open(rel)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if e.sum != "" && e.alg == alg && !e.fresh {
		e.used = true
		return e.sum, nil
	}
	h := hasher(alg)
	if h == nil {
		return "", badStaged("%s: unsupported digest algorithm %q", rel, alg)
	}
	if e.fresh {
		n, err := t.freshCopy(rel, f, h)
		if err != nil {
			return "", err
		}
		if n != e.size {
			return "", badStaged("%s changed size after it was taken back", rel)
		}
	} else {
		n, err := io.Copy(h, f)
		if err != nil {
			return "", err
		}
		if n != e.size {
			return "", badStaged("%s changed size after it was taken back", rel)
		}
		if err := t.sync(f); err != nil {
			return "", err
		}
	}
	e.used, e.sum, e.alg = true, hex.EncodeToString(h.Sum(nil)), alg
	return e.sum, nil
}

// claim leaves a staged layer's digest to the store, which checks it as
// it ingests the file (Stage.storeChecks), and marks it committed; false
// where the store does not, or for a fresh copy (hashed while copying).
func (t *tree) claim(rel string) bool {
	e, ok := t.files[rel]
	if !ok || !t.storeChecks || e.fresh {
		return false
	}
	e.used = true
	return true
}

// presumMin is the smallest file presum hashes ahead (small ones are not
// worth a goroutine).
const presumMin = 1 << 20

// presum hashes (and fsyncs, unless noSync) the staged blobs of at least
// presumMin bytes in parallel, one worker per CPU, before the graph is
// walked: the walk's sum then finds each digest computed. Only names that
// are a digest's hex (64: sha256, 128: sha512; what an OCI layout and dir:
// name blobs) are hashed; a failure is left for sum to report. With fresh
// copies (a shared pull uid) nothing is done: sum copies while it hashes.
func (t *tree) presum(maxBytes int64) {
	if t.fresh || t.storeChecks {
		return
	}
	budget := maxBytes
	if budget <= 0 {
		budget = 1 << 62
	}
	type job struct {
		rel string
		alg string
	}
	var jobs []job
	for rel, e := range t.files {
		if e.size < presumMin || e.sum != "" || e.size > budget || e.fresh {
			continue
		}
		switch base := path.Base(rel); {
		case target.IsHex("sha256", base):
			jobs = append(jobs, job{rel, "sha256"})
			budget -= e.size
		case target.IsHex("sha512", base):
			jobs = append(jobs, job{rel, "sha512"})
			budget -= e.size
		}
	}
	if len(jobs) < 2 {
		return // nothing to do in parallel
	}
	work := make(chan job)
	var wg sync.WaitGroup
	for w := 0; w < min(runtime.GOMAXPROCS(0), len(jobs)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				f, e, err := t.open(j.rel)
				if err != nil {
					continue
				}
				h := hasher(j.alg)
				n, err := io.Copy(h, f)
				if err == nil && n == e.size && !e.fresh && t.sync(f) == nil {
					// Each worker writes only its own entry.
					e.sum, e.alg = hex.EncodeToString(h.Sum(nil)), j.alg
				}
				f.Close()
			}
		}()
	}
	for _, j := range jobs {
		work <- j
	}
	close(work)
	wg.Wait()
}

func (t *tree) commitContent(rel string, e *entry, f *os.File, b []byte) error {
	e.used = true
	if !e.fresh {
		return t.sync(f)
	}
	_, err := t.freshCopy(rel, newBytesReader(b), nil)
	return err
}

// freshCopy replaces rel by a new root-created file with the content of r
// (an O_EXCL random temporary name in the same root-owned directory, then
// renameat over rel), hashing what it writes into h.
func (t *tree) freshCopy(rel string, r io.Reader, h hash.Hash) (int64, error) {
	dfd := t.dirs[dirOf(rel)]
	out, tmp, err := safefs.CreateTemp(dfd, ".fresh-")
	if err != nil {
		return 0, err
	}
	ok := false
	defer func() {
		out.Close()
		if !ok {
			_ = unix.Unlinkat(dfd, tmp, 0)
		}
	}()
	w := io.Writer(out)
	if h != nil {
		w = io.MultiWriter(out, h)
	}
	// At most one byte more than was taken back (another process of a
	// shared uid may still be appending): the caller checks the size.
	limit := int64(1 << 62)
	if e, ok := t.files[rel]; ok {
		limit = e.size + 1
	}
	n, err := io.CopyBuffer(w, io.LimitReader(r, limit), make([]byte, 1<<20))
	if err != nil {
		return n, err
	}
	if err := safefs.SetOwner(int(out.Fd()), t.owner, 0o644); err != nil {
		return n, err
	}
	if err := t.sync(out); err != nil {
		return n, err
	}
	st, err := safefs.Fstat(int(out.Fd()))
	if err != nil {
		return n, err
	}
	if err := unix.Renameat(dfd, tmp, dfd, path.Base(rel)); err != nil {
		return n, err
	}
	ok = true
	t.files[rel].ino = st.Ino
	return n, nil
}

// unused returns the staged files the graph did not name.
func (t *tree) unused() []string {
	var out []string
	for r, e := range t.files {
		if !e.used {
			out = append(out, r)
		}
	}
	sort.Strings(out)
	return out
}

// drop removes a staged file (never committed).
func (t *tree) drop(rel string) error {
	delete(t.files, rel)
	return unix.Unlinkat(t.dirs[dirOf(rel)], path.Base(rel), 0)
}

// syncDirs fsyncs every staged directory (before the final rename),
// unless the tree is noSync (nothing of it is renamed into DEST).
func (t *tree) syncDirs() error {
	if t.noSync {
		return nil
	}
	for _, fd := range t.dirs {
		if err := syncDir(fd); err != nil {
			return err
		}
	}
	return nil
}

type bytesReader struct {
	b []byte
}

func newBytesReader(b []byte) *bytesReader { return &bytesReader{b: b} }

func (r *bytesReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}
