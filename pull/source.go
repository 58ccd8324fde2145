package pull

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/registry"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/image"
	"go.podman.io/image/v5/manifest"
	"go.podman.io/image/v5/types"
)

// Size limits applied to what a registry sends. The manifest and config
// limits are containers/image's own (internal/iolimits MaxManifestBodySize
// and MaxConfigBodySize); they are repeated here so that every transport,
// not only docker://, is held to them, and so that a declared size is
// refused before anything is fetched.
const (
	// MaxManifestBytes bounds one manifest or index.
	MaxManifestBytes = 4 << 20
	// MaxConfigBytes bounds one image config blob.
	MaxConfigBytes = 4 << 20
	// DefaultMaxImageBytes is the image size limit when the plan sets none
	// (Request.MaxImageBytes == 0): the sum of the declared sizes of one
	// image, the bytes read from the registry in one attempt, and the
	// bytes written into staging in one attempt (after decompression).
	DefaultMaxImageBytes int64 = 64 << 30
)

// maxImageBytes is the image size limit in effect.
func (p *Request) maxImageBytes() int64 {
	if p.MaxImageBytes > 0 {
		return p.MaxImageBytes
	}
	return DefaultMaxImageBytes
}

// guard is shared by the wrapping source and destination of one attempt:
// it bounds what the registry sends and what staging receives, and it
// tells the stall watchdog when a byte last arrived and what was being
// fetched.
type guard struct {
	host     string
	maxImage int64

	last    atomic.Int64 // unix nanoseconds of the last byte or progress
	read    atomic.Int64 // blob bytes read from the source
	written atomic.Int64 // bytes the copy wrote into the destination

	mu       sync.Mutex
	seq      int
	inflight map[int]fetch

	hosts *hostLog // which host served each manifest and blob, with blob bytes

	ctx    context.Context // the attempt's: bounds the bandwidth waits
	lim    *limiter        // the pull's bandwidth cap, nil for none
	meters meters          // blob fetches in flight, for the rate watchdog
}

type fetch struct {
	id   int // order of begin
	what string
}

func newGuard(host string, maxImage int64) *guard {
	g := &guard{host: host, maxImage: maxImage, inflight: map[int]fetch{}, hosts: newHostLog()}
	g.touch()
	return g
}

// touch records that data arrived.
func (g *guard) touch() { g.last.Store(time.Now().UnixNano()) }

// begin records that what is being fetched; the returned function ends it.
func (g *guard) begin(what string) func() {
	g.mu.Lock()
	g.seq++
	id := g.seq
	g.inflight[id] = fetch{id: id, what: what}
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			delete(g.inflight, id)
			g.mu.Unlock()
		})
	}
}

// idle returns how long no data arrived.
func (g *guard) idle() time.Duration { return time.Since(time.Unix(0, g.last.Load())) }

// stalled names what was being fetched when no data arrived: the oldest
// fetches in flight, or "the next request" between requests.
func (g *guard) stalled(timeout time.Duration) *stallError {
	g.mu.Lock()
	var fs []fetch
	for _, f := range g.inflight {
		fs = append(fs, f)
	}
	g.mu.Unlock()
	sort.Slice(fs, func(i, j int) bool { return fs[i].id < fs[j].id })
	what := "the next request"
	if len(fs) > 0 {
		what = fs[0].what
		if len(fs) > 1 {
			what += fmt.Sprintf(" (and %d more)", len(fs)-1)
		}
	}
	return &stallError{what: what, host: g.host, timeout: timeout}
}

// stallError is the cause of an attempt cancelled by the stall watchdog.
type stallError struct {
	what    string
	host    string
	timeout time.Duration
}

func (e *stallError) Error() string {
	return fmt.Sprintf("no data received within the stall timeout (%s) while fetching %s from %s", e.timeout, e.what, e.host)
}

func (e *stallError) Is(target error) bool { return target == errStalled }

// Errors of a registry that sends more than it declared.
var (
	errBlobTooLarge  = errors.New("blob is larger than its declared size")
	errImageTooLarge = errors.New("image is larger than the maximum image size")
	errBadDescriptor = errors.New("invalid descriptor")
)

