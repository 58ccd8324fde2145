package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/pipeline"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// serveFake serves a stand-in for the runtime's CRI (its image service,
// its runtime service: either may be nil) on the unix socket sock until
// the test ends.
func serveFake(t *testing.T, sock string, images runtimeapi.ImageServiceServer, runtime runtimeapi.RuntimeServiceServer, opts ...grpc.ServerOption) {
	t.Helper()
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	if images != nil {
		runtimeapi.RegisterImageServiceServer(srv, images)
	}
	if runtime != nil {
		runtimeapi.RegisterRuntimeServiceServer(srv, runtime)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
}

// dialCRI is a client of the CRI on the unix socket sock, as crictl and
// the kubelet dial it (no TLS); opts add to that. The caller closes it.
func dialCRI(t *testing.T, sock string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+sock, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// fakeRuntime is the runtime's own CRI: a list, a stream (StreamImages, new
// in cri-api v0.37), an error, and the metadata it was sent.
type fakeRuntime struct {
	runtimeapi.UnimplementedImageServiceServer
	gotMD chan metadata.MD

	mu sync.Mutex
	// statusCalls counts ImageStatus calls for listedImage, which is
	// listed (as listedID) from the listAfter'th call on (never when 0).
	statusCalls int
	listAfter   int
	// moved: listedImage is listed as another image (a later pull moved
	// the tag), listedID by its ID.
	moved bool
	// listAny: every image is listed, as listedID.
	listAny bool
}

const (
	listedImage = "docker.io/library/busybox:latest"
	listedID    = "sha256:cfg"
)

func (f *fakeRuntime) ListImages(ctx context.Context, _ *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.gotMD <- md
	return &runtimeapi.ListImagesResponse{Images: []*runtimeapi.Image{{Id: "sha256:one", RepoTags: []string{"reg/a:1"}}}}, nil
}

func (f *fakeRuntime) StreamImages(_ *runtimeapi.StreamImagesRequest, s grpc.ServerStreamingServer[runtimeapi.StreamImagesResponse]) error {
	for _, id := range []string{"sha256:one", "sha256:two"} {
		if err := s.Send(&runtimeapi.StreamImagesResponse{Images: []*runtimeapi.Image{{Id: id}}}); err != nil {
			return err
		}
	}
	return nil
}

// ImageStatus: listedImage is listed from the listAfter'th call on, as
// containerd's CRI lists an image imported through its API once it has
// handled the image's events; before, the answer has no image (containerd's
// answer for an unknown image). Any other image is an error.
func (f *fakeRuntime) ImageStatus(_ context.Context, r *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listAny {
		return &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Id: listedID}}, nil
	}
	if f.moved {
		switch r.GetImage().GetImage() {
		case listedImage:
			return &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Id: "sha256:newer"}}, nil
		case listedID:
			return &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Id: listedID}}, nil
		}
	}
	if r.GetImage().GetImage() != listedImage {
		return nil, status.Errorf(codes.NotFound, "no such image: %s", r.GetImage().GetImage())
	}
	f.statusCalls++
	if f.listAfter > 0 && f.statusCalls >= f.listAfter {
		return &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Id: listedID}}, nil
	}
	return &runtimeapi.ImageStatusResponse{}, nil
}

func (f *fakeRuntime) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.statusCalls
}

