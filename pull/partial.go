package pull

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/dest/target"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/registry"
	"go.podman.io/image/v5/types"
	"golang.org/x/sys/unix"
)

// Resume across restarts.
//
// Every blob the copy fetches is appended, as it arrives, to
// <Stage.Partial>/<alg>-<hex>.partial (fsynced every partialSyncEvery bytes
// and when an unfinished blob is closed, unless Stage.NoSync), so that a kill -9, a reboot or a timeout
// leaves a prefix of it there. The next pull into the same DEST that needs
// the blob serves the kept bytes first and asks the registry only for the
// rest (registry.Client.BlobFrom: a Range request), as one stream: the kept
// bytes are never trusted on their own, containers/image checks the digest
// of the whole stream and the parent hashes the staged blob again (or, for
// a containerd: DEST's layer, containerd as the import writes it). The
// reader checks the digest too, so that it knows what to keep: a blob whose
// stream matches is complete and its file is removed (the blob is in
// staging now), or, handed over (claim), stays for the parent to move into
// the staged OCI layout, so that its bytes are written once; a kept prefix that turns out wrong is removed and the read
// fails as a network error (the attempt is retried, this time from byte 0).
// A kept file longer than the declared size is removed before use; one of
// exactly the declared size is hashed first and served without a request
// when it matches. The cache is a convenience: any failure to read or write
// it falls back to the network alone.

// partialSyncEvery is how many appended bytes may wait for an fsync (what
// a reboot may lose of a kept prefix; a kill loses nothing: the page cache
// keeps it). Each fsync stalls the blob's read loop, so not too often; a
// cache of Stage.NoSync is never synced.
const partialSyncEvery = 64 << 20

// partialReserve is free space the cache never takes: the copy's own
// writes (manifests, index, directories) need a little beyond the declared
// sizes.
const partialReserve = 1 << 20

// partialCache is the partial-blob directory of one copy.
type partialCache struct {
	dir string
	log *slog.Logger
	// noSync: nothing appended is synced (Stage.NoSync).
	noSync bool

	mu   sync.Mutex
	busy map[digest.Digest]bool // one reader per blob keeps a file
	// When the staging area is an OCI layout whose blobs the parent may
	// take from the cache (Stage.HandOver), a blob kept whole is not
	// written a second time: PutBlob claims its reader in active (claim),
	// the kept file stays in the cache, and handed lists it for the
	// parent, which moves it into staging before it verifies
	// (dest.Partial.HandOver).
	active map[digest.Digest]*resumeReader
	// shared: a blob fetched by more than one stream at once (a manifest
	// naming it twice). The claim is by digest, and a stream that is not
	// the keeping reader's would claim that reader and find it unfinished:
	// no stream of a shared blob is claimed, each is written as usual.
	shared map[digest.Digest]bool
	handed []digest.Digest
	// room is how many bytes this copy may still append: the kept bytes
	// double what a blob takes on DEST's filesystem until it completes, so
	// they may use only the space the image does not need (allow).
	room int64
}

// allow sets how much the cache may append: the free space of DEST's
// filesystem beyond what the image needs, less partialReserve. Nil-safe.
func (c *partialCache) allow(spare int64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.room = max(spare-partialReserve, 0)
}

// take reserves n bytes of room; false when there is not enough.
func (c *partialCache) take(n int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.room < n {
		return false
	}
	c.room -= n
	return true
}

// openPartialCache returns the cache of st (st.Partial), or nil when it
// has none (no resume).
func openPartialCache(st *Stage, log *slog.Logger) *partialCache {
	if st.Partial == "" {
		return nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &partialCache{dir: st.Partial, log: log, noSync: st.NoSync, busy: map[digest.Digest]bool{}, active: map[digest.Digest]*resumeReader{},
		shared: map[digest.Digest]bool{}}
}

// syncFile is (*os.File).Sync; the tests count the calls.
var syncFile = (*os.File).Sync

// claim hands the blob d of size bytes over in the cache instead of
// having the copy write it into staging: it returns the reader keeping d,
// which from now on keeps the file when the blob is complete, or nil
// (no handover: the copy writes the blob as usual). Nil-safe: only a
// destination with a handover has a cache to claim from.
func (c *partialCache) claim(d digest.Digest, size int64) *resumeReader {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.shared[d] {
		return nil
	}
	r := c.active[d]
	// A reader that already stopped keeping (no room, a write error,
	// perhaps while containers/image peeked at the stream) cannot hand
	// its blob over: the copy writes it as usual.
	if r == nil || r.size != size || r.ended || r.handover || !r.keep {
		return nil
	}
	r.handover = true
	return r
}

// wasHanded reports whether r kept its whole blob for the parent, and if
// not, the write error that stopped it (nil: another reason).
func (c *partialCache) wasHanded(r *resumeReader) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return r.handed, r.writeErr
}

