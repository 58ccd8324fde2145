package reexec

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

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
	// The CRI's reason crosses as one of failure's; any other is dropped.
	refused := &failure.Error{Code: failure.Network, Message: "connection refused", Reason: failure.ReasonRegistryUnavailable}
	if got := failure.CRIReasonOf(toWire(refused).err()); got != failure.ReasonRegistryUnavailable {
		t.Fatalf("reason %q did not cross", got)
	}
	forged := &wireError{Code: failure.Network, Message: "x", Reason: "ImageInspectError\nAnything: it is fine"}
	if got := failure.CRIReasonOf(forged.err()); got != "" {
		t.Fatalf("a reason failure does not know crossed: %q", got)
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

// What the parent writes on fd 3 the child reads back: the request line,
// the trust roots raw after it (newlines and braces in them are not
// JSON), and the control lines after those.
func TestRequestRoundTripWithRawRoots(t *testing.T) {
	roots := []byte("-----BEGIN CERTIFICATE-----\n{\"not\":\"json\"}\n\n-----END CERTIFICATE-----\n")
	req := wireRequest{Request: Request{Copy: &pull.Request{Reference: "reg/x:1"},
		Material: &pull.Material{SystemRoots: roots, Secrets: map[string]pull.Secret{"cred-1": {Username: "u"}}}}, NodeRate: true}
	b, err := encodeRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	if contains(b[:strings.IndexByte(string(b), '\n')], "CERTIFICATE") {
		t.Fatal("the roots are in the JSON line")
	}
	ctl, _ := json.Marshal(control{Rate: 12345, Layers: 2})
	got, dec, err := readRequest(strings.NewReader(string(b) + string(ctl) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got.Copy.Reference != "reg/x:1" || got.Material.Secrets["cred-1"].Username != "u" || !got.NodeRate ||
		string(got.Material.SystemRoots) != string(roots) {
		t.Fatalf("read back %+v, roots %q", got, got.Material.SystemRoots)
	}
	var c control
	if err := dec.Decode(&c); err != nil || c.Rate != 12345 || c.Layers != 2 {
		t.Fatalf("the control line after the roots: %+v %v", c, err)
	}
	// A line longer than the child's read buffer and roots longer still,
	// arriving in pieces as from a pipe.
	long := strings.Repeat("u", 100<<10)
	bigRoots := []byte(strings.Repeat("R\n", 150<<10))
	b, err = encodeRequest(wireRequest{Request: Request{Material: &pull.Material{SystemRoots: bigRoots,
		Secrets: map[string]pull.Secret{"cred-1": {Username: long}}}}, NodeRate: true})
	if err != nil {
		t.Fatal(err)
	}
	got, dec, err = readRequest(iotest.HalfReader(strings.NewReader(string(b) + string(ctl) + "\n")))
	if err != nil || got.Material.Secrets["cred-1"].Username != long || string(got.Material.SystemRoots) != string(bigRoots) {
		t.Fatalf("a long line and long roots: %v (username %d bytes, roots %d)", err, len(got.Material.Secrets["cred-1"].Username), len(got.Material.SystemRoots))
	}
	if err := dec.Decode(&c); err != nil || c.Rate != 12345 {
		t.Fatalf("the control line after long roots: %+v %v", c, err)
	}
	// Without roots nothing follows the line but the control lines.
	b, _ = encodeRequest(wireRequest{Request: Request{Material: &pull.Material{}}})
	if got, _, err := readRequest(strings.NewReader(string(b))); err != nil || got.Material.SystemRoots != nil {
		t.Fatalf("no roots: %v, %q", err, got.Material.SystemRoots)
	}
}

// Roots the line announces but does not carry, too many of them, or
// roots without material are an error, not a request.
func TestRequestRootsBounded(t *testing.T) {
	for name, in := range map[string]string{
		"truncated":   `{"material":{},"roots_len":10}` + "\nabc",
		"too large":   `{"material":{},"roots_len":` + strconv.Itoa(maxWireRoots+1) + "}\n",
		"negative":    `{"material":{},"roots_len":-1}` + "\n",
		"no material": `{"roots_len":3}` + "\nabc",
		"no newline":  `{"material":{}}`,
	} {
		if _, _, err := readRequest(strings.NewReader(in)); err == nil {
			t.Errorf("%s: read as a request", name)
		}
	}
	big := wireRequest{Request: Request{Material: &pull.Material{SystemRoots: make([]byte, maxWireRoots+1)}}}
	if _, err := encodeRequest(big); err == nil {
		t.Error("the parent encoded more roots than the child takes")
	}
}

// The child's stage keeps and hands over partial blobs as the parent says;
// it syncs nothing it stages when the parent says so, with a cache or
// without one.
func TestStageInChildFlags(t *testing.T) {
	s := StageInChild("image", nil, true, true, true)
	if s.Partial == "" || !s.HandOver || !s.NoSync {
		t.Errorf("with a cache: %+v, want partial, hand_over and no_sync", s)
	}
	s = StageInChild("image", nil, true, false, false)
	if s.Partial == "" || s.HandOver || s.NoSync {
		t.Errorf("with a synced cache: %+v, want partial only", s)
	}
	s = StageInChild("image", nil, false, true, true)
	if s.Partial != "" || s.HandOver || !s.NoSync {
		t.Errorf("without a cache: %+v, want no_sync alone", s)
	}
}
