package failure_test

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/pullhelper/pullhelper/internal/failure"
)

func TestExitCodes(t *testing.T) {
	for code, want := range map[failure.Code]int{
		failure.Internal: 1, failure.Usage: 2, failure.Unauthorized: 3, failure.TLS: 4,
		failure.NotFound: 5, failure.Network: 6, failure.Isolation: 7, failure.Verification: 8,
		failure.Destination: 9, failure.Interrupted: 130, failure.Code("bogus"): 1,
	} {
		if got := code.Exit(); got != want {
			t.Errorf("%s.Exit() = %d, want %d", code, got, want)
		}
	}
}

func TestCodeOfWrapped(t *testing.T) {
	base := errors.New("boom")
	err := fmt.Errorf("outer: %w", failure.Wrap(failure.TLS, base, "connecting to %s", "reg"))
	if got := failure.CodeOf(err); got != failure.TLS {
		t.Fatalf("CodeOf = %s, want tls", got)
	}
	if !errors.Is(err, base) {
		t.Fatal("cause lost")
	}
	if got := err.Error(); got != "outer: connecting to reg: boom" {
		t.Fatalf("message %q", got)
	}
	if failure.CodeOf(base) != failure.Internal {
		t.Fatal("unclassified error must be internal")
	}
	if failure.Wrap(failure.TLS, nil, "x") != nil {
		t.Fatal("Wrap(nil) must be nil")
	}
}

// New with %w prints the error as %v would and keeps it as the cause; without
// %w there is no cause.
func TestNewKeepsWrapped(t *testing.T) {
	cause := fmt.Errorf("reading x: %w", fs.ErrNotExist)
	e := failure.New(failure.Usage, "policy %s: %w", "p.toml", cause)
	if e.Error() != "policy p.toml: reading x: file does not exist" || e.Code != failure.Usage {
		t.Fatalf("got %q %s", e.Error(), e.Code)
	}
	if !errors.Is(e, fs.ErrNotExist) || e.Err != cause {
		t.Errorf("the cause is not kept: %#v", e.Err)
	}
	if e := failure.New(failure.Usage, "policy %s: %v", "p.toml", cause); e.Err != nil {
		t.Errorf("%%v kept a cause: %v", e.Err)
	}
	two := failure.New(failure.Usage, "%w and %w", cause, errors.ErrUnsupported)
	if !errors.Is(two, fs.ErrNotExist) || !errors.Is(two, errors.ErrUnsupported) || two.Error() != "reading x: file does not exist and unsupported operation" {
		t.Errorf("two causes: %q", two.Error())
	}
}
