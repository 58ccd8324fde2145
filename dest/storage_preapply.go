package dest

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"go.podman.io/storage/pkg/archive"
	"hash/crc32"
	"io"
	"os"
	"sync/atomic"

	"github.com/opencontainers/go-digest"
	imgspecv1 "github.com/opencontainers/image-spec/specs-go/v1"
	"go.podman.io/image/v5/manifest"
	"go.podman.io/image/v5/types"
	"go.podman.io/storage"
	"golang.org/x/sys/unix"
)

// Applying the layers before containers/image's import.
//
// containers/image's storage destination reads each layer blob through a
// decompressor into a temporary file while it computes the uncompressed
// digest (putBlobToPendingFile), then applies that file (createNewLayer →
// PutLayer), decompressing it again, one layer after the other. preApply
// gives the store the verified blobs instead, inflated once: each layer's
// DiffID is computed from its blob first (decompressed and hashed, the
// next layer's while the store applies this one) and compared with the
// config's, then the store applies what that pass wrote, the layer's tar
// in gzip's stored blocks (inflating it is a copy; the store records the
// layer as gzip'd, as it does from the blob), under that DiffID, in an
// unnamed file of the parent's below GRAPHROOT that takes at most a
// quarter of its filesystem's free space (past it, or where no such file
// can be made, the store reads the blob and inflates it itself).
// A layer is created only under an ID derived from a DiffID computed here
// from its bytes (never from the config's word alone: a kill or another
// pull must never find a layer whose ID names content it does not hold).
// The layer gets the ID containers/image gives it (layerID: the DiffID's
// hex for the first, the digest of "PARENT+DIFFID" above it), so that the
// import that follows finds every layer by its blob's digest
// (tryReusingBlobAsPending, LayersByCompressedDigest) and by that ID
// (commitLayer), applies nothing and writes only the image record, last, as
// before. A layer whose DiffID is not the config's is refused with
// containers/image's words, before anything of it is written.
//
// Only what the import would apply the same way is taken: a single image
// (an index's instances are left to the import), every layer a tar,
// gzip'd or not (zstd, encrypted and foreign types go to the import
// unchanged), as many DiffIDs in the config as layers. Anything else, or a
// blob the staging does not hold (the store had it), stops the pre-apply
// there: what is left is the import's, as before.

// layerMediaTypes are the layer types preApply gives the store itself.
var layerMediaTypes = map[string]bool{
	imgspecv1.MediaTypeImageLayer:                     true,
	imgspecv1.MediaTypeImageLayerGzip:                 true,
	manifest.DockerV2Schema2LayerMediaType:            true,
	manifest.DockerV2SchemaLayerMediaTypeUncompressed: true,
}

// chainID is containers/image's layer ID (storage.layerID, without TOC):
// the DiffID's hex for a layer without parent, else the digest of
// "PARENT+DIFFID-HEX".
func chainID(parent string, diffID digest.Digest) string {
	if parent == "" {
		return diffID.Encoded()
	}
	return digest.Canonical.FromString(parent + "+" + diffID.Encoded()).Encoded()
}

// preApply applies the verified image's layers to store in order, each
// that is not there yet, and returns the IDs of the layers it created
// (the caller removes them if the import then fails). An error is the
// store's, a blob's that cannot be read, or a layer's whose DiffID is not
// the config's.
func preApply(ctx context.Context, store storage.Store, src *verifiedSource) ([]string, error) {
	man, mime, err := src.image(ctx)
	if err != nil || manifest.MIMETypeIsMultiImage(mime) {
		return nil, nil // the import reads it and says what is wrong
	}
	m, err := manifest.FromBlob(man, mime)
	if err != nil {
		return nil, nil
	}
	layers := m.LayerInfos()
	cfg, err := stagedRaw(src.t, m.ConfigInfo().Digest.String())
	if err != nil {
		return nil, nil
	}
	ids, err := configDiffIDs(cfg)
	if err != nil || len(ids) != len(layers) || len(layers) == 0 {
		return nil, nil
	}
	diffIDs := make([]digest.Digest, len(ids))
	for i, d := range ids {
		diffIDs[i] = digest.Digest(d)
	}
	for i, l := range layers {
		if l.EmptyLayer || !layerMediaTypes[l.MediaType] || l.Digest.Validate() != nil || diffIDs[i].Validate() != nil ||
			diffIDs[i].Algorithm() != digest.Canonical {
			return nil, nil
		}
	}
	// The DiffIDs, computed from the blobs in order, one ahead of the
	// store: the next layer's is computed while the store applies this
	// one (the channel is unbuffered: at most two layers' tars exist).
	tmpDir := store.GraphRoot()
	sums := make(chan computed)
	stop := make(chan struct{})
	defer func() {
		close(stop)
		for c := range sums { // what the producer had computed: its tar
			c.close()
		}
	}()
	go func() {
		defer close(sums)
		for _, l := range layers {
			c := blobDiffID(ctx, src, l.BlobInfo, tmpDir)
			select {
			case sums <- c:
			case <-stop:
				c.close()
				return
			}
			if c.err != nil || c.absent {
				return
			}
		}
	}()
	var created []string
	parent := ""
	for i, l := range layers {
		c, ok := <-sums
		if !ok || c.absent {
			return created, nil // the import takes it from here
		}
		id, err := applyComputed(ctx, store, src, l.BlobInfo, &c, i, diffIDs[i], parent)
		c.close()
		if err != nil {
			return created, err
		}
		if id == "" {
			return created, nil
		}
		if !c.had {
			created = append(created, id)
		}
		parent = id
	}
	return created, nil
}

