package netns_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pullhelper/pullhelper/netns"
)

func TestResolveAndCheck(t *testing.T) {
	self, err := netns.Resolve("pid:" + itoa(os.Getpid()))
	if err != nil {
		t.Fatalf("own netns: %v", err)
	}
	if self != "/proc/"+itoa(os.Getpid())+"/ns/net" {
		t.Fatalf("path %s", self)
	}
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := netns.Resolve(fifo); err == nil || !strings.Contains(err.Error(), "is a FIFO") {
		t.Errorf("fifo: %v", err)
	}
	file := filepath.Join(t.TempDir(), "f")
	_ = os.WriteFile(file, nil, 0o644)
	for spec, want := range map[string]string{
		file:                     "is a regular file, not a network namespace",
		t.TempDir():              "is a directory",
		"/proc/self/ns/mnt":      "is a mount namespace",
		"/nonexistent/ns":        "does not exist",
		"no-such-netns-name-xyz": "/run/netns/no-such-netns-name-xyz does not exist",
		"pid:abc":                "want pid:PID",
		"/dev/null":              "is a character device",
	} {
		if _, err := netns.Resolve(spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", spec, err, want)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// A FIFO swapped in under the namespace's name after Check fails the
// entry at once instead of blocking its open (the thread is not moved).
func TestEnterFIFODoesNotBlock(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "ns")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // spent if it entered; it cannot, on a FIFO
		done <- netns.EnterOnThisThread(fifo)
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), fifo) {
			t.Fatalf("entering a FIFO: %v, want an error naming it", err)
		}
	case <-time.After(30 * time.Second): // a hang guard, not a timing assertion
		if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		t.Fatal("EnterOnThisThread blocked opening a FIFO")
	}
}
