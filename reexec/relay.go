package reexec

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/pull"
)

// maxStderrLine bounds one relayed line of the child's stderr; the rest of
// a longer line (a registry's error body, say) is dropped, and reading goes
// on, so the child never blocks on, or dies writing to, its stderr.
// maxStderrTotal bounds what is relayed of one pull's stderr in all: past
// it, one line says so and the rest is read and dropped.
const (
	maxStderrLine  = 64 << 10
	maxStderrTotal = 1 << 20
)

// childPrefix starts every relayed line in the text log format: what
// follows is the child's, not the parent's.
const childPrefix = "pullhelper-child: "

// relayStderr copies the child's stderr line by line until EOF (or until r
// is closed), truncating lines over maxStderrLine and stopping after
// maxStderrTotal bytes. Every line is the child's text, so it is escaped
// (pull.Printable: no terminal control, no line of its own) and labelled:
// with a JSON log (log non-nil) it is the "line" attribute of a parent
// record with msg "child", so the child cannot forge a record of the
// parent's; otherwise it is written to w prefixed with childPrefix. Unless
// debug, it drops a Go runtime stack dump (a child killed by pids_max
// cannot create a thread and dumps every goroutine); the parent explains
// such deaths.
func relayStderr(r io.ReadCloser, w io.Writer, log *slog.Logger, debug bool) {
	defer r.Close()
	br := bufio.NewReaderSize(r, maxStderrLine)
	emit := func(line string) {
		line = pull.Printable(line)
		if log != nil {
			log.Info("child", "line", line)
			return
		}
		if !strings.HasPrefix(line, childPrefix) {
			line = childPrefix + line
		}
		fmt.Fprintln(w, line)
	}
	dropping := false
	total := 0
	for {
		chunk, err := br.ReadSlice('\n')
		line := string(bytes.TrimSuffix(chunk, []byte("\n")))
		if errors.Is(err, bufio.ErrBufferFull) {
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n') // the rest of the line
			}
			line += fmt.Sprintf(" [line truncated: over %d KiB]", maxStderrLine>>10)
		}
		if (line != "" || err == nil) && total <= maxStderrTotal {
			if total += len(line) + 1; total > maxStderrTotal {
				emit(fmt.Sprintf("(child output truncated: over %d KiB; the rest is dropped)", maxStderrTotal>>10))
			} else {
				if !debug && !dropping && (line == "runtime stack:" || strings.HasPrefix(line, "goroutine ")) {
					dropping = true
					emit("(Go stack trace omitted; --debug shows it)")
				}
				if !dropping {
					emit(line)
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// eventQueue hands events to the caller's sink from a goroutine of its own,
// so a sink that blocks (a progress reader that never reads) never holds up
// the parent's loop, and so SIGTERM and --timeout. When the queue is full
// events are dropped (and counted) rather than waited for. It is bounded
// in bytes as well as in events: an event that passed progressOnly has
// fields of bounded length (pull.CheckEvent), at most maxEventBytes in all,
// so the queue holds at most eventQueueLen × maxEventBytes (about 4 MiB).
type eventQueue struct {
	q       chan api.Event
	done    chan struct{}
	dropped int
	log     *slog.Logger
}

const eventQueueLen = 4096

// maxEventBytes bounds an event that passed pull.CheckEvent: its strings
// (type, digest and instance digest, media type, host) and the struct
// itself.
const maxEventBytes = len(api.EventConfigProg) + 2*(len("sha512:")+128) + pull.MaxMediaType + pull.MaxHost + 256

func newEventQueue(sink func(api.Event), log *slog.Logger) *eventQueue {
	e := &eventQueue{q: make(chan api.Event, eventQueueLen), done: make(chan struct{}), log: log}
	go func() {
		defer close(e.done)
		for ev := range e.q {
			if sink != nil {
				sink(ev)
			}
		}
	}()
	return e
}

func (e *eventQueue) emit(ev api.Event) {
	select {
	case e.q <- ev:
	default:
		e.dropped++
	}
}

// close lets the queue deliver what it holds, waiting at most wait, so the
// caller's next event (done or error) comes after these.
func (e *eventQueue) close(wait time.Duration) {
	close(e.q)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-e.done:
	case <-t.C:
		e.log.Warn("the progress sink is not taking events; not waiting for it")
	}
	if e.dropped > 0 {
		e.log.Warn("dropped progress events: the progress sink did not keep up", "dropped", e.dropped)
	}
}
