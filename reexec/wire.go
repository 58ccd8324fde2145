package reexec

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/dnsconf"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/privdrop"
	"github.com/pullhelper/pullhelper/pull"
)

// ChildName is argv[0] of the child.
const ChildName = "pullhelper-child"

// Fds in the child: the two protocol pipes, then the staging directory and
// (when the request names one) the partial-blob cache.
const (
	planFD    = 3
	eventsFD  = 4
	stageFD   = 5
	partialFD = 6
)

// partialInChild is where the child mounts the partial-blob cache.
const partialInChild = childTmp + "/partial"

// childTmp is the child's private /tmp: a tmpfs of childTmpSize bytes in its
// own mount namespace, with the staging directory (passed as fd 5 and
// bind-mounted while still root, which may traverse DEST's ancestors) at
// /tmp/stage and the copy's configuration and keys in /tmp/config. So DEST's
// ancestors (often root-only, 0700) need not be searchable by the pull uid,
// key material never reaches a disk, and the request names no host path
// (the child's mountinfo still shows its mounts' sources).
const (
	childTmp     = "/tmp"
	childTmpSize = 16 << 20
)

// StageInChild is the staging area as the child sees it: the work
// directory at /tmp/stage, the configuration in /tmp/config.
// With partial, the copy keeps and resumes partial blobs in
// /tmp/partial (the cache the parent passes as fd 6).
func StageInChild(name string, known []dest.KnownBlob, partial, handOver bool) *pull.Stage {
	s := &pull.Stage{Work: childTmp + "/stage", Name: name, Known: known, Config: childTmp + "/config"}
	if partial {
		s.Partial, s.HandOver = partialInChild, handOver
	}
	return s
}

// Request is what the parent sends on fd 3: the copy and everything the
// child needs to set itself up. It must be JSON-representable.
type Request struct {
	Copy     *pull.Request     `json:"copy"`
	Material *pull.Material    `json:"material"`
	Stage    *pull.Stage       `json:"stage"`  // as the child sees it; the directory itself comes as fd 5
	Cgroup   map[string]string `json:"cgroup"` // controller → path /proc/self/cgroup must show
	Identity privdrop.Identity `json:"identity"`
	DNS      *dnsconf.Config   `json:"dns,omitempty"` // files to bind over /etc/resolv.conf and /etc/hosts
	Seccomp  bool              `json:"seccomp"`
	Log      LogConfig         `json:"log"`
	Bars     bool              `json:"bars"`
	// NodeRate: more lines follow the request on fd 3, each a control
	// message with this pull's share of the node's bandwidth, until the
	// parent closes the pipe.
	NodeRate bool `json:"node_rate,omitempty"`
}

// control is a line on fd 3 after the request (with Request.NodeRate):
// this pull's share of the node's budgets.
type control = pull.NodeShare

// LogConfig is how the child logs on its stderr.
type LogConfig struct {
	Format string `json:"format"`
	Debug  bool   `json:"debug"`
}

// message is one line on fd 4. Exactly one field is set.
type message struct {
	Event  *api.Event  `json:"event,omitempty"`
	Result *api.Result `json:"result,omitempty"`
	// Copied travels with Result: what the parent verifies against.
	Copied *pull.Copied `json:"copied,omitempty"`
	Error  *wireError   `json:"error,omitempty"`
}

// wireError is an error crossing the pipe; the parent rebuilds it.
type wireError struct {
	Code    failure.Code `json:"code"`
	Message string       `json:"message"`
}

func toWire(err error) *wireError {
	return &wireError{Code: failure.CodeOf(err), Message: err.Error()}
}

func (w *wireError) err() error { return &failure.Error{Code: w.Code, Message: w.Message} }

// maxMessage bounds one line on fd 4. The largest legitimate message is the
// result, which can carry a raw index manifest (containers/image caps
// manifests at 4 MiB; JSON escaping can double it). A longer line is a
// compromised child trying to exhaust the root parent's memory.
const maxMessage = 16 << 20

// errOversized is a line on fd 4 longer than maxMessage.
var errOversized = fmt.Errorf("the pull child sent an oversized message (a line over %d MiB on its event pipe)", maxMessage>>20)

// readLine returns the next '\n'-terminated line of r without the newline,
// never holding more than max bytes: a longer line is errOversized. An
// unterminated last line (a child that died mid-message) is
// io.ErrUnexpectedEOF.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > max+1 { // +1: the newline itself
			return nil, errOversized
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
}

// progressOnly returns the child's event reduced to what a progress event
// carries, stamped with the parent's clock, or false for any other type.
// The parent emits start, done and error itself, so a compromised child
// cannot tell the caller that a pull finished.
func progressOnly(e api.Event) (api.Event, bool) {
	if !api.IsProgress(e.Type) {
		return api.Event{}, false
	}
	return api.Event{Type: e.Type, TS: time.Now().UTC(), Digest: e.Digest, MediaType: e.MediaType,
		Size: e.Size, Bytes: e.Bytes, Skipped: e.Skipped, Host: boundHost(e.Host)}, true
}

// The child's account of which hosts served the pull is informational (see
// api.Result.Endpoints): the parent only bounds it, to hosts of at most
// maxHost bytes (a DNS name's limit) and at most maxEndpoints entries.
const (
	maxHost      = 255
	maxEndpoints = 64
)

// boundHost is h, or "" when it is longer than maxHost.
func boundHost(h string) string {
	if len(h) > maxHost {
		return ""
	}
	return h
}

// boundEndpoints bounds the child's endpoints block in place: an entry with
// an empty or oversized host or a negative count is dropped, and at most
// maxEndpoints remain.
func boundEndpoints(res *api.Result) {
	var out []api.EndpointUse
	for _, e := range res.Endpoints {
		if len(out) == maxEndpoints {
			break
		}
		if e.Host == "" || boundHost(e.Host) == "" || e.Manifests < 0 || e.Blobs < 0 || e.Bytes < 0 {
			continue
		}
		out = append(out, e)
	}
	res.Endpoints = out
}
