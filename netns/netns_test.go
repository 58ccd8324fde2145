package netns_test

import (
	"fmt"
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
	self, id, err := netns.Resolve("pid:" + itoa(os.Getpid()))
	if err != nil {
		t.Fatalf("own netns: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &st); err != nil || id != (netns.ID{Dev: st.Dev, Ino: st.Ino}) {
		t.Fatalf("ID %+v, want the namespace's device and inode (%v)", id, err)
	}
	if self != "/proc/"+itoa(os.Getpid())+"/ns/net" {
		t.Fatalf("path %s", self)
	}
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := netns.Resolve(fifo); err == nil || !strings.Contains(err.Error(), "is a FIFO") {
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
		if _, _, err := netns.Resolve(spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", spec, err, want)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// A FIFO at the namespace's name fails Open at once instead of blocking
// it (the thread is never moved).
func TestEnterFIFODoesNotBlock(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "ns")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // spent if it entered; it cannot, on a FIFO
		h, err := netns.Open(fifo)
		if err == nil {
			err = h.EnterOnThisThread()
		}
		done <- err
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

// A Handle enters the namespace it checked, through its descriptor: the
// thread's namespace is then the Handle's ID.
func TestHandleEntersWhatItChecked(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: setns")
	}
	h, err := netns.Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is spent
		if err := h.EnterOnThisThread(); err != nil {
			done <- err
			return
		}
		var st unix.Stat_t
		if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
			done <- err
			return
		}
		if (netns.ID{Dev: st.Dev, Ino: st.Ino}) != h.ID {
			done <- fmt.Errorf("the thread is in %d/%d, the handle holds %+v", st.Dev, st.Ino, h.ID)
			return
		}
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h.Close()
	if err := h.EnterOnThisThread(); err == nil {
		t.Fatal("a closed handle entered a namespace")
	}
}
