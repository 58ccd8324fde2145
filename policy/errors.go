package policy

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Error is a policy or flag error. It names where the bad setting came from:
// File and Line for the policy file (Line is 0 when unknown), or a flag name
// in Key.
type Error struct {
	File string
	Line int
	Key  string
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		if fl := flagFor(e.Key); fl != "" && !strings.HasPrefix(e.Key, "-") {
			b.WriteString(" (" + fl + ")")
		}
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in one policy document or one set of
// settings, each an *Error, in file order. Validation reports them all at
// once, like the kubelet's config validation; syntax errors still stop the
// decoder at the first one.
type Errors []*Error

// MaxErrors is how many problems one document reports at most; after that
// checking stops (a hostile file must not make it slow) and a last line says
// that more may follow.
const MaxErrors = 20

func (es Errors) full() bool { return len(es) >= MaxErrors }

// Error joins the problems with "; " so that it stays one line.
func (es Errors) Error() string {
	return strings.Join(es.Lines(), "; ")
}

// Unwrap gives errors.Is and errors.As every problem.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// Lines renders each problem on its own.
func (es Errors) Lines() []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Error()
	}
	return out
}

// Problems returns each problem of err on its own: the lines of an Errors in
// err's chain, else err's own text.
func Problems(err error) []string {
	var es Errors
	if errors.As(err, &es) {
		return es.Lines()
	}
	return []string{err.Error()}
}

// add appends err (an *Error or an Errors) to es.
func (es Errors) add(err error) Errors {
	var more Errors
	var one *Error
	switch {
	case err == nil:
	case errors.As(err, &more):
		es = append(es, more...)
	case errors.As(err, &one):
		es = append(es, one)
	default:
		es = append(es, &Error{Msg: err.Error()})
	}
	return es
}

// result sorts es by line (unknown lines last), drops duplicates (a base
// setting is checked again in every profile) and returns nil when empty.
func (es Errors) result() error {
	if len(es) == 0 {
		return nil
	}
	sort.SliceStable(es, func(i, j int) bool {
		li, lj := es[i].Line, es[j].Line
		if li == 0 || lj == 0 {
			return li != 0 && lj == 0
		}
		return li < lj
	})
	seen := map[string]bool{}
	out := es[:0]
	for _, e := range es {
		if s := e.Error(); !seen[s] {
			seen[s] = true
			out = append(out, e)
		}
	}
	if len(out) >= MaxErrors {
		file := out[0].File
		out = append(out[:MaxErrors:MaxErrors], &Error{File: file, Msg: fmt.Sprintf("stopped after %d problems; fix these first", MaxErrors)})
	}
	if len(out) == 1 {
		return out[0]
	}
	return out
}

var (
	flagsMu sync.RWMutex
	flagOf  = map[string]string{}
)

// NameFlag records that flag (e.g. "--timeout") sets key (e.g.
// "pull.timeout"), so that errors about the key in a file name the flag too:
// "FILE:LINE: pull.timeout (--timeout): problem". The CLI's flag table
// calls it for each of its flags.
func NameFlag(key, flag string) {
	flagsMu.Lock()
	flagOf[key] = flag
	flagsMu.Unlock()
}

// flagFor returns the flag of key, looking through a profile prefix.
func flagFor(key string) string {
	if strings.HasPrefix(key, "profiles.") {
		if parts := strings.SplitN(key, ".", 3); len(parts) == 3 {
			key = parts[2]
		}
	}
	flagsMu.RLock()
	defer flagsMu.RUnlock()
	return flagOf[key]
}
