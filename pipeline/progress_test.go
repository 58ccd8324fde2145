package pipeline

import (
	"testing"
	"time"

	"github.com/pullhelper/pullhelper/api"
)

// The caller sees a blob's layer_progress at most every progressInterval on
// the parent's own clock, stamped when passed, however the child's events
// were bunched on the way (tests/040's rate check reads these stamps).
func TestProgressGate(t *testing.T) {
	clock := time.Unix(1000, 0)
	var got []api.Event
	gate := progressGate(func(e api.Event) { got = append(got, e) }, func() time.Time { return clock })
	a, b := "sha256:aa", "sha256:bb"
	step := func(d time.Duration, e api.Event) { clock = clock.Add(d); gate(e) }
	step(0, api.Event{Type: api.EventLayerStart, Digest: a})
	step(0, api.Event{Type: api.EventLayerProgress, Digest: a, Bytes: 1})
	step(10*time.Millisecond, api.Event{Type: api.EventLayerProgress, Digest: a, Bytes: 2})  // too soon: dropped
	step(0, api.Event{Type: api.EventLayerProgress, Digest: b, Bytes: 1})                    // another blob: passed
	step(240*time.Millisecond, api.Event{Type: api.EventLayerProgress, Digest: a, Bytes: 3}) // 250 ms after a's first
	step(0, api.Event{Type: api.EventLayerDone, Digest: a})
	step(0, api.Event{Type: api.EventLayerProgress, Digest: a, Bytes: 4}) // after done: a new blob run
	step(0, api.Event{Type: api.EventDone})                               // not a progress event: never passed
	var seen []int64
	last := map[string]time.Time{}
	for _, e := range got {
		if e.TS.IsZero() {
			t.Errorf("%s %s: no stamp", e.Type, e.Digest)
		}
		if e.Type == api.EventLayerProgress {
			if p, ok := last[e.Digest]; ok && e.TS.Sub(p) < progressInterval {
				t.Errorf("%s: layer_progress %v after the last", e.Digest, e.TS.Sub(p))
			}
			last[e.Digest] = e.TS
			seen = append(seen, e.Bytes)
		}
		if e.Type == api.EventLayerDone {
			delete(last, e.Digest)
		}
		if e.Type == api.EventDone {
			t.Errorf("done passed")
		}
	}
	if want := []int64{1, 1, 3, 4}; len(seen) != len(want) || seen[0] != 1 || seen[1] != 1 || seen[2] != 3 || seen[3] != 4 {
		t.Errorf("layer_progress bytes passed %v, want %v", seen, want)
	}
	if len(got) != 6 {
		t.Errorf("passed %d events, want 6 (start, 4 progress, done of a)", len(got))
	}
}
