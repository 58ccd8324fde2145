package reexec

import (
	"path/filepath"

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
