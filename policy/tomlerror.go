package policy

import (
	"errors"
	"regexp"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/pullhelper/pullhelper/internal/safefile"
)

// syntaxError is a TOML syntax error by where and what kind only: its
// message may quote the file's bytes (the file may not be a policy at all:
// a symlink to a root-only file), so quoted fragments go and the last key
// stays only if it is one of the schema's.
func syntaxError(name string, err error) error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		key := pe.LastKey
		if !schemaKey(key) {
			key = ""
		}
		return &Error{File: name, Line: pe.Position.Line, Key: key, Msg: safefile.Redact(cleanTOMLMessage(pe.Message))}
	}
	return &Error{File: name, Msg: safefile.Redact(cleanTOMLMessage(err.Error()))}
}

// tomlError is a decoder's complaint about a value: a key of the schema is
// named with the decoder's message (which may quote the value: the file
// set a key of the policy) less its bare long numbers (an integer out of
// range is repeated unquoted); any other key is not, and the message loses
// its quoted fragments.
func tomlError(name string, err error) error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		msg := pe.Message
		if pe.Usage != "" && !strings.Contains(msg, pe.Usage) {
			msg += " (" + strings.TrimSpace(strings.SplitN(pe.Usage, "\n", 2)[0]) + ")"
		}
		if !schemaKey(pe.LastKey) {
			return &Error{File: name, Line: pe.Position.Line, Msg: safefile.Redact(cleanTOMLMessage(msg))}
		}
		return &Error{File: name, Line: pe.Position.Line, Key: pe.LastKey, Msg: safefile.RedactNumbers(cleanTOMLMessage(msg))}
	}
	// Type mismatches come as plain errors: "toml: line N (last key "K"): …".
	if m := lineKeyRE.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		if !schemaKey(m[2]) {
			return &Error{File: name, Line: line, Msg: safefile.Redact(cleanTOMLMessage(m[3]))}
		}
		return &Error{File: name, Line: line, Key: m[2], Msg: safefile.RedactNumbers(cleanTOMLMessage(m[3]))}
	}
	return &Error{File: name, Msg: safefile.Redact(cleanTOMLMessage(err.Error()))}
}

var lineKeyRE = regexp.MustCompile(`^toml: line (\d+) \(last key "([^"]*)"\): (.*)$`)

// cleanTOMLMessage is the decoder's message on one line, without its
// "toml: " prefix.
func cleanTOMLMessage(s string) string {
	s = strings.TrimPrefix(s, "toml: ")
	return strings.ReplaceAll(s, "\n", " ")
}
