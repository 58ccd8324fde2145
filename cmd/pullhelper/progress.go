package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/pull"
	"golang.org/x/sys/unix"
)

// The --progress-fd sink never stalls the pull: events go through a bounded
// queue to one writer goroutine. A reader that does not keep up loses
// progress events (they are counted and reported on stderr), never the
// final done or error event, which has reserved room in the queue; the final
// flush waits at most progressFlush and then gives up, so a reader that
// never reads cannot hold back SIGTERM, --timeout or the exit.
//
// The descriptor is left in blocking mode: O_NONBLOCK belongs to the open
// file description, which the caller (or its other children) may share and
// would then see EAGAIN on its own writes. A write blocked in the kernel
// therefore holds only the writer goroutine's thread until the process
// exits; when the caller did pass a non-blocking descriptor, the runtime
// poller is used and the flush deadline interrupts the write.
//
// The queue is bounded in bytes as well as in lines (a bootc line lists
// every layer): progressQueueBytes in all, of which progressReserveBytes
// only the final lines may use.
const (
	progressQueue        = 1024
	progressReserve      = 8 // slots only the final lines (done/error; bootc's Start and last two) may use
	progressQueueBytes   = 4 << 20
	progressReserveBytes = 1 << 20
	progressFlush        = 2 * time.Second
)

type progressWriter struct {
	fd      int
	f       *os.File
	warn    io.Writer
	mu      sync.Mutex // serialises emit and close; the writer never takes it
	closed  bool
	q       chan []byte
	done    chan struct{}
	dropped atomic.Int64
	queued  atomic.Int64 // bytes in q and not yet written
	werr    error        // set by the writer goroutine; read after done
}

// checkProgressFD refuses what cannot carry events: stdin/stdout/stderr, a
// closed descriptor, one opened read-only or O_PATH.
func checkProgressFD(fd int) error {
	var st unix.Stat_t
	if fd <= 2 || unix.Fstat(fd, &st) != nil {
		return failure.New(failure.Usage, "--progress-fd %d: not an open file descriptor other than stdin, stdout or stderr", fd)
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return failure.New(failure.Usage, "--progress-fd %d: reading its flags: %w", fd, err)
	}
	if fl&unix.O_PATH != 0 || fl&unix.O_ACCMODE == unix.O_RDONLY {
		return failure.New(failure.Usage, "--progress-fd %d: open read-only; pass a descriptor open for writing (e.g. 3>FILE or a pipe's write end)", fd)
	}
	return nil
}

func newProgressWriter(fd int, warn io.Writer) (*progressWriter, error) {
	if err := checkProgressFD(fd); err != nil {
		return nil, err
	}
	// Not for the pull child: the descriptor flag is ours alone.
	unix.CloseOnExec(fd)
	w := &progressWriter{fd: fd, f: os.NewFile(uintptr(fd), "progress-fd"), warn: warn,
		q: make(chan []byte, progressQueue), done: make(chan struct{})}
	go w.run()
	return w, nil
}

func (w *progressWriter) run() {
	defer close(w.done)
	for b := range w.q {
		if w.werr != nil {
			w.dropped.Add(1)
		} else if _, err := w.f.Write(b); err != nil {
			w.werr = err
		}
		w.queued.Add(-int64(len(b)))
	}
}

func isFinal(e pull.Event) bool { return e.Type == "done" || e.Type == "error" }

// maxFinalMessage bounds the message of the final event: a longer one is
// cut there (marked " [truncated]"), so the final line always fits in the
// room reserved for it and is never dropped.
const maxFinalMessage = 16 << 10

// emit queues one event; it never blocks on the reader.
func (w *progressWriter) emit(e pull.Event) {
	final := isFinal(e)
	if final && len(e.Message) > maxFinalMessage {
		e.Message = strings.ToValidUTF8(e.Message[:maxFinalMessage], "") + " [truncated]"
	}
	w.emitValue(e, final)
}

