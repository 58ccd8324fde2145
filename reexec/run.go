package reexec

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/cgroup"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/pull"
)

// forwardRates writes each share from c.rates as a control line on fd 3
// until the channel closes, stop closes, or the child stops reading.
func (c *childProc) forwardRates(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case r, ok := <-c.rates:
			if !ok {
				return
			}
			b, _ := json.Marshal(control(r))
			if _, err := c.planW.Write(append(b, '\n')); err != nil {
				return
			}
		}
	}
}

// kill ends a child that run will not reap: the cgroup and the child are
// killed, the pipes closed and the child reaped. It never waits for a pipe.
func (c *childProc) kill(g *cgroup.Group) {
	_ = g.Kill(c.pid)
	c.planW.Close()
	c.events.Close()
	<-c.waited
	c.drainStderr(time.Now().Add(drainTimeout))
}

// drainStderr waits, until the deadline, for the relay to reach EOF, then
// stops it.
func (c *childProc) drainStderr(deadline time.Time) {
	if c.relayDone == nil {
		return
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-c.relayDone:
	case <-t.C:
		c.stderr.Close() // unblocks the relay's read
		<-c.relayDone
	}
}

// read decodes the child's messages until EOF or an error (then sent on
// errc, nil at EOF); it closes msgs last. Each line is bounded by maxLine
// but one, the report or the error, bounded by maxMessage; its arrays and
// nesting are bounded before it is decoded (checkShape). The first report
// or error ends the messages: later lines are read and ignored.
func (c *childProc) read(msgs chan<- message, errc chan<- error) {
	defer close(msgs)
	br := bufio.NewReaderSize(c.events, 64<<10)
	long := false // the one long line was read
	for {
		limit := maxMessage
		if long {
			limit = maxLine
		}
		line, err := readLine(br, limit)
		if err != nil {
			// EOF, a last line cut short by the child's death, or the
			// read end closed by the drain bound: the end of messages.
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, os.ErrClosed) {
				err = nil
			}
			errc <- err
			return
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if err := checkShape(line); err != nil {
			errc <- err
			return
		}
		var m message
		if err := json.Unmarshal(line, &m); err != nil {
			errc <- decodeError(err)
			return
		}
		if len(line) > maxLine {
			long = true
			if m.Report == nil && m.Error == nil {
				errc <- errOversized
				return
			}
		}
		msgs <- m
		if m.Report != nil || m.Error != nil {
			// The report or the error is the child's last word:
			// whatever it writes after is read and ignored (so it
			// never blocks on a full pipe), never decoded.
			_, err := io.Copy(io.Discard, br)
			if errors.Is(err, os.ErrClosed) {
				err = nil
			}
			errc <- err
			return
		}
	}
}