func verification(sentinel error, format string, args ...any) error {
	return &failure.Error{Code: failure.Verification, Message: fmt.Sprintf(format, args...), Err: sentinel}
}

// checkDigest accepts only a valid sha256 digest: pullhelper verifies and
// names blobs by sha256 (the OCI canonical algorithm) and nothing else.
func checkDigest(d digest.Digest, what string) error {
	if err := d.Validate(); err != nil {
		return verification(errBadDescriptor, "%s has an invalid digest %q: %v", what, string(d), err)
	}
	if d.Algorithm() != digest.SHA256 {
		return verification(errBadDescriptor, "%s uses digest algorithm %s; only sha256 is supported", what, d.Algorithm())
	}
	return nil
}

// checkManifest refuses a manifest the copy must not act on: too large,
// an index inside an index, a descriptor with an invalid or non-sha256
// digest, a negative size, a config over MaxConfigBytes, or an image whose
// declared sizes add up to more than max. It runs before any blob of the
// image is fetched.
func checkManifest(raw []byte, mime string, instance bool, max int64) error {
	if len(raw) > MaxManifestBytes {
		return verification(errImageTooLarge, "manifest is %d bytes, more than the maximum of %d", len(raw), MaxManifestBytes)
	}
	if mime == "" {
		mime = manifest.GuessMIMEType(raw)
	}
	if manifest.MIMETypeIsMultiImage(mime) {
		if instance {
			return verification(errBadDescriptor, "an index names another index (%s) as an image; nested indexes are not supported", mime)
		}
		list, err := manifest.ListFromBlob(raw, mime)
		if err != nil {
			return verification(errBadDescriptor, "parsing the index: %v", err)
		}
		for _, d := range list.Instances() {
			if err := checkDigest(d, "an index entry"); err != nil {
				return err
			}
		}
		return nil
	}
	m, err := manifest.FromBlob(raw, mime)
	if err != nil {
		return verification(errBadDescriptor, "parsing the manifest (%s): %v", mime, err)
	}
	var total int64
	add := func(bi types.BlobInfo, what string) error {
		if err := checkDigest(bi.Digest, what); err != nil {
			return err
		}
		if bi.Size < -1 {
			return verification(errBadDescriptor, "%s %s declares a negative size %d", what, bi.Digest, bi.Size)
		}
		if bi.Size > 0 {
			if bi.Size > max-total {
				return verification(errImageTooLarge, "the image declares more than the maximum image size of %d bytes (pull.max_image_size)", max)
			}
			total += bi.Size
		}
		return nil
	}
	if ci := m.ConfigInfo(); ci.Digest != "" {
		if err := add(ci, "the config"); err != nil {
			return err
		}
		if ci.Size > MaxConfigBytes {
			return verification(errImageTooLarge, "the config %s declares %d bytes, more than the maximum of %d", ci.Digest, ci.Size, MaxConfigBytes)
		}
	}
	for _, l := range m.LayerInfos() {
		if err := add(l.BlobInfo, "layer"); err != nil {
			return err
		}
	}
	return nil
}

// guardedRef wraps the copy's source or destination reference so that
// every image source or destination it opens goes through g.
type guardedRef struct {
	types.ImageReference
	// identity, on the copy's source, is the reference the signature
	// policy judges the image by (PolicyReference: the tag as requested),
	// which the source reports as its Reference while every byte comes by
	// the pinned digest; nil: ImageReference's own.
	identity types.ImageReference
	g        *guard
	// partial, on a staging destination, is the partial-blob cache whose
	// whole blobs are handed over instead of written again (claim).
	partial *partialCache
	// remote, when set, opens the image source (the registry client's,
	// remote.go) instead of the reference's own.
	remote func(types.ImageReference) types.ImageSource
}

func (r guardedRef) NewImageSource(ctx context.Context, sys *types.SystemContext) (types.ImageSource, error) {
	if r.remote != nil {
		return &guardedSource{ImageSource: r.remote(r.ImageReference), ref: r, g: r.g}, nil
	}
	done := r.g.begin("the manifest")
	src, err := r.ImageReference.NewImageSource(ctx, sys)
	done()
	if err != nil {
		return nil, err
	}
	return &guardedSource{ImageSource: src, ref: r, g: r.g}, nil
}