// emitValue queues v as one JSON line; reserved lines (the final ones) may
// use the room kept for them. It never blocks on the reader.
func (w *progressWriter) emitValue(v any, reserved bool) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	limit, room := cap(w.q)-progressReserve, int64(progressQueueBytes-progressReserveBytes)
	if reserved {
		limit, room = cap(w.q), progressQueueBytes
	}
	if w.closed || len(w.q) >= limit || w.queued.Load()+int64(buf.Len()) > room {
		// Only emit sends, under mu, so len < limit <= cap means the send
		// below cannot block; the writer only lowers queued.
		w.dropped.Add(1)
		return
	}
	w.queued.Add(int64(buf.Len()))
	w.q <- buf.Bytes()
}

// close flushes for at most progressFlush and reports what was lost.
func (w *progressWriter) close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	close(w.q)
	w.mu.Unlock()
	t := time.NewTimer(progressFlush)
	defer t.Stop()
	select {
	case <-w.done:
		if w.werr != nil {
			fmt.Fprintf(w.warn, "pullhelper: warning: --progress-fd %d: writing events: %v\n", w.fd, w.werr)
		}
		_ = w.f.Close()
	case <-t.C:
		// Interrupts the write when the descriptor is pollable; otherwise
		// the writer stays blocked until the process exits. The file is not
		// closed under a write that may still be running.
		_ = w.f.SetWriteDeadline(time.Now())
		fmt.Fprintf(w.warn, "pullhelper: warning: --progress-fd %d: the reader took no events for %s; gave up on the last ones\n", w.fd, progressFlush)
	}
	if n := w.dropped.Load(); n > 0 {
		fmt.Fprintf(w.warn, "pullhelper: warning: --progress-fd %d: dropped %d events the reader was too slow to take\n", w.fd, n)
	}
}

// progressSink returns a function queueing JSON Lines events for fd in the
// given --progress-format, or nil for fd -1, and the function that flushes
// them (for at most progressFlush) at the end. Writing never stalls the
// pull. An unknown format is a usage error, with or without a descriptor.
func progressSink(fd int, format string, warn io.Writer) (func(api.Event), func(), error) {
	switch format {
	case progressFormatPullhelper, progressFormatBootc:
	default:
		return nil, nil, failure.New(failure.Usage, "--progress-format: want %s or %s, not %q", progressFormatPullhelper, progressFormatBootc, format)
	}
	if fd < -1 {
		return nil, nil, failure.New(failure.Usage, "--progress-fd %d: want a file descriptor number", fd)
	}
	if fd < 0 { // -1, the default: none
		return nil, func() {}, nil
	}
	w, err := newProgressWriter(fd, warn)
	if err != nil {
		return nil, nil, err
	}
	if format == progressFormatPullhelper {
		return w.emit, w.close, nil
	}
	s := newBootcSink(w, time.Now, func(d time.Duration, f func()) func() {
		t := time.AfterFunc(d, f)
		return func() { t.Stop() }
	})
	return s.emit, s.close, nil
}

// bootcSink feeds the translator in order: events come from more than one
// goroutine (the pipeline's start and done, the child's progress, main's
// error), one at a time. When the translator holds an update back, a timer
// (after; time.AfterFunc but in tests) writes it once the window opens.
type bootcSink struct {
	mu    sync.Mutex
	t     *bootcTranslator
	now   func() time.Time
	after func(time.Duration, func()) (stop func())
	stop  func() // the armed timer's, or nil
	w     *progressWriter
}

func newBootcSink(w *progressWriter, now func() time.Time, after func(time.Duration, func()) func()) *bootcSink {
	return &bootcSink{t: newBootcTranslator(), now: now, after: after, w: w}
}

func (s *bootcSink) emit(e api.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.write(s.t.handle(e, s.now()))
}

// flush is the timer's: write what the translator held back.
func (s *bootcSink) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stop = nil
	s.write(s.t.flush(s.now()))
}

// write queues lines and arms the timer for a held update; s.mu is held.
func (s *bootcSink) write(lines []bootcLine) {
	for _, l := range lines {
		s.w.emitValue(l.v, l.keep)
	}
	if at, ok := s.t.due(); ok && s.stop == nil {
		s.stop = s.after(max(at.Sub(s.now()), 0), s.flush)
	}
}

// close stops the timer and flushes the writer. A timer already firing
// finds the translator finished (the final event came first) or the writer
// closed; either way it writes nothing.
func (s *bootcSink) close() {
	s.mu.Lock()
	if s.stop != nil {
		s.stop()
		s.stop = nil
	}
	s.mu.Unlock()
	s.w.close()
}
