package reexec

import (
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

// checkShape scans line's bytes once, retaining nothing and allocating
// nothing, and refuses an array of more than maxArrayLen elements or
// nesting deeper than maxDepth. Outside strings it counts brackets and the
// values that start in an array; inside one it only looks for the closing
// quote. On valid JSON that is exactly the structure, element by element;
// a line that is not valid JSON is refused by json.Unmarshal's own check,
// which reads the whole line before it allocates anything. Its errors
// never repeat the line's text (only kinds and byte offsets).
func checkShape(line []byte) error {
	type level struct {
		array bool
		n     int  // values started in it (an array's elements)
		next  bool // a value may start here: after '[' or ','
	}
	var stack [maxDepth]level
	depth := 0
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		if depth > 0 && stack[depth-1].array && stack[depth-1].next && c != ']' {
			top := &stack[depth-1]
			top.next = false
			if top.n++; top.n > maxArrayLen {
				return fmt.Errorf("the pull child sent a message with an array of more than %d elements (at byte %d)", maxArrayLen, i)
			}
		}
		switch c {
		case '"':
			for i++; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' {
					i++
				}
			}
		case '[', '{':
			if depth == maxDepth {
				return fmt.Errorf("the pull child sent a message nested deeper than %d levels (at byte %d)", maxDepth, i)
			}
			stack[depth] = level{array: c == '[', next: c == '['}
			depth++
		case ']', '}':
			if depth > 0 {
				depth--
			}
		case ',':
			if depth > 0 && stack[depth-1].array {
				stack[depth-1].next = true
			}
		}
	}
	return nil
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
