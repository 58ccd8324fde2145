package pipeline

import (
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/memfs"
)

// memConfigSize bounds the --no-isolation configuration filesystem, as the
// child's private /tmp is bounded (registries.conf, registries.d, the
// certificates, the auth file, containers/image's blob-info cache).
const memConfigSize = 16 << 20

// memConfig is --no-isolation's configuration directory, where the copy
// writes its auth file (the password) and the endpoints' client keys: a
// tmpfs that is mounted nowhere (internal/memfs: fsopen, fsmount, a
// detached mount in no mount namespace's tree), held by one close-on-exec
// descriptor of this process and reached through /proc/self/fd/N. Nothing
// of it is on a disk or under any path another process can name, and it
// vanishes when the descriptor is closed — by close, or by the kernel when
// this process dies, SIGKILL included: nothing is left for gc. (The
// isolated child keeps the same material in the tmpfs of its private mount
// namespace.)
type memConfig struct {
	*memfs.FS
}

// newMemConfig creates it; it needs CAP_SYS_ADMIN (the parent is root).
func newMemConfig() (*memConfig, error) {
	fs, err := memfs.New(memConfigSize, 4096)
	if err != nil {
		return nil, failure.New(failure.Isolation,
			"--no-isolation keeps the copy's secrets (auth file, client keys) in a private in-memory filesystem and could not create one (%v); run pullhelper as root", err)
	}
	return &memConfig{fs}, nil
}

// Close drops it and everything in it.
func (m *memConfig) Close() {
	if m != nil {
		m.FS.Close()
	}
}