// addHanded records that the whole of d sits in the cache, checked.
func (c *partialCache) addHanded(d digest.Digest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Contains(c.handed, d) {
		c.handed = append(c.handed, d)
	}
}

// handedOver lists the blobs to move into staging (nil-safe).
func (c *partialCache) handedOver() []string {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, d := range c.handed {
		out = append(out, d.String())
	}
	return out
}

// partialFile is the cache's name for d.
func partialFile(d digest.Digest) string {
	return target.PartialEntry(d.Algorithm().String(), d.Encoded())
}

func (c *partialCache) acquire(d digest.Digest) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy[d] {
		c.shared[d] = true
		return false
	}
	c.busy[d] = true
	return true
}

func (c *partialCache) release(d digest.Digest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.busy, d)
	delete(c.active, d)
}

// track makes r the reader claim finds for its blob.
func (c *partialCache) track(r *resumeReader) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.active[r.d] = r
}

// blob is GetBlob through the cache: kept bytes first, then the network
// from where they end, every network byte appended to the kept file.
func (c *partialCache) blob(ctx context.Context, rc *registry.Client, info types.BlobInfo) (io.ReadCloser, int64, error) {
	d, size := info.Digest, info.Size
	if d.Validate() != nil || size <= 0 || !c.acquire(d) {
		return rc.Blob(ctx, d, size)
	}
	path := filepath.Join(c.dir, partialFile(d))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		c.release(d)
		c.log.Warn("the partial-blob cache cannot keep this blob; fetching it without", "digest", d.String(), "error", err.Error())
		return rc.Blob(ctx, d, size)
	}
	r := &resumeReader{c: c, f: f, path: path, d: d, size: size, h: d.Algorithm().Hash(), keep: true}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		r.drop("not a regular file")
		return rc.Blob(ctx, d, size)
	}
	k := fi.Size()
	switch {
	case k > size:
		c.log.Warn("discarding a kept partial blob longer than its declared size", "digest", d.String(), "kept", k, "size", size)
		k = r.restart()
	case k == size:
		// Complete: serve it without a request if it is the blob.
		if sum, err := hashPrefix(f, k, d.Algorithm()); err == nil && sum == d {
			c.log.Info("serving a kept blob in full", "digest", d.String(), "bytes", k)
			r.kept, r.done = k, true
			c.track(r)
			return r, size, nil
		}
		c.log.Warn("discarding a kept blob that does not match its digest", "digest", d.String(), "bytes", k)
		k = r.restart()
	}
	var body io.ReadCloser
	var announced int64
	if k > 0 {
		c.log.Info("resuming a kept partial blob", "digest", d.String(), "kept", k, "size", size)
		body, announced, err = rc.BlobFrom(ctx, d, size, k)
	} else {
		body, announced, err = rc.Blob(ctx, d, size)
	}
	if err != nil {
		r.closeFile()
		return nil, 0, err
	}
	r.kept, r.written, r.synced, r.body = k, k, k, body
	c.track(r)
	// A server announcing more than the declared size is refused by the
	// caller's size check: pass its announcement on.
	if announced > size {
		return r, announced, nil
	}
	return r, size, nil
}

// hashPrefix hashes the first n bytes of f.
func hashPrefix(f *os.File, n int64, alg digest.Algorithm) (digest.Digest, error) {
	h := alg.Hash()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, n)); err != nil {
		return "", err
	}
	return digest.NewDigest(alg, h), nil
}

// resumeReader yields the kept bytes of f (kept of them), then body,
// appending body's bytes to f.
type resumeReader struct {
	c    *partialCache
	f    *os.File // nil once closed or dropped
	path string
	d    digest.Digest
	size int64
	h    hash.Hash

	kept    int64 // bytes of f served before the network
	pos     int64 // bytes served
	written int64 // bytes in f
	synced  int64
	body    io.ReadCloser // nil when f alone holds the blob (done)
	done    bool          // the whole blob is in f, verified
	keep    bool          // still appending to f
	ended   bool          // the digest was checked
	// handover: claimed by PutBlob; a complete blob's file stays in the
	// cache (handed) instead of being removed.
	handover bool
	handed   bool
	// writeErr is why appending to f failed (nil: it did not), for a
	// claimed blob's PutBlob to say.
	writeErr error
}

