package cri

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/pull"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// flight is one pull and the callers waiting for it.
type flight struct {
	done    chan struct{}
	res     *api.Result
	err     error
	waiters int
	cancel  context.CancelFunc
}

// PullImage implements runtime.v1.ImageService/PullImage. It logs one
// line per request (logline.go: every field a request sets bounded) and
// counts it in the metrics.
func (s *Server) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	start := time.Now()
	attrs := append(requestAttrs(req), "runtime", s.cfg.RuntimeKind.name())
	res, shared, cred, err := s.pull(ctx, req)
	d := time.Since(start)
	attrs = append(attrs, "duration_ms", d.Milliseconds(), "shared", shared)
	attrs = append(attrs, credentialAttrs(cred)...)
	if err != nil {
		st := s.cfg.RuntimeKind.withReason(statusOf(err, ctx.Err(), cred), err)
		result := resultOf(st, err)
		s.metrics.request(result, st.Code(), d)
		s.log.Warn("pull", append(attrs, "result", string(result), "code", st.Code().String(), "error", clip(st.Message(), maxLogError))...)
		return nil, st.Err()
	}
	s.metrics.request(resultOf(nil, nil), codes.OK, d)
	s.log.Info("pull", append(attrs, resultAttrs(res)...)...)
	return &runtimeapi.PullImageResponse{ImageRef: s.cfg.RuntimeKind.imageRef(res.ImageID)}, nil
}

// pull normalises the request and joins or starts its flight.
func (s *Server) pull(ctx context.Context, req *runtimeapi.PullImageRequest) (*api.Result, bool, *Credential, error) {
	raw := req.GetImage().GetImage()
	if raw == "" {
		return nil, false, nil, failure.New(failure.Usage, "the request names no image (image.image is empty)")
	}
	// The image as the runtime's CRI reads it, before anything else
	// (runtime.go: containerd's docker.io/library/NAME:latest; CRI-O's
	// short names are left to registries.conf).
	rt := s.cfg.RuntimeKind
	image, short, err := rt.normalize(raw)
	if err != nil {
		return nil, false, nil, err
	}
	ac, err := rt.authConfig(req.GetAuth())
	var cred *Credential
	if err == nil {
		cred, err = credentialFor(ac, image)
	}
	if err != nil {
		return nil, false, nil, failure.New(failure.Usage, "%s", cred.redact(err.Error()))
	}
	if rt.crio() {
		cred = crioIgnored(cred, req.GetAuth(), image)
	}
	pod, err := podSettings(req.GetSandboxConfig(), s.cfg.PodPolicy)
	if err == nil {
		pod.SignaturePolicy, err = rt.namespacePolicy(req.GetSandboxConfig())
		pod.Snapshotter = rt.handlerSnapshotter(req)
	}
	if err != nil {
		return nil, false, cred, err
	}
	// Equal requests share a pull: the same image, credential and pod
	// settings (a pull in one pod's cgroup or with its DNS is that pod's).
	key := image + "\x00"
	if cred != nil {
		key += cred.Identity
	}
	key += "\x00" + pod.key()
	res, shared, err := s.join(ctx, key, func(ctx context.Context) (*api.Result, error) {
		r := Request{Image: image, Runtime: rt, Cred: cred, Pod: req.GetSandboxConfig(), Settings: pod}
		if !short {
			r.Dest = rt.Dest(image)
		}
		return s.run(ctx, r)
	})
	return res, shared, cred, err
}

// join waits for the flight of key, starting it when there is none. When
// the last caller of a flight goes, its context is cancelled; a later
// request then starts a flight of its own.
func (s *Server) join(ctx context.Context, key string, do func(context.Context) (*api.Result, error)) (*api.Result, bool, error) {
	s.mu.Lock()
	f := s.flights[key]
	shared := f != nil
	if f == nil {
		fctx, cancel := context.WithCancel(s.base)
		f = &flight{done: make(chan struct{}), cancel: cancel}
		s.flights[key] = f
		s.running.Add(1)
		go func() {
			defer s.running.Done()
			f.res, f.err = do(fctx)
			s.metrics.pulled(f.res, f.err)
			result := "ok"
			if f.err != nil {
				result = string(failure.CodeOf(f.err))
			}
			s.log.Info("pull done", "image", strings.SplitN(key, "\x00", 2)[0], "result", result)
			s.mu.Lock()
			if s.flights[key] == f {
				delete(s.flights, key)
			}
			s.mu.Unlock()
			cancel()
			close(f.done)
		}()
	}
	f.waiters++
	s.mu.Unlock()
	if shared {
		s.metrics.joinedOne()
		s.log.Info("pull joined", "image", strings.SplitN(key, "\x00", 2)[0])
	}
	select {
	case <-f.done:
		s.mu.Lock()
		f.waiters--
		s.mu.Unlock()
		return f.res, shared, f.err
	case <-ctx.Done():
		s.mu.Lock()
		f.waiters--
		if f.waiters == 0 {
			f.cancel()
			if s.flights[key] == f {
				delete(s.flights, key)
			}
		}
		s.mu.Unlock()
		return nil, shared, ctx.Err()
	}
}

