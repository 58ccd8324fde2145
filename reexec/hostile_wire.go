//go:build pullhelper_hostile

package reexec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/pull"
)

// Actions of a compromised child against what the parent takes from its
// messages (issue 22 findings 4 and 6, and the wire review's): fat events,
// a report claiming what the parent must verify or know itself, lines that
// amplify when decoded or make the decoder quote them, and text that
// drives a terminal or forges the parent's log.
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
	raw := func(b []byte) error {
		_, err := os.NewFile(eventsFD, "events").Write(b)
		return err
	}
	// wire-amp: the copy's report with an endpoints array of ~8 M "{}"
	// filling maxMessage (decoded, over 1 GiB in the parent), and end.
	registerHostile("wire-amp", func(e *hostileEnv) (bool, int) {
		b, err := json.Marshal(message{Report: e.Report})
		if err != nil {
			say("wire-amp: %v", err)
			return true, 103
		}
		var buf bytes.Buffer
		buf.Write(bytes.TrimSuffix(b, []byte("}}")))
		buf.WriteString(`,"endpoints":[`)
		for buf.Len() < maxMessage-100 {
			buf.WriteString(`{},`)
		}
		buf.Truncate(buf.Len() - 1)
		buf.WriteString("]}}\n")
		if err := raw(buf.Bytes()); err != nil {
			say("wire-amp: %v", err)
			return true, 103
		}
		say("wire-amp: sent %d MiB", buf.Len()>>20)
		return true, 0
	})
	// wire-esc: an error whose message drives a terminal (cursor up, erase
	// line, OSC retitle, concealed text, a line separator, NEL) and end.
	registerHostile("wire-esc", func(e *hostileEnv) (bool, int) {
		e.Send(message{Error: &wireError{Code: "network", Message: "x\x1b[1A\x1b[2K\x1b]0;owned\x07pullhelper: pulled OK\x1b[8m hidden\u2028\u0085\x00\b\u009b31m"}})
		say("wire-esc: sent")
		return true, 1
	})
	// wire-stderr: forge records of the parent's log (JSON and text) and
	// terminal escapes on the relayed stderr, then go on.
	registerHostile("wire-stderr", func(e *hostileEnv) (bool, int) {
		fmt.Fprintf(os.Stderr, "{\"time\":\"2030-01-01T00:00:00Z\",\"level\":\"INFO\",\"msg\":\"forged parent record\"}\n\x1b]0;owned\x07\x1b[2Ktime=2030 level=WARN msg=\"forged text record\"\n")
		// 3 MiB more: past what the parent relays of one pull.
		line := strings.Repeat("z", 1000) + "\n"
		for range 3 << 10 {
			fmt.Fprint(os.Stderr, line)
		}
		return false, 0
	})
	// wire-bignum: an error and a report in one long line whose JSON the
	// parent cannot decode: a 20 MiB number literal (Go's decoder error
	// quotes it in full), and end.
	registerHostile("wire-bignum", func(e *hostileEnv) (bool, int) {
		if err := raw([]byte(`{"error":{"code":"network","message":"x"},"report":{"layers":` + strings.Repeat("9", 20<<20) + "}}\n")); err != nil {
			say("wire-bignum: %v", err)
			return true, 103
		}
		say("wire-bignum: sent")
		return true, 0
	})
	// wire-tally: the copy's report claiming counts it did not verify
	// (65536 layers, 2^50 bytes) and a host the plan never named, then
	// progress events after the report, and end.
	registerHostile("wire-tally", func(e *hostileEnv) (bool, int) {
		r := *e.Report
		r.Layers, r.Bytes = pull.MaxLayers, pull.MaxCount
		r.Endpoints = append([]api.EndpointUse{{Host: "evil.attacker.example:443", Manifests: 1, Blobs: 99, Bytes: 1 << 40}}, r.Endpoints...)
		for i := range r.Endpoints {
			r.Endpoints[i].Blobs, r.Endpoints[i].Bytes = 99, 1<<40
		}
		e.Send(message{Report: &r})
		for range 5 {
			e.Send(message{Event: &api.Event{Type: "layer_done", Digest: "sha256:" + strings.Repeat("b", 64), Size: 5}})
		}
		say("wire-tally: sent")
		return true, 0
	})
}
