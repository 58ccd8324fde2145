package policy

import (
	"bytes"
	"fmt"

	"github.com/pullhelper/pullhelper/internal/safefile"
)

// Bounds on a policy document, checked before the TOML decoder sees it, so
// that a hostile or broken file costs bounded memory and time: an 80 KB file
// of nested arrays once made the decoder take 16 GB.
const (
	// MaxFileSize is the largest policy file read (1 MiB); a real policy
	// is a few KiB.
	MaxFileSize = 1 << 20
	// MaxDepth is the deepest nesting of arrays and inline tables (table
	// headers count as one level). The schema needs 5 at most
	// (profiles = { p = { trust = { ca_files = [ { … } ] } } }).
	MaxDepth = 16
)

// readBounded reads at most MaxFileSize bytes of path, refusing a bigger
// file without reading the rest, and anything but a regular file (a FIFO
// is refused without waiting for a writer) -- through safefile, as every
// file root reads for the caller. A symlink is followed (a ConfigMap
// volume's files are symlinks).
func readBounded(path string) ([]byte, error) {
	data, err := safefile.ReadFile(path, MaxFileSize)
	switch {
	case safefile.TooBig(err):
		return nil, tooBig(path)
	case err != nil:
		return nil, &Error{File: path, Msg: "reading policy: " + safefile.Reason(err)}
	}
	return data, nil
}

func tooBig(name string) error {
	return &Error{File: name, Msg: fmt.Sprintf("policy file larger than %d bytes (1 MiB), the limit; a policy is a few KiB", MaxFileSize)}
}

// checkBounds refuses a document over MaxFileSize or nested deeper than
// MaxDepth. The scan knows TOML's strings and comments well enough that a
// bracket inside them does not count; anything it gets wrong only makes the
// count differ for documents the decoder would reject anyway.
func checkBounds(name string, data []byte) error {
	if len(data) > MaxFileSize {
		return tooBig(name)
	}
	depth, line := 0, 1
	for i := 0; i < len(data); i++ {
		switch c := data[i]; c {
		case '\n':
			line++
		case '#':
			j := bytes.IndexByte(data[i:], '\n')
			if j < 0 {
				return nil
			}
			i += j - 1 // the newline itself is counted on the next round
		case '"', '\'':
			delim := data[i : i+1]
			if bytes.HasPrefix(data[i:], []byte{c, c, c}) {
				delim = data[i : i+3]
			}
			j := i + len(delim)
			for j < len(data) {
				b := data[j]
				if b == '\n' || (b == '\\' && len(delim) == 1 && j+1 < len(data) && data[j+1] == '\n') {
					if len(delim) == 1 {
						break // unterminated one-line string: the decoder stops here
					}
					line++
				}
				if c == '"' && b == '\\' {
					if j+1 < len(data) && data[j+1] == '\n' {
						line++
					}
					j += 2
					continue
				}
				if bytes.HasPrefix(data[j:], delim) {
					j += len(delim)
					// A multi-line string may end in up to two more quotes.
					for k := 0; k < 2 && len(delim) == 3 && j < len(data) && data[j] == c; k++ {
						j++
					}
					break
				}
				j++
			}
			i = j - 1
		case '[', '{':
			depth++
			if depth > MaxDepth {
				return &Error{File: name, Line: line, Msg: fmt.Sprintf("arrays or inline tables nested deeper than %d levels, the limit", MaxDepth)}
			}
		case ']', '}':
			if depth > 0 {
				depth--
			}
		}
	}
	return nil
}