func (r *resumeReader) Read(p []byte) (int, error) {
	if r.pos < r.kept {
		if int64(len(p)) > r.kept-r.pos {
			p = p[:r.kept-r.pos]
		}
		n, err := r.f.ReadAt(p, r.pos)
		r.h.Write(p[:n])
		r.pos += int64(n)
		if err != nil && !errors.Is(err, io.EOF) {
			return n, failure.Wrap(failure.Network, err, "reading the kept part of blob %s", r.d)
		}
		if n == 0 {
			return 0, failure.New(failure.Network, "the kept part of blob %s ended at %d of %d bytes", r.d, r.pos, r.kept)
		}
		return n, nil
	}
	if r.done {
		if r.pos >= r.size {
			r.finish()
			return 0, io.EOF
		}
		return 0, io.ErrUnexpectedEOF
	}
	n, err := r.body.Read(p)
	if n > 0 {
		if r.kept > 0 {
			// Only a stream that starts with kept bytes needs a hash of
			// its own (to tell a bad kept prefix from a bad registry); a
			// fresh one is checked by containers/image as it streams.
			r.h.Write(p[:n])
		}
		r.pos += int64(n)
		r.append(p[:n])
	}
	if r.pos >= r.size && !r.ended {
		if ferr := r.finish(); ferr != nil {
			return n, ferr
		}
	}
	return n, err
}

// append keeps b at the end of f; a failure stops keeping (the copy goes
// on from the network).
func (r *resumeReader) append(b []byte) {
	if !r.keep || r.f == nil {
		return
	}
	// A handed-over blob is written here instead of into staging: it
	// takes the room the image was counted with, not the cache's.
	if !r.claimed() && !r.c.take(int64(len(b))) {
		r.stopKeeping()
		r.c.log.Info("the partial-blob cache stopped keeping this blob: DEST's filesystem has no room beyond the image", "digest", r.d.String(), "kept", r.written)
		return
	}
	if _, err := r.f.WriteAt(b, r.written); err != nil {
		r.c.mu.Lock()
		r.writeErr = err
		r.c.mu.Unlock()
		r.stopKeeping()
		r.c.log.Warn("the partial-blob cache stopped keeping this blob", "digest", r.d.String(), "kept", r.written, "error", err.Error())
		return
	}
	r.written += int64(len(b))
	if r.written-r.synced >= partialSyncEvery && !r.c.noSync {
		if err := syncFile(r.f); err == nil {
			r.synced = r.written
		}
	}
}

// finish checks the digest of the whole stream: a match removes the kept
// file (the blob is in staging); a mismatch removes it too, and when kept
// bytes were used it is an error of its own (retried from byte 0).
//
// A handed-over blob (claim) keeps its file when it is complete: closed
// (and synced, unless the cache is noSync) but not removed, handed set; PutBlob reports it to the
// parent only once containers/image has checked the stream's digest.
func (r *resumeReader) finish() error {
	r.c.mu.Lock()
	r.ended = true
	handover := r.handover
	r.c.mu.Unlock()
	if r.kept > 0 {
		sum := digest.NewDigest(r.d.Algorithm(), r.h)
		if r.pos != r.size || sum != r.d {
			r.drop("")
			return failure.New(failure.Network, "blob %s resumed from %d kept bytes does not match its digest (got %s); the kept bytes are discarded and the blob is fetched again", r.d, r.kept, sum)
		}
	}
	if handover && r.keep && r.f != nil && r.pos == r.size && (r.done || r.written == r.size) {
		r.closeFile() // synced (unless noSync): on cgroup v1 the write-back is the pull's
		r.c.mu.Lock()
		r.handed = true
		r.c.mu.Unlock()
		return nil
	}
	r.drop("")
	return nil // a fresh stream: containers/image checks its digest
}

// stopKeeping stops appending to f (under the cache's lock: claim reads
// keep from PutBlob's goroutine).
func (r *resumeReader) stopKeeping() {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	r.keep = false
}

// claimed reports whether PutBlob claimed r (claim).
func (r *resumeReader) claimed() bool {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	return r.handover
}

// restart empties f (its bytes are not the blob's) and returns 0.
func (r *resumeReader) restart() int64 {
	if err := r.f.Truncate(0); err != nil {
		r.drop("truncating failed")
	}
	return 0
}

// drop removes the kept file and stops keeping.
func (r *resumeReader) drop(why string) {
	if r.f == nil {
		return
	}
	if why != "" {
		r.c.log.Warn("discarding a kept partial blob", "digest", r.d.String(), "reason", why)
	}
	_ = os.Remove(r.path)
	r.stopKeeping()
	r.closeFile()
}

// closeFile syncs what was appended (unless the cache is noSync), closes f
// and lets another reader keep the blob.
func (r *resumeReader) closeFile() {
	if r.f == nil {
		return
	}
	if r.keep && r.written > r.synced && !r.c.noSync {
		_ = syncFile(r.f)
	}
	_ = r.f.Close()
	r.f = nil
	r.c.release(r.d)
}

func (r *resumeReader) Close() error {
	r.closeFile()
	if r.body != nil {
		return r.body.Close()
	}
	return nil
}

// String names the reader in errors and logs.
func (r *resumeReader) String() string {
	return fmt.Sprintf("blob %s (%d kept bytes)", r.d, r.kept)
}
