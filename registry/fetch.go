package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/opencontainers/go-digest"
)

// maxResumes is how often one blob's body may break off and be resumed.
const maxResumes = 5

// Manifest fetches the manifest ref (a tag, or a digest "sha256:…") of
// at most max bytes, asking for the media types in accept. A tag is asked
// only of endpoints that may resolve; a digest of every endpoint in order.
// It returns the bytes, the media type and the host that served them. The
// caller verifies a digest.
func (c *Client) Manifest(ctx context.Context, ref string, accept []string, max int64) ([]byte, string, string, error) {
	var (
		raw        []byte
		mt, served string
	)
	err := c.retry(ctx, "manifest "+ref, func() error {
		var err error
		raw, mt, served, err = c.manifestOnce(ctx, ref, accept, max)
		return err
	})
	return raw, mt, served, err
}

func (c *Client) manifestOnce(ctx context.Context, ref string, accept []string, max int64) ([]byte, string, string, error) {
	_, isDigest := parseDigest(ref)
	op := "fetching the manifest " + ref
	var errs []error
	asked := false
	may := func(h *host) bool { return isDigest || h.ep.Resolve }
	for i, h := range c.hosts {
		if !may(h) {
			continue
		}
		asked = true
		raw, mt, err := h.manifest(ctx, ref, accept, max, op)
		if err == nil {
			return raw, mt, h.name(), nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
		// Said only when a later endpoint will be asked (one that may
		// resolve a tag, for a tag): after the last, the error is the
		// FallbackError's.
		if slices.ContainsFunc(c.hosts[i+1:], may) {
			c.hooks.Log.Info("endpoint failed; trying the next", "host", h.name(), "what", "manifest "+ref, "error", err.Error())
		}
	}
	if !asked {
		return nil, "", "", fmt.Errorf("%w for the tag %s: none may resolve (containerd capabilities)", ErrNoEndpoint, ref)
	}
	return nil, "", "", &FallbackError{What: op, Errs: errs}
}

func (h *host) manifest(ctx context.Context, ref string, accept []string, max int64, op string) ([]byte, string, error) {
	hdr := http.Header{"Accept": {strings.Join(accept, ", ")}}
	res, err := h.do(ctx, http.MethodGet, "/"+h.ep.Repository+"/manifests/"+ref, hdr)
	if err != nil {
		return nil, "", h.hostError(op, err)
	}
	if res.StatusCode != http.StatusOK {
		return nil, "", responseError(res, h.name(), op, h.secrets()...)
	}
	defer res.Body.Close()
	if res.ContentLength > max {
		return nil, "", &TooLargeError{Host: h.name(), What: "the manifest " + ref, Limit: max, Size: res.ContentLength}
	}
	b, err := io.ReadAll(io.LimitReader(&receivedReader{r: res.Body, f: Received(ctx)}, max+1))
	if err != nil {
		return nil, "", h.hostError(op, err)
	}
	if int64(len(b)) > max {
		return nil, "", &TooLargeError{Host: h.name(), What: "the manifest " + ref, Limit: max, Size: -1}
	}
	mt := res.Header.Get("Content-Type")
	if parsed, _, err := mime.ParseMediaType(mt); err == nil {
		mt = parsed
	}
	return b, mt, nil
}

type receivedKey struct{}

// WithReceived returns ctx carrying f, which a Manifest fetched under it
// calls with the size of each chunk of the body as it arrives, and a Blob
// or BlobFrom with each chunk it skips of a full answer to a Range request
// (the caller's stall and rate watchdogs see a manifest, or a skip, that
// trickles in). A blob's body itself is the caller's to count.
func WithReceived(ctx context.Context, f func(n int)) context.Context {
	return context.WithValue(ctx, receivedKey{}, f)
}

// Received is the function WithReceived put into ctx (nil for none).
func Received(ctx context.Context) func(int) {
	f, _ := ctx.Value(receivedKey{}).(func(int))
	return f
}

// receivedReader tells f of every chunk read.
type receivedReader struct {
	r io.Reader
	f func(int)
}

func (r *receivedReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	if n > 0 && r.f != nil {
		r.f(n)
	}
	return n, err
}

// TooLargeError: a server sent (or announced) more than the limit.
type TooLargeError struct {
	Host, What  string
	Limit, Size int64 // Size -1: not announced
}

func (e *TooLargeError) Error() string {
	if e.Size >= 0 {
		return fmt.Sprintf("%s: %s is %d bytes, more than the maximum of %d", e.Host, e.What, e.Size, e.Limit)
	}
	return fmt.Sprintf("%s: %s is more than the maximum of %d bytes", e.Host, e.What, e.Limit)
}

// Blob opens blob d (size bytes, -1 when unknown), asking every endpoint in
// order until one serves it. The reader resumes a body that breaks off
// with a Range request, on the same endpoint first, then on the later
// ones. It returns the size the server announced (-1 when it did not).
func (c *Client) Blob(ctx context.Context, d digest.Digest, size int64) (io.ReadCloser, int64, error) {
	return c.BlobFrom(ctx, d, size, 0)
}

// BlobFrom is Blob from byte offset on (a Range request; a server that
// ignores the Range is read past the offset): the reader yields the bytes
// from offset to the end. The size returned is the whole blob's when the
// server announced it, else -1.
func (c *Client) BlobFrom(ctx context.Context, d digest.Digest, size, offset int64) (io.ReadCloser, int64, error) {
	if offset < 0 || (size >= 0 && offset > size) {
		return nil, 0, fmt.Errorf("blob %s: offset %d outside its size %d", d, offset, size)
	}
	var (
		rc io.ReadCloser
		n  int64
	)
	err := c.retry(ctx, "blob "+d.String(), func() error {
		var err error
		rc, n, err = c.blobOnce(ctx, d, size, offset)
		return err
	})
	return rc, n, err
}

func (c *Client) blobOnce(ctx context.Context, d digest.Digest, size, offset int64) (io.ReadCloser, int64, error) {
	op := "fetching blob " + d.String()
	var errs []error
	for i, h := range c.hosts {
		body, n, err := h.blob(ctx, d, offset, op)
		if err == nil {
			switch {
			case size < 0:
				size = n
			case n <= size:
				// A shorter announcement is a body that ends early: the
				// reader resumes it up to the size the manifest declares.
				// (A longer one is returned as is, for the caller's
				// size check.)
				n = size
			}
			return &blobReader{c: c, ctx: ctx, d: d, size: size, read: offset, at: i, body: body, op: op}, n, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
		if i < len(c.hosts)-1 {
			c.hooks.Log.Info("endpoint failed; trying the next", "host", h.name(), "what", "blob "+d.String(), "error", err.Error())
		}
	}
	return nil, 0, &FallbackError{What: op, Errs: errs}
}

// blob opens d's body from offset on; the size is the whole blob's (-1
// when the server does not say).
func (h *host) blob(ctx context.Context, d digest.Digest, offset int64, op string) (io.ReadCloser, int64, error) {
	var hdr http.Header
	if offset > 0 {
		hdr = http.Header{"Range": {"bytes=" + strconv.FormatInt(offset, 10) + "-"}}
	}
	res, err := h.do(ctx, http.MethodGet, "/"+h.ep.Repository+"/blobs/"+d.String(), hdr)
	if err != nil {
		return nil, 0, h.hostError(op, err)
	}
	switch {
	case res.StatusCode == http.StatusOK:
		if offset > 0 {
			// The server ignored the Range: skip what is already read.
			if err := h.c.skip(ctx, res.Body, offset); err != nil {
				_ = res.Body.Close()
				return nil, 0, h.hostError(op, fmt.Errorf("skipping to offset %d of a full answer to a Range request: %w", offset, err))
			}
		}
		return res.Body, res.ContentLength, nil
	case res.StatusCode == http.StatusPartialContent && offset > 0:
		start, total, ok := contentRange(res.Header.Get("Content-Range"))
		if !ok || start != offset {
			_ = res.Body.Close()
			return nil, 0, h.hostError(op, fmt.Errorf("asked for bytes from %d, got Content-Range %q", offset, res.Header.Get("Content-Range")))
		}
		return res.Body, total, nil
	}
	return nil, 0, responseError(res, h.name(), op, h.secrets()...)
}

// contentRange parses "bytes START-END/TOTAL" (TOTAL may be "*": -1).
func contentRange(v string) (start, total int64, ok bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(v), "bytes ")
	if !ok {
		return 0, 0, false
	}
	span, tot, _ := strings.Cut(rest, "/")
	s, _, ok := strings.Cut(span, "-")
	if !ok {
		return 0, 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, 0, false
	}
	total = -1
	if t, err := strconv.ParseInt(tot, 10, 64); err == nil && t >= 0 {
		total = t
	}
	return n, total, true
}

// blobReader reads one blob, resuming a body that breaks off.
type blobReader struct {
	c       *Client
	ctx     context.Context
	d       digest.Digest
	size    int64 // -1: unknown
	read    int64
	at      int // the endpoint serving the body
	body    io.ReadCloser
	resumes int
	op      string
	err     error
}

func (r *blobReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	for {
		n, err := r.body.Read(p)
		r.read += int64(n)
		if err == io.EOF && r.size >= 0 && r.read < r.size {
			err = io.ErrUnexpectedEOF
		}
		if err == nil || err == io.EOF {
			return n, err
		}
		if rerr := r.resume(err); rerr != nil {
			r.err = rerr
			if n > 0 {
				return n, nil
			}
			return 0, rerr
		}
		if n > 0 {
			return n, nil
		}
	}
}

// resume replaces a broken body with one from the offset reached, asking
// the endpoint that served it, then the later ones.
func (r *blobReader) resume(cause error) error {
	_ = r.body.Close()
	h := r.c.hosts[r.at]
	broken := h.hostError(r.op, fmt.Errorf("the body broke off after %d bytes: %w", r.read, cause))
	if r.ctx.Err() != nil || r.resumes >= maxResumes || errors.Is(cause, context.Canceled) {
		return broken
	}
	r.resumes++
	// The endpoint that served the body first, then the later ones; a
	// pass that fails in a way that may pass is retried like any request.
	from := r.at
	err := r.c.retry(r.ctx, "blob "+r.d.String()+" from byte "+fmt.Sprint(r.read), func() error {
		var errs []error
		for i := from; i < len(r.c.hosts); i++ {
			h := r.c.hosts[i]
			r.c.hooks.Log.Info("resuming a blob", "host", h.name(), "blob", r.d.String(), "offset", r.read, "error", cause.Error())
			body, _, err := h.blob(r.ctx, r.d, r.read, r.op)
			if err == nil {
				r.at, r.body = i, body
				return nil
			}
			errs = append(errs, err)
			if r.ctx.Err() != nil {
				break
			}
		}
		return &FallbackError{What: r.op, Errs: errs}
	})
	if err != nil {
		return fmt.Errorf("%w (resuming after: %v)", err, broken)
	}
	return nil
}

func (r *blobReader) Close() error { return r.body.Close() }

// Host is the endpoint serving the body now.
func (r *blobReader) Host() string { return r.c.hosts[r.at].name() }

func parseDigest(ref string) (digest.Digest, bool) {
	d, err := digest.Parse(ref)
	return d, err == nil
}

// skip discards the first n bytes of r, telling Hooks.Discard and ctx's
// Received function of each chunk (the caller's watchdogs and limits see
// them).
func (c *Client) skip(ctx context.Context, r io.Reader, n int64) error {
	buf := make([]byte, 32<<10)
	received := Received(ctx)
	for n > 0 {
		k, err := r.Read(buf[:min(int64(len(buf)), n)])
		n -= int64(k)
		if k > 0 && received != nil {
			received(k)
		}
		if k > 0 && c.hooks.Discard != nil {
			if herr := c.hooks.Discard(k); herr != nil {
				return herr
			}
		}
		switch {
		case n == 0:
			return nil
		case err == io.EOF:
			return io.ErrUnexpectedEOF
		case err != nil:
			return err
		}
	}
	return nil
}