// computed is a layer's DiffID computed from its blob, with the layer's
// tar that pass wrote (tar: gzip stored blocks in an unnamed file of this
// process's, at offset 0; nil when none was written: the store inflates
// the blob itself).
type computed struct {
	diffID digest.Digest
	tar    *os.File
	err    error
	absent bool // not staged
	had    bool // set by applyComputed: the store had the layer already
}

func (c *computed) close() {
	if c.tar != nil {
		c.tar.Close()
		c.tar = nil
	}
}

// applyComputed applies layer i (blob l, computed c) above parent and
// returns its ID, or "" when the import is to take it from here. c.had
// says whether the store had it (another pull, or an earlier one).
func applyComputed(ctx context.Context, store storage.Store, src *verifiedSource, l types.BlobInfo, c *computed, i int, want digest.Digest, parent string) (string, error) {
	if c.err != nil {
		return "", fmt.Errorf("reading layer %d (blob %s): %w", i, l.Digest, c.err)
	}
	if c.diffID != want {
		return "", fmt.Errorf("layer %d (blob %s) does not match config's DiffID %q", i, l.Digest, want)
	}
	id := chainID(parent, c.diffID)
	if have, err := store.Layer(id); err == nil && have != nil {
		c.had = true
		return id, nil
	}
	// Both digests are known and checked: the blob's (Verify) and its
	// DiffID (computed above from its bytes); the store records them, and
	// the blob's size as the compressed size.
	size := l.Size
	opts := &storage.LayerOptions{OriginalDigest: l.Digest, OriginalSize: &size, UncompressedDigest: c.diffID}
	var diff io.Reader
	if c.tar != nil {
		diff = c.tar
		tarApplied.Add(1)
	} else {
		rc, _, err := src.GetBlob(ctx, types.BlobInfo{Digest: l.Digest, Size: l.Size}, nil)
		if err != nil {
			return "", nil
		}
		defer rc.Close()
		diff = rc
	}
	_, _, err := store.PutLayer(id, parent, nil, "", false, opts, diff)
	if errors.Is(err, storage.ErrDuplicateID) {
		c.had = true // another pull applied it meanwhile
		return id, nil
	}
	if err != nil {
		return "", fmt.Errorf("applying layer %d (blob %s): %w", i, l.Digest, err)
	}
	if importHook != nil { // the test build only (hook_hostile_storage.go)
		importHook(store, l.Digest)
	}
	return id, nil
}

