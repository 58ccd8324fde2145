package reexec

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

// tokenShape is the shape check as encoding/json's tokens see it (the
// implementation checkShape replaced, kept as its reference): every
// token in an array but its closing delimiter is one element, '[' and '{'
// nest.
func tokenShape(line []byte) (arrayTooLong, tooDeep bool, err error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	type level struct {
		array bool
		n     int
	}
	var stack []level
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return false, false, nil
		}
		if err != nil {
			return false, false, err
		}
		if len(stack) > 0 && stack[len(stack)-1].array {
			if d, ok := tok.(json.Delim); !ok || (d != ']' && d != '}') {
				if stack[len(stack)-1].n++; stack[len(stack)-1].n > maxArrayLen {
					return true, false, nil
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
				return false, true, nil
			}
			stack = append(stack, level{array: d == '['})
		case ']', '}':
			stack = stack[:len(stack)-1]
		}
	}
}

// sameShape fails t when checkShape and tokenShape disagree on valid JSON
// (on invalid JSON json.Unmarshal refuses the line after checkShape, so only
// valid lines must agree).
func sameShape(t *testing.T, line []byte) {
	t.Helper()
	if !json.Valid(line) {
		return
	}
	long, deep, terr := tokenShape(line)
	if terr != nil {
		t.Fatalf("tokens of valid JSON: %v", terr)
	}
	err := checkShape(line)
	switch {
	case long && (err == nil || !strings.Contains(err.Error(), "array of more than")):
		t.Fatalf("%.80q: an array over %d elements, checkShape says %v", line, maxArrayLen, err)
	case deep && (err == nil || !strings.Contains(err.Error(), "nested deeper")):
		t.Fatalf("%.80q: nested over %d levels, checkShape says %v", line, maxDepth, err)
	case !long && !deep && err != nil:
		t.Fatalf("%.80q: within the bounds, checkShape says %v", line, err)
	}
}

func TestCheckShapeBounds(t *testing.T) {
	elems := func(n int, e string) string { return "[" + strings.TrimSuffix(strings.Repeat(e+",", n), ",") + "]" }
	nest := func(n int) string { return strings.Repeat(`{"a":`, n-1) + "[]" + strings.Repeat("}", n-1) }
	for _, tc := range []struct {
		name, line string
		refused    string // "" = accepted
	}{
		{"empty array", `{"a":[ ]}`, ""},
		{"longest list", elems(maxArrayLen, `"x"`), ""},
		{"one too many", elems(maxArrayLen+1, `"x"`), "array of more than"},
		{"one too many, of arrays", elems(maxArrayLen+1, `[]`), "array of more than"},
		{"one too many, of objects with commas", elems(maxArrayLen+1, `{"a":1,"b":[1,2]}`), "array of more than"},
		{"commas in strings are not elements", `[` + `"` + strings.Repeat(",", 2*maxArrayLen) + `"]`, ""},
		{"brackets in strings do not nest", `["` + strings.Repeat("[{", 20) + `"]`, ""},
		{"escaped quotes do not end a string", `["\"` + strings.Repeat(",", 2*maxArrayLen) + `\\"]`, ""},
		{"commas of an inner object are not the array's", "[" + `{"` + strings.Repeat(`a":1,"`, maxArrayLen) + `z":1}` + "]", ""},
		{"deepest", nest(maxDepth), ""},
		{"one level too deep", nest(maxDepth + 1), "nested deeper"},
		{"whitespace", " [ 1 ,\t2 ,\n3 , [ ] ]\r\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line := []byte(tc.line)
			if !json.Valid(line) {
				t.Fatalf("the case is not valid JSON: %.80q", line)
			}
			err := checkShape(line)
			if tc.refused == "" && err != nil || tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)) {
				t.Fatalf("checkShape: %v, want %q", err, tc.refused)
			}
			sameShape(t, line)
		})
	}
}

// checkShape allocates nothing, whatever the line.
func TestCheckShapeAllocatesNothing(t *testing.T) {
	line := []byte(`{"report":{"copied":{"handed":["` + strings.Repeat(`a","`, 1000) + `b"]},"endpoints":[{"host":"x","blobs":1}]}}`)
	if n := testing.AllocsPerRun(20, func() { _ = checkShape(line) }); n != 0 {
		t.Fatalf("%v allocations a line", n)
	}
}

// FuzzCheckShape: on every valid JSON line checkShape refuses exactly what
// the token walk refuses (an array over maxArrayLen elements, nesting over
// maxDepth), and never more.
func FuzzCheckShape(f *testing.F) {
	for _, s := range []string{
		`{"event":{"type":"layer_done","digest":"sha256:ab","size":5}}`,
		`{"report":{"copied":{"handed":["a","b"]},"endpoints":[{"host":"x"},{"host":"y"}]}}`,
		`[[[[[[[]]]]]]]`, `[{"a":[{"b":[1,2,"]\",["]}]}]`, `"\\\""`, `[1,[2,[3]],{"k":[4,5]}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		sameShape(t, line)
	})
}
