package cri

import (
	"fmt"
	"log/slog"
	"unicode/utf8"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/pull"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The bounds of the per-pull log line's request fields, in bytes before
// escaping. A CRI client may send anything up to gRPC's 4 MiB message; the
// kubelet sends what the API server validated: a namespace is a DNS label
// (63), a pod name a DNS subdomain (253), a UID a UUID (36); an image
// reference's name is at most 255 (distribution/reference
// NameTotalLengthMax) with a tag of 128 and a digest.
const (
	maxLogImage     = 1024
	maxLogNamespace = 63
	maxLogPodName   = 253
	maxLogPodUID    = 128
	maxLogUsername  = 256
	maxLogError     = 4096
)

// clip is s as a log line may carry it: at most n bytes of s (cut at a
// rune boundary, the cut said with the length), every unprintable rune
// escaped (pull.Printable).
func clip(s string, n int) string {
	if len(s) <= n {
		return pull.Printable(s)
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return pull.Printable(s[:cut]) + fmt.Sprintf("…(%d bytes)", len(s))
}

// requestAttrs are the log line's fields of the request: the image as
// asked for, the pod (namespace, name, uid) when the request names one.
func requestAttrs(req *runtimeapi.PullImageRequest) []any {
	attrs := []any{"image", clip(req.GetImage().GetImage(), maxLogImage)}
	if md := req.GetSandboxConfig().GetMetadata(); md != nil {
		attrs = append(attrs, "pod_namespace", clip(md.GetNamespace(), maxLogNamespace),
			"pod_name", clip(md.GetName(), maxLogPodName), "pod_uid", clip(md.GetUid(), maxLogPodUID))
	}
	return attrs
}

// credentialAttrs are the request credential's fields: its registry and
// username (never the secret), what was ignored.
func credentialAttrs(cred *Credential) []any {
	if cred == nil {
		return nil
	}
	attrs := []any{"registry", clip(cred.Host, maxLogImage), "username", clip(cred.Username, maxLogUsername)}
	if cred.Ignored != "" {
		attrs = append(attrs, "ignored", cred.Ignored)
	}
	return attrs
}

// resultAttrs are a successful pull's fields, from the result the parent
// built: digest, image ID, bytes (the result's, and the endpoints' over
// the wire), the pull's own duration, its cgroup, uid and usage (as the
// result JSON names them), result ok and gRPC code OK.
func resultAttrs(res *api.Result) []any {
	attrs := []any{"digest", res.Digest, "image_id", res.ImageID, "bytes", res.Bytes, "kept_bytes", res.KeptBytes, "wire_bytes", wireBytes(res),
		"pull_duration_ms", res.DurationMS, "cgroup", res.Isolation.Cgroup, "isolated", res.Isolation.Enabled,
		"uid", res.Isolation.UID}
	if u := res.Usage; u != nil {
		var g []any
		for _, f := range []struct {
			name string
			v    *uint64
		}{
			{"cpu_usage_ns", u.CPUUsageNS}, {"memory_peak_bytes", u.MemoryPeakBytes},
			{"io_read_bytes", u.IOReadBytes}, {"io_write_bytes", u.IOWriteBytes},
			{"pids_peak", u.PidsPeak}, {"oom_kills", u.OOMKills}, {"pids_max_hits", u.PidsMaxHits},
		} {
			if f.v != nil {
				g = append(g, slog.Uint64(f.name, *f.v))
			}
		}
		attrs = append(attrs, slog.Group("usage", g...))
	}
	return append(attrs, "result", "ok", "code", codes.OK.String())
}
