package dest

import (
	"fmt"
	"strings"

	"github.com/pullhelper/pullhelper/dest/target"
	"github.com/pullhelper/pullhelper/internal/safefs"
	"golang.org/x/sys/unix"
)

// The partial-blob cache's handover: whole blobs the copy left in the
// cache moved into the staged OCI layout instead of being written twice.

// maxHanded bounds the list of handed-over blobs the parent acts on (the
// child's word; an image has far fewer blobs).
const maxHanded = 10000

// HandOver moves the blobs the copy left whole in the cache (pull's
// Copied.Handed: digests, the child's claim) into the staged OCI layout,
// as <Name>/blobs/<alg>/<hex>, before Verify takes the stage back and
// hashes every file in it: nothing about a moved file is trusted more than
// about a file the copy wrote there. Call it only when every process of
// the pull is dead and after TakeBack (the cache is root's again). A name
// that is not a digest, a cache entry that is missing or not a regular
// file with one link, or a staged file already in its place is skipped
// (Verify then reports what is missing or wrong). It returns how many it
// moved. Nil-safe.
func (p *Partial) HandOver(s *Stage, digests []string) (int, error) {
	if p == nil || p.Dir == nil || len(digests) == 0 {
		return 0, nil
	}
	if len(digests) > maxHanded {
		return 0, badStaged("the copy handed over %d blobs, more than %d", len(digests), maxHanded)
	}
	img, err := safefs.OpenDirAt(int(s.Work.Fd()), s.Name)
	if err != nil {
		return 0, badStaged("%s: %v", s.Name, safefs.ErrnoText(err))
	}
	defer unix.Close(img)
	blobs := map[string]int{}
	defer func() {
		for _, fd := range blobs {
			unix.Close(fd)
		}
	}()
	cache := int(p.Dir.Fd())
	moved := 0
	for _, d := range digests {
		alg, hex, ok := strings.Cut(d, ":")
		if !ok || !target.IsHex(alg, hex) {
			continue
		}
		name := target.PartialEntry(alg, hex)
		st, err := safefs.FstatAt(cache, name)
		if err != nil || !safefs.IsReg(st) || st.Nlink != 1 {
			continue
		}
		dfd, ok := blobs[alg]
		if !ok {
			if dfd, err = blobDir(img, alg); err != nil {
				return moved, badStaged("%s/blobs/%s: %v", s.Name, alg, safefs.ErrnoText(err))
			}
			blobs[alg] = dfd
		}
		switch err := unix.Renameat2(cache, name, dfd, hex, unix.RENAME_NOREPLACE); err {
		case nil:
			moved++
		case unix.EEXIST:
			// The copy wrote it too: Verify judges the staged one.
		default:
			return moved, fmt.Errorf("moving %s from the partial-blob cache into staging: %v", name, err)
		}
	}
	return moved, nil
}

// CanHandOver reports whether HandOver can move the cache's files into
// s by rename: both on one mount (a DEST that is a mount point stages
// inside it, apart from the cache in its parent). Nil-safe.
func (p *Partial) CanHandOver(s *Stage) bool {
	if p == nil || p.Dir == nil || s == nil || s.Work == nil {
		return false
	}
	var a, b unix.Statx_t
	const mask = unix.STATX_MNT_ID
	if unix.Statx(int(p.Dir.Fd()), "", unix.AT_EMPTY_PATH, mask, &a) != nil ||
		unix.Statx(int(s.Work.Fd()), "", unix.AT_EMPTY_PATH, mask, &b) != nil {
		return false
	}
	if a.Mask&mask == 0 || b.Mask&mask == 0 {
		return false // a kernel without mount IDs: no handover
	}
	return a.Mnt_id == b.Mnt_id && a.Dev_major == b.Dev_major && a.Dev_minor == b.Dev_minor
}

// blobDir opens (making it when missing) blobs/<alg> beneath the staged
// layout held as img, one component at a time, never following a
// symbolic link (mkdirat does not follow one in its last component, and
// each directory is opened beneath the last).
func blobDir(img int, alg string) (int, error) {
	cur := img
	for _, name := range []string{"blobs", alg} {
		if err := unix.Mkdirat(cur, name, 0o755); err != nil && err != unix.EEXIST {
			if cur != img {
				unix.Close(cur)
			}
			return -1, err
		}
		next, err := safefs.OpenDirAt(cur, name)
		if cur != img {
			unix.Close(cur)
		}
		if err != nil {
			return -1, err
		}
		cur = next
	}
	return cur, nil
}
