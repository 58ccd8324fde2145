package dest

import (
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/pullhelper/pullhelper/dest/target"
	"github.com/pullhelper/pullhelper/internal/safefs"
	"golang.org/x/sys/unix"
)

// Hashing handed-over blobs while the copy goes on.
//
// A blob the copy hands over (Partial.HandOver) is complete in the
// partial-blob cache as soon as the child closes it, usually well before
// the child exits: Prehash hashes it then, in parallel with the rest of
// the copy, so that Verify finds its digest computed instead of reading
// every byte again after the child is gone. The file is the pull uid's
// while the child lives, so the hash is worth something only if nothing
// could have changed the file after it was read. A read lease
// (F_SETLEASE F_RDLCK) proves that: the kernel grants it only while no one
// has the file open for writing (a writable mapping counts as open), and
// every later open for writing, and truncate by path, breaks it (the
// opener waits; this process gets SIGIO and lets go at once, so a
// legitimate opener is not held up: the owner of the process installs the
// SIGIO handler and hands Prehash its channel; dest installs none).
// open(O_RDONLY|O_TRUNC) truncates
// without breaking a read lease: the size, checked again, catches that. A
// name swapped for another file changes the inode, which the digest is
// tied to. Finish, called once every process of the pull is dead, keeps a
// digest only if its lease is still unbroken and the inode still has its
// size and one link; Verify hashes everything else as before.

// maxPrehash bounds the blobs hashed ahead (the child names them).
const maxPrehash = 1000

// leaseFS reports whether a read lease on a file of the filesystem with
// this magic number is broken by every write to it: the local filesystems
// whose files have one inode only. Elsewhere nothing is hashed ahead: an
// NFS or FUSE file can be written by its server, an overlay's through its
// upper layer, neither breaking a lease on this inode.
func leaseFS(magic int64) bool {
	switch magic {
	case unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC, unix.TMPFS_MAGIC:
		return true
	}
	return false
}

// Presum is a digest computed ahead, for the inode it was computed on.
type Presum struct {
	Size int64
	Alg  string
	Sum  string // hex
}

// Presums are digests computed ahead, by (device, inode).
type Presums map[[2]uint64]Presum

// Prehash hashes whole blobs of a pull's partial-blob cache while the copy
// runs. Its methods are safe for concurrent use and nil-safe.
type Prehash struct {
	cache *os.File // a dup of the cache's directory descriptor

	mu     sync.Mutex
	seen   map[string]bool
	jobs   []*preJob
	closed bool
	budget int64       // bytes still to hash: the image's limit, in all
	noSync bool        // a hashed file is not synced (Stage.NoSync)
	stop   atomic.Bool // Abort: hashing ends at the next chunk

	work    chan *preJob
	wg      sync.WaitGroup
	pending sync.WaitGroup // jobs queued and not yet hashed (tests wait on it)
	// releaser: releaseBroken's goroutine.
	releaser sync.WaitGroup
	sigs     <-chan os.Signal
	release  func() // the owner's: sigs is read no more
	done     chan struct{}
}

type preJob struct {
	name, alg string
	f         *os.File // nil until opened; holds the lease
	dev, ino  uint64
	size      int64
	sum       string
	ok        bool // hashed whole with the lease held
	broken    bool // the lease broke (someone opened the file for writing)
}

// Prehash starts hashing ahead for the cache (nil without one, when its
// descriptor cannot be duplicated, or for a stage whose store checks the
// layers' digests itself, Stage.storeChecks: nothing is hashed ahead
// then), at most
// maxBytes in all (the image's size limit: the child names the files and
// may make them as large as it likes; beyond the budget Verify hashes, and
// its size checks refuse). Call Finish once every process of the pull is
// dead, and Abort on every path (after Finish it does nothing).
//
// sigio receives this process's SIGIO, which the kernel sends when a
// writer breaks one of the leases: the caller, the owner of the process's
// signal handlers, installs it (signal.Notify(ch, syscall.SIGIO)) before
// the call, and release, called once Prehash reads sigio no more (at the
// end of Finish, or at once when it returns nil), is where it removes it
// (signal.Stop). A broken lease's opener waits until the lease is let go,
// so without SIGIO delivered here it waits the kernel's lease-break time.
func (p *Partial) Prehash(maxBytes int64, sigio <-chan os.Signal, release func()) *Prehash {
	if release == nil {
		release = func() {}
	}
	if p == nil || p.Dir == nil || (p.stage != nil && p.stage.storeChecks) {
		release()
		return nil
	}
	var fs unix.Statfs_t
	if unix.Fstatfs(int(p.Dir.Fd()), &fs) != nil || !leaseFS(int64(fs.Type)) {
		release()
		return nil
	}
	fd, err := unix.FcntlInt(p.Dir.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		release()
		return nil
	}
	h := &Prehash{cache: os.NewFile(uintptr(fd), p.Path), seen: map[string]bool{}, budget: maxBytes, noSync: p.stage != nil && p.stage.NoSync,
		work: make(chan *preJob, maxPrehash), sigs: sigio, release: release, done: make(chan struct{})}
	h.releaser.Add(1)
	go h.releaseBroken()
	for range max(1, runtime.GOMAXPROCS(0)) {
		h.wg.Add(1)
		go h.worker()
	}
	return h
}

