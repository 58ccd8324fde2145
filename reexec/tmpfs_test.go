package reexec

import (
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/pullhelper/pullhelper/privdrop"
	"golang.org/x/sys/unix"
)

// mountPrivateTmpfs, in a private mount namespace (as the child's): a
// 0700 tmpfs owned by the pull identity, invisible outside.
func TestMountPrivateTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	dir := filepath.Join(t.TempDir(), "material")
	type out struct {
		st  unix.Statfs_t
		fi  os.FileInfo
		err error
	}
	res := make(chan out, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread and its namespace end with the goroutine
		var o out
		if o.err = unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); o.err != nil {
			res <- o
			return
		}
		if o.err = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); o.err != nil {
			res <- o
			return
		}
		if o.err = mountPrivateTmpfs(dir, privdrop.Identity{UID: 61999, GID: 61999}); o.err != nil {
			res <- o
			return
		}
		o.err = unix.Statfs(dir, &o.st)
		if o.err == nil {
			o.fi, o.err = os.Stat(dir)
		}
		res <- o
	}()
	o := <-res
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.st.Type != unix.TMPFS_MAGIC {
		t.Fatalf("%s is not a tmpfs in the namespace (type %x)", dir, o.st.Type)
	}
	if o.fi.Mode().Perm() != 0o700 || o.fi.Sys().(*syscall.Stat_t).Uid != 61999 {
		t.Fatalf("mode %v uid %d", o.fi.Mode(), o.fi.Sys().(*syscall.Stat_t).Uid)
	}
	// Outside the namespace dir is the bare root-owned mount point.
	fi, err := os.Stat(dir)
	if err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Fatalf("the tmpfs is visible outside the namespace (%v)", err)
	}
}
