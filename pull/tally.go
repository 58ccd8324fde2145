package pull

import (
	"sync"

	"github.com/opencontainers/go-digest"
	"go.podman.io/image/v5/manifest"
	"go.podman.io/image/v5/types"
)

// tally turns containers/image progress into events and totals.
type tally struct {
	mu     sync.Mutex
	blobs  map[digest.Digest]int64
	layers map[digest.Digest]bool
}

func newTally() *tally {
	return &tally{blobs: map[digest.Digest]int64{}, layers: map[digest.Digest]bool{}}
}

func (t *tally) event(pp types.ProgressProperties) (Event, bool) {
	a := pp.Artifact
	e := Event{Digest: a.Digest.String(), MediaType: a.MediaType, Size: a.Size}
	if e.Size < 0 {
		e.Size = 0
	}
	isLayer := !isConfigMediaType(a.MediaType)
	t.mu.Lock()
	defer t.mu.Unlock()
	switch pp.Event {
	case types.ProgressEventNewArtifact:
		e.Type = "layer_start"
	case types.ProgressEventRead:
		e.Type, e.Bytes = "layer_progress", int64(pp.Offset)
	case types.ProgressEventDone, types.ProgressEventSkipped:
		e.Type, e.Bytes = "layer_done", int64(pp.Offset)
		e.Skipped = pp.Event == types.ProgressEventSkipped
		size := a.Size
		if size <= 0 {
			size = int64(pp.Offset)
		}
		t.blobs[a.Digest] = size
		if isLayer {
			t.layers[a.Digest] = true
		}
	default:
		return e, false
	}
	if !isLayer {
		e.Type = "config" + e.Type[len("layer"):]
	}
	return e, true
}

func (t *tally) totals() (layers int, bytes int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range t.blobs {
		bytes += n
	}
	return len(t.layers), bytes
}

func isConfigMediaType(mt string) bool {
	switch mt {
	case manifest.DockerV2Schema2ConfigMediaType, "application/vnd.oci.image.config.v1+json":
		return true
	}
	return false
}
