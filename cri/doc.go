// Package cri is `pullhelper cri`: a CRI image service (runtime.v1.ImageService
// of k8s.io/cri-api) on a unix socket, in front of the container runtime's
// own CRI, for the kubelet's --image-service-endpoint.
//
//   - PullImage (pull.go) runs one pull per request through the pipeline
//     (the caller's Plan hook builds it from a Request — the image, DEST, the
//     credential and the pod's sandbox_config — as `pullhelper pull` would, into
//     containerd:REF of the runtime's socket, namespace k8s.io; Run is
//     pipeline.Run, isolated), and answers image_ref = the image ID, as
//     containerd's CRI does (criService.PullImage returns the image ID).
//     The request's AuthConfig becomes an in-memory credential for that
//     registry (auth.go); without one the node's own sources apply. Equal
//     requests in flight (image and credential identity) share one pull;
//     at most MaxParallel pulls run at once. When every caller of a pull
//     has gone (cancelled, deadline), the pull's context is cancelled,
//     which kills its cgroup and removes its staging.
//   - Every other method, of the ImageService or any other service
//     (ListImages, ImageStatus, RemoveImage, ImageFsInfo, StreamImages,
//     RuntimeService calls), is forwarded to the runtime's socket as raw
//     bytes (forward.go: grpc.UnknownServiceHandler with a codec that
//     passes frames through), so the kubelet sees one store and methods
//     newer than this code still work. Messages are bounded at 16 MiB
//     each way, as the kubelet's CRI client bounds them (maxMsgSize).
//
// Invariants: an error returned to a caller is a gRPC status whose message
// is the pull's one-line error (failure's invariant: no secret), with the
// request's secrets redacted again in case; no secret is logged; the
// socket is created root-only (0600), in a directory that it and every one
// above it are root's and not writable by others (sticky allowed:
// dest.CheckRootDir), and removed when Serve returns; the runtime's socket
// is connected to only through dest.OpenRootSocket (root's, in such
// directories), at every connection, forwarded calls included.
package cri