// Blob hashes the cache's file of digest d ("sha256:HEX") ahead, if there
// is one; it never blocks.
func (h *Prehash) Blob(d string) {
	if h == nil {
		return
	}
	alg, hx, ok := strings.Cut(d, ":")
	if !ok || !target.IsHex(alg, hx) {
		return
	}
	name := target.PartialEntry(alg, hx)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.seen[name] || len(h.seen) >= maxPrehash {
		return
	}
	h.seen[name] = true
	j := &preJob{name: name, alg: alg}
	h.jobs = append(h.jobs, j)
	h.pending.Add(1)
	h.work <- j // room for maxPrehash: never blocks
}

func (h *Prehash) worker() {
	defer h.wg.Done()
	buf := make([]byte, 256<<10) // one per worker: a buffer per file was most of the CPU on many small blobs
	for j := range h.work {
		h.hash(j, buf)
		h.pending.Done()
	}
}

// hash leases, hashes and syncs one file (not for a NoSync stage); any
// failure leaves it to Verify.
// The name is opened O_PATH first and reopened for reading only once it
// is a regular file (an open of a device may act on the device).
func (h *Prehash) hash(j *preJob, buf []byte) {
	pfd, err := safefs.OpenAt(int(h.cache.Fd()), j.name, unix.O_PATH, 0)
	if err != nil {
		return
	}
	st, err := safefs.Fstat(pfd)
	if err != nil || !safefs.IsReg(st) || st.Nlink != 1 || st.Size <= 0 {
		unix.Close(pfd)
		return
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", pfd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	unix.Close(pfd)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), j.name)
	if now, err := safefs.Fstat(fd); err != nil || now.Dev != st.Dev || now.Ino != st.Ino {
		f.Close()
		return
	}
	h.mu.Lock()
	if st.Size > h.budget {
		h.mu.Unlock()
		f.Close()
		return
	}
	h.budget -= st.Size
	// The lease is taken under the lock, so that releaseBroken sees every
	// lease taken.
	_, err = unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_RDLCK)
	if err != nil || h.closed {
		h.mu.Unlock()
		f.Close() // EAGAIN: still open for writing somewhere
		return
	}
	j.f, j.dev, j.ino, j.size = f, st.Dev, st.Ino, st.Size
	h.mu.Unlock()
	hs := hasher(j.alg)
	for off := int64(0); off < st.Size; {
		if h.stop.Load() {
			return
		}
		n, err := f.ReadAt(buf[:min(int64(len(buf)), st.Size-off)], off)
		hs.Write(buf[:n])
		off += int64(n)
		if err != nil && (err != io.EOF || off != st.Size) {
			return
		}
	}
	if !h.noSync && syncFile(f) != nil {
		return
	}
	h.mu.Lock()
	j.sum, j.ok = hex.EncodeToString(hs.Sum(nil)), true
	h.mu.Unlock()
}

// releaseBroken lets go of every lease a writer broke (the writer's open
// waits until then), marking it broken.
func (h *Prehash) releaseBroken() {
	defer h.releaser.Done()
	for {
		select {
		case <-h.done:
			return
		case <-h.sigs:
		}
		h.mu.Lock()
		for _, j := range h.jobs {
			if j.f == nil || j.broken {
				continue
			}
			if l, err := unix.FcntlInt(j.f.Fd(), unix.F_GETLEASE, 0); err != nil || l != unix.F_RDLCK {
				j.broken = true
				_, _ = unix.FcntlInt(j.f.Fd(), unix.F_SETLEASE, unix.F_UNLCK)
			}
		}
		h.mu.Unlock()
	}
}

// Finish stops hashing ahead, waits for the hashes under way and returns
// the digests whose lease held to the end: no one opened the file for
// writing since it was leased, and the inode still has the size it was
// hashed at, with one link. Call it only when every process of the pull
// is dead (nothing may write the files after their leases are let go),
// before the cache's files are moved (HandOver). Every lease is let go and
// every descriptor closed. Nil-safe; a second call returns nil.
func (h *Prehash) Finish() Presums {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	close(h.work)
	h.mu.Unlock()
	h.wg.Wait()
	close(h.done)
	h.releaser.Wait() // no scan of the leases runs any more
	h.release()
	out := Presums{}
	for _, j := range h.jobs {
		if j.f == nil {
			continue
		}
		l, err := unix.FcntlInt(j.f.Fd(), unix.F_GETLEASE, 0)
		st, serr := safefs.Fstat(int(j.f.Fd()))
		if j.ok && !j.broken && err == nil && l == unix.F_RDLCK && serr == nil &&
			st.Size == j.size && st.Nlink == 1 && st.Dev == j.dev && st.Ino == j.ino {
			out[[2]uint64{j.dev, j.ino}] = Presum{Size: j.size, Alg: j.alg, Sum: j.sum}
		}
		_, _ = unix.FcntlInt(j.f.Fd(), unix.F_SETLEASE, unix.F_UNLCK)
		j.f.Close()
	}
	h.cache.Close()
	return out
}

// Abort ends hashing ahead at the next chunk (256 KiB) and lets everything go
// (Finish, keeping nothing): the path of a pull that failed or was
// stopped, which must not wait for a hash. Nil-safe; after Finish it does
// nothing.
func (h *Prehash) Abort() {
	if h == nil {
		return
	}
	h.stop.Store(true)
	h.Finish()
}

// UsePresums gives Verify the digests Prehash computed: a staged file that
// is one of those inodes, with that size, is not hashed again.
func (s *Stage) UsePresums(p Presums) { s.presums = p }
