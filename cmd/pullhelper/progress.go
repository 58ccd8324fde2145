package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

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
const (
	progressQueue   = 1024
	progressReserve = 8 // slots only done/error may use
	progressFlush   = 2 * time.Second
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
	werr    error // set by the writer goroutine; read after done
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
		return failure.New(failure.Usage, "--progress-fd %d: reading its flags: %v", fd, err)
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
			continue
		}
		if _, err := w.f.Write(b); err != nil {
			w.werr = err
		}
	}
}

func isFinal(e pull.Event) bool { return e.Type == "done" || e.Type == "error" }

// emit queues one event; it never blocks on the reader.
func (w *progressWriter) emit(e pull.Event) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	limit := cap(w.q) - progressReserve
	if isFinal(e) {
		limit = cap(w.q)
	}
	if w.closed || len(w.q) >= limit {
		// Only emit sends, under mu, so len < limit <= cap means the send
		// below cannot block.
		w.dropped.Add(1)
		return
	}
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
