package reexec

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/pullhelper/pullhelper/dnsconf"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/privdrop"
	"github.com/pullhelper/pullhelper/pull"
)

// ChildName is argv[0] of the child.
const ChildName = "pullhelper-child"

// Fds of the two protocol pipes in the child.
const (
	planFD   = 3
	eventsFD = 4
)

// childStageDir is where the child sees the staging area: its private
// mount namespace has the staging directory bind-mounted over /tmp (done
// while still root, which may traverse DEST's ancestors). So DEST's ancestors (often root-only, 0700) need not be
// searchable by the pull uid, temporary files land on DEST's filesystem, and
// the child never learns DEST's path.
const childStageDir = "/tmp"

// childMaterialDir is the MaterialDir the parent is meant to send: a
// directory in the child's view of the staging root, hidden under a tmpfs.
const childMaterialDir = childStageDir + "/.pullhelper-material"

func stageInChild(st *pull.Stage) *pull.Stage {
	return &pull.Stage{Root: childStageDir, Path: childStageDir + "/" + filepath.Base(st.Path)}
}

// request is what the parent sends on fd 3. It must be JSON-representable.
type request struct {
	Plan     *pull.Plan        `json:"plan"`
	Material *pull.Material    `json:"material"`
	Stage    *pull.Stage       `json:"stage"`     // as the child sees it
	StageDir string            `json:"stage_dir"` // the real staging directory, bind-mounted at Stage.Root
	Cgroup   map[string]string `json:"cgroup"`    // controller → path /proc/self/cgroup must show
	Identity privdrop.Identity `json:"identity"`
	DNS      *dnsconf.Config   `json:"dns,omitempty"` // files to bind over /etc/resolv.conf and /etc/hosts
	Seccomp  bool              `json:"seccomp"`
	Log      logConfig         `json:"log"`
	Bars     bool              `json:"bars"`

	// MaterialDir, when set, is where the child keeps key material (the
	// --cert-dir client key and certificates): a private tmpfs the child
	// mounts there (mountPrivateTmpfs), so no key reaches DEST's
	// filesystem and none survives the child. Empty: the staging area.
	MaterialDir string `json:"material_dir,omitempty"`
}

type logConfig struct {
	Format string `json:"format"`
	Debug  bool   `json:"debug"`
}

// message is one line on fd 4. Exactly one field is set.
type message struct {
	Event  *pull.Event  `json:"event,omitempty"`
	Result *pull.Result `json:"result,omitempty"`
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

// childEventTypes are the only events the child may send: progress. The
// parent emits start, done and error itself, so a compromised child cannot
// tell the caller that a pull finished.
var childEventTypes = map[string]bool{
	"layer_start": true, "layer_progress": true, "layer_done": true,
	"config_start": true, "config_progress": true, "config_done": true,
}

// progressOnly returns the child's event reduced to what a progress event
// carries, stamped with the parent's clock, or false for any other type.
func progressOnly(e pull.Event) (pull.Event, bool) {
	if !childEventTypes[e.Type] {
		return pull.Event{}, false
	}
	return pull.Event{Type: e.Type, TS: time.Now().UTC(), Digest: e.Digest, MediaType: e.MediaType,
		Size: e.Size, Bytes: e.Bytes, Skipped: e.Skipped}, true
}