func (r guardedRef) NewImage(ctx context.Context, sys *types.SystemContext) (types.ImageCloser, error) {
	src, err := r.NewImageSource(ctx, sys)
	if err != nil {
		return nil, err
	}
	return image.FromSource(ctx, sys, src)
}

func (r guardedRef) NewImageDestination(ctx context.Context, sys *types.SystemContext) (types.ImageDestination, error) {
	dest, err := r.ImageReference.NewImageDestination(ctx, sys)
	if err != nil {
		return nil, err
	}
	return &guardedDest{ImageDestination: dest, ref: r, g: r.g, partial: r.partial}, nil
}

// guardedSource caps every read from the registry. It implements only the
// public types.ImageSource, so containers/image drops its private
// extensions (partial pulls with GetBlobAt, which pullhelper never uses)
// and reads each blob through GetBlob.
type guardedSource struct {
	types.ImageSource
	ref guardedRef
	g   *guard
}

// Reference is what containers/image's copy judges the image by (the
// policy's scope, a signature's identity): the reference as requested when
// the source has one (guardedRef.identity), never opened.
func (s *guardedSource) Reference() types.ImageReference {
	if s.ref.identity != nil {
		return identityRef{s.ref.identity}
	}
	return s.ref
}

// identityRef names an image for the signature policy only: it opens
// nothing (the copy's source fetches by the pinned digest, through the
// guard).
type identityRef struct{ types.ImageReference }

var errIdentityOnly = errors.New("the reference as requested is for the signature policy only; the image is read by its pinned digest")

func (identityRef) NewImage(context.Context, *types.SystemContext) (types.ImageCloser, error) {
	return nil, errIdentityOnly
}
func (identityRef) NewImageSource(context.Context, *types.SystemContext) (types.ImageSource, error) {
	return nil, errIdentityOnly
}
func (identityRef) NewImageDestination(context.Context, *types.SystemContext) (types.ImageDestination, error) {
	return nil, errIdentityOnly
}
func (identityRef) DeleteImage(context.Context, *types.SystemContext) error { return errIdentityOnly }

// PolicyReference is the reference the signature policy judges a pull of
// named by, as containers/image's copy from docker://NAME does: NAME as
// requested, with its tag ("latest" when it names none; the policy's scope
// NAME:TAG, a signature's identity matched against it), or NAME@DIGEST when
// it names a digest (a tag beside the digest is dropped: a docker
// reference cannot hold both). The image itself is the pinned digest's.
func PolicyReference(named reference.Named) reference.Named {
	if d, ok := named.(reference.Digested); ok {
		if c, err := reference.WithDigest(reference.TrimNamed(named), d.Digest()); err == nil {
			return c
		}
	}
	return reference.TagNameOnly(named)
}

func (s *guardedSource) GetManifest(ctx context.Context, instanceDigest *digest.Digest) ([]byte, string, error) {
	what := "the manifest"
	if instanceDigest != nil {
		if err := checkDigest(*instanceDigest, "an index entry"); err != nil {
			return nil, "", err
		}
		what = "the manifest " + instanceDigest.String()
	}
	done := s.g.begin(what)
	// Every byte of the manifest counts, for the stall watchdog (data is
	// arriving) and for the rate watchdog (fast enough): a manifest at
	// 1 B/s is below the minimum rate, not a stall. The rate is judged
	// from the first byte of the body on, as a blob's is (the wait for the
	// answer and the retries before it are the stall timeout's). The
	// registry client calls back in this goroutine.
	lm := &lazyMeter{g: s.g, what: what, host: func() string { return cmp.Or(s.g.hosts.manifestHost(), s.g.host) }}
	raw, mime, err := s.ImageSource.GetManifest(registry.WithReceived(ctx, func(n int) {
		s.g.touch()
		lm.add(n)
	}), instanceDigest)
	if lm.m != nil {
		s.g.meters.remove(lm.m)
	}
	done()
	if err != nil {
		return nil, "", err
	}
	s.g.touch()
	if err := checkManifest(raw, mime, instanceDigest != nil, s.g.maxImage); err != nil {
		return nil, "", err
	}
	return raw, mime, nil
}

