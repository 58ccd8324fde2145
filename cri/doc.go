// Package cri is `pullhelper cri`: a CRI image service (runtime.v1.ImageService
// of k8s.io/cri-api) on a unix socket, in front of the container runtime's
// own CRI, for the kubelet's --image-service-endpoint.
//
//   - The runtime behind the socket (runtime.go) is containerd or CRI-O:
//     named by the caller, or Detect asks its RuntimeService/Version
//     (runtime_name "containerd" or "cri-o"). For CRI-O, crioconf.go reads
//     the store CRI-O uses: storage.conf's, with crio.conf's [crio] root,
//     runroot, storage_driver and storage_option over it, then the
//     drop-ins', merged as CRI-O's Config.UpdateFromDropInFile merges them,
//     and its [crio.image] signature policies: the node's signature_policy
//     (the caller's Plan hook uses it when pullhelper names none) and
//     signature_policy_dir, whose NAMESPACE.json replaces it for a pod of
//     that namespace (Runtime.namespacePolicy, into PodSettings).
//   - In front of containerd, a pod whose runtime handler names its own
//     snapshotter in the containerd config (Runtime.Snapshotters, from
//     dest.ReadContainerdConfig) has its image unpacked for it
//     (handlerSnapshotter, into PodSettings), as containerd's
//     snapshotterFromPodSandboxConfig picks it.
//   - PullImage (pull.go) runs one pull per request through the pipeline
//     (the caller's Plan hook builds it from a Request — the image, DEST, the
//     runtime, the credential and the pod's sandbox_config — as `pullhelper
//     pull` would; Run is pipeline.Run, isolated) into the runtime's store:
//     containerd:REF of the runtime's socket, namespace k8s.io, answering
//     image_ref = the image ID as containerd's CRI does
//     (criService.PullImage) once the runtime's CRI lists it: its
//     ImageStatus(image) answers that ID, or, when a later pull has moved
//     the name on, ImageStatus(ID) does (awaitListed, at most 30 s;
//     containerd's CRI learns of an import from its image events, while its
//     own pull updates its image store before it answers); or
//     containers-storage:[STORE]REF, answering the bare storage ID as
//     CRI-O's resolveImageRefToID does (CRI-O reads its store on each
//     ImageStatus: no wait). For CRI-O a short name is left to the hook,
//     which resolves it through registries.conf before naming the DEST; a
//     digest goes to containers-storage:[STORE]REPO@DIGEST (stored under
//     that name, no tag, as CRI-O's PullImage stores it).
//     The request's AuthConfig becomes an in-memory auth.Request for
//     exactly one registry host (auth.go: server_address's host, a plain
//     host[:port] or a URL of one, else the image's registry; never a
//     mirror on another host, never a pattern), an identity_token carried
//     as one (the child's registry client exchanges it at the realm as an
//     OAuth2 refresh token, as containerd does); registry_token is ignored
//     as containerd's CRI ignores it, and for CRI-O identity_token too
//     (crioIgnored). It is its host's only credential (a refused one fails
//     the pull, as in both runtimes); without one, and for other hosts,
//     the node's own sources apply. Equal
//     requests in flight (image, credential identity and pod settings)
//     share one pull;
//     at most MaxParallel pulls run at once. When every caller of a pull
//     has gone (cancelled, deadline), the pull's context is cancelled,
//     which kills its cgroup and removes its staging.
//   - Per pod (pod.go): before a pull joins or starts, the request's
//     sandbox_config is read as the policy's [cri] says (PodPolicy, the
//     caller's hook): the profile the pod chose by annotation (only one of
//     cri.pod_profiles), then by that profile its cgroup parent
//     (cri.pull_cgroup = "pod", as CRI-O's separate_pull_cgroup = "pod")
//     and its DNS (cri.pod_dns), each checked and bounded; a bad value is
//     a usage error (InvalidArgument) and nothing starts. The result,
//     PodSettings, is part of the flight key and goes to the Plan hook in
//     the Request.
//   - The ImageService's other methods (ListImages, ImageStatus,
//     RemoveImage, ImageFsInfo, StreamImages, any newer runtime.v1 one)
//     and RuntimeService/Version are forwarded to the runtime's socket as
//     raw bytes (forward.go: grpc.UnknownServiceHandler with a codec that
//     passes frames through), so the kubelet sees one store and methods
//     newer than this code still work. No other call is forwarded: the
//     runtime service would make a caller of this socket (a --listen-group
//     member) root on the runtime, and runtime.v1alpha2's PullImage would
//     pull around the policy; they are Unimplemented here. Messages are
//     bounded at 16 MiB each way, as the kubelet's CRI client bounds them
//     (maxMsgSize).
//   - Observability: one log line per PullImage request (logline.go: the
//     request's image and pod, the result's digest, image ID, bytes, cgroup
//     and usage, the failure code beside the gRPC code; every field a
//     request sets bounded and escaped) and, with Config.MetricsListen,
//     Prometheus metrics on GET /metrics (metrics.go: client_golang, a
//     registry of its own with the Go and process collectors; requests by
//     failure and gRPC code, pulls by failure code, bytes, a duration
//     histogram, pulls in flight and waiting, joined requests; no label
//     holds a request's value). The HTTP server has read and write
//     timeouts, a header bound, at most 4 scrapes at once, and stops
//     after the last pull when Serve returns.
//   - Preflight, called before the runtime is asked anything (Detect
//     waits up to 15 s), checks what needs no runtime — --max-parallel,
//     --listen's directories and path (checkListen, making nothing),
//     --listen-group's setgid rule — and binds --metrics-listen, handed to
//     Serve as Config.MetricsListener (Serve closes it, whatever it
//     returns): a usage error comes at once.
//
// Invariants: an error returned to a caller is a gRPC status whose message
// is the pull's one-line error (failure's invariant: no secret), with the
// request's secrets redacted again in case; no secret is logged; the
// socket is created root-only (0600), or root:ListenGID 0660 (group.go,
// server.go bindAs: born with that group and mode, never more open), in a
// directory that it and every one above it are root's and not writable by
// others (sticky allowed: dest.CheckRootDir), and removed when Serve
// returns; the runtime's socket is reached through Config.Dial, which
// `pullhelper cri` sets to dest.DialRootSocket (root's socket, in root's
// directories, checked at each connection, forwarded calls included).
package cri
