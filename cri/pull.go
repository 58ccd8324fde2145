package cri

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/distribution/reference"
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

// PullImage implements runtime.v1.ImageService/PullImage.
func (s *Server) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	start := time.Now()
	image := req.GetImage().GetImage()
	attrs := []any{"image", image}
	if md := req.GetSandboxConfig().GetMetadata(); md != nil {
		attrs = append(attrs, "pod_namespace", md.GetNamespace(), "pod_name", md.GetName())
	}
	res, shared, cred, err := s.pull(ctx, req)
	attrs = append(attrs, "duration_ms", time.Since(start).Milliseconds(), "shared", shared)
	if cred != nil {
		attrs = append(attrs, "registry", cred.Host, "username", cred.Username)
		if cred.Ignored != "" {
			attrs = append(attrs, "ignored", cred.Ignored)
		}
	}
	if err != nil {
		st := statusOf(err, ctx.Err(), cred)
		s.log.Warn("pull", append(attrs, "code", st.Code().String(), "error", st.Message())...)
		return nil, st.Err()
	}
	attrs = append(attrs, "digest", res.Digest, "image_id", res.ImageID, "bytes", res.Bytes, "kept_bytes", res.KeptBytes, "cgroup", res.Isolation.Cgroup,
		"isolated", res.Isolation.Enabled, "uid", res.Isolation.UID, "code", codes.OK.String())
	if res.Usage != nil {
		attrs = append(attrs, "usage", res.Usage)
	}
	s.log.Info("pull", attrs...)
	return &runtimeapi.PullImageResponse{ImageRef: res.ImageID}, nil
}

// pull normalises the request and joins or starts its flight.
func (s *Server) pull(ctx context.Context, req *runtimeapi.PullImageRequest) (*api.Result, bool, *Credential, error) {
	raw := req.GetImage().GetImage()
	if raw == "" {
		return nil, false, nil, failure.New(failure.Usage, "the request names no image (image.image is empty)")
	}
	// containerd's CRI: the image reference is normalised
	// (docker.io/library/NAME:latest) before anything else.
	named, err := reference.ParseDockerRef(raw)
	if err != nil {
		return nil, false, nil, failure.New(failure.Usage, "image %q: %v", pull.Printable(raw), err)
	}
	image := named.String()
	cred, err := credentialFor(req.GetAuth(), image)
	if err != nil {
		return nil, false, nil, failure.New(failure.Usage, "%s", cred.redact(err.Error()))
	}
	key := image + "\x00"
	if cred != nil {
		key += cred.Identity
	}
	res, shared, err := s.join(ctx, key, func(ctx context.Context) (*api.Result, error) {
		return s.run(ctx, Request{Image: image, Dest: "containerd:" + image, Cred: cred, Pod: req.GetSandboxConfig()})
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
		select {
		case s.sem <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	defer func() { <-s.sem }()
	s.mu.Lock()
	s.pulls++
	s.mu.Unlock()
	s.log.Info("pull started", "image", image)
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
		return nil, failure.New(failure.Destination, "the import into containerd reported no image ID")
	}
	return res, nil
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