// Serve end to end over real sockets: PullImage answers the image ID of
// the pull it ran (the pipeline stood in for) or the mapped status; every
// other method, unary or streaming, reaches the runtime with the caller's
// metadata, and its answers and errors come back unchanged.
func TestServe(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: Serve refuses a --listen directory that is not root's (dest.CheckRootDir)")
	}
	dir := t.TempDir()
	rtSock, phSock := filepath.Join(dir, "rt.sock"), filepath.Join(dir, "ph", "cri.sock")
	fake := &fakeRuntime{gotMD: make(chan metadata.MD, 1), listAfter: 3}
	serveFake(t, rtSock, fake, nil)

	var planned []string
	cfg := Config{
		Listen: phSock, Runtime: rtSock, MaxParallel: 2,
		Plan: func(r Request) (*pipeline.Plan, error) {
			planned = append(planned, r.Image+" "+r.Dest)
			if r.Image == "docker.io/library/missing:latest" {
				return nil, failure.New(failure.NotFound, "docker.io/library/missing:latest: manifest unknown")
			}
			return &pipeline.Plan{}, nil
		},
		Run: func(context.Context, *pipeline.Plan, pipeline.Options) (*api.Result, error) {
			return &api.Result{ImageID: "sha256:cfg", Digest: "sha256:man"}, nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { _, err := Serve(ctx, cfg); served <- err }()
	conn := dialCRI(t, phSock)
	defer conn.Close()
	c := runtimeapi.NewImageServiceClient(conn)
	// Wait for the socket (WaitForReady: no sleep).
	res, err := c.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}}, grpc.WaitForReady(true))
	if err != nil || res.ImageRef != listedID {
		t.Fatalf("PullImage: %v %v", res, err)
	}
	// The answer came once the runtime's CRI listed the image (the third
	// ImageStatus), not before.
	if n := fake.calls(); n != 3 {
		t.Fatalf("PullImage answered after %d ImageStatus calls, want 3", n)
	}
	if fi, err := os.Stat(phSock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket: %v %v", fi.Mode(), err)
	}
	if len(planned) != 1 || planned[0] != "docker.io/library/busybox:latest containerd:docker.io/library/busybox:latest" {
		t.Fatalf("planned %v", planned)
	}
	_, err = c.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "missing"}})
	if st, _ := status.FromError(err); st.Code() != codes.NotFound || st.Message() != "pullhelper: not_found: docker.io/library/missing:latest: manifest unknown" {
		t.Fatalf("missing: %v", err)
	}
	_, err = c.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "Bad Name"}})
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument {
		t.Fatalf("bad name: %v", err)
	}

	// Forwarded: unary, with the caller's metadata.
	lctx := metadata.AppendToOutgoingContext(ctx, "x-test", "v1")
	list, err := c.ListImages(lctx, &runtimeapi.ListImagesRequest{})
	if err != nil || len(list.Images) != 1 || list.Images[0].Id != "sha256:one" || list.Images[0].RepoTags[0] != "reg/a:1" {
		t.Fatalf("ListImages: %v %v", list, err)
	}
	if md := <-fake.gotMD; len(md.Get("x-test")) != 1 || md.Get("x-test")[0] != "v1" {
		t.Fatalf("the runtime got metadata %v", md)
	}
	// Forwarded: server streaming.
	stream, err := c.StreamImages(ctx, &runtimeapi.StreamImagesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("StreamImages: %v", err)
		}
		ids = append(ids, m.Images[0].Id)
	}
	if len(ids) != 2 || ids[1] != "sha256:two" {
		t.Fatalf("StreamImages: %v", ids)
	}
	// Forwarded: the runtime's error, code and message.
	_, err = c.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "reg/b:2"}})
	if st, _ := status.FromError(err); st.Code() != codes.NotFound || st.Message() != "no such image: reg/b:2" {
		t.Fatalf("ImageStatus: %v", err)
	}
	// A method the runtime lacks: its Unimplemented, not ours.
	_, err = c.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: "x"}})
	if st, _ := status.FromError(err); st.Code() != codes.Unimplemented {
		t.Fatalf("RemoveImage: %v", err)
	}

	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(phSock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the socket is left: %v", err)
	}
}

// podRuntime is a runtime service that records every call it gets.
type podRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	mu    sync.Mutex
	calls []string
}

func (p *podRuntime) record(m string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, m)
}

func (p *podRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	p.record("Version")
	return &runtimeapi.VersionResponse{RuntimeName: "containerd", RuntimeVersion: "v2.4.2", RuntimeApiVersion: "v1"}, nil
}

