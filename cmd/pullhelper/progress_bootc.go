package main

import (
	"strings"
	"time"

	"github.com/pullhelper/pullhelper/api"
)

// --progress-format bootc: the pull's events (api.Event) translated into
// bootc's progress protocol (api.BootcStart, api.BootcProgressBytes,
// api.BootcProgressSteps; see api/bootc.go for the upstream source), so
// that tooling written for `bootc upgrade --progress-fd` reads a pullhelper
// pull unchanged:
//
//   - Start {version "0.1.0"} first, always.
//   - ProgressBytes task "pulling" (bootc's name for the same work), id and
//     description naming the image, one subtask "layer" per layer in the
//     order the layers started, completed ones kept (as bootc does). A layer
//     already in DEST (layer_done skipped) counts as cached: bytesCached and
//     stepsCached, not bytesTotal and stepsTotal, as bootc counts layers a
//     previous run fetched. The config blob is not a layer and not counted.
//     From the resolved event on (before any blob), bytesTotal and
//     stepsTotal are at least what it announces (its size less its
//     configs', its layers) less what is cached so far, as bootc's are the
//     layers to fetch from the start; before it, and in the final line of
//     a success, they are the layers started (the final line's bytes equal
//     its bytesTotal, the fetched layers' sizes).
//   - ProgressSteps task "pullhelper" with the steps the events let one
//     observe: "resolving" (the image and its manifest; until the resolved
//     event or the first blob), "fetching" (the blobs; until the config and every
//     started layer are done: containers/image copies the config last) and
//     "committing" (the parent's verification and commit; until done). The
//     subtasks are the steps completed so far and the current one, as
//     bootc's "staging" task lists them.
//
// Rate: at most api.BootcRefreshHz lines a second. An update within
// 1/BootcRefreshHz of the last line written is not written but kept (the
// state is cumulative: the next line carries it), and written when the
// window opens even if no event comes then (the sink's timer: the commit
// sends none), and, as with bootc, Start is not counted. The final lines (at done or error: the last ProgressBytes
// with bytes == bytesTotal on success, then the last ProgressSteps) are
// always written, whatever the rate. On error the current step stays
// incomplete; the error itself goes to stdout as always (bootc's protocol
// has no error event).

// Progress formats (--progress-format).
const (
	progressFormatPullhelper = "pullhelper"
	progressFormatBootc      = "bootc"
)

// bootcTask* are the task names of the translation.
const (
	bootcTaskBytes = "pulling"
	bootcTaskSteps = "pullhelper"
)

var bootcSteps = []api.BootcSubTaskStep{
	{Subtask: "resolving", Description: "Resolving the image and fetching its manifest", ID: "resolving"},
	{Subtask: "fetching", Description: "Fetching layers", ID: "fetching"},
	{Subtask: "committing", Description: "Verifying and committing to the destination", ID: "committing"},
}

// bootcMaxLayers bounds the layers tracked (and listed in every line): the
// digests come from the pull child, which is not trusted, and no real image
// comes near it (overlay stacks 128 at most). Events for further digests are
// ignored, as are digests longer than a digest is (bootcMaxDigest; the
// parent refuses such events from the child already): so the translator
// holds, and each line lists, at most bootcMaxLayers short entries.
const (
	bootcMaxLayers = 1024
	bootcMaxDigest = len("sha512:") + 128
)

type bootcLayer struct {
	digest  string
	size    uint64
	bytes   uint64
	done    bool
	skipped bool
}

// bootcLine is one event to write; keep marks one that must not be dropped
// (Start and the final lines).
type bootcLine struct {
	v    any
	keep bool
}

