package privdrop

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pullhelper/pullhelper/internal/state"
	"golang.org/x/sys/unix"
)

// The systemd DynamicUser range.
const (
	DynamicMin = 61184
	DynamicMax = 65519
)

// Lease is an identity held for one pull. Release frees a dynamic uid.
type Lease struct {
	Identity
	Source string `json:"source"` // "dynamic", "user NAME", "uid N"
	// Reclaimed are the stale lock files (of pulls killed before their
	// Release) the allocation removed once it held its own (Sweep).
	Reclaimed []string `json:"-"`
	lock      *os.File
	lockDir   *os.File // the lock directory, held while the lock is
	lockName  string
}

// Release frees the uid: it removes the lock file while still holding its
// flock, then drops the flock (idempotent). Lock files do not accumulate;
// an allocation that opened the file just before the unlink notices that
// its file is no longer the one at the name and tries again (lockUID).
func (l *Lease) Release() {
	if l != nil && l.lock != nil {
		_ = unix.Unlinkat(int(l.lockDir.Fd()), l.lockName, 0)
		_ = l.lock.Close() // closing drops the flock
		_ = l.lockDir.Close()
		l.lock = nil
	}
}

// MaxID is the largest uid or gid a pull runs as: 4294967295 ((uid_t)-1)
// means "unchanged" to setresuid, and larger ones would be truncated (2^32
// to 0). policy.MaxID is the same bound, checked when the policy is.
const MaxID = 1<<32 - 2

// Allocate resolves [privileges] user: "dynamic" (a free uid/gid pair from
// the DynamicUser range, locked for this pull), a user name, or a uid.
// uid 0 is refused.
func Allocate(spec, lockDir string) (*Lease, error) {
	if spec == "dynamic" {
		return allocateDynamic(lockDir)
	}
	id, source, err := resolve(spec)
	if err != nil {
		return nil, err
	}
	return &Lease{Identity: id, Source: source}, nil
}

// resolve is a user name or uid as Allocate takes it (never "dynamic"):
// its identity, or why the pull cannot run as it.
func resolve(spec string) (Identity, string, error) {
	if spec == "" || spec == "0" || spec == "root" {
		return Identity{}, "", fmt.Errorf("privileges.user %q: the pull never runs as root", spec)
	}
	if n, err := strconv.Atoi(spec); err == nil || numeric(spec) {
		if err != nil || n <= 0 || n > MaxID {
			return Identity{}, "", fmt.Errorf("privileges.user %q: want a uid in 1-%d", spec, MaxID)
		}
		if strconv.Itoa(n) != spec {
			// "007", "+7": the passwd lookup below is by the exact text.
			return Identity{}, "", fmt.Errorf("privileges.user %q: write the uid in plain decimal (%d), without a sign or leading zeros", spec, n)
		}
		gid := n
		if u, err := user.LookupId(spec); err == nil {
			gid, _ = strconv.Atoi(u.Gid)
		}
		if gid == 0 {
			return Identity{}, "", fmt.Errorf("privileges.user %q: its primary group is root (gid 0); use a user with another group", spec)
		}
		if gid < 0 || gid > MaxID {
			return Identity{}, "", fmt.Errorf("privileges.user %q: its primary group %d is out of range 1-%d", spec, gid, MaxID)
		}
		return Identity{UID: n, GID: gid}, "uid " + spec, nil
	}
	u, err := user.Lookup(spec)
	if err != nil {
		return Identity{}, "", fmt.Errorf("privileges.user %q: %w", spec, err)
	}
	uid, uerr := strconv.Atoi(u.Uid)
	gid, gerr := strconv.Atoi(u.Gid)
	if uid == 0 || gid == 0 {
		return Identity{}, "", fmt.Errorf("privileges.user %q is uid %d gid %d: the pull never runs as root", spec, uid, gid)
	}
	if uerr != nil || gerr != nil || uid < 0 || uid > MaxID || gid < 0 || gid > MaxID {
		return Identity{}, "", fmt.Errorf("privileges.user %q is uid %s gid %s: out of range 1-%d", spec, u.Uid, u.Gid, MaxID)
	}
	return Identity{UID: uid, GID: gid}, "user " + spec, nil
}

// numeric: spec is written as a uid (digits, perhaps after signs), which
// Allocate takes as one, never as a user name.
func numeric(spec string) bool { return strings.Trim(strings.TrimLeft(spec, "+-"), "0123456789") == "" }

// Check is the refusal Allocate would give spec, made early so that a
// plan can refuse it (nil for "dynamic", whose uid is found only as it is
// allocated). unknown reports an unknown user name. A lookup that fails
// for another reason than an unknown name is left to Allocate.
func Check(spec string) (unknown bool, err error) {
	if spec == "dynamic" {
		return false, nil
	}
	_, _, err = resolve(spec)
	var le user.UnknownUserError
	if errors.As(err, &le) {
		return true, err
	}
	if err != nil && !numeric(spec) && errors.Unwrap(err) != nil {
		return false, nil // the lookup failed otherwise: Allocate's
	}
	return false, err
}

func allocateDynamic(lockDir string) (*Lease, error) {
	dfd, err := state.OpenDir(lockDir)
	if err != nil {
		return nil, fmt.Errorf("the uid lock directory: %w", err)
	}
	taken := usedIDs()
	for uid := DynamicMin; uid <= DynamicMax; uid++ {
		if taken[uid] {
			continue
		}
		// systemd's own DynamicUser allocations.
		if _, err := os.Lstat(fmt.Sprintf("/run/systemd/dynamic-uid/direct:%d", uid)); err == nil {
			continue
		}
		name := strconv.Itoa(uid) + ".lock"
		f, err := lockUID(dfd, name)
		if err != nil {
			unix.Close(dfd)
			return nil, fmt.Errorf("locking uid %d in %s: %w", uid, lockDir, err)
		}
		if f == nil {
			continue // another pull holds it
		}
		reclaimed := sweepIn(dfd, lockDir, name)
		dir := os.NewFile(uintptr(dfd), lockDir)
		return &Lease{Identity: Identity{UID: uid, GID: uid}, Source: "dynamic", Reclaimed: reclaimed, lock: f, lockDir: dir, lockName: name}, nil
	}
	unix.Close(dfd)
	return nil, fmt.Errorf("no free uid in the dynamic range %d-%d", DynamicMin, DynamicMax)
}

// lockUID takes the flock of the lock file name in the lock directory
// held as dfd, without waiting: the open file, or nil when another pull
// holds it. A holder's Release unlinks the file before dropping its
// flock; state.LockAt then takes the new file at name instead of the
// unlinked one.
func lockUID(dfd int, name string) (*os.File, error) {
	fd, err := state.LockAt(context.Background(), dfd, name, 0)
	if errors.Is(err, state.ErrLocked) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// usedIDs collects uids and gids that are named in /etc/passwd or /etc/group
// or that own a running process: a dynamic uid must belong to nobody.
func usedIDs() map[int]bool {
	used := map[int]bool{}
	for _, f := range []string{"/etc/passwd", "/etc/group"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			fs := strings.Split(line, ":")
			if len(fs) > 2 {
				if n, err := strconv.Atoi(fs[2]); err == nil {
					used[n] = true
				}
			}
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil {
			used[int(st.Uid)] = true
		}
	}
	return used
}
