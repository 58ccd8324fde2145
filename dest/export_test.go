package dest

import (
	"os"
	"sync/atomic"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/pullhelper/pullhelper/internal/safefs"
	"golang.org/x/sys/unix"
)

// SetCommitHook lets tests observe DEST between the steps of a dir: commit.
func SetCommitHook(f func(step string)) { commitHook = f }

// ForceWalk is safefs.ForceWalk: the tests of dest's callers of OpenAt
// run without openat2 too.
var ForceWalk = safefs.ForceWalk

// WaitPrehash waits until every blob given to h so far is hashed (or
// given up on).
func WaitPrehash(h *Prehash) { h.pending.Wait() }

// PresumOf is the digest Prehash computed for path's inode, if any.
func PresumOf(p Presums, path string) (Presum, bool) {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return Presum{}, false
	}
	ps, ok := p[[2]uint64{st.Dev, st.Ino}]
	return ps, ok
}

// LeaseFS is leaseFS.
var LeaseFS = leaseFS

// TarApplied is how many layers the pre-apply gave the store as the tar
// its DiffID pass wrote.
func TarApplied() int64 { return tarApplied.Load() }

// NoPreApplyTar makes the containers-storage pre-apply give the store each
// blob to inflate itself (no room for a layer's tar), until restore.
func NoPreApplyTar() (restore func()) {
	old := tarRoom
	tarRoom = func(unix.Statfs_t) int64 { return 0 }
	return func() { tarRoom = old }
}

// CountSyncs counts the fsyncs of staged and hashed-ahead files and of
// staged directories until restore.
func CountSyncs() (count func() int64, restore func()) {
	var n atomic.Int64
	oldFile, oldDir := syncFile, syncDir
	syncFile = func(f *os.File) error { n.Add(1); return oldFile(f) }
	syncDir = func(fd int) error { n.Add(1); return oldDir(fd) }
	return n.Load, func() { syncFile, syncDir = oldFile, oldDir }
}

// SetStoreChecks marks s as a store's that checks each layer's digest as
// it ingests it (what containerd's Stage sets).
func SetStoreChecks(s *Stage, v bool) { s.storeChecks = v }

// CtrdServed is the manifest a verified containerd: DEST imports as the
// image's (nil: none, --all-architectures of an index).
func CtrdServed(d Destination) (desc ocispec.Descriptor, raw []byte, ok bool) {
	c := d.(*containerdDest)
	if c.pending == nil || c.pending.served == nil {
		return desc, nil, false
	}
	return c.pending.served.desc, c.pending.served.raw, true
}

// CtrdInstances are the registry's index and instances a verified
// containerd: DEST imports for an index the staging converted (nil: none).
func CtrdInstances(d Destination) map[string][]byte {
	c := d.(*containerdDest)
	if c.pending == nil {
		return nil
	}
	return c.pending.instances
}
