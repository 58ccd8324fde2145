package client_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/client"
)

// agentEnv makes the test binary an agent (TestMain): it pulls with the
// client as its environment says, prints "progress" at the first progress
// event, and waits to be killed.
const agentEnv = "PULLHELPER_CLIENT_TEST_AGENT"

func runAgent() int {
	get := func(k string) string { return os.Getenv(agentEnv + "_" + k) }
	secret, err := os.ReadFile(get("SECRET_FILE"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var once sync.Once
	_, err = (&client.Client{Binary: get("BIN")}).Pull(context.Background(), client.Request{
		Image: get("IMAGE"), Dest: get("DEST"), CertDir: get("CERT_DIR"), CgroupParent: get("CGROUP_PARENT"),
		PullSecrets: [][]byte{secret},
		Extra:       []string{"--max-bandwidth", "64KiB/s"},
		OnEvent: func(e api.Event) {
			if e.Type == api.EventLayerProgress {
				once.Do(func() { fmt.Println("progress") })
			}
		},
	})
	fmt.Fprintln(os.Stderr, "agent: Pull returned:", err)
	return 1
}

// An agent killed with SIGKILL mid-pull: the helper gets SIGTERM
// (Pdeathsig) and cleans up; DEST stays untouched, no cgroup is left.
func TestAgentKilled(t *testing.T) {
	w := env(t)
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret.json")
	if err := os.WriteFile(secretFile, w.authJSON, 0o600); err != nil {
		t.Fatal(err)
	}
	parent := cgroupParent(t)
	dest := filepath.Join(dir, "dest")
	agent := exec.Command(os.Args[0], "-test.run=^$")
	agent.Env = append(os.Environ(), agentEnv+"=1",
		agentEnv+"_BIN="+w.bin, agentEnv+"_IMAGE="+w.host+"/client/slow:latest", agentEnv+"_DEST=oci:"+dest,
		agentEnv+"_CERT_DIR="+w.certDir, agentEnv+"_CGROUP_PARENT="+parent, agentEnv+"_SECRET_FILE="+secretFile)
	var stderr strings.Builder
	agent.Stderr = &stderr
	out, err := agent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agent.Process.Kill(); _ = agent.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "progress\n" {
		t.Fatalf("the agent printed %q, not progress; stderr:\n%s", line, stderr.String())
	}
	procs := helperProcs(t, parent)
	if len(procs) < 2 {
		t.Fatalf("helper processes %v: want the helper and its child", procs)
	}
	_ = agent.Process.Signal(syscall.SIGKILL)
	_ = agent.Wait()
	killed := time.Now()
	// The pull alone would take a minute (4 MiB at 64 KiB/s); cleanup
	// after SIGTERM takes well under a second. 30 s is a failure bound.
	deadline := time.Now().Add(30 * time.Second)
	for pid, st := range procs {
		for procStart(pid) == st {
			if time.Now().After(deadline) {
				t.Fatalf("process %d (%s) still runs 30 s after its agent was killed", pid, strings.ReplaceAll(readProc(pid, "cmdline"), "\x00", " "))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("the helper and its child exited %v after the agent was killed", time.Since(killed).Round(time.Millisecond))
	if left := pullCgroups(parent); len(left) > 0 {
		t.Errorf("cgroups left after the helper exited: %v", left)
	}
	if _, err := os.Stat(dest); !os.IsNotExist(err) {
		t.Errorf("DEST exists after the agent was killed: %v", err)
	}
}