// run is one pull: a slot of MaxParallel, the plan, the pipeline.
func (s *Server) run(ctx context.Context, r Request) (*api.Result, error) {
	image := r.Image
	select {
	case s.sem <- struct{}{}:
	default:
		s.log.Info("pull waiting", "image", image, "max_parallel", cap(s.sem))
		s.metrics.waitingAdd(1)
		select {
		case s.sem <- struct{}{}:
			s.metrics.waitingAdd(-1)
		case <-ctx.Done():
			s.metrics.waitingAdd(-1)
			return nil, ctx.Err()
		}
	}
	s.metrics.inFlightAdd(1)
	defer func() {
		s.metrics.inFlightAdd(-1)
		<-s.sem
	}()
	s.mu.Lock()
	s.pulls++
	s.mu.Unlock()
	attrs := []any{"image", image}
	if st := r.Settings; st.Profile != "" || st.CgroupParent != "" || st.DNS != nil || st.SignaturePolicy != "" || st.Snapshotter != "" {
		attrs = append(attrs, "pod_settings", st)
	}
	s.log.Info("pull started", attrs...)
	plan, err := s.cfg.Plan(r)
	if err != nil {
		return nil, err
	}
	defer plan.Close()
	for _, w := range plan.Warnings {
		s.log.Warn(w, "image", image)
	}
	res, err := s.cfg.Run(ctx, plan, s.cfg.Options)
	if err != nil {
		return nil, err
	}
	if res.ImageID == "" {
		return nil, failure.New(failure.Destination, "the import into %s's store reported no image ID", s.cfg.RuntimeKind.name())
	}
	// containerd's CRI lists an import asynchronously; CRI-O reads its
	// containers-storage store on each ImageStatus, so a committed image
	// is listed already.
	if !s.cfg.RuntimeKind.crio() {
		if err := s.listed(ctx, image, res.ImageID); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// listedTimeout bounds awaitListed; listedPoll is its interval.
var (
	listedTimeout = 30 * time.Second
	listedPoll    = 20 * time.Millisecond
)

// awaitListed waits until the runtime's CRI answers ImageStatus(image) with
// the image ID the pull imported. containerd's CRI learns of an image
// imported through its API from the image events, asynchronously (its event
// monitor calls CRIImageService.UpdateImage); its own PullImage updates its
// image store before it answers (CRIImageService.PullImage:
// imageStore.Update for each reference), so that the kubelet's
// ImageStatus right after PullImage finds the image (critest's "should
// list and get image status immediately after pulling"). When the name is
// listed as another image (a later pull moved the tag), the image listed
// by its ID is enough. Bounded by listedTimeout and ctx.
func (s *Server) awaitListed(ctx context.Context, image, id string) error {
	wctx, cancel := context.WithTimeout(ctx, listedTimeout)
	defer cancel()
	c := runtimeapi.NewImageServiceClient(s.runtime)
	tick := time.NewTicker(listedPoll)
	defer tick.Stop()
	for {
		res, err := c.ImageStatus(wctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: image}})
		switch got := res.GetImage().GetId(); {
		case err != nil || got == "":
		case got == id:
			return nil
		default:
			// The name is listed as another image: a later pull moved
			// the tag on. This pull's image is listed once its ID is.
			byID, err := c.ImageStatus(wctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: id}})
			if err == nil && byID.GetImage().GetId() == id {
				return nil
			}
		}
		select {
		case <-wctx.Done():
			if err := ctx.Err(); err != nil {
				return err
			}
			return failure.New(failure.Destination, "%s is imported as %s, but the runtime's CRI did not list it within %s (ImageStatus); its image events may be stalled", pull.Printable(image), id, listedTimeout)
		case <-tick.C:
		}
	}
}

// grpcCodes maps each failure code to the status code the kubelet sees.
var grpcCodes = map[failure.Code]codes.Code{
	failure.Usage:        codes.InvalidArgument,
	failure.Unauthorized: codes.Unauthenticated,
	failure.NotFound:     codes.NotFound,
	failure.Network:      codes.Unavailable,
	failure.TLS:          codes.Unavailable,
	failure.Interrupted:  codes.Canceled,
}

// withReason is st as the runtime's own PullImage would fail: CRI-O's
// (server/image_pull.go) returns a connection refused as
// "RegistryUnavailable: …" and a signature policy's rejection as
// "SignatureValidationFailed: …", plain errors that gRPC sends with code
// Unknown, which the kubelet's CRI client strips to the message, so that
// evalCRIPullErr finds the prefix and the pod's reason says which.
// containerd's CRI names neither: st stays as it is, as it does for a
// cancelled or timed-out request.
func (r Runtime) withReason(st *status.Status, err error) *status.Status {
	reason := failure.CRIReasonOf(err)
	if !r.crio() || reason == "" || st.Code() == codes.Canceled || st.Code() == codes.DeadlineExceeded {
		return st
	}
	return status.New(codes.Unknown, string(reason)+": "+st.Message())
}

// statusOf is the gRPC status of a failed pull: the code by failure code
// (others Internal); a request that was cancelled or timed out says so
// (Canceled, DeadlineExceeded). The message is the pull's error on one
// line, prefixed with its failure code, with the request's secrets
// redacted.
func statusOf(err, ctxErr error, cred *Credential) *status.Status {
	fc := failure.CodeOf(err)
	c, ok := grpcCodes[fc]
	if !ok {
		c = codes.Internal
	}
	msg := err.Error()
	switch {
	case errors.Is(ctxErr, context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		c, fc, msg = codes.DeadlineExceeded, failure.Interrupted, "the request's deadline passed; the pull was stopped and nothing was committed"
	case ctxErr != nil || errors.Is(err, context.Canceled):
		c, fc, msg = codes.Canceled, failure.Interrupted, "the request was cancelled; the pull was stopped and nothing was committed"
	}
	msg = pull.Printable(strings.ReplaceAll(msg, "\n", " "))
	return status.New(c, "pullhelper: "+string(fc)+": "+cred.redact(msg))
}
