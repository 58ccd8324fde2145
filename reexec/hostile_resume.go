//go:build pullhelper_hostile

package reexec

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/pullhelper/pullhelper/pull"
)

// Resume trials (tests/120-resume.bats): "hold" stops the child where it
// stands (after-copy: every blob staged, no result sent) until the test
// kills it or its parent.
func init() {
	registerHostile("hold", func(*hostileEnv) (bool, int) {
		fmt.Fprintln(os.Stderr, "pullhelper-child: hostile: holding")
		time.Sleep(time.Hour)
		return true, 1
	})
}

// Prehash trials (tests/120-resume.bats): at after-copy every blob the
// copy handed over sits whole in the partial-blob cache and the parent has
// hashed it ahead under a read lease. "rewrite-handed" flips a byte of
// each through a new O_WRONLY descriptor (the open waits until the parent
// lets go of its lease); "truncate-handed" empties each with
// open(O_RDONLY|O_TRUNC), which does not break a read lease. Either way
// the parent must not trust what it hashed ahead.
func init() {
	each := func(f func(path string) error) func(*hostileEnv) (bool, int) {
		return func(*hostileEnv) (bool, int) {
			ents, err := os.ReadDir(partialInChild)
			if err != nil {
				fmt.Fprintln(os.Stderr, "pullhelper-child: hostile:", err)
				return true, 102
			}
			n := 0
			for _, e := range ents {
				if err := f(filepath.Join(partialInChild, e.Name())); err != nil {
					fmt.Fprintln(os.Stderr, "pullhelper-child: hostile:", err)
					return true, 102
				}
				n++
			}
			fmt.Fprintf(os.Stderr, "pullhelper-child: hostile: changed %d handed-over blobs\n", n)
			return false, 0
		}
	}
	registerHostile("rewrite-handed", each(func(path string) error {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		b := make([]byte, 1)
		r, err := os.Open(path)
		if err != nil {
			return err
		}
		defer r.Close()
		if _, err := r.ReadAt(b, 100); err != nil {
			return err
		}
		_, err = f.WriteAt([]byte{b[0] ^ 0xff}, 100)
		return err
	}))
	registerHostile("truncate-handed", each(func(path string) error {
		fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_TRUNC, 0)
		if err != nil {
			return err
		}
		return syscall.Close(fd)
	}))
}

// Cache trials (tests/120-resume.bats, issue 22 finding 5): "plant-unasked"
// leaves in the partial-blob cache what no blob of the image is — 256 MiB
// (sparse) under a digest-shaped name the image does not have — and makes
// every kept file longer than its blob by 1 MiB, then fails. The parent
// must keep only the image's blobs, each at most its declared size.
func init() {
	registerHostile("plant-unasked", func(*hostileEnv) (bool, int) {
		ents, err := os.ReadDir(partialInChild)
		if err != nil {
			fmt.Fprintln(os.Stderr, "pullhelper-child: hostile:", err)
			return true, 102
		}
		grown := 0
		for _, e := range ents {
			f, err := os.OpenFile(filepath.Join(partialInChild, e.Name()), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				continue
			}
			if _, err := f.Write(make([]byte, 1<<20)); err == nil {
				grown++
			}
			f.Close()
		}
		name := filepath.Join(partialInChild, "sha256-"+strings.Repeat("e", 64)+".partial")
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			err = f.Truncate(256 << 20)
			f.Close()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "pullhelper-child: hostile:", err)
			return true, 102
		}
		fmt.Fprintf(os.Stderr, "pullhelper-child: hostile: planted an unasked blob, grew %d kept files\n", grown)
		return true, 1
	})
}

// Review 2 finding 2 (tests/120-resume.bats): "plant-announced" announces
// (layer_start) a digest no blob of the image has, declaring 1 GiB, plants
// 256 MiB (sparse) under its name in the partial-blob cache, dated ten
// years ahead so that the age limit would never remove it, and goes on;
// "drop-index" then removes the staged index.json, so that the pull fails
// verification (exit 8) with the child's report, its manifest genuine.
func init() {
	registerHostile("plant-announced", func(e *hostileEnv) (bool, int) {
		hx := strings.Repeat("e", 64)
		e.Send(message{Event: &pull.Event{Type: "layer_start", Digest: "sha256:" + hx, Size: 1 << 30}})
		name := filepath.Join(partialInChild, "sha256-"+hx+".partial")
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			err = f.Truncate(256 << 20)
			f.Close()
		}
		if err == nil {
			later := time.Now().Add(10 * 365 * 24 * time.Hour)
			err = os.Chtimes(name, later, later)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "pullhelper-child: hostile:", err)
			return true, 102
		}
		fmt.Fprintln(os.Stderr, "pullhelper-child: hostile: announced and planted an unasked blob, dated ahead")
		return false, 0
	})
	registerHostile("drop-index", func(e *hostileEnv) (bool, int) {
		if err := os.Remove(filepath.Join(e.Req.Stage.Work, e.Req.Stage.Name, "index.json")); err != nil {
			fmt.Fprintln(os.Stderr, "pullhelper-child: hostile:", err)
			return true, 102
		}
		return false, 0
	})
}
