package proc_test

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/pullhelper/pullhelper/internal/proc"
)

func TestTags(t *testing.T) {
	self, err := proc.SelfTag()
	if err != nil {
		t.Fatal(err)
	}
	if proc.Gone(self) {
		t.Fatal("own tag reported gone")
	}
	st, _ := proc.StartTime(os.Getpid())
	if !proc.Gone(fmt.Sprintf("%d-%d", os.Getpid(), st+1)) {
		t.Fatal("same pid with another start time must be gone (pid reuse)")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if !proc.Gone(fmt.Sprintf("%d-1", cmd.Process.Pid)) {
		t.Fatal("exited process not gone")
	}
	for _, bad := range []string{"", "x", "12", "a-b", "-1-5"} {
		if proc.Gone(bad) {
			t.Errorf("unparsable tag %q reported gone", bad)
		}
	}
}
