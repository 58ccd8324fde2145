package cri

import (
	"errors"
	"os/user"
	"strconv"

	"github.com/pullhelper/pullhelper/internal/failure"
)

// ListenGroup resolves a --listen-group value: a group name of
// /etc/group (os/user.LookupGroup; this static binary reads no other NSS
// source), or a numeric GID taken as it is, as chown(1) takes one. Root's
// group (0) is refused: without the flag the socket is root's alone. An
// unknown name or a bad number is exit 2.
func ListenGroup(v string) (int, error) {
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		if n == 0 || n >= 1<<31-1 {
			return 0, failure.New(failure.Usage, "--listen-group %s: want a group other than root's (0), a GID below 2147483647", v)
		}
		return int(n), nil
	}
	g, err := user.LookupGroup(v)
	if err != nil {
		var unknown user.UnknownGroupError
		if errors.As(err, &unknown) {
			return 0, failure.New(failure.Usage, "--listen-group %q: no such group in /etc/group; create it (groupadd) or give its GID", v)
		}
		return 0, failure.New(failure.Usage, "--listen-group %q: %s", v, failure.Reason(err))
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil || gid <= 0 {
		return 0, failure.New(failure.Usage, "--listen-group %q: GID %q: want a group other than root's (0)", v, g.Gid)
	}
	return gid, nil
}
