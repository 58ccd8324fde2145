package reexec

// Fuzz targets for what the root parent reads from the (untrusted) child on
// fd 4: the bounded line reader and the message decoder over it.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/pull"
)

// FuzzReadLine: readLine returns exactly the '\n'-separated lines of its
// input, each of at most max bytes, whatever the buffer size; a longer line
// is errOversized, an unterminated last line io.ErrUnexpectedEOF (or
// errOversized once it is longer than a full line could be).
func FuzzReadLine(f *testing.F) {
	f.Add([]byte("a\nbb\n"), uint8(8), uint8(16))
	f.Add([]byte("12345678\n"), uint8(8), uint8(16))
	f.Add([]byte("123456789\n"), uint8(8), uint8(16))
	f.Add([]byte(strings.Repeat("x", 1000)), uint8(8), uint8(16))
	f.Add([]byte("a\nhalf"), uint8(8), uint8(16))
	f.Add([]byte("\n\n\r\n"), uint8(0), uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, max, size uint8) {
		br := bufio.NewReaderSize(bytes.NewReader(data), int(size)) // at least 16
		rest := data
		for {
			got, err := readLine(br, int(max))
			i := bytes.IndexByte(rest, '\n')
			switch {
			case len(rest) == 0:
				if !errors.Is(err, io.EOF) {
					t.Fatalf("at the end: %q, %v, want io.EOF", got, err)
				}
				return
			case (i < 0 && len(rest) > int(max)+1) || i > int(max):
				if !errors.Is(err, errOversized) {
					t.Fatalf("line of %d bytes (max %d): %q, %v, want errOversized", min(i, len(rest)), max, got, err)
				}
				return
			case i < 0:
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("unterminated %q: %q, %v", rest, got, err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, rest[:i]) {
				t.Fatalf("got %q, %v, want %q", got, err, rest[:i])
			}
			rest = rest[i+1:]
		}
	})
}

// FuzzChildMessages: whatever the child writes on fd 4, the parent's
// decoder stops with nil (EOF, a line cut short) or a one-line error, emits
// only messages of complete JSON lines, at most one of them from a line over
// maxLine (and that one a report or an error), and the parent's bounds hold
// for what it takes from them: only well-formed progress events (digests,
// media types, hosts of bounded length), at most pull.MaxEndpoints
// endpoints with valid hosts and counts in range.
func FuzzChildMessages(f *testing.F) {
	for _, m := range []message{
		{Event: &api.Event{Type: api.EventLayerProgress, Digest: "sha256:ab", Bytes: 10, Size: 20, Host: "reg.example:5000"}},
		{Event: &api.Event{Type: api.EventLayerProgress, Digest: "sha256:" + strings.Repeat("a", 64), MediaType: "application/vnd.oci.image.layer.v1.tar+gzip", Bytes: 10, Size: 20, Host: "[::1]:5000"}},
		{Event: &api.Event{Type: "done"}},
		{Report: &pull.Report{Digest: "sha256:" + strings.Repeat("b", 64), Endpoints: []api.EndpointUse{{Host: "a", Blobs: 1}, {Host: "", Blobs: 1}, {Host: "b", Bytes: -1}}}},
		{Error: &wireError{Code: failure.Unauthorized, Message: "unauthorized: reg"}},
	} {
		b, err := json.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append(b, '\n'))
	}
	f.Add([]byte("{\"event\":{\"type\":\"layer_progress\",\"host\":\"" + strings.Repeat("h", 300) + "\"}}\n\n  \n{\"event\":"))
	f.Add([]byte("{\"report\":{}}\n{\"report\":{\"endpoints\":[" + strings.Repeat(`{"host":"x"},`, 70) + `{"host":"y"}]}}` + "\n"))
	f.Add([]byte("{\"event\":{\"type\":\"layer_progress\",\"digest\":\"sha256:" + strings.Repeat("a", maxLine) + "\"}}\n"))
	f.Add([]byte("not json\n"))
	f.Add([]byte(`{"error":{"code":"x"}}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		go func() {
			_, _ = w.Write(data)
			w.Close()
		}()
		c := &childProc{events: r}
		msgs := make(chan message)
		errc := make(chan error, 1)
		go c.read(msgs, errc)
		n, long := 0, 0
		for m := range msgs {
			n++
			// Re-encoding can grow a line: up to 6 bytes for 1 ("<" becomes
			// \u003c) and the zero-valued fields the decoder left (a "ts",
			// an empty "type"). A message re-encoded past 6 × maxLine + 1 KiB
			// surely came from a line over maxLine; one between may not have
			// (the fuzzer's e3782f632b2b7378: a 16 KiB event line, 16.1 KiB
			// re-encoded). The exact line bound is TestMaxEventBytes's.
			if b, _ := json.Marshal(m); len(b) > 6*maxLine+1024 {
				if long++; long > 1 || (m.Report == nil && m.Error == nil) {
					t.Fatalf("a second long line, or a long line that is not the last message: %.200s", b)
				}
			}
			if m.Event != nil {
				if e, err := progressOnly(*m.Event); err == nil {
					if !api.IsProgress(e.Type) || len(e.Host) > pull.MaxHost || len(e.Digest) > 135 || len(e.MediaType) > pull.MaxMediaType || e.Size < 0 || e.Bytes < 0 {
						t.Fatalf("progress event %+v passed", e)
					}
				} else if api.IsProgress(m.Event.Type) && pull.CheckEvent(*m.Event) == nil {
					t.Fatalf("progress event %+v dropped", *m.Event)
				}
			}
			if m.Report != nil {
				eps := pull.BoundEndpoints(m.Report.Endpoints)
				if len(eps) > pull.MaxEndpoints {
					t.Fatalf("%d endpoints", len(eps))
				}
				for _, e := range eps {
					if !pull.ValidHost(e.Host) || e.Manifests < 0 || e.Blobs < 0 || e.Bytes < 0 {
						t.Fatalf("endpoint %+v kept", e)
					}
				}
			}
			if m.Error != nil {
				_ = m.Error.err()
			}
		}
		if err := <-errc; err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
		}
		if lines := bytes.Count(data, []byte("\n")); n > lines {
			t.Fatalf("%d messages from %d complete lines", n, lines)
		}
	})
}
