package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
