package dest

import (
	"strings"
	"time"

	"github.com/pullhelper/pullhelper/dest/target"
	"github.com/pullhelper/pullhelper/internal/safefs"
	"golang.org/x/sys/unix"
)

// Salvage: the complete-looking blobs of a stale staging directory moved
// into DEST's partial-blob cache instead of being removed with it.

// salvage moves the complete-looking blobs of a stale staging root (held
// as rootFd, its owner dead) into the cache held as cacheFd, as
// <alg>-<hex>.partial, and returns how many it moved and their bytes. The
// places a copy leaves finished blobs in work/ are looked at, resolving
// every name beneath the held descriptors without following symlinks:
//
//	image/blobs/<alg>/<hex>                     oci: (containers/image renames a blob there once its digest matched)
//	image/<hex>, image/sha512-<hex>             dir:
//	container_images_oci*/blobs/<alg>/<hex>     oci-archive: (its unpacked layout)
//
// Only regular files with one link are kept: root's by rename on the same
// filesystem, made 0600 first; another uid's (a pull uid's, whose staging
// was never taken back) as a fresh root-owned copy, never adopted. Keeping
// does not make them trusted:
// the copy hashes a kept file holding a whole blob before serving it (and
// discards a mismatch or one longer than the blob), containers/image
// checks the stream and the parent hashes the staged blob again (for
// containerd:, containerd hashes a layer as the commit writes it).
// docker-archive: streams blobs into its tar, which is not taken apart.
func salvage(rootFd, cacheFd int) (int, int64) {
	wfd, err := safefs.OpenDirAt(rootFd, workDir)
	if err != nil {
		return 0, 0
	}
	defer unix.Close(wfd)
	var n int
	var bytes int64
	add := func(k int, b int64) { n, bytes = n+k, bytes+b }
	layout := func(dirFd int, name string) {
		lfd, err := safefs.OpenDirAt(dirFd, name)
		if err != nil {
			return
		}
		defer unix.Close(lfd)
		for _, alg := range []string{"sha256", "sha512"} {
			if afd, err := safefs.OpenDirAt(lfd, "blobs/"+alg); err == nil {
				add(salvageDir(afd, cacheFd, func(f string) (string, bool) {
					return alg + "-" + f, target.IsHex(alg, f)
				}))
				unix.Close(afd)
			}
		}
	}
	layout(wfd, "image")
	if ifd, err := safefs.OpenDirAt(wfd, "image"); err == nil {
		add(salvageDir(ifd, cacheFd, func(f string) (string, bool) {
			if target.IsHex("sha256", f) {
				return "sha256-" + f, true
			}
			h, ok := strings.CutPrefix(f, "sha512-")
			return f, ok && target.IsHex("sha512", h)
		}))
		unix.Close(ifd)
	}
	if names, err := safefs.ReadDirNames(wfd); err == nil {
		for _, d := range names {
			if strings.HasPrefix(d, "container_images_oci") {
				layout(wfd, d)
			}
		}
	}
	return n, bytes
}

// salvageDir moves the entries of dirFd that name accepts (it returns the
// cache name's stem, <alg>-<hex>) into the cache. An entry already kept
// there stays unless the moved one is longer (a whole blob supersedes a
// prefix of it).
func salvageDir(dirFd, cacheFd int, name func(string) (string, bool)) (int, int64) {
	names, err := safefs.ReadDirNames(dirFd)
	if err != nil {
		return 0, 0
	}
	var n int
	var bytes int64
	for _, f := range names {
		stem, ok := name(f)
		if !ok {
			continue
		}
		entry := stem + ".partial"
		fd, err := safefs.OpenAt(dirFd, f, unix.O_RDONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			continue
		}
		st, err := safefs.Fstat(fd)
		now, lerr := safefs.FstatAt(dirFd, f)
		ok = err == nil && lerr == nil && safefs.IsReg(st) && st.Nlink == 1 && st.Size > 0 &&
			now.Dev == st.Dev && now.Ino == st.Ino
		if ok {
			if k, kerr := safefs.FstatAt(cacheFd, entry); kerr == nil && safefs.IsReg(k) && k.Size >= st.Size {
				ok = false // the cache keeps as much already
			}
		}
		if !ok {
			unix.Close(fd)
			continue
		}
		if st.Uid != 0 {
			// Another uid's (the pull uid's: its staging was never
			// taken back): not adopted, a fresh root-owned copy is kept.
			err = copyAs(fd, st.Size, cacheFd, entry)
			unix.Close(fd)
			if err != nil {
				continue
			}
			n++
			bytes += st.Size
			continue
		}
		// Its times from now (the copy may have set any): see tidy.
		t := time.Now().UnixNano()
		ok = safefs.SetOwner(fd, Identity{}, 0o600) == nil && setTimes(fd, t, t) == nil
		unix.Close(fd)
		if !ok {
			continue
		}
		if err := unix.Renameat(dirFd, f, cacheFd, entry); err != nil {
			continue
		}
		// What arrived must be the inode checked (a name swapped in
		// between is not kept).
		if got, err := safefs.FstatAt(cacheFd, entry); err != nil || got.Dev != st.Dev || got.Ino != st.Ino || !safefs.IsReg(got) {
			_ = unix.Unlinkat(cacheFd, entry, 0)
			continue
		}
		n++
		bytes += st.Size
	}
	return n, bytes
}
