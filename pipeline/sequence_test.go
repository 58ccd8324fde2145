package pipeline

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/pull"
)

// recorder is a steps that records each call and fails the one named
// failAt.
type recorder struct {
	calls  []string
	failAt string
}

var errStep = errors.New("step failed")

func (r *recorder) call(name string) error {
	r.calls = append(r.calls, name)
	if name == r.failAt {
		return errStep
	}
	return nil
}

func (r *recorder) prepare(context.Context) error              { return r.call("prepare") }
func (r *recorder) release()                                   { _ = r.call("release") }
func (r *recorder) stage(context.Context) error                { return r.call("stage") }
func (r *recorder) removeStage()                               { _ = r.call("removeStage") }
func (r *recorder) openPartial()                               { _ = r.call("openPartial") }
func (r *recorder) closePartial()                              { _ = r.call("closePartial") }
func (r *recorder) start(context.Context) error                { return r.call("start") }
func (r *recorder) stop()                                      { _ = r.call("stop") }
func (r *recorder) prehash()                                   { _ = r.call("prehash") }
func (r *recorder) abortPrehash()                              { _ = r.call("abortPrehash") }
func (r *recorder) handOver(*pull.Report) error                { return r.call("handOver") }
func (r *recorder) verify(context.Context, *pull.Report) error { return r.call("verify") }
func (r *recorder) commit(context.Context) error               { return r.call("commit") }
func (r *recorder) removePartial()                             { _ = r.call("removePartial") }

func (r *recorder) copy(context.Context) (*pull.Report, error) {
	if err := r.call("copy"); err != nil {
		return nil, err
	}
	return &pull.Report{Digest: "sha256:" + strings.Repeat("a", 64)}, nil
}

func (r *recorder) result(rep *pull.Report) (*api.Result, error) {
	if err := r.call("result"); err != nil {
		return nil, err
	}
	return &api.Result{Digest: rep.Digest}, nil
}

// TestSequenceOrder: a pull's steps run in the one order, and every undo
// runs after the steps, last first.
func TestSequenceOrder(t *testing.T) {
	r := &recorder{}
	res, err := sequence(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if res == nil || res.Digest != "sha256:"+strings.Repeat("a", 64) {
		t.Fatalf("result %+v is not the one the result step built", res)
	}
	want := []string{"prepare", "stage", "openPartial", "start", "prehash", "copy", "handOver", "verify", "commit", "removePartial", "result",
		"abortPrehash", "stop", "closePartial", "removeStage", "release"}
	if !slices.Equal(r.calls, want) {
		t.Errorf("calls\n got %v\nwant %v", r.calls, want)
	}
}

// TestSequenceCleanup: a failure at each step that can fail ends the
// sequence there with that error, runs no later step, and undoes exactly
// what was done before it, last first (the undo of a failed start runs
// too: stop undoes whatever start did).
func TestSequenceCleanup(t *testing.T) {
	cases := []struct {
		failAt string
		want   []string
	}{
		{"prepare", []string{"prepare"}},
		{"stage", []string{"prepare", "stage", "release"}},
		{"start", []string{"prepare", "stage", "openPartial", "start", "stop", "closePartial", "removeStage", "release"}},
		{"copy", []string{"prepare", "stage", "openPartial", "start", "prehash", "copy", "abortPrehash", "stop", "closePartial", "removeStage", "release"}},
		{"handOver", []string{"prepare", "stage", "openPartial", "start", "prehash", "copy", "handOver", "abortPrehash", "stop", "closePartial", "removeStage", "release"}},
		{"verify", []string{"prepare", "stage", "openPartial", "start", "prehash", "copy", "handOver", "verify", "abortPrehash", "stop", "closePartial", "removeStage", "release"}},
		{"commit", []string{"prepare", "stage", "openPartial", "start", "prehash", "copy", "handOver", "verify", "commit", "abortPrehash", "stop", "closePartial", "removeStage", "release"}},
		{"result", []string{"prepare", "stage", "openPartial", "start", "prehash", "copy", "handOver", "verify", "commit", "removePartial", "result", "abortPrehash", "stop", "closePartial", "removeStage", "release"}},
	}
	for _, c := range cases {
		t.Run(c.failAt, func(t *testing.T) {
			r := &recorder{failAt: c.failAt}
			res, err := sequence(context.Background(), r)
			if !errors.Is(err, errStep) || res != nil {
				t.Fatalf("failing %s: got %+v, %v; want no result and its error", c.failAt, res, err)
			}
			if !slices.Equal(r.calls, c.want) {
				t.Errorf("calls\n got %v\nwant %v", r.calls, c.want)
			}
		})
	}
}

// pullSteps and recorder are both steps (the test exercises the
// interface the pipeline runs).
var (
	_ steps  = (*pullSteps)(nil)
	_ steps  = (*recorder)(nil)
	_ runner = (*inProcessRunner)(nil)
	_ runner = (*isolatedRunner)(nil)
)