func (s *guardedSource) GetBlob(ctx context.Context, info types.BlobInfo, cache types.BlobInfoCache) (io.ReadCloser, int64, error) {
	if err := checkDigest(info.Digest, "blob"); err != nil {
		return nil, 0, err
	}
	what := "blob " + info.Digest.String()
	if isConfigMediaType(info.MediaType) {
		what = "the config " + info.Digest.String()
	}
	done := s.g.begin(what)
	s.g.hosts.startBlob(info.Digest)
	// A resume the server answers in full has the kept prefix skipped
	// before GetBlob returns: those bytes are the rate watchdog's from the
	// first (a skip at 1 B/s is too slow, not a stall), as the body's are
	// once it is read. The registry client calls back in this goroutine,
	// and again, should the body break and be resumed, in the reader's.
	lm := &lazyMeter{g: s.g, what: what, host: func() string { return s.g.hosts.blobHost(info.Digest) }}
	rc, size, err := s.ImageSource.GetBlob(registry.WithReceived(ctx, lm.add), info, cache)
	m := lm.get()
	if err != nil {
		s.g.meters.remove(m)
		done()
		return nil, 0, err
	}
	kept := keptPrefix(rc)
	s.g.hosts.setKept(info.Digest, kept)
	if info.Size >= 0 && size > info.Size {
		s.g.meters.remove(m)
		done()
		_ = rc.Close()
		return nil, 0, verification(errBlobTooLarge, "blob %s is larger than its declared size %d (the registry announces %d bytes)", info.Digest, info.Size, size)
	}
	return &cappedReader{rc: rc, d: info.Digest, limit: info.Size, kept: kept, g: s.g, done: done, m: m}, size, nil
}

// lazyMeter is a fetch's meter, added to the rate watchdog's at its first
// byte (the rate is judged from the first byte of the body on; the wait
// for the answer is the stall timeout's).
type lazyMeter struct {
	g    *guard
	what string
	host func() string
	m    *meter
}

// add counts n bytes, adding the meter first if it has none.
func (l *lazyMeter) add(n int) {
	l.get().bytes.Add(int64(n))
}

// get is the meter, added now if no byte came yet.
func (l *lazyMeter) get() *meter {
	if l.m == nil {
		l.m = l.g.meters.add(l.what, l.host)
	}
	return l.m
}

// keptPrefix is how many of the first bytes of a blob stream the
// partial-blob cache serves (kept by an earlier pull), not the registry.
func keptPrefix(rc io.ReadCloser) int64 {
	if s, ok := rc.(*slotReader); ok {
		rc = s.ReadCloser
	}
	if r, ok := rc.(*resumeReader); ok {
		return r.kept
	}
	return 0
}

// discarded accounts bytes the registry client skips (a full answer to a
// Range request): they arrived, so the stall watchdog sees them, and they
// are bytes read from the registry, held to the image limit.
func (g *guard) discarded(n int) error {
	g.touch()
	if g.read.Add(int64(n)) > g.maxImage {
		return verification(errImageTooLarge, "the registry sent more than the maximum image size of %d bytes (pull.max_image_size)", g.maxImage)
	}
	return nil
}

// cappedReader returns an error as soon as more than limit bytes arrive
// (limit < 0: the size is unknown, only the image limit applies). Its
// first kept bytes come from the partial-blob cache: they count for the
// limits and the watchdogs, but they are not bytes the registry sent
// (endpoints) nor bandwidth (the limiter).
type cappedReader struct {
	rc    io.ReadCloser
	d     digest.Digest
	limit int64
	kept  int64
	n     int64
	g     *guard
	done  func()
	m     *meter
}

