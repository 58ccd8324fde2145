package reexec

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/pull"
)

func TestReadLineBounds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    string
		max   int
		lines []string
		end   error
	}{
		{"lines", "a\nbb\n", 8, []string{"a", "bb"}, io.EOF},
		{"exactly max", "12345678\n", 8, []string{"12345678"}, io.EOF},
		{"over max", "123456789\n", 8, nil, errOversized},
		{"over max without newline", strings.Repeat("x", 1000), 8, nil, errOversized},
		{"cut short", "a\nhalf", 8, []string{"a"}, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReaderSize(strings.NewReader(tc.in), 16) // smaller than some lines
			var got []string
			for {
				l, err := readLine(br, tc.max)
				if err != nil {
					if !errors.Is(err, tc.end) {
						t.Fatalf("ended with %v, want %v", err, tc.end)
					}
					break
				}
				got = append(got, string(l))
			}
			if strings.Join(got, "|") != strings.Join(tc.lines, "|") {
				t.Fatalf("lines %q, want %q", got, tc.lines)
			}
		})
	}
}

// An endless line is refused after max bytes, without reading it all.
func TestReadLineStopsEarly(t *testing.T) {
	r := &countingReader{}
	_, err := readLine(bufio.NewReader(r), 1<<20)
	if !errors.Is(err, errOversized) {
		t.Fatal(err)
	}
	if r.n > 2<<20 {
		t.Fatalf("read %d bytes for a 1 MiB bound", r.n)
	}
}

type countingReader struct{ n int }

func (c *countingReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	c.n += len(p)
	return len(p), nil
}

// A 3 MiB stderr line is truncated and the relay keeps reading (before, a
// bufio.Scanner stopped at 1 MiB and the child died of SIGPIPE).
func TestRelayStderrTruncatesAndGoesOn(t *testing.T) {
	in := "first\n" + strings.Repeat("y", 3<<20) + "\nlast\n"
	var out bytes.Buffer
	relayStderr(io.NopCloser(strings.NewReader(in)), &out, nil, false)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 3 || lines[0] != childPrefix+"first" || lines[2] != childPrefix+"last" {
		t.Fatalf("relayed %d lines: first %q last %q", len(lines), lines[0], lines[len(lines)-1])
	}
	if !strings.HasSuffix(lines[1], "[line truncated: over 64 KiB]") || len(lines[1]) > maxStderrLine+len(childPrefix)+64 {
		t.Fatalf("long line relayed as %d bytes ending %q", len(lines[1]), lines[1][len(lines[1])-40:])
	}
}

func TestRelayStderrDropsStackDump(t *testing.T) {
	var out bytes.Buffer
	relayStderr(io.NopCloser(strings.NewReader("runtime: failed to create new OS thread\ngoroutine 1 [running]:\nmain.main()\n")), &out, nil, false)
	if strings.Contains(out.String(), "main.main") || !strings.Contains(out.String(), "stack trace omitted") {
		t.Fatalf("relayed %q", out.String())
	}
}

// Only well-formed progress events cross from the child, reduced to
// progress fields.
func TestProgressOnly(t *testing.T) {
	for _, typ := range []string{"start", "done", "error", "retry", ""} {
		if _, err := progressOnly(pull.Event{Type: typ}); err == nil {
			t.Errorf("a %q event from the child was accepted", typ)
		}
	}
	d := "sha256:" + strings.Repeat("a", 64)
	e, err := progressOnly(pull.Event{Type: "layer_done", Digest: d, Bytes: 3, Message: "forged", Image: "x", Host: "mirror.example:5000"})
	if err != nil || e.Digest != d || e.Bytes != 3 || e.Message != "" || e.Image != "" || e.TS.IsZero() || e.Host != "mirror.example:5000" {
		t.Fatalf("got %+v, %v", e, err)
	}
	// A field that is not what it names refuses the whole event.
	for _, bad := range []pull.Event{
		{Type: "layer_progress", Digest: d, Host: strings.Repeat("h", 256)},
		{Type: "layer_progress", Digest: "sha256:" + strings.Repeat("a", 2<<20)},
		{Type: "layer_progress", Digest: d, MediaType: strings.Repeat("m", 300) + "/x"},
		{Type: "layer_progress", Digest: d, Bytes: -1},
	} {
		if _, err := progressOnly(bad); err == nil {
			t.Errorf("an event with a bad field passed: digest %d bytes, media type %d, host %d, bytes %d",
				len(bad.Digest), len(bad.MediaType), len(bad.Host), bad.Bytes)
		}
	}
}

// An event that passed progressOnly is at most maxEventBytes: the event
// queue's byte bound.
func TestMaxEventBytes(t *testing.T) {
	e := pull.Event{Type: api.EventConfigProg, Digest: "sha512:" + strings.Repeat("a", 128), InstanceDigest: "sha512:" + strings.Repeat("b", 128),
		MediaType: strings.Repeat("a", 127) + "/" + strings.Repeat("b", 127), Host: strings.Repeat("h", 63) + "." + strings.Repeat("h", 63) + "." + strings.Repeat("h", 63) + "." + strings.Repeat("h", 61) + ":65535",
		Size: 1 << 40, Bytes: 1 << 40}
	got, err := progressOnly(e)
	if err != nil {
		t.Fatalf("a maximal valid event was refused: %v", err)
	}
	if n := len(got.Type) + len(got.Digest) + len(got.InstanceDigest) + len(got.MediaType) + len(got.Host) + int(unsafe.Sizeof(got)); n > maxEventBytes {
		t.Fatalf("a valid event holds %d bytes, more than maxEventBytes %d", n, maxEventBytes)
	}
}

// A sink that never returns does not block emit (so not the parent's loop),
// and close waits for it only a bounded time.
func TestEventQueueNeverBlocks(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	q := newEventQueue(func(pull.Event) { <-block }, slog.New(slog.DiscardHandler))
	done := make(chan struct{})
	go func() {
		for range eventQueueLen * 3 {
			q.emit(pull.Event{Type: "layer_progress"})
		}
		q.close(10 * time.Millisecond)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("emit or close blocked on a stuck sink")
	}
	if q.dropped == 0 {
		t.Fatal("a full queue must drop, not wait")
	}
}
