package client

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"sync"

	"github.com/pullhelper/pullhelper/api"
)

// readEvents decodes JSON Lines events from r for fn until EOF. A line that
// is not an event, or longer than maxEventLine, is skipped.
func readEvents(r io.Reader, fn func(api.Event)) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readLine(br)
		if len(line) > 0 {
			var e api.Event
			if json.Unmarshal(line, &e) == nil && e.Type != "" {
				fn(e)
			}
		}
		if err != nil {
			return
		}
	}
}

// readLine returns the next line, or nil for one over maxEventLine (read
// and dropped).
func readLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	over := false
	for {
		frag, err := br.ReadSlice('\n')
		if !over {
			if len(buf)+len(frag) > maxEventLine {
				over, buf = true, nil
			} else {
				buf = append(buf, frag...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if over {
			return nil, err
		}
		return bytes.TrimSpace(buf), err
	}
}

// capWriter keeps the first max bytes written.
type capWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (w *capWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := w.max - w.buf.Len(); room > 0 {
		if len(p) > room {
			w.buf.Write(p[:room])
		} else {
			w.buf.Write(p)
		}
	}
	return len(p), nil
}

func (w *capWriter) Bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Bytes()
}

// tailWriter passes stderr on to w (if any) and keeps its last stderrTail
// bytes.
type tailWriter struct {
	mu   sync.Mutex
	w    io.Writer
	tail []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.w != nil {
		_, _ = t.w.Write(p)
	}
	t.tail = append(t.tail, p...)
	if len(t.tail) > stderrTail {
		t.tail = append([]byte(nil), t.tail[len(t.tail)-stderrTail:]...)
	}
	return len(p), nil
}

func (t *tailWriter) lastLine() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(t.tail)), "\n")
	return strings.TrimPrefix(strings.TrimSpace(lines[len(lines)-1]), "pullhelper: ")
}