// blobDiffID computes the digest of a staged layer blob decompressed (as
// the store detects its compression), or says absent when the staging
// does not hold the blob. A gzip'd blob's tar is also written, as gzip
// without compression (stored blocks: the store's decompression of it is a
// copy and a CRC), to an unnamed file in dir (O_TMPFILE: no name, gone
// with its descriptor on every path), so that the store applies it without
// inflating the blob a second time and records the layer's compression as
// gzip, as it does for the blob. Other blobs (a plain tar is applied as it
// is) and a file that cannot be made or written leave the tar nil: the
// store reads the blob.
func blobDiffID(ctx context.Context, src *verifiedSource, l types.BlobInfo, dir string) computed {
	rc, _, err := src.GetBlob(ctx, types.BlobInfo{Digest: l.Digest, Size: l.Size}, nil)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) && errors.Is(err, os.ErrNotExist) {
			return computed{absent: true}
		}
		return computed{err: err}
	}
	defer rc.Close()
	br := bufio.NewReaderSize(rc, 64<<10)
	head, _ := br.Peek(10)
	gz := archive.DetectCompression(head) == archive.Gzip
	un, err := archive.DecompressStream(br)
	if err != nil {
		return computed{err: err}
	}
	defer un.Close()
	h := digest.Canonical.Digester()
	var tw tarWriter
	if gz {
		tw.open(dir)
	}
	if _, err := io.Copy(io.MultiWriter(h.Hash(), &tw), un); err != nil {
		tw.drop()
		return computed{err: err}
	}
	return computed{diffID: h.Digest(), tar: tw.done()}
}

// tarWriter writes a tar as gzip without compression (RFC 1952 around
// RFC 1951 stored blocks) to an unnamed file until a write fails; then it
// drops the file and takes everything without writing it (the hash goes
// on: the store reads the blob).
type tarWriter struct {
	f    *os.File
	bw   *bufio.Writer
	crc  uint32
	size uint32 // ISIZE: the length modulo 2^32
	room int64  // what the file may still take
}

// tarApplied counts the layers applied from their tar (tests read it).
var tarApplied atomic.Int64

// tarRoom is what a layer's tar may take of a filesystem: a quarter of
// its free space (a variable: tests give none, to take the blob path).
var tarRoom = func(fs unix.Statfs_t) int64 { return int64(fs.Bavail) * fs.Bsize / 4 }

// storedMax is the most a stored block holds (LEN is 16 bits).
const storedMax = 65535

// open starts the file in dir (O_TMPFILE, 0600, this process's only); if
// it cannot, nothing is written. The file takes at most a quarter of the
// space free in dir's filesystem now: past it, it is dropped, so that it
// never takes the room the store's own extraction needs.
func (w *tarWriter) open(dir string) {
	var fs unix.Statfs_t
	if unix.Statfs(dir, &fs) != nil {
		return
	}
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return
	}
	w.room = tarRoom(fs)
	w.f = os.NewFile(uintptr(fd), dir+"/(unnamed)")
	w.bw = bufio.NewWriterSize(w.f, 256<<10)
	// ID1 ID2 CM=deflate FLG=0 MTIME=0 XFL=0 OS=unknown
	w.put([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255})
}

func (w *tarWriter) put(b []byte) {
	if w.f != nil {
		if _, err := w.bw.Write(b); err != nil {
			w.drop()
		}
	}
}

func (w *tarWriter) Write(p []byte) (int, error) {
	if w.f == nil {
		return len(p), nil
	}
	if w.room -= int64(len(p)) + 5*(int64(len(p))/storedMax+1); w.room < 0 {
		w.drop()
		return len(p), nil
	}
	w.crc = crc32.Update(w.crc, crc32.IEEETable, p)
	w.size += uint32(len(p))
	for rest := p; len(rest) > 0; {
		n := min(len(rest), storedMax)
		w.put([]byte{0, byte(n), byte(n >> 8), ^byte(n), ^byte(n >> 8)}) // BFINAL=0 BTYPE=00 LEN NLEN
		w.put(rest[:n])
		rest = rest[n:]
	}
	return len(p), nil
}

func (w *tarWriter) drop() {
	if w.f != nil {
		w.f.Close()
		w.f, w.bw = nil, nil
	}
}

// done is the file written whole, at offset 0, or nil.
func (w *tarWriter) done() *os.File {
	if w.f == nil {
		return nil
	}
	w.put([]byte{1, 0, 0, 0xff, 0xff}) // an empty final stored block
	w.put(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, w.crc), w.size))
	if w.f == nil {
		return nil
	}
	if err := w.bw.Flush(); err != nil {
		w.drop()
		return nil
	}
	if _, err := w.f.Seek(0, io.SeekStart); err != nil {
		w.drop()
	}
	return w.f
}

// removeLayers deletes the layers preApply created for an import that
// failed, last first. A layer an image or another layer uses by now (a
// concurrent pull of the same layers) stays: the store refuses, and that
// is right.
func removeLayers(store storage.Store, ids []string) {
	for i := len(ids) - 1; i >= 0; i-- {
		_ = store.DeleteLayer(ids[i])
	}
}
