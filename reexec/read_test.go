package reexec

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// readAll runs childProc.read over data as the child's event pipe and
// returns the messages and the error it ended with.
func readAll(t *testing.T, data []byte) ([]message, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = w.Write(data); w.Close() }()
	c := &childProc{events: r}
	defer r.Close()
	msgs := make(chan message, 16)
	errc := make(chan error, 1)
	go c.read(msgs, errc)
	var got []message
	for m := range msgs {
		got = append(got, m)
	}
	return got, <-errc
}

const testDigest = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

// A line within maxMessage whose decoding would amplify it (millions of
// "{}" endpoints or "" digests, each a struct or string header once
// decoded, in slices that double) is refused before it is decoded: the
// parent allocates about the line itself, not the ~1 GiB the decoded
// slices took.
func TestReadRefusesAmplifyingLines(t *testing.T) {
	lines := map[string][]byte{
		"endpoints":  []byte(`{"report":{"digest":"` + testDigest + `","endpoints":[` + repeatTo(`{}`) + "]}}\n"),
		"handed":     []byte(`{"report":{"digest":"` + testDigest + `","copied":{"handed":[` + repeatTo(`""`) + "]}}}\n"),
		"signatures": []byte(`{"report":{"digest":"` + testDigest + `","copied":{"signatures":[` + repeatTo(`""`) + "]}}}\n"),
		"nested":     []byte(`{"report":{"digest":"` + testDigest + `","x":` + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + "}}\n"),
	}
	for name, line := range lines {
		if len(line) > maxMessage {
			t.Fatalf("%s: test line of %d bytes is over maxMessage", name, len(line))
		}
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		got, err := readAll(t, line)
		runtime.ReadMemStats(&m1)
		// The line itself (read into a growing buffer) is about 2×
		// maxMessage; decoding it took over 1 GiB.
		if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > 8*uint64(maxMessage) {
			t.Errorf("%s: reading a %d MiB line allocated %d MiB", name, len(line)>>20, alloc>>20)
		}
		if err == nil || len(got) != 0 {
			t.Errorf("%s: %d messages, error %v; want the line refused", name, len(got), err)
		} else if !strings.Contains(err.Error(), "array of more than") && !strings.Contains(err.Error(), "nested deeper") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func repeatTo(elem string) string {
	n := (maxMessage - 200) / (len(elem) + 1)
	return strings.TrimSuffix(strings.Repeat(elem+",", n), ",")
}

// The longest list a report may carry (pull.MaxHanded handed digests)
// passes the shape check.
func TestReadTakesTheLongestLegitimateList(t *testing.T) {
	handed := strings.TrimSuffix(strings.Repeat(`"`+testDigest+`",`, maxArrayLen), ",")
	got, err := readAll(t, []byte(`{"report":{"digest":"`+testDigest+`","copied":{"handed":[`+handed+"]}}}\n"))
	if err != nil || len(got) != 1 || len(got[0].Report.Copied.Handed) != maxArrayLen {
		t.Fatalf("%d messages, %v", len(got), err)
	}
	if err := got[0].Report.Check(); err != nil {
		t.Fatal(err)
	}
}

// A line the parent cannot decode is reported by kind and offset: none of
// the child's bytes are repeated (Go's UnmarshalTypeError quotes a number
// literal in full, a time.ParseError the text).
func TestReadErrorRepeatsNothingOfTheLine(t *testing.T) {
	for _, line := range []string{
		`{"error":{"code":"network","message":"x"},"report":{"layers":` + strings.Repeat("9", 20<<20) + "}}",
		`{"event":{"type":"layer_progress","size":` + strings.Repeat("9", 10000) + `}}`,
		`{"event":{"type":"layer_progress","ts":"` + "\u009b31m\u2028X" + strings.Repeat("x", 100) + `"}}`,
		`{"event":{"type":"layer_progress","size":1e999}}`,
		`{"event":{"type":"layer_progress","size":"xxxxxxxxxxxxxxxx"}}`,
		`{"event":{"type":xxxxxxxxxxxxxxxx}}`,
	} {
		_, err := readAll(t, []byte(line+"\n"))
		if err == nil {
			t.Errorf("%.60s…: accepted", line)
			continue
		}
		msg := err.Error()
		if len(msg) > 200 || strings.Contains(msg, "999") || strings.Contains(msg, "xxxx") || strings.ContainsRune(msg, '\u009b') {
			t.Errorf("%.60s…: the error repeats the line: %.300q", line, msg)
		}
	}
}

// The report (or the error) is the child's last word: what it writes
// after is read (the child never blocks on a full pipe) and ignored.
func TestReadIgnoresLinesAfterTheReport(t *testing.T) {
	for _, last := range []string{`{"report":{"digest":"` + testDigest + `"}}`, `{"error":{"code":"network","message":"m"}}`} {
		ev := `{"event":{"type":"layer_done","digest":"` + testDigest + `","size":5}}`
		data := ev + "\n" + last + "\n" + strings.Repeat(ev+"\n", 5) + `{"report":{"digest":"` + testDigest + `","layers":7}}` + "\n" + strings.Repeat("x", 1<<20)
		got, err := readAll(t, []byte(data))
		if err != nil || len(got) != 2 || got[0].Event == nil || (got[1].Report == nil && got[1].Error == nil) {
			t.Fatalf("after %s: %d messages, %v", last, len(got), err)
		}
	}
}

// The child's stderr is relayed escaped, bounded and labelled: in the
// text format every line starts with childPrefix, in the JSON format each
// is the "line" of a parent record with msg "child", so a child cannot
// forge a record of the parent's or drive the terminal; past
// maxStderrTotal one line says the rest was dropped.
func TestRelayStderrCannotForge(t *testing.T) {
	forged := "{\"time\":\"2030-01-01T00:00:00Z\",\"level\":\"INFO\",\"msg\":\"forged parent record\"}\n" +
		"\x1b]0;owned\x07\x1b[2Kpullhelper: pulled OK\u2028next\u0085\r\n"
	in := forged + strings.Repeat(strings.Repeat("z", 1000)+"\n", 3<<10)

	var text bytes.Buffer
	relayStderr(io.NopCloser(strings.NewReader(in)), &text, nil, false)
	lines := strings.Split(strings.TrimSuffix(text.String(), "\n"), "\n")
	for _, l := range lines {
		if !strings.HasPrefix(l, childPrefix) || strings.IndexFunc(l, func(r rune) bool { return !strconv.IsPrint(r) }) >= 0 {
			t.Fatalf("text: relayed line %.80q", l)
		}
	}
	if text.Len() > maxStderrTotal+64<<10 || !strings.Contains(lines[len(lines)-1], "child output truncated") {
		t.Errorf("text: %d bytes relayed of %d, last line %q", text.Len(), len(in), lines[len(lines)-1])
	}

	var js bytes.Buffer
	relayStderr(io.NopCloser(strings.NewReader(forged)), io.Discard, slog.New(slog.NewJSONHandler(&js, nil)), false)
	n := 0
	for _, l := range strings.Split(strings.TrimSuffix(js.String(), "\n"), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil || rec["msg"] != "child" {
			t.Fatalf("json: record %q (%v)", l, err)
		}
		line, _ := rec["line"].(string)
		if strings.IndexFunc(line, func(r rune) bool { return !strconv.IsPrint(r) }) >= 0 {
			t.Errorf("json: line %q not escaped", line)
		}
		n++
	}
	if n != 2 {
		t.Errorf("json: %d records for 2 lines: %s", n, js.String())
	}
}
