package client_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/client"
)

var sentinels = []error{client.ErrInternal, client.ErrUsage, client.ErrUnauthorized, client.ErrTLS,
	client.ErrNotFound, client.ErrNetwork, client.ErrIsolation, client.ErrVerification,
	client.ErrDestination, client.ErrInterrupted, client.ErrProtocol}

// cgroupParent is a cgroup parent of this test alone.
func cgroupParent(t *testing.T) string {
	p := fmt.Sprintf("/pullhelper-clienttest-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
	t.Cleanup(func() {
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + p)
		for _, d := range dirs {
			subs, _ := filepath.Glob(d + "/pull-*")
			for _, s := range subs {
				_ = os.Remove(s)
			}
			_ = os.Remove(d)
		}
	})
	return p
}

func (w *world) client() *client.Client {
	return &client.Client{Binary: w.bin}
}

// request is a pull of name from the registry into a fresh DEST, with the
// right credential as an inline pull secret.
func (w *world) request(t *testing.T, name string) client.Request {
	return client.Request{
		Image:        w.host + "/client/" + name + ":latest",
		Dest:         "oci:" + filepath.Join(t.TempDir(), "dest"),
		PullSecrets:  [][]byte{w.authJSON},
		CertDir:      w.certDir,
		CgroupParent: cgroupParent(t),
	}
}

func TestPullWithProgress(t *testing.T) {
	w := env(t)
	r := w.request(t, "tiny")
	var events []api.Event
	r.OnEvent = func(e api.Event) { events = append(events, e) }
	res, err := w.client().Pull(testCtx(t), r)
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	if res.Digest != w.digests["tiny"] || res.Layers != 1 || res.Destination == "" {
		t.Errorf("result: digest %s layers %d destination %q; want digest %s, 1 layer", res.Digest, res.Layers, res.Destination, w.digests["tiny"])
	}
	if res.Credential == nil || res.Credential.Source != "pull-secret" || !strings.HasPrefix(res.Credential.File, "fd:") || res.Credential.Username != w.user {
		t.Errorf("credential %+v: want the inline pull secret (source pull-secret, file fd:N, username %s)", res.Credential, w.user)
	}
	if !res.Isolation.Enabled || res.Isolation.UID == 0 {
		t.Errorf("isolation %+v: want an isolated, unprivileged child", res.Isolation)
	}
	seen := map[string]int{}
	for _, e := range events {
		seen[e.Type]++
		if e.TS.IsZero() {
			t.Errorf("event %s without ts", e.Type)
		}
	}
	if len(events) == 0 || events[0].Type != api.EventStart || events[len(events)-1].Type != api.EventDone {
		t.Errorf("events %v: want start first and done last", seen)
	}
	if seen[api.EventLayerStart] != 1 || seen[api.EventLayerDone] != 1 {
		t.Errorf("events %v: want one layer_start and one layer_done", seen)
	}
	if _, err := os.Stat(strings.TrimPrefix(r.Dest, "oci:") + "/index.json"); err != nil {
		t.Errorf("DEST has no index.json: %v", err)
	}
}

func TestPullInlineAuthFile(t *testing.T) {
	w := env(t)
	r := w.request(t, "tiny")
	r.PullSecrets, r.AuthFile = nil, w.authJSON
	res, err := w.client().Pull(testCtx(t), r)
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	if res.Credential == nil || res.Credential.Source != "containers-auth.json" || !strings.HasPrefix(res.Credential.File, "fd:") {
		t.Errorf("credential %+v: want the inline auth file (containers-auth.json, fd:N)", res.Credential)
	}
	r.AuthFilePath = "/etc/passwd"
	if _, err := w.client().Pull(testCtx(t), r); !errors.Is(err, client.ErrUsage) {
		t.Errorf("AuthFile and AuthFilePath: err %v, want ErrUsage", err)
	}
}

