package pipeline

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
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
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	if n := livePulls(dfd, "self"); n != 1 {
		t.Errorf("livePulls = %d with only temporary registrations, want 1", n)
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("a young temporary registration was removed: %v", err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("a stale temporary registration nobody holds is still there (%v)", err)
	}
}

// The directory a pull registers in must be root's (the euid's) and
// writable by nobody else, every directory above it too: otherwise another
// user could plant entries there, or swap it for a directory of root's
// whose files livePulls would remove. nodeShare refuses it, and touches
// nothing in it.
func TestNodeShareRefusesDirectoryOthersControl(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the directory is given to uid 65534")
	}
	for _, c := range []struct {
		name, want string
		setup      func(t *testing.T, dir string) string
	}{
		{"owned by another uid", "owned by uid 65534", func(t *testing.T, dir string) string {
			must(t, os.Chown(dir, 65534, 65534))
			return dir
		}},
		{"writable by others", "writable by group or others", func(t *testing.T, dir string) string {
			must(t, os.Chmod(dir, 0o777))
			return dir
		}},
		{"below a directory of another uid", "owned by uid 65534, not root", func(t *testing.T, dir string) string {
			must(t, os.Chown(filepath.Dir(dir), 65534, 65534))
			return dir
		}},
		{"through a symbolic link", "symbolic link", func(t *testing.T, dir string) string {
			link := filepath.Join(filepath.Dir(dir), "link")
			must(t, os.Symlink(dir, link))
			return link
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "top", "bandwidth")
			must(t, os.MkdirAll(dir, 0o700))
			stale := filepath.Join(dir, "2-gone")
			must(t, os.WriteFile(stale, nil, 0o600))
			_, _, err := nodeShare(c.setup(t, dir), 300, 0, slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("nodeShare: %v, want a refusal saying %q", err, c.want)
			}
			if names := dirNames(dir); len(names) != 1 || names[0] != "2-gone" {
				t.Errorf("entries after the refusal: %v, want only 2-gone, untouched", names)
			}
		})
	}
}

// livePulls removes only what a pull makes: a regular file of root's (the
// euid's) with one link that nobody holds. Another uid's file, a hard link
// to a file elsewhere, a FIFO and a symbolic link are neither counted nor
// removed (only root can put them there: OpenDir's checks).
func TestNodeShareRemovesOnlyDeadRegistrations(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: one entry is given to uid 65534")
	}
	top := t.TempDir()
	dir := filepath.Join(top, "bandwidth")
	must(t, os.Mkdir(dir, 0o700))
	foreign := filepath.Join(dir, "1-foreign")
	must(t, os.WriteFile(foreign, nil, 0o600))
	must(t, os.Chown(foreign, 65534, 65534))
	elsewhere := filepath.Join(top, "elsewhere")
	must(t, os.WriteFile(elsewhere, nil, 0o600))
	must(t, os.Link(elsewhere, filepath.Join(dir, "2-linked")))
	must(t, unix.Mkfifo(filepath.Join(dir, "3-fifo"), 0o600))
	must(t, os.Symlink(elsewhere, filepath.Join(dir, "4-symlink")))
	must(t, os.WriteFile(filepath.Join(dir, "5-dead"), nil, 0o600))
	rates, stop, err := nodeShare(dir, 300, 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if got := <-rates; got.Rate != 300 {
		t.Errorf("share: %d B/s, want 300 (nothing there is a live pull)", got.Rate)
	}
	stop()
	want := []string{"1-foreign", "2-linked", "3-fifo", "4-symlink"}
	if got := dirNames(dir); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("entries left: %v, want %v (only the dead registration removed)", got, want)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
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
