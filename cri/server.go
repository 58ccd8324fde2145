package cri

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/pipeline"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Request is one pull as the plan hook sees it.
type Request struct {
	// Image is the request's image, normalised as the runtime's CRI
	// normalises it (containerd: docker.io/library/NAME:latest; CRI-O: a
	// qualified name with its tag, or a short name as sent).
	Image string
	// Dest is the pull's DEST: Runtime.Dest(Image), containerd:IMAGE or
	// containers-storage:[STORE]IMAGE. It is "" when Image is a short name
	// for CRI-O: the hook resolves Image through registries.conf (as the
	// pipeline resolves a short IMAGE) and pulls into
	// Runtime.Dest(resolved).
	Dest string
	// Runtime is the runtime behind the service.
	Runtime Runtime
	// Cred is the request's credential (nil: the node's sources only).
	Cred *Credential
	// Pod is the request's sandbox_config (nil when it has none).
	Pod *runtimeapi.PodSandboxConfig
	// Settings are what the policy took from Pod (pod.go): the profile
	// the pod chose, the pod's cgroup parent and DNS when the policy
	// uses them. The plan applies them.
	Settings PodSettings
}

// PlanFunc builds the plan of one pull. The caller owns the policy, the
// flags and the inputs; Serve closes the plan.
type PlanFunc func(r Request) (*pipeline.Plan, error)

// RunFunc runs a plan (pipeline.Run; a test's stand-in).
type RunFunc func(ctx context.Context, p *pipeline.Plan, o pipeline.Options) (*api.Result, error)

// Config is what Serve needs.
type Config struct {
	// Listen and Runtime are unix socket paths (without "unix://").
	Listen, Runtime string
	// RuntimeKind is the runtime behind the socket (the zero value:
	// containerd).
	RuntimeKind Runtime
	// MaxParallel bounds the pulls running at once (at least 1).
	MaxParallel int
	Plan        PlanFunc
	Run         RunFunc
	// PodPolicy, when set, is asked per request what the policy takes
	// from the pod (PodSettings); nil: nothing.
	PodPolicy PodPolicyFunc
	// Options are passed to every Run (its Log too: one line per pull).
	Options pipeline.Options
	Log     *slog.Logger
	// Ready, when set, is called once the socket listens (systemd's
	// READY=1).
	Ready func()
	// ListenGID, when not 0, is the group of the socket (--listen-group):
	// the socket is root's, that group's, 0660. 0: root-only, 0600.
	ListenGID int
	// MetricsListen, when set, is the HOST:PORT of the Prometheus
	// metrics (--metrics-listen, checked by MetricsAddr).
	MetricsListen string
	// MetricsListener, when set, is MetricsListen already bound
	// (Preflight): Serve serves on it and closes it, whatever it returns.
	MetricsListener net.Listener
	// Dial, when set, connects to the runtime's socket (each connection:
	// forwarded calls, reconnects); `pullhelper cri` checks the socket is
	// root's, in root's directories (dest.DialRootSocket). Nil: a plain
	// unix dial.
	Dial DialFunc
}

// DialFunc connects to the unix socket at path.
type DialFunc func(ctx context.Context, path string) (net.Conn, error)

// The kubelet's connection parameters for the runtime's socket
// (k8s.io/cri-client's NewRemoteImageService and NewRemoteRuntimeService):
// gRPC's backoff from 100 ms up to 3 s between reconnections, instead of
// gRPC's default up to 120 s, so that a runtime that restarts answers
// forwarded calls (and a pull's wait for its listing) within seconds.
var runtimeConnectParams = func() grpc.ConnectParams {
	p := grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: 5 * time.Second}
	p.Backoff.BaseDelay, p.Backoff.MaxDelay = 100*time.Millisecond, 3*time.Second
	return p
}()

// runtimeConn is a client of the runtime's socket, through dial when set.
func runtimeConn(path string, dial DialFunc) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(runtimeConnectParams),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize), grpc.MaxCallSendMsgSize(maxMsgSize))}
	if dial == nil {
		return grpc.NewClient("unix://"+path, opts...)
	}
	return grpc.NewClient("passthrough:///"+path, append(opts,
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return dial(ctx, path) }))...)
}

