package policy

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// Kind is how a flag's text becomes a TOML value.
type Kind int

// Flag value kinds.
const (
	String  Kind = iota // quoted as a TOML string; the key's type parses it
	Int                 // a TOML integer
	Bool                // a TOML boolean
	Strings             // repeated flag → TOML array of strings
)

// SourceCRIOGlobalAuthFile is what sets auth.authfile for a pull of
// `pullhelper cri` in front of CRI-O from its [crio.image]
// global_auth_file: CRI-O's only auth file, which, unlike a file the
// caller names, need not exist (containers/image then reads no
// credential from any file).
const SourceCRIOGlobalAuthFile = "crio.conf [crio.image] global_auth_file"

// Set overrides the dotted key with a flag's value, decoding it exactly as the
// policy file would (same types, same validation); errors name the flag.
func (l *Loaded) Set(flag, key string, kind Kind, values ...string) error {
	var lit string
	switch kind {
	case String:
		lit = quote(values[len(values)-1])
	case Int:
		v := values[len(values)-1]
		if _, err := strconv.ParseInt(v, 10, 64); err != nil {
			if errors.Is(err, strconv.ErrRange) {
				return &Error{Key: flag, Msg: fmt.Sprintf("invalid value %q: too large; the maximum is %d", v, math.MaxInt32)}
			}
			return &Error{Key: flag, Msg: fmt.Sprintf("invalid value %q: want an integer", v)}
		}
		lit = v
	case Bool:
		b, err := strconv.ParseBool(values[len(values)-1])
		if err != nil {
			return &Error{Key: flag, Msg: fmt.Sprintf("invalid value %q: want true or false", values[len(values)-1])}
		}
		lit = strconv.FormatBool(b)
	case Strings:
		q := make([]string, len(values))
		for i, v := range values {
			q[i] = quote(v)
		}
		lit = "[" + strings.Join(q, ", ") + "]"
	}
	parts := strings.Split(key, ".")
	doc := ""
	if len(parts) > 1 {
		doc = "[" + strings.Join(parts[:len(parts)-1], ".") + "]\n"
	}
	doc += parts[len(parts)-1] + " = " + lit + "\n"
	var next = clonePolicy(l.Policy)
	md, err := toml.Decode(doc, &next)
	if err != nil {
		var pe toml.ParseError
		msg := err.Error()
		if errors.As(err, &pe) {
			msg = pe.Message
		}
		return &Error{Key: flag, Msg: cleanTOMLMessage(msg)}
	}
	if und := md.Undecoded(); len(und) > 0 {
		return &Error{Key: flag, Msg: "internal error: unknown policy key " + und[0].String()}
	}
	l.Policy = next
	l.defined[key] = flag
	return nil
}

// quote renders s as a TOML basic string.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
