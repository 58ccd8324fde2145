//go:build pullhelper_hostile

package reexec

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/pullhelper/pullhelper/pull"
)

// Actions of a compromised child against what the parent takes from its
// messages (issue 22 findings 4 and 6): fat events, and a report claiming
// what the parent must verify or know itself.
func init() {
	say := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "pullhelper-child: hostile: "+format+"\n", args...)
	}
	// fat-events: 64 layer_progress events whose digest is 2 MiB each
	// (each a line far over any event's size), then go on.
	registerHostile("fat-events", func(e *hostileEnv) (bool, int) {
		fat := strings.Repeat("a", 2<<20)
		for i := range 64 {
			e.Send(message{Event: &pull.Event{Type: "layer_progress", Digest: fmt.Sprintf("sha256:%03d%s", i, fat), Size: 1 << 30, Bytes: int64(i)}})
		}
		say("fat-events: sent 64 events of 2 MiB")
		return false, 0
	})
	// fat-fields: 2000 layer_progress events whose digest, media type and
	// host are 4 KiB each (each line still short), then go on.
	registerHostile("fat-fields", func(e *hostileEnv) (bool, int) {
		fat := strings.Repeat("a", 4<<10)
		for i := range 2000 {
			e.Send(message{Event: &pull.Event{Type: "layer_progress", Digest: fmt.Sprintf("sha256:%04d%s", i, fat),
				MediaType: "application/" + fat, Host: fat + ".example", Size: 1 << 30, Bytes: int64(i)}})
		}
		say("fat-fields: sent 2000 events with 4 KiB fields")
		return false, 0
	})
	// false-report: send the copy's report with claims the parent must not
	// repeat: a media type the manifest does not have, an image ID and a
	// store (what only a store DEST's commit can tell), and end the child.
	registerHostile("false-report", func(e *hostileEnv) (bool, int) {
		b, err := json.Marshal(e.Report)
		var rep map[string]any
		if err == nil {
			err = json.Unmarshal(b, &rep)
		}
		if err != nil {
			say("false-report: %v", err)
			return true, 103
		}
		rep["media_type"] = "application/vnd.hostile.claim+json"
		rep["image_id"] = "sha256:" + strings.Repeat("e", 64)
		rep["store"] = map[string]any{"type": "containerd", "address": "/run/hostile.sock", "names": []string{"hostile:claim"}}
		line, _ := json.Marshal(map[string]any{"report": rep})
		if _, err := os.NewFile(eventsFD, "events").Write(append(line, '\n')); err != nil {
			say("false-report: %v", err)
			return true, 103
		}
		say("false-report: sent")
		return true, 0
	})
}
