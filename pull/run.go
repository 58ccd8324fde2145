package pull

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"time"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/internal/failure"
	"go.podman.io/image/v5/signature"
	"go.podman.io/image/v5/types"
)

// errStalled cancels an attempt during which no byte arrived for StallTimeout.
var errStalled = errors.New("no data received within the stall timeout")

// Event is the output contract's progress event (package api).
type Event = api.Event

// Copied is what the copy stored, in its report, for the parent's
// verification: the manifest bytes it wrote and, when the reference is an
// index, the index the registry served (whose digest the parent checks
// against the reported one).
type Copied struct {
	Manifest []byte `json:"manifest,omitempty"`
	IndexRaw []byte `json:"index_raw,omitempty"`
	// Served is the manifest as the registry served it for the digest the
	// copy reports (the instance's, for an index): the parent ties the
	// stored manifest to it. Signatures, with a signature policy file, are
	// its signatures, so that the parent can judge it again.
	Served     []byte   `json:"served,omitempty"`
	Signatures [][]byte `json:"signatures,omitempty"`
	// ServedInstances, when every instance of an index was copied and
	// the destination stored the index converted (DestinationDigest),
	// are the registry's instance manifests in the index's order
	// (dest.Expect.ServedInstances): at most MaxServedInstances, of at
	// most MaxManifestBytes in all.
	ServedInstances [][]byte `json:"served_instances,omitempty"`
	// ServedConfigs, when the destination stored a Docker schema 2
	// manifest (the one served, or instances) converted to OCI, are the
	// registry's configs of those manifests whose OCI re-encoding by
	// containers/image is named by another digest (the stored config's):
	// MaxServedConfigBytes of configs fetched in all, each config once.
	ServedConfigs [][]byte `json:"served_configs,omitempty"`
	// Handed are the blobs the copy left whole in the partial-blob cache
	// instead of writing them into the staged OCI layout: the parent
	// moves them to blobs/<alg>/<hex> there before it verifies
	// (dest.Partial.HandOver). Like every word of the child's, a claim
	// only: the parent hashes each moved file as any staged blob
	// (containerd hashes a layer bound for it, as the import writes it).
	Handed []string `json:"handed,omitempty"`
}

// Options are the caller's hooks; all may be nil.
type Options struct {
	// Events receives progress events in order, from one goroutine.
	Events func(Event)
	// Report, when set, receives containers/image's progress bars (only
	// useful on a terminal).
	Report io.Writer
	// Log receives human log records.
	Log *slog.Logger
	// Node, when set, carries this pull's share of the node's budgets
	// whenever it changes; Request.MaxBandwidth still caps the rate.
	Node <-chan NodeShare

	lim   *limiter // the Copy's bandwidth limiter, shared by its attempts
	slots *slots   // the Copy's layer-download slots (nil: no node limit)
}

// NodeShare is one pull's part of the node's budgets (0: no limit).
type NodeShare struct {
	Rate   int64 `json:"rate"`   // bytes per second
	Layers int   `json:"layers"` // concurrent blob downloads
}

func (o Options) emit(e Event) {
	if o.Events != nil {
		e.TS = time.Now().UTC()
		o.Events(e)
	}
}

// Copy is the network-facing part: it resolves the tag, copies the image
// into the staging area (st.Name inside st.Work) with retries, and syncs it
// to disk. It reads no registry configuration of the host: the
// credentials, certificates, registries.conf, registries.d and signature
// policy come in m, and are written into st.Config (in memory) for
// containers/image to read.
func Copy(ctx context.Context, p *Request, m *Material, st *Stage, o Options) (*Report, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	o.lim, o.slots = nodeLimits(p.MaxBandwidth, o.Node)
	if p.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, p.Timeout, fmt.Errorf("pull timed out after %s (--timeout)", p.Timeout))
		defer cancel()
	}
	pc, err := m.policyContext(p)
	if err != nil {
		return nil, err
	}
	defer func() { _ = pc.Destroy() }()
	sys, err := m.systemContext(p, st)
	if err != nil {
		return nil, err
	}
	// Every candidate in order, until the registry accepts one (the
	// kubelet's rule: whatever the refusal looks like); each round gives
	// every host its own candidate, through the auth file, so that a
	// credential reaches only the host it is for. No credential at all is
	// one anonymous round; there is no anonymous retry after refused
	// credentials.
	var (
		rep      *Report
		attempts int
		refused  bool
	)
	n := p.candidates()
	for i := 0; i < n; i++ {
		if err = m.writeAuth(p, sys.AuthFilePath, i); err != nil {
			return nil, err
		}
		var k int
		rep, k, err = p.retrying(ctx, pc, sys, m, i, st, o)
		attempts += k
		if err == nil {
			rep.Credential = p.credentialView(i)
			break
		}
		refused = refused || failure.CodeOf(err) == failure.Unauthorized
		if !nextCandidate(err) || i == n-1 || ctx.Err() != nil {
			break
		}
		if i < len(p.Credentials) {
			c := p.Credentials[i]
			o.Log.Warn("the registry refused a credential; trying the next", "source", c.Source, "file", c.File, "key", c.Key, "username", c.Username, "error", rootCause(err))
		}
		if rerr := st.reset(); rerr != nil {
			return nil, rerr
		}
	}
	if err != nil {
		if refused || failure.CodeOf(err) == failure.Unauthorized {
			return nil, p.refusedAll(err)
		}
		return nil, err
	}
	if !st.NoSync {
		if err := syncTree(st.path()); err != nil {
			return nil, failure.Wrap(failure.Destination, err, "syncing the staged image")
		}
	}
	rep.Attempts = attempts
	return rep, nil
}

