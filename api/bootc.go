package api

import (
	"encoding/json"
	"fmt"
)

// bootc's progress protocol, what `bootc upgrade --progress-fd N` (and
// `pullhelper pull --progress-format bootc --progress-fd N`) writes: JSON
// Lines, one event per line, internally tagged by "type" (Start,
// ProgressBytes, ProgressSteps), every other field camelCase and required.
//
// Transcribed from bootc-dev/bootc at commit
// 534c76ea474a356aa288f6767635e579ea2614d5:
// crates/lib/src/progress_jsonl.rs (enum Event, SubTaskBytes, SubTaskStep,
// API_VERSION, REFRESH_HZ) and docs/src/progress-v0.schema.json, the schema
// bootc publishes for it ("progress-v0"). bootc itself names its tasks
// "pulling" (ProgressBytes, one subtask per layer: "layer" or "ostree chunk"),
// "importing" and "staging" (ProgressSteps); see crates/lib/src/deploy.rs.

// BootcProgressVersion is the protocol version a Start event carries
// (bootc's API_VERSION).
const BootcProgressVersion = "0.1.0"

// BootcRefreshHz is the most events a second bootc writes (REFRESH_HZ): an
// update that may be dropped is dropped when one was written less than
// 1/BootcRefreshHz ago.
const BootcRefreshHz = 5

// The values of the "type" tag.
const (
	BootcTypeStart         = "Start"
	BootcTypeProgressBytes = "ProgressBytes"
	BootcTypeProgressSteps = "ProgressSteps"
)

// BootcStart is the first event of a stream.
type BootcStart struct {
	Type    string `json:"type"` // BootcTypeStart
	Version string `json:"version"`
}

// BootcProgressBytes is an incremental update of a byte-counted task, e.g.
// an image download. BytesTotal 0 means "unspecified". Cached counts are
// what a previous run already fetched (for a pull: layers already in DEST).
type BootcProgressBytes struct {
	Type        string `json:"type"` // BootcTypeProgressBytes
	Task        string `json:"task"`
	Description string `json:"description"`
	ID          string `json:"id"`
	BytesCached uint64 `json:"bytesCached"`
	Bytes       uint64 `json:"bytes"`
	BytesTotal  uint64 `json:"bytesTotal"`
	StepsCached uint64 `json:"stepsCached"`
	Steps       uint64 `json:"steps"`
	StepsTotal  uint64 `json:"stepsTotal"`
	// Subtasks is never nil when written: the schema wants an array.
	Subtasks []BootcSubTaskBytes `json:"subtasks"`
}

// BootcSubTaskBytes is one part of a ProgressBytes task, e.g. a layer; it is
// complete when Bytes == BytesTotal.
type BootcSubTaskBytes struct {
	Subtask     string `json:"subtask"`
	Description string `json:"description"`
	ID          string `json:"id"`
	BytesCached uint64 `json:"bytesCached"`
	Bytes       uint64 `json:"bytes"`
	BytesTotal  uint64 `json:"bytesTotal"`
}

// BootcProgressSteps is an incremental update of a task made of discrete
// steps.
type BootcProgressSteps struct {
	Type        string `json:"type"` // BootcTypeProgressSteps
	Task        string `json:"task"`
	Description string `json:"description"`
	ID          string `json:"id"`
	StepsCached uint64 `json:"stepsCached"`
	Steps       uint64 `json:"steps"`
	StepsTotal  uint64 `json:"stepsTotal"`
	// Subtasks is never nil when written: the schema wants an array.
	Subtasks []BootcSubTaskStep `json:"subtasks"`
}

// BootcSubTaskStep is one step of a ProgressSteps task: Completed is false
// while it runs and true once it is done.
type BootcSubTaskStep struct {
	Subtask     string `json:"subtask"`
	Description string `json:"description"`
	ID          string `json:"id"`
	Completed   bool   `json:"completed"`
}

// ParseBootcEvent decodes one line of a bootc progress stream into a
// *BootcStart, *BootcProgressBytes or *BootcProgressSteps. It is lenient
// the way bootc's own serde types are (unknown fields are ignored, as bootc
// says new fields may be added) but refuses an unknown type.
func ParseBootcEvent(line []byte) (any, error) {
	var tag struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(line, &tag); err != nil {
		return nil, fmt.Errorf("decoding bootc progress event: %w", err)
	}
	var v any
	switch tag.Type {
	case BootcTypeStart:
		v = &BootcStart{}
	case BootcTypeProgressBytes:
		v = &BootcProgressBytes{}
	case BootcTypeProgressSteps:
		v = &BootcProgressSteps{}
	default:
		return nil, fmt.Errorf("decoding bootc progress event: unknown type %q", tag.Type)
	}
	if err := json.Unmarshal(line, v); err != nil {
		return nil, fmt.Errorf("decoding bootc %s event: %w", tag.Type, err)
	}
	return v, nil
}
