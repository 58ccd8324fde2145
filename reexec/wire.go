package reexec

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/dest/target"
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
// /tmp/partial (the cache the parent passes as fd 6), handing whole ones
// over with handOver; with noSync it syncs nothing it stages (pull.Stage).
func StageInChild(name string, known []target.KnownBlob, partial, handOver, noSync bool) *pull.Stage {
	s := &pull.Stage{Work: childTmp + "/stage", Name: name, Known: known, Config: childTmp + "/config", NoSync: noSync}
	if partial {
		s.Partial, s.HandOver = partialInChild, handOver
	}
	return s
}

// Request is what the caller tells the child: the copy and everything
// the child needs to set itself up. It must be JSON-representable. How the
// child logs, draws bars and learns its node share is not the caller's to
// say again: Run derives it from the StartOptions the child was born with
// (wireRequest).
type Request struct {
	Copy     *pull.Request     `json:"copy"`
	Material *pull.Material    `json:"material"`
	Stage    *pull.Stage       `json:"stage"`  // as the child sees it; the directory itself comes as fd 5
	Cgroup   map[string]string `json:"cgroup"` // controller → path /proc/self/cgroup must show
	Identity privdrop.Identity `json:"identity"`
	DNS      *dnsconf.Config   `json:"dns,omitempty"` // files to bind over /etc/resolv.conf and /etc/hosts
	Seccomp  bool              `json:"seccomp"`
}

// wireRequest is the line the parent sends on fd 3: the caller's Request
// and what follows from StartOptions.
type wireRequest struct {
	Request
	Log  LogConfig `json:"log"`
	Bars bool      `json:"bars"` // StartOptions.Terminal
	// NodeRate (StartOptions.Rates is set): more lines follow the request
	// on fd 3, each a control message with this pull's share of the
	// node's bandwidth, until the parent closes the pipe.
	NodeRate bool `json:"node_rate,omitempty"`
	// RootsLen is the length of Material.SystemRoots, which follow the
	// request line raw (they are most of the request: as JSON, base64, a
	// few hundred KiB that the child's decoder scanned three times), at
	// most maxWireRoots; the control lines come after them.
	RootsLen int `json:"roots_len,omitempty"`
}

// maxWireRoots bounds RootsLen: the parent reads at most 16 MiB of trust
// roots (pipeline's maxRootTotal).
const maxWireRoots = 16 << 20

// encodeRequest is what the parent writes on fd 3 before any control line:
// the request as one JSON line, then Material.SystemRoots raw (RootsLen).
func encodeRequest(req wireRequest) ([]byte, error) {
	var roots []byte
	if req.Material != nil {
		roots = req.Material.SystemRoots
	}
	if len(roots) > maxWireRoots {
		return nil, fmt.Errorf("%d bytes of trust roots, more than %d", len(roots), maxWireRoots)
	}
	req.RootsLen = len(roots)
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	return append(append(b, '\n'), roots...), nil
}

// control is a line on fd 3 after the request (with wireRequest.NodeRate):
// this pull's share of the node's budgets.
type control = pull.NodeShare

// LogConfig is how the child logs on its stderr.
type LogConfig struct {
	Format string `json:"format"`
	Debug  bool   `json:"debug"`
	// Quiet: the child logs nothing (--quiet); a crash's output is still
	// relayed.
	Quiet bool `json:"quiet,omitempty"`
}

// message is one line on fd 4. Exactly one field is set. The child sends
// its own report (pull.Report: what it claims), never the caller's result:
// the pipeline builds api.Result from the plan and what it verified.
type message struct {
	Event  *api.Event   `json:"event,omitempty"`
	Report *pull.Report `json:"report,omitempty"`
	Error  *wireError   `json:"error,omitempty"`
}

// wireError is an error crossing the pipe; the parent rebuilds it.
type wireError struct {
	Code    failure.Code      `json:"code"`
	Message string            `json:"message"`
	Reason  failure.CRIReason `json:"reason,omitempty"`
}

func toWire(err error) *wireError {
	return &wireError{Code: failure.CodeOf(err), Message: err.Error(), Reason: failure.CRIReasonOf(err)}
}

// maxErrorMessage bounds the child's error message as the parent repeats
// it (the copy's own error texts are far shorter: registry/errors.go).
const maxErrorMessage = 16 << 10

// err rebuilds the child's error: a code the contract does not have is
// internal, a reason that is not one of failure's is dropped, a message
// over maxErrorMessage is cut there, and every character that is not
// printable escaped (pull.Printable): one line, no terminal control.
func (w *wireError) err() error {
	code := w.Code
	if code.Exit() == 1 {
		code = failure.Internal
	}
	msg := w.Message
	if len(msg) > maxErrorMessage {
		msg = strings.ToValidUTF8(msg[:maxErrorMessage], "") + " [truncated]"
	}
	msg = pull.Printable(msg)
	reason := w.Reason
	if !reason.Known() {
		reason = ""
	}
	return &failure.Error{Code: code, Message: msg, Reason: reason}
}

// Bounds on fd 4's lines. An event is a few hundred bytes once its fields
// pass pull.CheckEvent (two digests, a media type, a host, a few counts), and
// an error a few KiB: every line is at most maxLine, except one, the last
// message (the report or the error), which may be up to maxMessage. The
// report carries up to three manifests (the stored one, the index, the one
// served) of at most pull.MaxManifestBytes, an index's instances as
// served of at most pull.MaxManifestBytes in all, configs as served of at
// most pull.MaxServedConfigBytes in all, and signatures of at most
// pull.MaxSignatureBytes, base64 in JSON (4/3), and small fields: the
// handed-over digests, the endpoints and the JSON of at most
// pull.MaxServedInstances strings twice, within maxReportRest. So the
// parent holds at most one line of maxMessage, ever; a second long line is
// a compromised child trying to exhaust the root parent's memory.
const (
	maxLine       = 16 << 10
	maxReportRest = 2 << 20
	maxMessage    = (4*pull.MaxManifestBytes+pull.MaxServedConfigBytes+pull.MaxSignatureBytes+2)/3*4 + maxReportRest
)

// errOversized is a line on fd 4 longer than it may be.
var errOversized = fmt.Errorf("the pull child sent an oversized message (a line over %d KiB on its event pipe, or a second line over %d KiB)", maxMessage>>10, maxLine>>10)

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
// carries, stamped with the parent's clock, or the reason it is refused
// (pull.CheckEvent: not a progress type, a field that is not what it
// names). The parent emits start, done and error itself, so a compromised
// child cannot tell the caller that a pull finished.
func progressOnly(e api.Event) (api.Event, error) {
	if err := pull.CheckEvent(e); err != nil {
		return api.Event{}, err
	}
	return api.Event{Type: e.Type, TS: time.Now().UTC(), Digest: e.Digest, MediaType: e.MediaType,
		Size: e.Size, Bytes: e.Bytes, Skipped: e.Skipped, Host: e.Host, KeptBytes: min(e.KeptBytes, e.Bytes),
		InstanceDigest: e.InstanceDigest, Layers: e.Layers, ConfigSize: e.ConfigSize, Attempt: e.Attempt}, nil
}