// retrying runs attempts with one credential, retrying network failures
// with a doubling back-off.
func (p *Request) retrying(ctx context.Context, pc *signature.PolicyContext, sys *types.SystemContext, m *Material, round int, st *Stage, o Options) (*Report, int, error) {
	delay := p.RetryDelay
	for attempt := 1; ; attempt++ {
		rep, err := p.attempt(ctx, pc, sys, m, round, st, o, attempt)
		if err == nil || !retryable(err) || attempt > p.Retries || ctx.Err() != nil {
			if err != nil {
				if cause := context.Cause(ctx); cause != nil && ctx.Err() == context.DeadlineExceeded {
					err = failure.Wrap(failure.Network, err, "%v", cause)
				}
			}
			return rep, attempt, err
		}
		o.Log.Warn("pull attempt failed; retrying", "attempt", attempt, "of", p.Retries+1, "in", delay, "error", err.Error())
		select {
		case <-time.After(delay):
		case <-ctx.Done():
		}
		if delay < math.MaxInt64/2 { // a huge retry_delay must not wrap around
			delay *= 2
		}
		if rerr := st.reset(); rerr != nil {
			return nil, attempt, rerr
		}
	}
}

// nextCandidate reports whether another credential may fare better after
// err: a refusal of any shape (401/403, a bare UNAUTHORIZED, a 404 that a
// registry returns for a repository the credential cannot see, an
// unclassified answer). A network, TLS, verification or destination failure
// is not about the credential.
func nextCandidate(err error) bool {
	switch failure.CodeOf(err) {
	case failure.Unauthorized, failure.NotFound, failure.Internal:
		return true
	}
	return false
}

// credentialView is the credential block of the result: the accepted
// candidate of the primary endpoint, or anonymous.
func (p *Request) credentialView(i int) *api.Credential {
	if len(p.Credentials) > 0 {
		c := p.Credentials[min(i, len(p.Credentials)-1)]
		return &api.Credential{Source: c.Source, File: c.File, Key: c.Key, Username: c.Username}
	}
	return &api.Credential{Source: "anonymous"}
}

// refusedAll names every source the registry refused (file and key, never
// the secret).
func (p *Request) refusedAll(err error) error {
	cause := err
	var fe *failure.Error
	if errors.As(err, &fe) && fe.Err != nil {
		cause = fe.Err
	}
	if len(p.Credentials) == 0 {
		return &failure.Error{Code: failure.Unauthorized, Err: err, Message: fmt.Sprintf(
			"registry %s refused anonymous access to %s (no credential matched; auth files searched: %s): %v",
			p.Registry, p.Reference, p.authFileList(), rootCause(cause))}
	}
	var tried []string
	for i, c := range p.Credentials {
		tried = append(tried, fmt.Sprintf("[%d] %s %s key %q user %q", i+1, c.Source, c.File, c.Key, c.Username))
	}
	return &failure.Error{Code: failure.Unauthorized, Err: err, Message: fmt.Sprintf(
		"registry %s refused every matching credential for %s: %s: %v",
		p.Registry, p.Reference, strings.Join(tried, "; "), rootCause(cause))}
}

// IsTerminal reports whether f is a terminal (for progress bars).
func IsTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