// bootcTranslator turns an api.Event stream into bootc lines. It is not
// safe for concurrent use; the clock is the caller's (handle's now).
type bootcTranslator struct {
	minGap     time.Duration
	lastWrite  time.Time
	wrote      bool // a rate-limited line was written (lastWrite is valid)
	started    bool // Start was written
	finished   bool // the final lines were written
	image      string
	layers     []*bootcLayer
	byDigest   map[string]*bootcLayer
	step       int // index into bootcSteps of the running step; len = all done
	configDone bool
	layersDone int // done.layers, once known
	bytesDirty bool
	stepsDirty bool
	// announced: a resolved event said annLayers layers of annBytes in
	// all; succeeded: the done event came (the final line is what was
	// fetched).
	// totalsNew: the announced totals are not written yet.
	announced, succeeded, totalsNew bool
	annLayers, annBytes             uint64
}

func newBootcTranslator() *bootcTranslator {
	return &bootcTranslator{minGap: time.Second / api.BootcRefreshHz, byDigest: map[string]*bootcLayer{}}
}

func clampSize(n int64) uint64 {
	if n < 0 {
		return 0
	}
	return uint64(n)
}

// handle takes one event seen at now and returns the lines to write.
func (t *bootcTranslator) handle(e api.Event, now time.Time) []bootcLine {
	if t.finished {
		return nil
	}
	var out []bootcLine
	if !t.started {
		t.started = true
		out = append(out, bootcLine{v: api.BootcStart{Type: api.BootcTypeStart, Version: api.BootcProgressVersion}, keep: true})
		t.stepsDirty = true
	}
	switch e.Type {
	case api.EventStart:
		t.image = e.Image
	case api.EventResolved:
		t.blobSeen()
		t.announced, t.totalsNew = true, true
		t.annLayers, t.annBytes = clampSize(int64(e.Layers)), clampSize(e.Size-e.ConfigSize)
		t.bytesDirty = true
	case api.EventConfigStart, api.EventConfigProg:
		t.blobSeen()
	case api.EventConfigDone:
		t.blobSeen()
		t.configDone = true
		t.maybeCommitting()
	case api.EventLayerStart, api.EventLayerProgress, api.EventLayerDone:
		t.blobSeen()
		l := t.byDigest[e.Digest]
		if l == nil {
			if len(t.layers) >= bootcMaxLayers || len(e.Digest) > bootcMaxDigest {
				break
			}
			l = &bootcLayer{digest: e.Digest}
			t.byDigest[e.Digest] = l
			t.layers = append(t.layers, l)
		}
		if l.done {
			break
		}
		// Bytes never go down (a retried blob starts again from 0); a
		// blob longer than declared grows its total.
		l.bytes = max(l.bytes, clampSize(e.Bytes))
		l.size = max(l.size, clampSize(e.Size), l.bytes)
		if e.Type == api.EventLayerDone {
			l.done, l.skipped = true, e.Skipped
			l.bytes = l.size
			t.maybeCommitting()
		}
		t.bytesDirty = true
	case api.EventDone:
		t.layersDone = max(e.Layers, 0)
		t.succeeded = true
		t.step = len(bootcSteps)
		t.finished = true
		return append(out, bootcLine{v: t.bytesEvent(), keep: true}, bootcLine{v: t.stepsEvent(), keep: true})
	case api.EventError:
		t.finished = true
		return append(out, bootcLine{v: t.bytesEvent(), keep: true}, bootcLine{v: t.stepsEvent(), keep: true})
	}
	return append(out, t.flush(now)...)
}

// flush returns the held update once the window is open at now: the steps
// if they changed, else the bytes; nothing if nothing changed. The totals
// a resolved event announces go first, so that the first ProgressBytes
// line has them before any layer started.
func (t *bootcTranslator) flush(now time.Time) []bootcLine {
	if t.finished || t.wrote && now.Sub(t.lastWrite) < t.minGap {
		return nil
	}
	var l bootcLine
	switch {
	case t.totalsNew && t.bytesDirty:
		l = bootcLine{v: t.bytesEvent()}
	case t.stepsDirty:
		l = bootcLine{v: t.stepsEvent()}
	case t.bytesDirty:
		l = bootcLine{v: t.bytesEvent()}
	default:
		return nil
	}
	t.wrote, t.lastWrite = true, now
	return []bootcLine{l}
}

