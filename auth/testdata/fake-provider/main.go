// Command fake-provider is a kubelet credential-provider plugin for the auth
// package's tests. It is built by the tests; nothing else uses it.
//
// It reads the CredentialProviderRequest from stdin, appends one JSON line
// describing the run to $FAKE_PROVIDER_LOG, and copies the file
// $FAKE_PROVIDER_RESPONSE to stdout as its response. The log holds argv, the
// variables named in $FAKE_PROVIDER_LOG_ENV (comma-separated) and the
// request; never the response, so a secret in it appears only on stdout.
//
// $FAKE_PROVIDER_MODE changes what it does after logging:
//
//	""           answer and exit 0
//	"fail"       answer, write $FAKE_PROVIDER_STDERR to stderr, exit 1
//	"hang"       sleep for an hour without answering
//	"hang-child" start a copy of itself in "hang" mode (sharing stdout and
//	             logging its own line), then hang too
//
// $FAKE_PROVIDER_STDERR is written to stderr in every mode.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

type logLine struct {
	PID     int               `json:"pid"`
	Role    string            `json:"role"`
	Argv    []string          `json:"argv"`
	Env     map[string]string `json:"env"`
	Request json.RawMessage   `json:"request,omitempty"`
	RawReq  string            `json:"rawRequest,omitempty"`
}

func main() {
	role := os.Getenv("FAKE_PROVIDER_ROLE")
	if role == "" {
		role = "plugin"
	}
	var req []byte
	if role == "plugin" {
		var err error
		req, err = io.ReadAll(os.Stdin)
		if err != nil {
			die("reading stdin: %v", err)
		}
	}
	line := logLine{PID: os.Getpid(), Role: role, Argv: os.Args, Env: map[string]string{}}
	for _, name := range strings.Split(os.Getenv("FAKE_PROVIDER_LOG_ENV"), ",") {
		if v, ok := os.LookupEnv(name); ok && name != "" {
			line.Env[name] = v
		}
	}
	if json.Valid(req) {
		line.Request = req
	} else {
		line.RawReq = string(req)
	}
	if path := os.Getenv("FAKE_PROVIDER_LOG"); path != "" {
		data, _ := json.Marshal(line)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			die("opening the log: %v", err)
		}
		if _, err := f.Write(append(data, '\n')); err != nil {
			die("writing the log: %v", err)
		}
		if err := f.Close(); err != nil {
			die("closing the log: %v", err)
		}
	}
	fmt.Fprint(os.Stderr, os.Getenv("FAKE_PROVIDER_STDERR"))

	switch mode := os.Getenv("FAKE_PROVIDER_MODE"); mode {
	case "hang":
		time.Sleep(time.Hour)
		os.Exit(0)
	case "hang-child":
		self, err := os.Executable()
		if err != nil {
			die("finding myself: %v", err)
		}
		child := exec.Command(self)
		child.Env = append(os.Environ(), "FAKE_PROVIDER_ROLE=child", "FAKE_PROVIDER_MODE=hang", "FAKE_PROVIDER_STDERR=")
		child.Stdout = os.Stdout
		if err := child.Start(); err != nil {
			die("starting the child: %v", err)
		}
		time.Sleep(time.Hour)
		os.Exit(0)
	case "", "fail":
		if path := os.Getenv("FAKE_PROVIDER_RESPONSE"); path != "" {
			f, err := os.Open(path)
			if err != nil {
				die("opening the response file: %v", err)
			}
			if _, err := io.Copy(os.Stdout, f); err != nil {
				die("writing the response: %v", err)
			}
		}
		if mode == "fail" {
			os.Exit(1)
		}
	default:
		die("unknown FAKE_PROVIDER_MODE %q", mode)
	}
}

// die reports a problem of the fake itself; its messages never include the
// response.
func die(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "fake-provider: "+format+"\n", a...)
	os.Exit(2)
}