// Server is a running image service.
type Server struct {
	cfg     Config
	runtime *grpc.ClientConn
	log     *slog.Logger
	sem     chan struct{}

	base    context.Context
	mu      sync.Mutex
	flights map[string]*flight
	running sync.WaitGroup
	pulls   int
	metrics *metrics
	// listed waits until the runtime's CRI lists a pulled image
	// (awaitListed; Serve sets it).
	listed func(ctx context.Context, image, id string) error
}

// SocketPath checks a --listen or --runtime-endpoint value, unix:///PATH
// with PATH absolute, and returns PATH.
func SocketPath(flag, v string) (string, error) {
	p, ok := strings.CutPrefix(v, "unix://")
	if !ok || !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return "", failure.New(failure.Usage, "%s %q: want unix:///ABSOLUTE/PATH", flag, v)
	}
	return p, nil
}

// listen creates the socket at path: root-only (0600, created under that
// umask), or with gid (not 0) root's, gid's, 0660 — created so, never more
// open, not even for a moment (bindAs) — in a directory that it and every
// one above it are root's and not writable by others (checked first:
// dest.CheckRootDir). An existing socket nobody answers on is stale and
// removed; a live one, or anything else at path, is refused (exit 2).
func listen(path string, gid int) (net.Listener, error) {
	stale, err := checkListen(path, gid, true)
	if err != nil {
		return nil, err
	}
	if stale {
		if err := os.Remove(path); err != nil {
			return nil, failure.New(failure.Usage, "--listen %s: removing the stale socket: %s", path, failure.Reason(err))
		}
	}
	if gid == 0 {
		old := unix.Umask(0o177)
		l, err := net.Listen("unix", path)
		unix.Umask(old)
		if err != nil {
			return nil, failure.New(failure.Usage, "--listen %s: %v", path, err)
		}
		return l, nil
	}
	return bindAs(path, gid)
}

// checkListen checks --listen's path as listen uses it. The kubelet sends
// its pull credentials to this socket: nobody but root may be able to move
// it aside and listen in its place, so its directory and every one above
// it are root's and not writable by others (sticky allowed) — the part
// that exists before it is created (create: its missing directories are
// then made), all of it after, and before anything at path is looked at.
// What is at path must be a socket no server answers on (stale: listen
// removes it); with gid, a setgid directory must have that group. Without
// create nothing is made or removed (Preflight).
func checkListen(path string, gid int, create bool) (stale bool, err error) {
	dir := filepath.Dir(path)
	existing := dir
	for {
		if _, err := os.Lstat(existing); err == nil || existing == "/" {
			break
		}
		existing = filepath.Dir(existing)
	}
	if err := dest.CheckRootDir(existing); err != nil {
		return false, failure.New(failure.Usage, "--listen %s: %v; listen in a directory only root can write (as /run)", path, err)
	}
	if !create && existing != dir {
		return false, nil // made by listen, and checked again there
	}
	if create {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return false, failure.New(failure.Usage, "--listen %s: creating its directory: %s", path, failure.Reason(err))
		}
	}
	if err := dest.CheckRootDir(dir); err != nil {
		return false, failure.New(failure.Usage, "--listen %s: %v; listen in a directory only root can write (as /run)", path, err)
	}
	if gid != 0 {
		var st unix.Stat_t
		if err := unix.Stat(dir, &st); err != nil {
			return false, failure.New(failure.Usage, "--listen %s: %s", path, failure.Reason(err))
		}
		if st.Mode&unix.S_ISGID != 0 && int(st.Gid) != gid {
			return false, failure.New(failure.Usage, "--listen %s: its directory is setgid (group %d), which would be the socket's group instead of --listen-group's %d; listen elsewhere", path, st.Gid, gid)
		}
	}
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.Mode().Type() != fs.ModeSocket:
		return false, failure.New(failure.Usage, "--listen %s: exists and is not a socket (%s); remove it or listen elsewhere", path, fi.Mode().Type())
	case err == nil:
		if c, derr := net.DialTimeout("unix", path, 2*time.Second); derr == nil {
			c.Close()
			return false, failure.New(failure.Usage, "--listen %s: another server answers on this socket; stop it or listen elsewhere", path)
		}
		return true, nil
	case !errors.Is(err, fs.ErrNotExist):
		return false, failure.New(failure.Usage, "--listen %s: %s", path, failure.Reason(err))
	}
	return false, nil
}

