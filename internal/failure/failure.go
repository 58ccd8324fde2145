package failure

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// Code classifies a failure. The string values are part of the CLI contract
// (the "code" field of the JSON error object).
type Code string

// The codes, in exit-status order (the README's "Exit codes" table).
const (
	Internal     Code = "internal"
	Usage        Code = "usage"
	Unauthorized Code = "unauthorized"
	TLS          Code = "tls"
	NotFound     Code = "not_found"
	Network      Code = "network"
	Isolation    Code = "isolation"
	Verification Code = "verification"
	Destination  Code = "destination"
	Interrupted  Code = "interrupted"
)

var exitCodes = map[Code]int{
	Internal:     1,
	Usage:        2,
	Unauthorized: 3,
	TLS:          4,
	NotFound:     5,
	Network:      6,
	Isolation:    7,
	Verification: 8,
	Destination:  9,
	Interrupted:  130,
}

// Exit returns the process exit status for c. Interrupted maps to 130; the
// caller that knows the signal was SIGTERM uses 143 instead.
func (c Code) Exit() int {
	if n, ok := exitCodes[c]; ok {
		return n
	}
	return 1
}

// Error is an error with a Code. Message is the complete one-line text shown
// to the user; Err, when set, is kept for errors.Is/As but not re-printed.
// Reason, when set, is the CRI's name for the failure (CRIReasonOf).
type Error struct {
	Code    Code
	Message string
	Err     error
	Reason  CRIReason
}

// CRIReason is one of the CRI's well-known pull failures
// (k8s.io/cri-api/pkg/errors), which the kubelet tells apart by the
// prefix of a PullImage error's message (evalCRIPullErr).
type CRIReason string

// The reasons: the registry could not be reached (the connection was
// refused, as CRI-O's PullImage tests it), or a signature policy rejected
// the image (CRI-O's WrapSignatureCRIErrorIfNeeded).
const (
	ReasonRegistryUnavailable       CRIReason = "RegistryUnavailable"
	ReasonSignatureValidationFailed CRIReason = "SignatureValidationFailed"
)

// Known reports whether r is one of the reasons ("" is not).
func (r CRIReason) Known() bool {
	return r == ReasonRegistryUnavailable || r == ReasonSignatureValidationFailed
}

// CRIReasonOf is the CRIReason of the first *Error in err's chain that has one
// ("" when none has).
func CRIReasonOf(err error) CRIReason {
	for err != nil {
		if fe, ok := err.(*Error); ok && fe.Reason != "" {
			return fe.Reason
		}
		err = errors.Unwrap(err)
	}
	return ""
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// New returns an Error with a formatted message. An error formatted with %w
// is printed as with %v and kept as the cause (Err), for errors.Is/As.
func New(code Code, format string, args ...any) *Error {
	e := fmt.Errorf(format, args...)
	fe := &Error{Code: code, Message: e.Error()}
	switch w := e.(type) {
	case interface{ Unwrap() error }:
		fe.Err = w.Unwrap()
	case interface{ Unwrap() []error }:
		fe.Err = e // several %w: errors.Is/As walk them all
	}
	return fe
}

// Wrap returns an Error whose message is "context: err". A nil err gives nil.
func Wrap(code Code, err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	msg := fmt.Sprintf(format, args...)
	if msg == "" {
		msg = err.Error()
	} else {
		msg = msg + ": " + err.Error()
	}
	return &Error{Code: code, Message: msg, Err: err}
}

// Context is nil while ctx is live; once it is done, the error to stop
// with, naming the step (what): the cause's own code when it has one (the
// pipeline's --timeout deadline says "pull timed out", Network), else
// Interrupted (SIGINT, SIGTERM).
func Context(ctx context.Context, what string) error {
	if ctx.Err() == nil {
		return nil
	}
	cause := context.Cause(ctx)
	if c := CodeOf(cause); c != Internal {
		return Wrap(c, cause, "%s", what)
	}
	return Wrap(Interrupted, cause, "%s", what)
}

// CodeOf returns the Code of the first *Error in err's chain, or Internal.
func CodeOf(err error) Code {
	var fe *Error
	if errors.As(err, &fe) {
		return fe.Code
	}
	return Internal
}

// Reason renders a path error as "PATH: reason", without Go's operation
// word ("open", "rename"), for messages that already say what was done.
func Reason(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Path + ": " + pe.Err.Error()
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.New + ": " + le.Err.Error()
	}
	return strings.TrimSpace(err.Error())
}
