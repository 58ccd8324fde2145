package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/pullhelper/pullhelper/api"
)

// binary resolves Client.Binary.
func (c *Client) binary() (string, error) {
	name := c.Binary
	if name == "" {
		name = "pullhelper"
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w: finding %s: %w", ErrProtocol, name, notExist{err})
	}
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	return p, nil
}

// versions caches `pullhelper version` per binary file (path, device,
// inode, size, mtime: a replaced binary is asked again).
var versions sync.Map

// Version runs `pullhelper version` and checks its protocol: ErrProtocol
// when it is older than api.Protocol or missing, or the output is not the
// version object.
func (c *Client) Version(ctx context.Context) (*api.Version, error) {
	bin, err := c.binary()
	if err != nil {
		return nil, err
	}
	return c.checkVersion(ctx, bin)
}

func (c *Client) checkVersion(ctx context.Context, bin string) (*api.Version, error) {
	key := bin
	if st, err := os.Stat(bin); err == nil {
		if s, ok := st.Sys().(*syscall.Stat_t); ok {
			key = fmt.Sprintf("%s\x00%d:%d:%d:%d", bin, s.Dev, s.Ino, st.Size(), st.ModTime().UnixNano())
		}
	}
	v, ok := versions.Load(key)
	if !ok {
		got, err := c.runVersion(ctx, bin)
		if err != nil {
			return nil, err
		}
		v, _ = versions.LoadOrStore(key, got)
	}
	ver := v.(*api.Version)
	if ver.Protocol < api.Protocol {
		what := fmt.Sprintf("protocol %d", ver.Protocol)
		if ver.Protocol == 0 {
			what = "no protocol"
		}
		return nil, fmt.Errorf("%w: %s (version %q) reports %s; this client needs protocol %d or later: install a newer pullhelper", ErrProtocol, bin, ver.Version, what, api.Protocol)
	}
	return ver, nil
}

func (c *Client) runVersion(ctx context.Context, bin string) (*api.Version, error) {
	cmd := exec.CommandContext(ctx, bin, "version")
	cmd.Env = c.Env
	stdout := &capWriter{max: 1 << 20}
	stderr := &tailWriter{w: c.Stderr}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %s version: %v (%s)", ErrProtocol, bin, err, stderr.lastLine())
	}
	var raw map[string]json.RawMessage
	var v api.Version
	if err := json.Unmarshal(stdout.Bytes(), &raw); err != nil {
		return nil, fmt.Errorf("%w: %s version did not print a JSON object", ErrProtocol, bin)
	}
	if err := json.Unmarshal(stdout.Bytes(), &v); err != nil {
		return nil, fmt.Errorf("%w: %s version: %v", ErrProtocol, bin, err)
	}
	if _, ok := raw["protocol"]; !ok {
		v.Protocol = 0
	}
	return &v, nil
}

// notExist is a binary that could not be found: errors.Is(err,
// fs.ErrNotExist) holds whether LookPath searched PATH (exec.ErrNotFound)
// or stat'ed a path.
type notExist struct{ err error }

func (e notExist) Error() string        { return e.err.Error() }
func (e notExist) Unwrap() error        { return e.err }
func (e notExist) Is(target error) bool { return target == fs.ErrNotExist }
