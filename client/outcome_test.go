package client_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/client"
)

// fakeHelper writes a fake pullhelper whose `version` is current and whose
// `pull` runs script; it returns the binary and a directory for DEST.
func fakeHelper(t *testing.T, script string) (string, string) {
	dir := t.TempDir()
	return writeScript(t, dir, "pullhelper", fmt.Sprintf("case \"$1\" in\nversion) echo '{\"version\":\"x\",\"protocol\":%d}' ;;\n*) %s ;;\nesac", api.Protocol, script)), dir
}

// A Go runtime crash (exit 2, a traceback on stderr, no JSON) is internal:
// the binary prints a JSON usage error for every exit 2 of its own, and an
// agent takes ErrUsage as permanent.
func TestCrashIsNotUsage(t *testing.T) {
	fake, dir := fakeHelper(t, "printf 'panic: runtime error: invalid memory address\\n\\ngoroutine 37 [running]:\\n\\t/src/pipeline/run.go:88 +0x1f4\\n' >&2; exit 2")
	_, err := (&client.Client{Binary: fake}).Pull(testCtx(t), client.Request{Image: "127.0.0.1:1/x", Dest: "oci:" + dir + "/d"})
	if errors.Is(err, client.ErrUsage) || !errors.Is(err, client.ErrInternal) {
		t.Errorf("a crash (exit 2, no JSON): %v; want ErrInternal", err)
	}
}

// A helper killed by a signal the client did not send (the OOM killer's
// SIGKILL, a crash's SIGSEGV or SIGABRT) while ctx is alive is internal,
// not interrupted.
func TestForeignSignalIsNotInterrupted(t *testing.T) {
	for _, sig := range []string{"KILL", "SEGV", "ABRT"} {
		t.Run(sig, func(t *testing.T) {
			fake, dir := fakeHelper(t, "kill -"+sig+" $$")
			_, err := (&client.Client{Binary: fake}).Pull(testCtx(t), client.Request{Image: "127.0.0.1:1/x", Dest: "oci:" + dir + "/d"})
			if errors.Is(err, client.ErrInterrupted) || !errors.Is(err, client.ErrInternal) {
				t.Errorf("SIG%s with ctx alive: %v; want ErrInternal", sig, err)
			}
		})
	}
}

// Exit 0 with stdout that is JSON but no result (an error object, null, an
// object without a digest) is internal, never a success with an empty
// result.
func TestExit0WithoutAResult(t *testing.T) {
	for name, out := range map[string]string{
		"error object": `{"error":{"code":"network","message":"connection reset"}}`,
		"null":         `null`,
		"empty":        `{}`,
	} {
		t.Run(name, func(t *testing.T) {
			fake, dir := fakeHelper(t, "echo '"+out+"'; exit 0")
			res, err := (&client.Client{Binary: fake}).Pull(testCtx(t), client.Request{Image: "127.0.0.1:1/x", Dest: "oci:" + dir + "/d"})
			if err == nil || !errors.Is(err, client.ErrInternal) {
				t.Errorf("exit 0 with %s: %+v, %v; want ErrInternal", out, res, err)
			}
		})
	}
}

// A callback slower than the helper but keeping up gets every event, done
// included, after the helper exited: the drain is cut off only when no
// byte comes for 5 s, not 5 s after the exit. 450 events (about 76 KiB:
// more than the client's 64 KiB read buffer, less than it and the pipe
// together, so the helper writes them all and exits at once) at 20 ms or
// more each take longer than that after the helper has exited.
func TestSlowCallbackGetsDone(t *testing.T) {
	fake, dir := fakeHelper(t, `i=0
while [ $i -lt 450 ]; do
  printf '{"type":"layer_progress","ts":"2026-01-01T00:00:00Z","digest":"sha256:%064d","size":4194304,"bytes":%d}\n' $i $i >&3
  i=$((i+1))
done
printf '{"type":"done","ts":"2026-01-01T00:00:01Z","bytes":4194304}\n' >&3
echo '{"image":"x","digest":"sha256:aa"}'`)
	var mu sync.Mutex
	n, sawDone := 0, false
	_, err := (&client.Client{Binary: fake}).Pull(testCtx(t), client.Request{
		Image: "127.0.0.1:1/x", Dest: "oci:" + dir + "/d",
		OnEvent: func(e api.Event) {
			time.Sleep(20 * time.Millisecond) // e.g. a status update to the API server
			mu.Lock()
			defer mu.Unlock()
			n++
			sawDone = sawDone || e.Type == api.EventDone
		},
	})
	if err != nil || !sawDone || n != 451 {
		t.Errorf("OnEvent got %d of 451 events (done: %v), err %v", n, sawDone, err)
	}
}