// due is when flush would next write a held update, if one is held.
func (t *bootcTranslator) due() (time.Time, bool) {
	if t.finished || !t.stepsDirty && !t.bytesDirty {
		return time.Time{}, false
	}
	return t.lastWrite.Add(t.minGap), true
}

// blobSeen: the manifest was read (resolved, or a blob started).
func (t *bootcTranslator) blobSeen() {
	if t.step == 0 {
		t.step = 1
		t.stepsDirty = true
	}
}

// maybeCommitting: the copy wrote its last blob once the config and every
// started layer are done.
func (t *bootcTranslator) maybeCommitting() {
	if t.step != 1 || !t.configDone {
		return
	}
	for _, l := range t.layers {
		if !l.done {
			return
		}
	}
	t.step = 2
	t.stepsDirty = true
}

func (t *bootcTranslator) id() string {
	if t.image == "" {
		return bootcTaskBytes
	}
	return t.image
}

func (t *bootcTranslator) bytesEvent() api.BootcProgressBytes {
	t.bytesDirty, t.totalsNew = false, false
	desc := "Pulling image"
	if t.image != "" {
		desc += " " + t.image
	}
	ev := api.BootcProgressBytes{Type: api.BootcTypeProgressBytes, Task: bootcTaskBytes, Description: desc, ID: t.id(),
		Subtasks: make([]api.BootcSubTaskBytes, 0, len(t.layers))}
	for _, l := range t.layers {
		st := api.BootcSubTaskBytes{Subtask: "layer", Description: "layer: " + shortDigest(l.digest), ID: l.digest,
			Bytes: l.bytes, BytesTotal: l.size}
		if l.skipped {
			st.BytesCached = l.size
			ev.BytesCached += l.size
			ev.StepsCached++
		} else {
			ev.Bytes += l.bytes
			ev.BytesTotal += l.size
			ev.StepsTotal++
			if l.done {
				ev.Steps++
			}
		}
		ev.Subtasks = append(ev.Subtasks, st)
	}
	// The resolved event's totals, less what turned out cached, until
	// the final line of a success.
	if t.announced && !t.succeeded {
		if t.annBytes > ev.BytesCached {
			ev.BytesTotal = max(ev.BytesTotal, t.annBytes-ev.BytesCached)
		}
		if t.annLayers > ev.StepsCached {
			ev.StepsTotal = max(ev.StepsTotal, t.annLayers-ev.StepsCached)
		}
	}
	// done's layer count covers layers that had no events of their own.
	if n := uint64(t.layersDone); n > ev.StepsCached+ev.StepsTotal {
		ev.StepsTotal = n - ev.StepsCached
	}
	return ev
}

func (t *bootcTranslator) stepsEvent() api.BootcProgressSteps {
	t.stepsDirty = false
	desc := "Pulling image"
	if t.image != "" {
		desc += " " + t.image
	}
	ev := api.BootcProgressSteps{Type: api.BootcTypeProgressSteps, Task: bootcTaskSteps, Description: desc, ID: t.id(),
		Steps: uint64(min(t.step, len(bootcSteps))), StepsTotal: uint64(len(bootcSteps)),
		Subtasks: make([]api.BootcSubTaskStep, 0, len(bootcSteps))}
	for i, s := range bootcSteps {
		if i > t.step {
			break
		}
		s.Completed = i < t.step
		ev.Subtasks = append(ev.Subtasks, s)
	}
	return ev
}

// shortDigest is the digest's first 21 hex digits, as bootc describes a
// layer ("layer: <21 hex digits>").
func shortDigest(d string) string {
	if i := strings.IndexByte(d, ':'); i >= 0 {
		d = d[i+1:]
	}
	if len(d) > 21 {
		d = d[:21]
	}
	return d
}
