package cri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/dest"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/pipeline"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Request is one pull as the plan hook sees it.
type Request struct {
	// Image is the request's image, normalised as containerd's CRI
	// normalises it (docker.io/library/NAME:latest).
	Image string
	// Dest is the pull's DEST (containerd:IMAGE).
	Dest string
	// Cred is the request's credential (nil: the node's sources only).
	Cred *Credential
	// Pod is the request's sandbox_config (nil when it has none).
	Pod *runtimeapi.PodSandboxConfig
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
	// MaxParallel bounds the pulls running at once (at least 1).
	MaxParallel int
	Plan        PlanFunc
	Run         RunFunc
	// Options are passed to every Run (its Log too: one line per pull).
	Options pipeline.Options
	Log     *slog.Logger
	// Ready, when set, is called once the socket listens (systemd's
	// READY=1).
	Ready func()
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

// listen creates the socket at path, root-only (0600, created under that
// umask: never more open, not even for a moment), in a directory that it
// and every one above it are root's and not writable by others (checked
// first: dest.CheckRootDir). An existing socket nobody answers on is
// stale and removed; a live one, or anything else at path, is refused
// (exit 2).
func listen(path string) (net.Listener, error) {
	// The kubelet sends its pull credentials to this socket: nobody but
	// root may be able to move it aside and listen in its place, so its
	// directory and every one above it are root's and not writable by
	// others (sticky allowed) — the part that exists before it is
	// created, all of it after, and before anything at path is looked at
	// (a stale socket removed).
	dir := filepath.Dir(path)
	existing := dir
	for {
		if _, err := os.Lstat(existing); err == nil || existing == "/" {
			break
		}
		existing = filepath.Dir(existing)
	}
	if err := dest.CheckRootDir(existing); err != nil {
		return nil, failure.New(failure.Usage, "--listen %s: %v; listen in a directory only root can write (as /run)", path, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, failure.New(failure.Usage, "--listen %s: creating its directory: %s", path, failure.Reason(err))
	}
	if err := dest.CheckRootDir(dir); err != nil {
		return nil, failure.New(failure.Usage, "--listen %s: %v; listen in a directory only root can write (as /run)", path, err)
	}
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.Mode().Type() != fs.ModeSocket:
		return nil, failure.New(failure.Usage, "--listen %s: exists and is not a socket (%s); remove it or listen elsewhere", path, fi.Mode().Type())
	case err == nil:
		if c, derr := net.DialTimeout("unix", path, 2*time.Second); derr == nil {
			c.Close()
			return nil, failure.New(failure.Usage, "--listen %s: another server answers on this socket; stop it or listen elsewhere", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, failure.New(failure.Usage, "--listen %s: removing the stale socket: %s", path, failure.Reason(err))
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, failure.New(failure.Usage, "--listen %s: %s", path, failure.Reason(err))
	}
	old := unix.Umask(0o177)
	l, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, failure.New(failure.Usage, "--listen %s: %v", path, err)
	}
	return l, nil
}

// maxMsgSize bounds a message either way, as the kubelet's CRI client
// bounds what it sends and receives (k8s.io/cri-client/pkg maxMsgSize,
// 16 MiB; containerd's gRPC server allows as much): a ListImages answer
// between gRPC's default 4 MiB and that reaches the kubelet as it would
// from containerd directly, and nothing larger is held.
const maxMsgSize = 16 << 20

// runtimeDialer connects to the runtime's socket at path as the pulls'
// import does (dest.OpenRootSocket): only to a socket of root's, in
// directories nobody else can write, through the descriptor that was
// checked; each connection checks again. Forwarded calls (what the
// kubelet asks about its images) would otherwise go to, and their answers
// come from, a listener another user made.
func runtimeDialer(path string) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, _ string) (net.Conn, error) {
		fd, err := dest.OpenRootSocket(path)
		if err != nil {
			return nil, fmt.Errorf("--runtime-endpoint: %v", err)
		}
		defer unix.Close(fd)
		var d net.Dialer
		return d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
	}
}

// Serve serves until ctx ends, then stops: every pull in flight is
// cancelled and waited for (its cgroup killed, its staging removed), and
// the socket is removed. It returns the number of pulls run.
func Serve(ctx context.Context, cfg Config) (int, error) {
	if cfg.MaxParallel < 1 {
		return 0, failure.New(failure.Usage, "--max-parallel %d: want at least 1", cfg.MaxParallel)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	conn, err := grpc.NewClient("unix://"+cfg.Runtime, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(runtimeDialer(cfg.Runtime)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize), grpc.MaxCallSendMsgSize(maxMsgSize)))
	if err != nil {
		return 0, failure.New(failure.Usage, "--runtime-endpoint unix://%s: %v", cfg.Runtime, err)
	}
	defer conn.Close()
	l, err := listen(cfg.Listen)
	if err != nil {
		return 0, err
	}
	defer os.Remove(cfg.Listen)
	s := &Server{cfg: cfg, runtime: conn, log: cfg.Log, sem: make(chan struct{}, cfg.MaxParallel), base: ctx, flights: map[string]*flight{}}
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
	s.log.Info("serving", "listen", "unix://"+cfg.Listen, "runtime_endpoint", "unix://"+cfg.Runtime, "max_parallel", cfg.MaxParallel)
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
