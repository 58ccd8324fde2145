package api_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/pullhelper/pullhelper/api"
)

// Lines as bootc writes them (canon_json: sorted keys), the values of
// progress_jsonl.rs's own test, decode into the api types.
func TestParseBootcEvent(t *testing.T) {
	for _, tc := range []struct {
		line string
		want any
	}{
		{`{"type":"Start","version":"0.1.0"}`, &api.BootcStart{Type: "Start", Version: api.BootcProgressVersion}},
		{`{"description":"somedesc","id":"someid","steps":0,"stepsCached":0,"stepsTotal":3,"subtasks":[{"completed":true,"description":"Importing Image","id":"importing","subtask":"importing"}],"task":"sometask","type":"ProgressSteps"}`,
			&api.BootcProgressSteps{Type: "ProgressSteps", Task: "sometask", Description: "somedesc", ID: "someid", StepsTotal: 3,
				Subtasks: []api.BootcSubTaskStep{{Subtask: "importing", Description: "Importing Image", ID: "importing", Completed: true}}}},
		{`{"bytes":11,"bytesCached":1,"bytesTotal":42,"description":"somedesc","id":"someid","steps":2,"stepsCached":4,"stepsTotal":3,"subtasks":[{"bytes":5,"bytesCached":6,"bytesTotal":7,"description":"layer: abc","id":"abc","subtask":"layer"}],"task":"sometask","type":"ProgressBytes"}`,
			&api.BootcProgressBytes{Type: "ProgressBytes", Task: "sometask", Description: "somedesc", ID: "someid", BytesCached: 1, Bytes: 11, BytesTotal: 42, StepsCached: 4, Steps: 2, StepsTotal: 3,
				Subtasks: []api.BootcSubTaskBytes{{Subtask: "layer", Description: "layer: abc", ID: "abc", BytesCached: 6, Bytes: 5, BytesTotal: 7}}}},
	} {
		got, err := api.ParseBootcEvent([]byte(tc.line))
		if err != nil {
			t.Fatalf("%s: %v", tc.line, err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\ngot  %#v\nwant %#v", tc.line, got, tc.want)
		}
		// And back: the same keys and values (Go writes them in field order).
		b, _ := json.Marshal(got)
		var a, c map[string]any
		_ = json.Unmarshal([]byte(tc.line), &a)
		_ = json.Unmarshal(b, &c)
		if !reflect.DeepEqual(a, c) {
			t.Errorf("round trip of %s gave %s", tc.line, b)
		}
	}
	for _, bad := range []string{`{"type":"Done"}`, `{}`, `not json`, `{"type":"Start","version":3}`} {
		if _, err := api.ParseBootcEvent([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}
