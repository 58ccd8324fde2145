package reexec

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/pull"
)

// Errors cross the pipe as {code, message} and come back typed.
func TestErrorRoundTrip(t *testing.T) {
	in := failure.New(failure.TLS, "TLS with reg:5000 failed")
	b, err := json.Marshal(message{Error: toWire(in)})
	if err != nil {
		t.Fatal(err)
	}
	var m message
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	out := m.Error.err()
	if failure.CodeOf(out) != failure.TLS || out.Error() != in.Error() {
		t.Fatalf("got %v (%s)", out, failure.CodeOf(out))
	}
	if failure.CodeOf(toWire(errors.New("x")).err()) != failure.Internal {
		t.Fatal("an untyped error must arrive as internal")
	}
}

// The request never carries secrets outside its Material, and the Plan's
// JSON has none.
func TestRequestKeepsSecretsInMaterial(t *testing.T) {
	p := &pull.Request{Reference: "reg/x:1"}
	req := Request{Copy: p, Material: &pull.Material{Secrets: map[string]pull.Secret{"cred-1": {Username: "u", Password: "hunter2"}}}}
	b, _ := json.Marshal(req.Copy)
	if string(b) == "" || contains(b, "hunter2") {
		t.Fatalf("plan JSON: %s", b)
	}
	b, _ = json.Marshal(req)
	if !contains(b, "hunter2") {
		t.Fatal("the material must carry the secret to the child")
	}
}

func contains(b []byte, s string) bool { return strings.Contains(string(b), s) }

func TestPullPanicsWithoutDispatch(t *testing.T) {
	dispatched = false
	defer func() {
		if recover() == nil {
			t.Fatal("Start must panic when main did not call Dispatch")
		}
	}()
	_, _ = Start(nil, StartOptions{})
}

// The child's error is bounded before it is repeated: a code the contract
// does not have is internal, a long message is cut, and it is one line.
func TestErrorFromTheChildIsBounded(t *testing.T) {
	w := &wireError{Code: failure.Code(strings.Repeat("c", 1<<20)), Message: "first\nsecond " + strings.Repeat("m", 1<<20)}
	err := w.err()
	if failure.CodeOf(err) != failure.Internal {
		t.Errorf("code %.40q, want internal", failure.CodeOf(err))
	}
	if n := len(err.Error()); n > maxErrorMessage+64 || strings.Contains(err.Error(), "\n") || !strings.HasPrefix(err.Error(), `first\nsecond`) {
		t.Errorf("message of %d bytes: %.60q", n, err.Error())
	}
}

// The child's text is repeated with every character that is not printable
// escaped: no terminal escape (ESC, OSC's BEL, C1 CSI), no line of its own
// (CR, LF, NEL, U+2028/2029), no NUL or backspace reaches the caller.
func TestChildErrorIsEscaped(t *testing.T) {
	w := &wireError{Code: "network", Message: "x\x1b[1A\x1b[2K\x1b]0;owned\x07pullhelper: pulled OK\x1b[8m\u009b31m\u2028\u2029\u0085\x00\b\r\n\xff\u200edone"}
	got := w.err().Error()
	for _, r := range got {
		if !strconv.IsPrint(r) {
			t.Fatalf("%q: %U is not printable", got, r)
		}
	}
	if want := `x\x1b[1A\x1b[2K\x1b]0;owned\apullhelper: pulled OK\x1b[8m\u009b31m\u2028\u2029\u0085\x00\b\r\n\xff\u200edone`; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