// Preflight checks, before the runtime is asked anything (with --runtime
// auto, Detect waits up to 15 s for its Version), what Serve would refuse
// without it, so that a usage error comes at once: --max-parallel,
// --listen's directories and path and --listen-group's setgid rule
// (checkListen, creating and removing nothing), and --metrics-listen,
// which it binds. The listener it returns (nil without MetricsListen) is
// Serve's in Config.MetricsListener; the caller closes it on any error
// before Serve.
func Preflight(cfg Config) (net.Listener, error) {
	if cfg.MaxParallel < 1 {
		return nil, failure.New(failure.Usage, "--max-parallel %d: want at least 1", cfg.MaxParallel)
	}
	if _, err := checkListen(cfg.Listen, cfg.ListenGID, false); err != nil {
		return nil, err
	}
	if cfg.MetricsListen == "" {
		return nil, nil
	}
	return listenMetrics(cfg.MetricsListen)
}

// bindAs creates the socket at path as root:gid 0660 in one step: the
// bind runs on a locked thread whose filesystem gid is gid
// (setfsgid(2), this thread only) under umask 0117, so the inode is
// born with that group and mode. A setgid directory would give the
// socket its own group instead, so one of another group is refused
// first; the result is checked (owner, group, mode) before it is used.
func bindAs(path string, gid int) (net.Listener, error) {
	// The directory's setgid bit was checked (checkListen).
	var st unix.Stat_t
	// A goroutine of its own: should the fsgid not come back, it
	// returns with its thread still locked, and the runtime ends that
	// thread, its credentials with it.
	type bound struct {
		l   net.Listener
		err error
	}
	ch := make(chan bound, 1)
	go func() {
		runtime.LockOSThread()
		prev, _ := unix.SetfsgidRetGid(gid)
		if cur, _ := unix.SetfsgidRetGid(-1); cur != gid {
			ch <- bound{nil, failure.New(failure.Usage, "--listen-group %d: cannot create the socket with this group", gid)}
			return
		}
		old := unix.Umask(0o117)
		l, lerr := net.Listen("unix", path)
		unix.Umask(old)
		_, _ = unix.SetfsgidRetGid(prev)
		if cur, _ := unix.SetfsgidRetGid(-1); cur != prev {
			if l != nil {
				l.Close()
			}
			ch <- bound{nil, failure.New(failure.Internal, "--listen %s: could not restore the filesystem gid", path)}
			return
		}
		runtime.UnlockOSThread()
		if lerr != nil {
			lerr = failure.New(failure.Usage, "--listen %s: %v", path, lerr)
		}
		ch <- bound{l, lerr}
	}()
	b := <-ch
	l, err := b.l, b.err
	if err != nil {
		return nil, err
	}
	if err := unix.Lstat(path, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK || st.Uid != 0 || int(st.Gid) != gid || st.Mode&0o7777 != 0o660 {
		l.Close()
		return nil, failure.New(failure.Usage, "--listen %s: the socket was not created root:%d 0660 (mode %#o, owner %d:%d); listen elsewhere", path, gid, st.Mode&0o7777, st.Uid, st.Gid)
	}
	return l, nil
}

// maxMsgSize bounds a message either way, as the kubelet's CRI client
// bounds what it sends and receives (k8s.io/cri-client/pkg maxMsgSize,
// 16 MiB; containerd's gRPC server allows as much): a ListImages answer
// between gRPC's default 4 MiB and that reaches the kubelet as it would
// from containerd directly, and nothing larger is held.
const maxMsgSize = 16 << 20

// Serve serves until ctx ends, then stops: every pull in flight is
// cancelled and waited for (its cgroup killed, its staging removed), and
// the socket is removed. It returns the number of pulls run.
func Serve(ctx context.Context, cfg Config) (int, error) {
	ml := cfg.MetricsListener
	fail := func(err error) (int, error) {
		if ml != nil {
			ml.Close()
		}
		return 0, err
	}
	if cfg.MaxParallel < 1 {
		return fail(failure.New(failure.Usage, "--max-parallel %d: want at least 1", cfg.MaxParallel))
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	conn, err := runtimeConn(cfg.Runtime, cfg.Dial)
	if err != nil {
		return fail(failure.New(failure.Usage, "--runtime-endpoint unix://%s: %v", cfg.Runtime, err))
	}
	defer conn.Close()
	m := newMetrics()
	// The metrics port first: when it is taken, no socket was made.
	if ml == nil && cfg.MetricsListen != "" {
		if ml, err = listenMetrics(cfg.MetricsListen); err != nil {
			return 0, err
		}
	}
	l, err := listen(cfg.Listen, cfg.ListenGID)
	if err != nil {
		if ml != nil {
			ml.Close()
		}
		return 0, err
	}
	defer os.Remove(cfg.Listen)
	s := &Server{cfg: cfg, runtime: conn, log: cfg.Log, sem: make(chan struct{}, cfg.MaxParallel), base: ctx, flights: map[string]*flight{}, metrics: m}
	s.listed = s.awaitListed
	if ml != nil {
		// Stopped after every pull has ended: its last scrape can
		// show nothing in flight.
		stop := serveMetrics(ml, m, s.log)
		defer stop()
	}
	srv := grpc.NewServer(grpc.ForceServerCodec(codec{}), grpc.UnknownServiceHandler(s.forward),
		grpc.MaxRecvMsgSize(maxMsgSize), grpc.MaxSendMsgSize(maxMsgSize))
	srv.RegisterService(&imageServiceDesc, s)
	stopped := make(chan struct{})
	go func() {
		<-ctx.Done()
		srv.Stop()
		close(stopped)
	}()
	if cfg.Ready != nil {
		cfg.Ready()
	}
	attrs := []any{"listen", "unix://" + cfg.Listen, "runtime_endpoint", "unix://" + cfg.Runtime, "runtime", cfg.RuntimeKind.name(),
		"runtime_version", cfg.RuntimeKind.Version, "runtime_from", cfg.RuntimeKind.From, "max_parallel", cfg.MaxParallel}
	if cfg.ListenGID != 0 {
		attrs = append(attrs, "listen_gid", cfg.ListenGID)
	}
	if ml != nil {
		attrs = append(attrs, "metrics_listen", ml.Addr().String())
	}
	s.log.Info("serving", attrs...)
	serveErr := srv.Serve(l)
	if ctx.Err() == nil {
		srv.Stop()
	} else {
		<-stopped
	}
	s.running.Wait()
	s.mu.Lock()
	n := s.pulls
	s.mu.Unlock()
	if serveErr != nil && ctx.Err() == nil {
		return n, failure.New(failure.Internal, "serving on %s: %v", cfg.Listen, serveErr)
	}
	return n, nil
}

// imageService is the part of runtime.v1.ImageService served here.
type imageService interface {
	PullImage(context.Context, *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error)
}

// imageServiceDesc registers PullImage only: every other method of the
// service, like every other service, reaches the unknown-service handler
// (forward).
var imageServiceDesc = grpc.ServiceDesc{
	ServiceName: "runtime.v1.ImageService",
	HandlerType: (*imageService)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "PullImage",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(runtimeapi.PullImageRequest)
			if err := dec(in); err != nil {
				return nil, err
			}
			if interceptor == nil {
				return srv.(imageService).PullImage(ctx, in)
			}
			info := &grpc.UnaryServerInfo{Server: srv, FullMethod: runtimeapi.ImageService_PullImage_FullMethodName}
			return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
				return srv.(imageService).PullImage(ctx, req.(*runtimeapi.PullImageRequest))
			})
		},
	}},
	Metadata: "api.proto",
}
