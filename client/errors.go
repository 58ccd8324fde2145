package client

import (
	"errors"
	"fmt"
)

// The sentinel errors, one per documented exit code of pullhelper (README
// "Exit codes"). Every error of a helper that ran matches exactly one of
// them with errors.Is (a crash, a signal the client did not send, exit 0
// without a result: ErrInternal; stopped by the client, SIGTERM or SIGINT:
// ErrInterrupted); errors.As with *Error gives the code, exit status and
// message. An error before the helper ran (ctx already done, no binary, a
// protocol mismatch) matches none.
var (
	ErrInternal     = errors.New("pullhelper: internal error")             // exit 1, "internal"
	ErrUsage        = errors.New("pullhelper: usage error")                // exit 2, "usage"
	ErrUnauthorized = errors.New("pullhelper: unauthorized")               // exit 3, "unauthorized"
	ErrTLS          = errors.New("pullhelper: tls error")                  // exit 4, "tls"
	ErrNotFound     = errors.New("pullhelper: not found")                  // exit 5, "not_found"
	ErrNetwork      = errors.New("pullhelper: network error")              // exit 6, "network"
	ErrIsolation    = errors.New("pullhelper: isolation error")            // exit 7, "isolation"
	ErrVerification = errors.New("pullhelper: verification error")         // exit 8, "verification"
	ErrDestination  = errors.New("pullhelper: destination error")          // exit 9, "destination"
	ErrInterrupted  = errors.New("pullhelper: interrupted")                // exit 129 (SIGHUP), 130 (SIGINT), 143 (SIGTERM), "interrupted"
	ErrProtocol     = errors.New("pullhelper: incompatible helper binary") // the binary speaks an older protocol, or none
)

// codes maps the JSON error codes to their exit status and sentinel; the
// binary documents both, so a client can classify from either.
var codes = []struct {
	code string
	exit int
	err  error
}{
	{"internal", 1, ErrInternal},
	{"usage", 2, ErrUsage},
	{"unauthorized", 3, ErrUnauthorized},
	{"tls", 4, ErrTLS},
	{"not_found", 5, ErrNotFound},
	{"network", 6, ErrNetwork},
	{"isolation", 7, ErrIsolation},
	{"verification", 8, ErrVerification},
	{"destination", 9, ErrDestination},
	{"interrupted", 129, ErrInterrupted},
	{"interrupted", 130, ErrInterrupted},
	{"interrupted", 143, ErrInterrupted},
}

// Error is a failure the helper reported: its JSON error code ("" when it
// printed none, e.g. when it was killed), its exit status (-1 when a signal
// ended it) and its one-line message. It never holds a secret: the helper's
// messages never do.
type Error struct {
	Code    string
	Exit    int
	Message string
	// sentinel is the Err* value this error matches.
	sentinel error
}

func (e *Error) Error() string { return "pullhelper: " + e.Message }

// Is reports whether target is e's sentinel.
func (e *Error) Is(target error) bool { return target == e.sentinel }

// newError classifies a failure: by the JSON code when it is a documented
// one, else by the exit status, else ErrInternal.
func newError(code string, exit int, msg string) *Error {
	e := &Error{Code: code, Exit: exit, Message: msg, sentinel: ErrInternal}
	found := false
	for _, c := range codes {
		if code != "" && c.code == code {
			e.sentinel, found = c.err, true
			break
		}
	}
	if !found {
		for _, c := range codes {
			if c.exit == exit {
				e.sentinel = c.err
				break
			}
		}
	}
	if e.Message == "" {
		e.Message = fmt.Sprintf("exited with status %d and no message", exit)
	}
	return e
}
