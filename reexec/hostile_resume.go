//go:build pullhelper_hostile

package reexec

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
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