func (r *cappedReader) Read(b []byte) (int, error) {
	if r.limit >= 0 && int64(len(b)) > r.limit-r.n+1 {
		// Read at most one byte past the limit: enough to know.
		b = b[:r.limit-r.n+1]
	}
	if r.g.lim != nil && len(b) > r.g.lim.chunk() {
		b = b[:r.g.lim.chunk()]
	}
	n, err := r.rc.Read(b)
	if n > 0 {
		r.g.touch()
		wire := int64(n) - min(max(r.kept-r.n, 0), int64(n))
		r.n += int64(n)
		if r.m != nil {
			r.m.bytes.Add(int64(n))
		}
		r.g.hosts.addBytes(r.d, wire)
		if r.g.lim != nil && r.g.ctx != nil && wire > 0 {
			if werr := r.g.lim.wait(r.g.ctx, int(wire)); werr != nil && err == nil {
				err = werr
			}
		}
		if r.limit >= 0 && r.n > r.limit {
			return 0, verification(errBlobTooLarge, "blob %s is larger than its declared size %d", r.d, r.limit)
		}
		if r.g.read.Add(int64(n)) > r.g.maxImage {
			return 0, verification(errImageTooLarge, "the registry sent more than the maximum image size of %d bytes (pull.max_image_size)", r.g.maxImage)
		}
	}
	return n, err
}

func (r *cappedReader) Close() error {
	if r.m != nil {
		r.g.meters.remove(r.m)
	}
	r.done()
	return r.rc.Close()
}

// guardedDest counts the bytes the copy writes into staging, after any
// decompression (docker-archive: stores layers uncompressed, so a small
// gzip bomb expands here): beyond the image limit, PutBlob fails.
type guardedDest struct {
	types.ImageDestination
	ref     guardedRef
	g       *guard
	partial *partialCache
}

func (d *guardedDest) Reference() types.ImageReference { return d.ref }

// PutBlob writes a blob into staging, or, when the partial-blob cache is
// keeping the whole of it anyway (claim), reads the stream to its end
// (containers/image checks its digest as it is read) and leaves the blob
// in the cache for the parent to move into staging: each byte is written
// once, not twice.
func (d *guardedDest) PutBlob(ctx context.Context, stream io.Reader, info types.BlobInfo, cache types.BlobInfoCache, isConfig bool) (types.BlobInfo, error) {
	counted := &countingReader{r: stream, g: d.g}
	var r *resumeReader // only a blob the cache tracks (a valid digest, a size) is claimed
	if !isConfig {
		r = d.partial.claim(info.Digest, info.Size)
	}
	if r == nil {
		return d.ImageDestination.PutBlob(ctx, counted, info, cache, isConfig)
	}
	// (io.Discard's own ReadFrom would read in 8 KiB pieces.)
	n, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, counted, make([]byte, 128<<10))
	if err != nil {
		return types.BlobInfo{}, err
	}
	if n != info.Size {
		return types.BlobInfo{}, verification(nil, "blob %s: %d bytes arrived, the manifest declares %d", info.Digest, n, info.Size)
	}
	if handed, werr := d.partial.wasHanded(r); !handed {
		if errors.Is(werr, syscall.ENOSPC) || errors.Is(werr, syscall.EDQUOT) || errors.Is(werr, syscall.EROFS) {
			// classify says it in the user's terms (no space left on
			// DEST's filesystem ...), as for a blob written into staging.
			return types.BlobInfo{}, fmt.Errorf("blob %s: keeping it in the partial-blob cache: %w", info.Digest, werr)
		}
		if werr != nil {
			return types.BlobInfo{}, failure.New(failure.Destination, "blob %s: the partial-blob cache could not keep it whole: %v", info.Digest, werr)
		}
		return types.BlobInfo{}, failure.New(failure.Destination, "blob %s: the partial-blob cache could not keep it whole (see the warning above)", info.Digest)
	}
	d.partial.addHanded(info.Digest)
	return types.BlobInfo{Digest: info.Digest, Size: n}, nil
}

type countingReader struct {
	r io.Reader
	g *guard
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	if n > 0 && c.g.written.Add(int64(n)) > c.g.maxImage {
		return 0, verification(errImageTooLarge, "the image expands to more than the maximum image size of %d bytes in the destination (pull.max_image_size)", c.g.maxImage)
	}
	return n, err
}
