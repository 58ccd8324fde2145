package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/internal/failure"
)

// Every bad flag is reported, one line each on stderr, "; " in the JSON.
func TestEveryBadFlagIsReported(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "p.toml")
	if err := os.WriteFile(pol, []byte("version = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"explain", "--policy", pol, "--timeout", "9223372037", "--retries", "x", "--memory-max", "12 apples", "127.0.0.1:1/x"}, &stdout, &stderr)
	lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
	want := []string{
		`pullhelper: --retries: invalid value "x": want an integer`,
		`pullhelper: --timeout: invalid duration "9223372037": too large; the maximum is`,
		`pullhelper: --memory-max: invalid size "12 apples"`,
	}
	if code != 2 || len(lines) != len(want) {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("line %d = %q, want prefix %q", i+1, lines[i], want[i])
		}
	}
	var doc struct {
		Error struct{ Code, Message string }
	}
	joined := strings.ReplaceAll(strings.Join(lines, "; "), "pullhelper: ", "")
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil || doc.Error.Code != "usage" || doc.Error.Message != joined {
		t.Fatalf("stdout %q (%v)", stdout.String(), err)
	}
}

// An error is written on one line with every non-printable character
// escaped, on stderr and in the JSON on stdout: a message may quote what
// the child staged or sent (a tar member's name, say).
func TestWriteErrorEscapes(t *testing.T) {
	var stdout, stderr bytes.Buffer
	writeError(&stdout, &stderr, failure.New(failure.Verification, "archive member a\x1b]0;owned\x07\u2028b\nc is bad"))
	want := `pullhelper: archive member a\x1b]0;owned\a\u2028b c is bad` + "\n"
	if stderr.String() != want {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
	var out struct{ Error struct{ Message string } }
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || out.Error.Message != strings.TrimSuffix(strings.TrimPrefix(want, "pullhelper: "), "\n") {
		t.Errorf("stdout %q (%v)", stdout.String(), err)
	}
}

// A --log-format pull refuses, explain refuses the same (it logs nothing
// itself, and accepted it).
func TestExplainRefusesTheLogFormatPullRefuses(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "p.toml")
	if err := os.WriteFile(pol, []byte("version = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"explain", "--policy", pol, "--log-format", "yaml", "127.0.0.1:1/x"}, &stdout, &stderr)
	if code != 2 || !strings.Contains(stdout.String(), `--log-format: want text or json, not \"yaml\"`) {
		t.Fatalf("exit %d, stdout %s", code, stdout.String())
	}
}
