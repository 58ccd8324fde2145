package pipeline

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestNodeShareSplitsAmongLivePulls(t *testing.T) {
	dir := t.TempDir()
	// Another live pull (an flock held on its file) and a dead one's file.
	held := filepath.Join(dir, "1-live")
	fd, err := unix.Open(held, unix.O_CREAT|unix.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "2-gone")
	if err := os.WriteFile(stale, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	rates, stop, err := nodeShare(dir, 300, 3, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if got := <-rates; got.Rate != 150 || got.Layers != 1 {
		t.Errorf("share with one other live pull: %+v, want 150 B/s, 1 layer", got)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the dead pull's file is still there (%v)", err)
	}
	// The other pull ends: the share is the whole budget again.
	_ = unix.Flock(fd, unix.LOCK_UN)
	if got := <-rates; got.Rate != 300 || got.Layers != 3 {
		t.Errorf("share alone: %+v, want 300 B/s, 3 layers", got)
	}
	stop()
	if _, ok := <-rates; ok {
		t.Error("the share channel is still open after stop")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("left behind: %v", entries)
	}
}
