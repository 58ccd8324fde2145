package main

// Inline secrets: --pull-secret-fd N, --authfile-fd N,
// --service-account-token-fd N and --provider-service-account-token-fd N
// name descriptors
// the spawning program opened for this run (a pipe, usually; package client
// passes them so). The parent reads each once, to EOF and at most
// maxSecretFD bytes, closes it, and keeps the bytes in memory only: they go
// through the same parsing as --pull-secret / --authfile /
// --service-account-token files (auth), and
// the child receives the chosen credentials with the rest of its material
// on fd 3, as for the file forms. Nothing is written to disk and a
// descriptor is never passed on to the child.
//
// They are flags, not policy keys: a descriptor belongs to one run, and a
// policy file names what is true for every run. A policy's
// auth.pull_secrets files are read as usual and come first; --authfile-fd
// replaces auth.authfile (as --authfile does) and cannot be combined with
// --authfile; --service-account-token-fd replaces auth.service_account_token
// and needs --service-account-registry (or auth.service_account_registries);
// --provider-service-account-token-fd replaces
// auth.provider_service_account_token (the pod's token for credential
// providers with tokenAttributes) and cannot be combined with
// --provider-service-account-token.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/pullhelper/pullhelper/auth"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
)

// maxSecretFD bounds what one descriptor may carry (4 MiB): the bound the
// parent puts on the configuration files it reads whole; a Kubernetes Secret
// is at most 1 MiB.
const maxSecretFD = 4 << 20

// inheritedFDs are the descriptors the process started with: open without
// FD_CLOEXEC (the Go runtime opens every one of its own, epoll and its
// pipes, with O_CLOEXEC, and they must not be mistaken for the caller's).
// main records them first, before reexec.Dispatch marks every fd from 3 up
// close-on-exec.
var inheritedFDs map[int]bool

func recordInheritedFDs() {
	inheritedFDs = map[int]bool{}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && fl&unix.FD_CLOEXEC == 0 {
			inheritedFDs[fd] = true
		}
	}
}

// secretFDs holds the descriptor flags.
type secretFDs struct {
	pullSecret textFlag
	authfile   textFlag
	saToken    textFlag
	provToken  textFlag
}

// inlineSecrets are what the descriptors held.
type inlineSecrets struct {
	pullSecrets []auth.Inline
	authfile    *auth.Inline
	saToken     *auth.Inline
	provToken   *auth.Inline
}

func addSecretFDFlags(fs *pflag.FlagSet, s *secretFDs) {
	s.pullSecret.typ, s.authfile.typ, s.saToken.typ, s.provToken.typ = "N", "N", "N", "N"
	fs.Var(&s.pullSecret, "pull-secret-fd", "read a Kubernetes pull secret (as --pull-secret) from open file descriptor N, once, to EOF (repeatable; after the --pull-secret files)")
	fs.Var(&s.authfile, "authfile-fd", "read the containers-auth.json(5) file (as --authfile) from open file descriptor N, once, to EOF")
	fs.Var(&s.saToken, "service-account-token-fd", "read the token offered to --service-account-registry registries (as --service-account-token) from open file descriptor N, once, to EOF")
	fs.Var(&s.provToken, "provider-service-account-token-fd", "read the pod service-account token for credential providers (as --provider-service-account-token) from open file descriptor N, once, to EOF")
}

