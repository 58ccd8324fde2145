package reexec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Bounds on the shape of a line on fd 4, checked before it is decoded:
// json.Unmarshal of a bounded line can still amplify it (a 3-byte "{}" in
// an array becomes a struct of tens of bytes, and slices grow by
// doubling), so a line whose arrays are longer than any legitimate list or
// whose nesting is deeper than the protocol's is refused unread. The
// longest list a report carries is its handed-over digests (pull.MaxHanded);
// the deepest value is an endpoint or a handed digest, four levels down.
// The per-field bounds (pull.Report.Check) still apply after decoding.
const (
	maxArrayLen = 10000 // pull.MaxHanded
	maxDepth    = 6
)

// checkShape walks line's JSON tokens, retaining nothing, and refuses an
// array of more than maxArrayLen elements or nesting deeper than maxDepth.
// Its errors never repeat the line's text (only kinds and byte offsets).
func checkShape(line []byte) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber() // a number token stays the literal: nothing parsed
	type level struct {
		array bool
		n     int
	}
	var stack []level
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return decodeError(err)
		}
		if len(stack) > 0 && stack[len(stack)-1].array {
			if d, ok := tok.(json.Delim); !ok || (d != ']' && d != '}') {
				if stack[len(stack)-1].n++; stack[len(stack)-1].n > maxArrayLen {
					return fmt.Errorf("the pull child sent a message with an array of more than %d elements (at byte %d)", maxArrayLen, dec.InputOffset())
				}
			}
		}
		d, ok := tok.(json.Delim)
		if !ok {
			continue
		}
		switch d {
		case '[', '{':
			if len(stack) == maxDepth {
				return fmt.Errorf("the pull child sent a message nested deeper than %d levels (at byte %d)", maxDepth, dec.InputOffset())
			}
			stack = append(stack, level{array: d == '['})
		case ']', '}':
			stack = stack[:len(stack)-1]
		}
	}
}

// decodeError says what is wrong with a line the parent could not decode,
// by kind and byte offset only: the decoder's own text quotes the child's
// bytes (a number literal in full, a time that did not parse).
func decodeError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("the pull child sent a malformed message: invalid JSON at byte %d", se.Offset)
	case errors.As(err, &te):
		typ := "a value"
		if te.Type != nil {
			typ = te.Type.String()
		}
		return fmt.Errorf("the pull child sent a malformed message: field %q is not a %s (at byte %d)", te.Field, typ, te.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("the pull child sent a malformed message: the JSON ends early")
	}
	return errors.New("the pull child sent a malformed message: a value of a form the parent does not accept")
}