func (p *podRuntime) RunPodSandbox(context.Context, *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	p.record("RunPodSandbox")
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: "pod"}, nil
}

func (p *podRuntime) ListContainers(context.Context, *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	p.record("ListContainers")
	return &runtimeapi.ListContainersResponse{}, nil
}

// Only the image service and RuntimeService/Version are forwarded: the
// runtime service's other calls (a pod, a container: root's through the
// runtime's socket, and a --listen-group member's through this one) and
// another API version's calls (v1alpha2's PullImage would pull around the
// policy) are Unimplemented here, naming the runtime's socket, and never
// reach the runtime.
func TestForwardsOnlyTheImageService(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: Serve refuses a --listen directory that is not root's (dest.CheckRootDir)")
	}
	dir := t.TempDir()
	rtSock, phSock := filepath.Join(dir, "rt.sock"), filepath.Join(dir, "ph", "cri.sock")
	rt := &podRuntime{}
	serveFake(t, rtSock, &fakeRuntime{gotMD: make(chan metadata.MD, 8)}, rt)
	cfg := Config{Listen: phSock, Runtime: rtSock, MaxParallel: 1,
		Plan: func(Request) (*pipeline.Plan, error) { return &pipeline.Plan{}, nil },
		Run: func(context.Context, *pipeline.Plan, pipeline.Options) (*api.Result, error) {
			return nil, errors.New("no pull in this test")
		}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { _, err := Serve(ctx, cfg); served <- err }()
	conn := dialCRI(t, phSock)
	defer conn.Close()
	rs := runtimeapi.NewRuntimeServiceClient(conn)
	v, err := rs.Version(ctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true))
	if err != nil || v.RuntimeName != "containerd" {
		t.Fatalf("Version: %v %v", v, err)
	}
	if _, err := runtimeapi.NewImageServiceClient(conn).ListImages(ctx, &runtimeapi.ListImagesRequest{}); err != nil {
		t.Fatalf("ListImages: %v", err)
	}
	_, err = rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{})
	st, _ := status.FromError(err)
	if st.Code() != codes.Unimplemented || !strings.Contains(st.Message(), "/runtime.v1.RuntimeService/RunPodSandbox") || !strings.Contains(st.Message(), "unix://"+rtSock) {
		t.Errorf("RunPodSandbox through pullhelper: %v; want Unimplemented naming the method and the runtime's socket", err)
	}
	if _, err := rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("ListContainers through pullhelper: %v; want Unimplemented", err)
	}
	// runtime.v1alpha2's PullImage, as raw frames: the same request bytes.
	raw, err := proto.Marshal(&runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}})
	if err != nil {
		t.Fatal(err)
	}
	var out frame
	err = conn.Invoke(ctx, "/runtime.v1alpha2.ImageService/PullImage", &frame{data: raw}, &out, grpc.ForceCodec(codec{}))
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "runtime.v1alpha2.ImageService/PullImage") {
		t.Errorf("v1alpha2 PullImage through pullhelper: %v; want Unimplemented", err)
	}
	rt.mu.Lock()
	calls := strings.Join(rt.calls, " ")
	rt.mu.Unlock()
	if calls != "Version" {
		t.Errorf("the runtime service got %q, want only Version", calls)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

// A pull whose image the runtime's CRI never lists fails (Internal, after
// listedTimeout) instead of answering an image ID that ImageStatus does
// not know; a caller that goes meanwhile gets Canceled.
func TestPullAwaitsListing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: Serve refuses a --listen directory that is not root's (dest.CheckRootDir)")
	}
	old := listedTimeout
	listedTimeout = 300 * time.Millisecond
	defer func() { listedTimeout = old }()
	dir := t.TempDir()
	rtSock, phSock := filepath.Join(dir, "rt.sock"), filepath.Join(dir, "ph.sock")
	fake := &fakeRuntime{gotMD: make(chan metadata.MD, 1)}
	serveFake(t, rtSock, fake, nil)
	cfg := Config{
		Listen: phSock, Runtime: rtSock, MaxParallel: 1,
		Plan: func(Request) (*pipeline.Plan, error) { return &pipeline.Plan{}, nil },
		Run: func(context.Context, *pipeline.Plan, pipeline.Options) (*api.Result, error) {
			return &api.Result{ImageID: listedID}, nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { _, err := Serve(ctx, cfg); served <- err }()
	conn := dialCRI(t, phSock)
	defer conn.Close()
	c := runtimeapi.NewImageServiceClient(conn)
	_, err := c.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}}, grpc.WaitForReady(true))
	if st, _ := status.FromError(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), "did not list it within 300ms") {
		t.Fatalf("never listed: %v", err)
	}
	if fake.calls() < 2 {
		t.Fatalf("%d ImageStatus calls: the wait did not poll", fake.calls())
	}
	// The tag listed as another image (moved on by a later pull): this
	// pull's image listed by its ID is enough.
	fake.mu.Lock()
	fake.moved = true
	fake.mu.Unlock()
	res, err := c.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}})
	if err != nil || res.ImageRef != listedID {
		t.Fatalf("moved tag: %v %v", res, err)
	}
	fake.mu.Lock()
	fake.moved = false
	fake.mu.Unlock()
	// The caller's deadline ends the wait first.
	listedTimeout = time.Hour
	dctx, dcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer dcancel()
	_, err = c.PullImage(dctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox"}})
	if st, _ := status.FromError(err); st.Code() != codes.DeadlineExceeded {
		t.Fatalf("deadline: %v", err)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

// bigRuntime answers ListImages with an answer of about 6 MiB: between
// gRPC's default 4 MiB and the kubelet's 16 MiB (k8s.io/cri-client/pkg
// maxMsgSize), as a node with many thousands of image tags would.
type bigRuntime struct {
	runtimeapi.UnimplementedImageServiceServer
}

func (bigRuntime) ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	var imgs []*runtimeapi.Image
	for i := range 6 << 10 {
		imgs = append(imgs, &runtimeapi.Image{Id: fmt.Sprintf("sha256:%064d", i), RepoTags: []string{fmt.Sprintf("reg/app:%d-%s", i, strings.Repeat("t", 900))}})
	}
	return &runtimeapi.ListImagesResponse{Images: imgs}, nil
}

// A forwarded answer larger than gRPC's default 4 MiB but within the
// kubelet's 16 MiB reaches the kubelet whole, as it would from containerd
// directly (without the bound it was ResourceExhausted).
func TestServeForwardsKubeletSizedAnswers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: Serve refuses a --listen directory that is not root's (dest.CheckRootDir)")
	}
	dir := t.TempDir()
	rtSock, phSock := filepath.Join(dir, "rt.sock"), filepath.Join(dir, "cri.sock")
	serveFake(t, rtSock, bigRuntime{}, nil, grpc.MaxSendMsgSize(16<<20))
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		_, err := Serve(ctx, Config{Listen: phSock, Runtime: rtSock, MaxParallel: 1,
			Plan: func(Request) (*pipeline.Plan, error) { return nil, errors.New("no pulls here") },
			Run:  func(context.Context, *pipeline.Plan, pipeline.Options) (*api.Result, error) { return nil, nil }})
		served <- err
	}()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	}()
	// As the kubelet dials its image service (cri-client: 16 MiB).
	conn := dialCRI(t, phSock,
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	defer conn.Close()
	list, err := runtimeapi.NewImageServiceClient(conn).ListImages(ctx, &runtimeapi.ListImagesRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("ListImages through the service: %v", err)
	}
	if n := len(list.Images); n != 6<<10 || proto.Size(list) <= 4<<20 {
		t.Fatalf("got %d images, %d bytes; want %d images over 4 MiB", n, proto.Size(list), 6<<10)
	}
}