func TestPullInlineServiceAccountToken(t *testing.T) {
	w := env(t)
	r := w.request(t, "tiny")
	r.PullSecrets, r.ServiceAccountToken, r.ServiceAccountRegistries = nil, []byte(w.token+"\n"), []string{w.host}
	res, err := w.client().Pull(testCtx(t), r)
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	if res.Credential == nil || res.Credential.Source != "service-account-token" || !strings.HasPrefix(res.Credential.File, "fd:") || res.Credential.Username != "serviceaccount" {
		t.Errorf("credential %+v: want the inline token (service-account-token, fd:N, serviceaccount)", res.Credential)
	}
	r.ServiceAccountRegistries = nil
	if _, err := w.client().Pull(testCtx(t), r); !errors.Is(err, client.ErrUsage) || !strings.Contains(err.Error(), "--service-account-registry") {
		t.Errorf("a token without registries: err %v, want ErrUsage naming --service-account-registry", err)
	}
}

// Each sentinel from a real cause.
func TestSentinels(t *testing.T) {
	w := env(t)
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	reject := filepath.Join(t.TempDir(), "reject.json")
	if err := os.WriteFile(reject, []byte(`{"default":[{"type":"reject"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	zero := 0
	cases := []struct {
		name   string
		want   error
		code   string
		exit   int
		modify func(r *client.Request)
		msg    string // in the message
	}{
		{"wrong password", client.ErrUnauthorized, "unauthorized", 3, func(r *client.Request) { r.PullSecrets = [][]byte{w.badJSON} }, w.host},
		{"missing tag", client.ErrNotFound, "not_found", 5, func(r *client.Request) { r.Image = w.host + "/client/tiny:missing" }, "missing"},
		{"unknown CA", client.ErrTLS, "tls", 4, func(r *client.Request) { r.CertDir = "" }, w.host},
		{"closed port", client.ErrNetwork, "network", 6, func(r *client.Request) {
			r.Image = fmt.Sprintf("127.0.0.1:%d/client/tiny:latest", port)
			r.Retries = &zero
		}, strconv.Itoa(port)},
		{"missing DEST parent", client.ErrDestination, "destination", 9, func(r *client.Request) {
			r.Dest = "oci:" + filepath.Join(t.TempDir(), "missing", "dest")
		}, "missing"},
		{"unknown flag", client.ErrUsage, "usage", 2, func(r *client.Request) { r.Extra = []string{"--no-such-flag"} }, "--no-such-flag"},
		{"malformed pull secret", client.ErrUsage, "usage", 2, func(r *client.Request) { r.PullSecrets = [][]byte{[]byte("{s3cr3t")} }, "--pull-secret-fd 3: parsing pull secret fd:3"},
		{"bad descriptor", client.ErrUsage, "usage", 2, func(r *client.Request) { r.Extra = []string{"--pull-secret-fd", "99"} }, "--pull-secret-fd 99"},
		{"missing netns", client.ErrIsolation, "isolation", 7, func(r *client.Request) { r.Netns = "/nonexistent-netns-" + strconv.Itoa(os.Getpid()) }, "/nonexistent-netns-"},
		{"signature policy rejects", client.ErrVerification, "verification", 8, func(r *client.Request) { r.Extra = []string{"--signature-policy", reject} }, "reject"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := w.request(t, "tiny")
			c.modify(&r)
			res, err := w.client().Pull(testCtx(t), r)
			if err == nil {
				t.Fatalf("Pull succeeded (%s); want %v", res.Digest, c.want)
			}
			for _, s := range sentinels {
				if got := errors.Is(err, s); got != (s == c.want) {
					t.Errorf("errors.Is(%v, %v) = %v", err, s, got)
				}
			}
			var e *client.Error
			if !errors.As(err, &e) {
				t.Fatalf("%v is not a *client.Error", err)
			}
			if e.Code != c.code || e.Exit != c.exit || strings.Contains(e.Message, "\n") || !strings.Contains(e.Message, c.msg) {
				t.Errorf("error code %q exit %d message %q: want code %q, exit %d, one line naming %q", e.Code, e.Exit, e.Message, c.code, c.exit, c.msg)
			}
			if strings.Contains(e.Message, "s3cr3t") || strings.Contains(e.Message, w.password) {
				t.Errorf("the message quotes the secret: %q", e.Message)
			}
			if err.Error() != "pullhelper: "+e.Message {
				t.Errorf("Error() %q does not carry the helper's message %q", err.Error(), e.Message)
			}
		})
	}
}

// pullCgroups are the per-pull cgroups under parent, in every hierarchy.
func pullCgroups(parent string) []string {
	all, _ := filepath.Glob("/sys/fs/cgroup/*" + parent + "/pull-*")
	return all
}

// helperProcs are the pull child (from the pull cgroup's cgroup.procs) and
// its parent, the helper, with their start times (to tell a reused pid).
func helperProcs(t *testing.T, parent string) map[int]string {
	procs := map[int]string{}
	files, _ := filepath.Glob("/sys/fs/cgroup/pids" + parent + "/pull-*/cgroup.procs")
	if len(files) == 0 {
		files, _ = filepath.Glob("/sys/fs/cgroup/*" + parent + "/pull-*/cgroup.procs")
	}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(s)
			if st := procStart(pid); st != "" {
				procs[pid] = st
				if pp := ppid(pid); pp > 0 {
					procs[pp] = procStart(pp)
				}
			}
		}
	}
	return procs
}

// procStart is field 22 of /proc/PID/stat (start time), "" if gone.
func procStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 20 || f[0] == "Z" {
		return ""
	}
	return f[19]
}

func ppid(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// slowRequest is a pull that lasts (a 4 MiB layer at 256 KiB/s); onProgress
// runs once, at its first layer progress event, with the pull running.
func (w *world) slowRequest(t *testing.T, onProgress func()) client.Request {
	r := w.request(t, "slow")
	r.Extra = []string{"--max-bandwidth", "256KiB/s"}
	var once sync.Once
	r.OnEvent = func(e api.Event) {
		if e.Type == api.EventLayerProgress {
			once.Do(onProgress)
		}
	}
	return r
}

// Cancellation: SIGTERM, the helper cleans up, Pull returns after it
// exited, with no process and no cgroup left.
func TestCancelLeavesNothing(t *testing.T) {
	w := env(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	var during map[int]string
	var cgDuring []string
	var r client.Request
	r = w.slowRequest(t, func() {
		during = helperProcs(t, r.CgroupParent)
		cgDuring = pullCgroups(r.CgroupParent)
		cancel()
	})
	start := time.Now()
	_, err := w.client().Pull(ctx, r)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, client.ErrInterrupted) {
		t.Fatalf("Pull after cancel: %v; want context.Canceled and ErrInterrupted", err)
	}
	var e *client.Error
	if errors.As(err, &e) && e.Exit != 143 {
		t.Errorf("exit %d, want 143 (SIGTERM, cleaned up)", e.Exit)
	}
	if len(during) < 2 || len(cgDuring) == 0 {
		t.Fatalf("while pulling: processes %v, cgroups %v; want the helper and its child in a pull cgroup", during, cgDuring)
	}
	for pid, st := range during {
		if procStart(pid) == st {
			t.Errorf("process %d (%s) is still running after Pull returned", pid, strings.ReplaceAll(readProc(pid, "cmdline"), "\x00", " "))
		}
	}
	if left := pullCgroups(r.CgroupParent); len(left) > 0 {
		t.Errorf("cgroups left after Pull returned: %v", left)
	}
	if time.Since(start) > 12*time.Second {
		t.Logf("note: cancellation took %v", time.Since(start))
	}
	if _, err := os.Stat(strings.TrimPrefix(r.Dest, "oci:")); !os.IsNotExist(err) {
		t.Errorf("DEST exists after a cancelled pull: %v", err)
	}
}

// A helper that ignores SIGTERM is killed after the grace period.
func TestCancelKillsAfterGrace(t *testing.T) {
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	fake := writeScript(t, dir, "stubborn", fmt.Sprintf(`
case "$1" in
version) echo '{"version":"fake","protocol":%d}' ;;
pull) trap '' TERM; echo $$ > %s; while :; do sleep 1; done ;;
esac`, api.Protocol, started))
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	c := &client.Client{Binary: fake, Grace: 300 * time.Millisecond}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Pull(ctx, client.Request{Image: "127.0.0.1:1/x", Dest: "oci:" + dir + "/d"})
		errc <- err
	}()
	waitFile(t, started)
	t.Cleanup(func() { // if the client failed to kill it
		if b, err := os.ReadFile(started); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	cancel()
	var err error
	select {
	case err = <-errc:
	case <-time.After(30 * time.Second): // a failure bound, 100 times the grace period
		t.Fatal("Pull did not return 30 s after cancel with a 300 ms grace period: the helper was not killed")
	}
	var e *client.Error
	if !errors.As(err, &e) || !errors.Is(err, client.ErrInterrupted) || !errors.Is(err, context.Canceled) || e.Exit != -1 || !strings.Contains(e.Message, "SIGTERM") {
		t.Fatalf("Pull of a helper ignoring SIGTERM: %v (%+v); want killed after the grace period", err, e)
	}
}

// waitFile waits for path to exist: the fake helper's own signal that it
// runs (bounded by the test's context).
func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s did not appear", path)
}

func readProc(pid int, file string) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	return string(b)
}

// An inline secret is never in /proc/*/cmdline or environ, of the helper,
// its child, or any process, while the pull runs.
func TestSecretNotInProc(t *testing.T) {
	w := env(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	needles := [][]byte{[]byte(w.password), []byte(base64.StdEncoding.EncodeToString([]byte(w.user + ":" + w.password))), []byte(w.token)}
	var helpers map[int]string
	var leaks []string
	var scanned atomic.Int64
	var r client.Request
	r = w.slowRequest(t, func() {
		defer cancel()
		helpers = helperProcs(t, r.CgroupParent)
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			for _, f := range []string{"cmdline", "environ"} {
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
				if err != nil {
					continue
				}
				if _, ok := helpers[pid]; ok {
					scanned.Add(1)
				}
				for _, n := range needles {
					if bytes.Contains(b, n) {
						leaks = append(leaks, fmt.Sprintf("/proc/%d/%s", pid, f))
					}
				}
			}
		}
	})
	r.ServiceAccountToken, r.ServiceAccountRegistries = []byte(w.token), []string{w.host}
	_, _ = w.client().Pull(ctx, r)
	if len(helpers) < 2 || scanned.Load() < 4 {
		t.Fatalf("scanned %d files of the helper processes %v; want cmdline and environ of the helper and its child", scanned.Load(), helpers)
	}
	if len(leaks) > 0 {
		t.Errorf("the inline secret is visible in %v", leaks)
	}
}

func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// A binary that speaks an older protocol, none, or prints garbage is
// refused before any pull.
func TestProtocolMismatch(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh for the fake binaries")
	}
	cases := map[string]string{
		"older":   fmt.Sprintf(`{"version":"0.9","go":"go1.22","os_arch":"linux/amd64","protocol":%d}`, api.Protocol-1),
		"none":    `{"version":"0.8","go":"go1.22","os_arch":"linux/amd64"}`,
		"garbage": `pullhelper 0.7`,
		"string":  `{"version":"1","protocol":"1"}`,
	}
	for name, out := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			calls := filepath.Join(dir, "calls")
			fake := writeScript(t, dir, "pullhelper", fmt.Sprintf("echo \"$1\" >> %s\ncat <<'EOF'\n%s\nEOF", calls, out))
			c := &client.Client{Binary: fake}
			_, err := c.Pull(testCtx(t), client.Request{Image: "127.0.0.1:1/x", Dest: "oci:" + dir + "/d", PullSecrets: [][]byte{[]byte("{}")}})
			if !errors.Is(err, client.ErrProtocol) {
				t.Fatalf("Pull with a %s binary: %v; want ErrProtocol", name, err)
			}
			if !strings.Contains(err.Error(), fake) {
				t.Errorf("%q does not name the binary", err)
			}
			b, _ := os.ReadFile(calls)
			if got := strings.Fields(string(b)); len(got) != 1 || got[0] != "version" {
				t.Errorf("the fake binary was run as %v; want only `version`", got)
			}
		})
	}
	// The current protocol is accepted, and asked once per binary file.
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	fake := writeScript(t, dir, "pullhelper", fmt.Sprintf(`echo "$1" >> %s
case "$1" in
version) echo '{"version":"x","protocol":%d}' ;;
*) echo '{"error":{"code":"not_found","message":"fake: no such image"}}'; exit 5 ;;
esac`, calls, api.Protocol))
	c := &client.Client{Binary: fake}
	for i := 0; i < 2; i++ {
		_, err := c.Pull(testCtx(t), client.Request{Image: "127.0.0.1:1/x", Dest: "oci:" + dir + "/d"})
		if !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "fake: no such image") {
			t.Fatalf("Pull %d: %v; want ErrNotFound from the fake", i, err)
		}
	}
	b, _ := os.ReadFile(calls)
	if got := strings.Fields(string(b)); strings.Join(got, " ") != "version pull pull" {
		t.Errorf("calls %v; want version once, then pull twice", got)
	}
}

// The real binary reports the protocol this client speaks.
func TestVersionOfRealBinary(t *testing.T) {
	w := env(t)
	v, err := w.client().Version(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if v.Protocol != api.Protocol || v.Version == "" {
		t.Errorf("version %+v; want protocol %d", v, api.Protocol)
	}
}

// Inline secrets larger than a pipe's buffer are written while the helper
// reads them; one over the helper's 4 MiB bound is refused (exit 2) without
// the client blocking on the write.
func TestSecretSizes(t *testing.T) {
	w := env(t)
	r := w.request(t, "tiny")
	// 1 MiB of JSON whitespace around the auth file: still valid.
	big := append(append(bytes.Repeat([]byte(" "), 1<<20), w.authJSON...), '\n')
	r.PullSecrets = [][]byte{big}
	if _, err := w.client().Pull(testCtx(t), r); err != nil {
		t.Fatalf("Pull with a 1 MiB pull secret: %v", err)
	}
	r = w.request(t, "tiny")
	r.PullSecrets = [][]byte{bytes.Repeat([]byte(" "), 5<<20)}
	_, err := w.client().Pull(testCtx(t), r)
	if !errors.Is(err, client.ErrUsage) || !strings.Contains(err.Error(), "--pull-secret-fd 3") || !strings.Contains(err.Error(), "4 MiB") {
		t.Fatalf("Pull with a 5 MiB pull secret: %v; want ErrUsage naming --pull-secret-fd 3 and the 4 MiB limit", err)
	}
}

// The JSON error code classifies first; without one, the exit status does,
// with the last line of stderr as the message.
func TestClassification(t *testing.T) {
	cases := []struct {
		name, script string
		want         error
		exit         int
		msg          string
	}{
		{"code wins", `echo '{"error":{"code":"verification","message":"digest mismatch"}}'; exit 1`, client.ErrVerification, 1, "digest mismatch"},
		{"exit without JSON", `echo 'pullhelper: x509: certificate signed by unknown authority' >&2; exit 4`, client.ErrTLS, 4, "x509: certificate signed by unknown authority"},
		{"unknown code and exit", `echo '{"error":{"code":"novel","message":"something new"}}'; exit 42`, client.ErrInternal, 42, "something new"},
		{"success without JSON", `exit 0`, client.ErrInternal, 0, "not JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			fake := writeScript(t, dir, "pullhelper", fmt.Sprintf("case \"$1\" in\nversion) echo '{\"version\":\"x\",\"protocol\":%d}' ;;\n*) %s ;;\nesac", api.Protocol, c.script))
			_, err := (&client.Client{Binary: fake}).Pull(testCtx(t), client.Request{Image: "127.0.0.1:1/x", Dest: "oci:" + dir + "/d"})
			var e *client.Error
			if !errors.Is(err, c.want) || !errors.As(err, &e) || e.Exit != c.exit || !strings.Contains(e.Message, c.msg) {
				t.Fatalf("err %v (%+v); want %v, exit %d, message with %q", err, e, c.want, c.exit, c.msg)
			}
		})
	}
}
