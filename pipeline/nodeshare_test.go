package pipeline

import (
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pullhelper/pullhelper/pull"
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

// Twelve pulls that register at the same moment all count each other.
func TestNodeShareConcurrentRegistrationsAllCounted(t *testing.T) {
	const pulls, rounds = 12, 3
	const total = int64(pulls * 1000)
	for r := 0; r < rounds; r++ {
		dir := t.TempDir()
		type reg struct {
			rates <-chan pull.NodeShare
			stop  func()
		}
		regs := make([]reg, pulls)
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, pulls)
		for i := range regs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				rates, stop, err := nodeShare(dir, total, 0, slog.New(slog.DiscardHandler))
				if err != nil {
					errs <- err
					return
				}
				regs[i] = reg{rates, stop}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: registering: %v", r, err)
		}
		// Every pull's share reaches total/pulls (each recounts every
		// nodeShareTick); one left out would stop the others at
		// total/(pulls-1) and itself too.
		deadline := time.After(30 * time.Second)
		for i, g := range regs {
			last := int64(0)
			for last != total/pulls {
				select {
				case s := <-g.rates:
					last = s.Rate
				case <-deadline:
					t.Fatalf("round %d: pull %d's share is %d B/s, want %d (all %d pulls counted); registrations: %v", r, i, last, total/pulls, pulls, dirNames(dir))
				}
			}
		}
		for _, g := range regs {
			g.stop()
		}
		if names := dirNames(dir); len(names) != 0 {
			t.Errorf("round %d: left behind: %v", r, names)
		}
	}
}

// A pull between making its registration's file and locking it is not
// taken for a dead one by a pull counting then: it is counted once
// registered. (With the file made under its counted name, the other pull
// locked and removed it, and the two counted 1 each from then on.)
func TestNodeShareRegisteringPullNotRemoved(t *testing.T) {
	dir := t.TempDir()
	made, resume := make(chan struct{}), make(chan struct{})
	registering = func() {
		registering = nil // the second pull registers straight through
		close(made)
		<-resume
	}
	defer func() { registering = nil }()
	type result struct {
		rates <-chan pull.NodeShare
		stop  func()
		err   error
	}
	first := make(chan result, 1)
	go func() {
		rates, stop, err := nodeShare(dir, 200, 0, slog.New(slog.DiscardHandler))
		first <- result{rates, stop, err}
	}()
	<-made
	// The second pull registers and counts while the first is between
	// making its file and locking it.
	rates2, stop2, err := nodeShare(dir, 200, 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop2()
	if got := <-rates2; got.Rate != 200 {
		t.Errorf("the second pull's first share: %d B/s, want 200 (the first one not registered yet)", got.Rate)
	}
	close(resume)
	r := <-first
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.stop()
	for i, rates := range []<-chan pull.NodeShare{r.rates, rates2} {
		deadline := time.After(30 * time.Second)
		for last := int64(0); last != 100; {
			select {
			case s := <-rates:
				last = s.Rate
			case <-deadline:
				t.Fatalf("pull %d's share is %d B/s, want 100 (both pulls counted); registrations: %v", i+1, last, dirNames(dir))
			}
		}
	}
}

// A temporary registration (a pull between making its file and locking
// it) is neither counted nor removed while young; one nobody holds and
// older than staleTemp is a dead pull's and removed.
func TestNodeShareTemporaryRegistrations(t *testing.T) {
	dir := t.TempDir()
	young := filepath.Join(dir, regTemp+"1-young")
	old := filepath.Join(dir, regTemp+"2-old")
	for _, p := range []string{young, old} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * staleTemp)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	if n := livePulls(dir, "self"); n != 1 {
		t.Errorf("livePulls = %d with only temporary registrations, want 1", n)
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("a young temporary registration was removed: %v", err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("a stale temporary registration nobody holds is still there (%v)", err)
	}
}

func dirNames(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