// run sends the request, relays progress events and returns the child's
// result. Its loop waits only on the child (its messages, its exit) and on
// cancellation (ctx, the timeout): events go to sink through a queue that
// never blocks the loop. After the child is reaped it kills whatever is
// left in the cgroup, then drains the pipes within drainTimeout: a
// grandchild holding them can neither hang the parent nor outlive the pull.
// The pipeline, not the child, says that the pull started and is done.
func (c *childProc) run(ctx context.Context, g *cgroup.Group, req wireRequest, sink func(api.Event), log *slog.Logger) (*pull.Report, error) {
	events := newEventQueue(sink, log)
	defer events.close(time.Second)

	msgs := make(chan message)
	readErr := make(chan error, 1)
	go c.read(msgs, readErr)
	sent := make(chan error, 1)
	stopRates := make(chan struct{})
	defer func() {
		close(stopRates)
		c.planW.Close() // also ends a forward blocked on a child that stopped reading
	}()
	go func() {
		b, err := encodeRequest(req)
		if err == nil {
			_, err = c.planW.Write(b)
		}
		sent <- err
		if err == nil && req.NodeRate {
			c.forwardRates(stopRates)
		}
		c.planW.Close()
	}()

	// The parent's own deadline, a little after the child's, in case the
	// child stops responding.
	var deadline <-chan time.Time
	if timeout := req.Copy.Timeout; timeout > 0 {
		t := time.NewTimer(timeout + 5*time.Second)
		defer t.Stop()
		deadline = t.C
	}
	var (
		rep     *pull.Report
		childE  error
		stopErr error
		werr    error
		exited  bool
		refused int // events dropped by progressOnly
		done    = ctx.Done()
	)
	stop := func(err error, why string) {
		if stopErr != nil {
			return
		}
		stopErr = err
		log.Warn(why+": killing every process in the pull cgroup", "cgroup", g.SubPath())
		if err := g.Kill(c.pid); err != nil {
			log.Error("killing the pull cgroup", "error", err.Error())
		}
	}
	handle := func(m message) {
		switch {
		case m.Event != nil:
			e, err := progressOnly(*m.Event)
			if err == nil {
				events.emit(e)
				break
			}
			if refused++; refused == 1 {
				log.Warn("dropped an event of the pull child: only well-formed progress events are accepted from it", "reason", err.Error())
			}
		case m.Report != nil:
			if rep != nil {
				break
			}
			if err := m.Report.Check(); err != nil {
				stop(failure.New(failure.Isolation, "the pull child sent an invalid report: %v", err), "the pull child broke the protocol")
				break
			}
			rep = m.Report
			rep.Endpoints = pull.BoundEndpoints(rep.Endpoints)
		case m.Error != nil:
			if childE == nil {
				childE = m.Error.err()
			}
		}
	}
	readEnd := func() {
		msgs = nil
		if err := <-readErr; err != nil {
			stop(failure.Wrap(failure.Isolation, err, ""), "the pull child broke the protocol")
		}
	}
	for !exited {
		select {
		case m, ok := <-msgs:
			if !ok {
				readEnd()
				continue
			}
			handle(m)
		case err := <-sent:
			sent = nil
			if err != nil {
				log.Debug("sending the request to the child", "error", err.Error()) // it died; its status says why
			}
		case werr = <-c.waited:
			exited = true
		case <-done:
			done = nil // once
			stop(failure.Wrap(failure.Interrupted, context.Cause(ctx), ""), "stopping")
		case <-deadline:
			deadline = nil
			stop(failure.New(failure.Network, "pull timed out after %s (--timeout); the child did not stop by itself", req.Copy.Timeout), "timed out")
		}
	}
	// The child is reaped. Nothing of the pull may outlive it or hold its
	// pipes: kill the rest of the cgroup, then drain with a bound.
	if err := g.Kill(); err != nil && stopErr == nil {
		stopErr = failure.Wrap(failure.Isolation, err, "")
	}
	bound := time.Now().Add(drainTimeout)
	t := time.NewTimer(drainTimeout)
	defer t.Stop()
	for msgs != nil {
		select {
		case m, ok := <-msgs:
			if !ok {
				readEnd()
				continue
			}
			handle(m)
		case <-t.C:
			log.Warn("the pull child's event pipe is still open after every process of the pull is dead; closing it")
			c.events.Close() // the reader returns at its next read
		}
	}
	c.events.Close()
	c.drainStderr(bound)
	if refused > 1 {
		log.Warn("dropped events of the pull child that were not well-formed progress events", "dropped", refused)
	}
	switch {
	case stopErr != nil:
		return nil, stopErr
	case childE != nil:
		return nil, childE
	case rep != nil && werr == nil:
		return rep, nil
	}
	return nil, &childDied{status: werr}
}

// childDied is a child that exited without a result.
type childDied struct{ status error }

func (c *childDied) Error() string {
	if c.status == nil {
		return "the pull child exited without a result"
	}
	return "the pull child exited without a result: " + c.status.Error()
}

// ExplainDeath turns a child that died without a result into the limit that
// killed it, when the cgroup says so.
func ExplainDeath(err error, u cgroup.Usage, l cgroup.Limits) error {
	var cd *childDied
	if !errors.As(err, &cd) {
		return err
	}
	switch {
	case u.OOMKills != nil && *u.OOMKills > 0:
		return failure.New(failure.Isolation, "the pull was killed by the OOM killer in its cgroup: cgroup.memory_max=%d bytes is too low for this pull (%s)", l.MemoryMax, cd.Error())
	case u.PidsMaxHits != nil && *u.PidsMaxHits > 0:
		return failure.New(failure.Isolation, "cgroup.pids_max=%d is too low: the pull child could not create the threads the Go runtime needs (%d refused forks; %s)", l.PidsMax, *u.PidsMaxHits, cd.Error())
	}
	return failure.New(failure.Internal, "%s", strings.TrimSpace(cd.Error()))
}