// read reads and closes every descriptor named, after checking them all:
// a bad one is a usage error naming its flag, before anything is read.
func (s *secretFDs) read(ctx context.Context, fs *pflag.FlagSet, progressFD int, saRegistries []string) (inlineSecrets, error) {
	var out inlineSecrets
	usage := func(format string, a ...any) (inlineSecrets, error) {
		return inlineSecrets{}, failure.New(failure.Usage, format, a...)
	}
	for _, one := range []struct {
		fd, file string
		vals     []string
	}{{"--authfile-fd", "--authfile", s.authfile.vals}, {"--service-account-token-fd", "--service-account-token", s.saToken.vals},
		{"--provider-service-account-token-fd", "--provider-service-account-token", s.provToken.vals}} {
		if len(one.vals) > 1 {
			return usage("%s: given %d times; there is one", one.fd, len(one.vals))
		}
		if len(one.vals) == 1 && fs.Changed(strings.TrimPrefix(one.file, "--")) {
			return usage("%s and %s both name the same file; give one", one.fd, one.file)
		}
	}
	if len(s.saToken.vals) == 1 && len(saRegistries) == 0 {
		return usage("--service-account-token-fd needs --service-account-registry (the registries to offer the token to)")
	}
	type named struct {
		flag string
		fd   int
	}
	var all []named
	seen := map[int]string{}
	for _, g := range []struct {
		flag string
		vals []string
	}{{"--pull-secret-fd", s.pullSecret.vals}, {"--authfile-fd", s.authfile.vals}, {"--service-account-token-fd", s.saToken.vals},
		{"--provider-service-account-token-fd", s.provToken.vals}} {
		for _, v := range g.vals {
			fd, err := strconv.Atoi(v)
			switch {
			case err != nil || fd < 0:
				return usage("%s %q: want a file descriptor number", g.flag, v)
			case fd == 1 || fd == 2:
				return usage("%s %d: stdout and stderr carry the result and logs; pass the secret on another descriptor", g.flag, fd)
			case fd == progressFD:
				return usage("%s %d: also --progress-fd; pass the secret on its own descriptor", g.flag, fd)
			case seen[fd] != "":
				return usage("%s %d: already given (%s); a descriptor is read once", g.flag, fd, seen[fd])
			case !inheritedFDs[fd]:
				return usage("%s %d: not an open file descriptor inherited from the caller", g.flag, fd)
			}
			seen[fd] = g.flag
			all = append(all, named{g.flag, fd})
		}
	}
	for _, n := range all {
		data, err := readFD(ctx, n.fd)
		if errors.Is(err, context.DeadlineExceeded) {
			return inlineSecrets{}, failure.New(failure.Network, "%s %d: %v", n.flag, n.fd, err)
		}
		if err != nil {
			return usage("%s %d: %v", n.flag, n.fd, err)
		}
		in := auth.Inline{Name: "fd:" + strconv.Itoa(n.fd), Setting: n.flag + " " + strconv.Itoa(n.fd), Data: data}
		switch n.flag {
		case "--authfile-fd":
			out.authfile = &in
		case "--service-account-token-fd":
			out.saToken = &in
		case "--provider-service-account-token-fd":
			out.provToken = &in
		default:
			out.pullSecrets = append(out.pullSecrets, in)
		}
	}
	return out, nil
}

// readFD reads fd to EOF, at most maxSecretFD bytes, and closes it. The
// descriptor is left in its mode (O_NONBLOCK belongs to the open file
// description, which the caller may share, e.g. a terminal on stdin), so a
// blocking read runs in its own goroutine: a writer that never closes its
// end does not outlive the run's cancellation (SIGINT, SIGTERM), which
// returns at once and leaves the read to the process's exit, nor the
// pull's --timeout (ctx's deadline: exit 6, as the pull's own).
func readFD(ctx context.Context, fd int) ([]byte, error) {
	f := os.NewFile(uintptr(fd), "fd:"+strconv.Itoa(fd))
	type read struct {
		data []byte
		err  error
	}
	ch := make(chan read, 1)
	go func() {
		data, err := io.ReadAll(io.LimitReader(f, maxSecretFD+1))
		f.Close()
		ch <- read{data, err}
	}()
	var r read
	select {
	case r = <-ch:
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("the pull's --timeout passed while reading it (the writer did not close its end): %w", ctx.Err())
		}
		return nil, fmt.Errorf("interrupted while reading (the writer did not close its end)")
	}
	switch {
	case r.err != nil:
		return nil, fmt.Errorf("reading: %v", unwrapPath(r.err))
	case len(r.data) > maxSecretFD:
		return nil, fmt.Errorf("more than %d bytes (4 MiB), the limit; a pull secret or auth file is a few KiB", maxSecretFD)
	}
	return r.data, nil
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
