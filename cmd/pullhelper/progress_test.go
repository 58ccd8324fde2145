package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/pull"
	"golang.org/x/sys/unix"
)

// safety bounds a call that must not block; exceeding it is a hang, not a
// slow machine (the code under test waits at most progressFlush).
const safety = 60 * time.Second

func TestProgressFDReadOnlyIsRefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), "events")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ro, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	fd := int(ro.Fd())
	var stdout, stderr bytes.Buffer
	code := run([]string{"pull", "--progress-fd", strconv.Itoa(fd), "--no-isolation", "127.0.0.1:1/x", "oci:" + filepath.Join(t.TempDir(), "d")}, &stdout, &stderr)
	want := "--progress-fd " + strconv.Itoa(fd) + ": open read-only"
	if code != 2 || !strings.Contains(stdout.String(), want) || !strings.Contains(stderr.String(), want) {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 2 naming %q", code, stdout.String(), stderr.String(), want)
	}
	// Write-only and read-write descriptors are fine.
	for _, flag := range []int{os.O_WRONLY, os.O_RDWR} {
		f, err := os.OpenFile(p, flag, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkProgressFD(int(f.Fd())); err != nil {
			t.Errorf("flag %#x: %v", flag, err)
		}
		f.Close()
	}
}

// fullPipe returns a pipe whose buffer is full (a reader that never reads):
// its read end and its write end's descriptor, which the sink owns.
func fullPipe(t *testing.T) (r *os.File, wfd int) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for {
		if _, err := unix.Write(p[1], chunk); err != nil {
			break // EAGAIN: full
		}
	}
	// Back to blocking, the worst case: a write blocks in the kernel.
	if err := unix.SetNonblock(p[1], false); err != nil {
		t.Fatal(err)
	}
	if err := unix.SetNonblock(p[0], false); err != nil {
		t.Fatal(err)
	}
	r = os.NewFile(uintptr(p[0]), "r")
	t.Cleanup(func() { r.Close() })
	return r, p[1]
}

func TestProgressNeverStallsOnAReaderThatDoesNotRead(t *testing.T) {
	_, wfd := fullPipe(t)
	var warn bytes.Buffer
	emit, closeEvents, err := progressSink(wfd, progressFormatPullhelper, &warn)
	if err != nil {
		t.Fatal(err)
	}
	finished := make(chan struct{})
	go func() {
		emit(pull.Event{Type: "start"})
		for i := 0; i < 5*progressQueue; i++ {
			emit(pull.Event{Type: "layer_progress", Bytes: int64(i)})
		}
		emit(pull.Event{Type: "error", Code: "interrupted"})
		closeEvents()
		close(finished)
	}()
	select {
	case <-finished:
	case <-time.After(safety):
		t.Fatal("emitting and closing blocked on a reader that never reads")
	}
	if !strings.Contains(warn.String(), "gave up on the last ones") || !strings.Contains(warn.String(), "dropped") {
		t.Fatalf("warnings = %q", warn.String())
	}
}

func TestProgressFinalEventSurvivesDrops(t *testing.T) {
	r, wfd := fullPipe(t)
	var warn bytes.Buffer
	emit, closeEvents, err := progressSink(wfd, progressFormatPullhelper, &warn)
	if err != nil {
		t.Fatal(err)
	}
	emitted := make(chan struct{})
	go func() {
		for i := 0; i < 3*progressQueue; i++ {
			emit(pull.Event{Type: "layer_progress", Bytes: int64(i)})
		}
		emit(pull.Event{Type: "done", Digest: "sha256:x"})
		close(emitted)
	}()
	select {
	case <-emitted:
	case <-time.After(safety):
		t.Fatal("emit blocked")
	}
	// Now the reader reads everything.
	var last string
	read := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(strings.TrimLeft(line, "\x00"), "{") {
				last = strings.TrimLeft(line, "\x00")
			}
		}
		read <- sc.Err()
	}()
	closeEvents()
	select {
	case err := <-read:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(safety):
		t.Fatal("the pipe was not closed after the flush")
	}
	var e pull.Event
	if err := json.Unmarshal([]byte(last), &e); err != nil || e.Type != "done" {
		t.Fatalf("last event %q (%v); want done", last, err)
	}
	if !strings.Contains(warn.String(), "dropped") {
		t.Fatalf("drops not reported: %q", warn.String())
	}
}

// A reader that does not read holds at most progressQueueBytes in the
// queue, however long the lines (a bootc line lists every layer), and the
// final line still has room.
func TestProgressQueueIsBoundedInBytes(t *testing.T) {
	_, wfd := fullPipe(t)
	var warn bytes.Buffer
	w, err := newProgressWriter(wfd, &warn)
	if err != nil {
		t.Fatal(err)
	}
	big := pull.Event{Type: "layer_progress", Message: strings.Repeat("x", 256<<10)}
	for range progressQueue {
		w.emit(big)
	}
	if q := w.queued.Load(); q > progressQueueBytes-progressReserveBytes || q < progressQueueBytes/2 {
		t.Fatalf("%d bytes queued; want at most %d and the queue near full", q, progressQueueBytes-progressReserveBytes)
	}
	n := len(w.q)
	w.emit(pull.Event{Type: "done", Message: strings.Repeat("y", 256<<10)})
	if len(w.q) != n+1 || w.queued.Load() > progressQueueBytes {
		t.Fatalf("the final line was not queued in its reserve: %d lines, %d bytes", len(w.q), w.queued.Load())
	}
	if w.dropped.Load() == 0 {
		t.Fatal("nothing was dropped")
	}
	w.close()
}

// A final event whose message is over the room reserved for it (the
// child's error once carried a 20 MiB line) is written with its message
// cut, never dropped: the final done or error line is always written.
func TestProgressOversizedFinalIsCutNotDropped(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "events")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	var warn bytes.Buffer
	w, err := newProgressWriter(fd, &warn)
	if err != nil {
		t.Fatal(err)
	}
	w.emit(pull.Event{Type: "error", Code: "isolation", Message: strings.Repeat("9", 20<<20)})
	w.close()
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	var e pull.Event
	if err := json.Unmarshal(bytes.TrimSpace(b), &e); err != nil || e.Type != "error" {
		t.Fatalf("%d bytes written (%v); want the error event", len(b), err)
	}
	if len(e.Message) > maxFinalMessage+64 || !strings.HasSuffix(e.Message, "[truncated]") {
		t.Fatalf("message of %d bytes, ending %q", len(e.Message), e.Message[max(len(e.Message)-20, 0):])
	}
}

// A negative --progress-fd other than the default -1 is exit 2 naming it
// (it pulled without progress, silently).
func TestProgressSinkRefusesANegativeFD(t *testing.T) {
	var warn bytes.Buffer
	if _, _, err := progressSink(-5, progressFormatPullhelper, &warn); failure.CodeOf(err) != failure.Usage || !strings.Contains(err.Error(), "--progress-fd -5") {
		t.Fatalf("progressSink(-5) = %v; want usage naming --progress-fd", err)
	}
	if emit, closeEvents, err := progressSink(-1, progressFormatPullhelper, &warn); err != nil || emit != nil {
		t.Fatalf("progressSink(-1) = %v, %v; want none, no error", emit != nil, err)
	} else {
		closeEvents()
	}
}
