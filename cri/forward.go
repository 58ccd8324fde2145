package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// frame is one gRPC message passed through undecoded.
type frame struct{ data []byte }

// codec is the protobuf codec for the messages this service decodes
// (PullImage) and a pass-through for frames (everything forwarded). Its
// name is "proto", so that the content type on the wire is unchanged.
type codec struct{}

func (codec) Marshal(v any) ([]byte, error) {
	switch m := v.(type) {
	case *frame:
		return m.data, nil
	case proto.Message:
		return proto.Marshal(m)
	}
	return nil, fmt.Errorf("cri codec: cannot marshal %T", v)
}

func (codec) Unmarshal(data []byte, v any) error {
	switch m := v.(type) {
	case *frame:
		m.data = append(m.data[:0], data...)
		return nil
	case proto.Message:
		return proto.Unmarshal(data, m)
	}
	return fmt.Errorf("cri codec: cannot unmarshal into %T", v)
}

func (codec) Name() string { return "proto" }

// forwardedDesc makes every forwarded call a bidirectional stream: unary
// and streaming methods alike are a sequence of frames each way.
var forwardedDesc = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

// forwarded reports whether a call of method is forwarded: the image
// service's methods (runtime.v1.ImageService; PullImage is served here)
// and RuntimeService/Version, which crictl and the detection ask. Nothing
// else: the runtime service (RunPodSandbox, CreateContainer, Exec…) would
// give a caller of this socket, a --listen-group member too, what only
// root may do through the runtime's own socket, and another API version's
// PullImage (runtime.v1alpha2) would pull around the policy and the
// isolation.
func forwarded(method string) bool {
	return strings.HasPrefix(method, "/runtime.v1.ImageService/") || method == "/runtime.v1.RuntimeService/Version"
}

// forward is the grpc.UnknownServiceHandler: a call forwarded goes to the
// runtime's socket as it came (the caller's metadata and deadline
// included), and the runtime's answer (headers, frames, trailer, status)
// comes back as it is; any other call is Unimplemented, naming the
// runtime's socket, and never reaches the runtime.
func (s *Server) forward(_ any, ss grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(ss)
	if !ok {
		return status.Error(codes.Internal, "pullhelper cri: the call names no method")
	}
	if !forwarded(method) {
		return status.Errorf(codes.Unimplemented, "pullhelper cri serves the CRI image service (runtime.v1.ImageService) and RuntimeService/Version only, not %s; call the runtime's own socket (%s) for it",
			clip(method, 256), "unix://"+s.cfg.Runtime)
	}
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	out := metadata.MD{}
	if md, ok := metadata.FromIncomingContext(ss.Context()); ok {
		for k, v := range md {
			if strings.HasPrefix(k, ":") || strings.HasPrefix(k, "grpc-") || k == "content-type" || k == "user-agent" || k == "te" {
				continue
			}
			out[k] = v
		}
	}
	cs, err := s.runtime.NewStream(metadata.NewOutgoingContext(ctx, out), forwardedDesc, method, grpc.ForceCodec(codec{}))
	if err != nil {
		return err
	}
	// The caller's frames to the runtime; the end of the caller's
	// stream closes the runtime's send side. A send error means the
	// runtime ended the call: its status comes from RecvMsg below.
	go func() {
		for {
			f := &frame{}
			if err := ss.RecvMsg(f); err != nil {
				if errors.Is(err, io.EOF) {
					_ = cs.CloseSend()
				} else {
					cancel()
				}
				return
			}
			if err := cs.SendMsg(f); err != nil {
				return
			}
		}
	}()
	if hdr, err := cs.Header(); err == nil && len(hdr) > 0 {
		if err := ss.SendHeader(hdr); err != nil {
			return err
		}
	}
	for {
		f := &frame{}
		if err := cs.RecvMsg(f); err != nil {
			ss.SetTrailer(cs.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := ss.SendMsg(f); err != nil {
			return err
		}
	}
}
