package pull

import (
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/api"
	"go.podman.io/image/v5/types"
)

// Which endpoint served what.
//
// containers/image picks among a registry's mirrors and its own location
// internally (registries.conf order, fallback on failure) and says nothing
// about the choice. Every request it makes goes through
// SystemContext.DockerProxy first, though, with its full URL: a manifest
// is .../manifests/<tag or digest>, a blob .../blobs/<digest>. hostLog
// records, per attempt, the host each manifest reference and each blob
// digest was last asked of (a fallback or a retry asks several: the last
// one is the one that served it), and the blob bytes the guard counted.

// hostLog is one attempt's record of which host served each manifest and
// blob. Its zero value is not usable; use newHostLog.
type hostLog struct {
	mu        sync.Mutex
	order     []string                 // hosts, in the order of their first request
	manifests map[string]string        // tag or digest → host
	blobs     map[digest.Digest]string // blob → host
	bytes     map[digest.Digest]int64  // blob → bytes read from the registry in its last fetch
	kept      map[digest.Digest]int64  // blob → bytes its last fetch served from the partial-blob cache
	// lastManifest is the host a manifest was last asked of.
	lastManifest string
}

func newHostLog() *hostLog {
	return &hostLog{manifests: map[string]string{}, blobs: map[digest.Digest]string{}, bytes: map[digest.Digest]int64{}, kept: map[digest.Digest]int64{}}
}

// wrap returns a copy of sys whose DockerProxy records each request that
// sys's DockerProxy lets through (a refused request reaches no host).
func (h *hostLog) wrap(sys *types.SystemContext) *types.SystemContext {
	s := *sys
	next := sys.DockerProxy
	if next == nil { // what containers/image would do without the hook
		next = func(u *url.URL) (*url.URL, error) {
			if sys.DockerProxyURL != nil {
				return sys.DockerProxyURL, nil
			}
			return http.ProxyFromEnvironment(&http.Request{URL: u})
		}
	}
	s.DockerProxy = func(u *url.URL) (*url.URL, error) {
		proxy, err := next(u)
		if err != nil {
			return nil, err
		}
		h.record(u)
		return proxy, nil
	}
	return &s
}

// record notes the host of a manifest or blob request; any other request
// (/v2/, a token realm, a redirect to storage) is ignored. Only the last
// two path elements are read: a mirror may prefix the repository with a
// path of its own, and containerd's override_path drops /v2/.
func (h *hostLog) record(u *url.URL) {
	if u == nil || u.Host == "" {
		return
	}
	els := strings.Split(strings.TrimSuffix(u.Path, "/"), "/")
	if len(els) < 2 {
		return
	}
	kind, ref := els[len(els)-2], els[len(els)-1]
	if ref == "" {
		return
	}
	host := strings.ToLower(u.Host)
	h.mu.Lock()
	defer h.mu.Unlock()
	switch kind {
	case "manifests":
		h.manifests[ref] = host
		h.lastManifest = host
	case "blobs":
		d, err := digest.Parse(ref)
		if err != nil {
			return // blobs/uploads/ and the like
		}
		h.blobs[d] = host
	default:
		return
	}
	for _, o := range h.order {
		if o == host {
			return
		}
	}
	h.order = append(h.order, host)
}

// blobHost is the host blob d was last asked of, or "".
func (h *hostLog) blobHost(d digest.Digest) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.blobs[d]
}

// manifestHost is the host a manifest was last asked of, or "".
func (h *hostLog) manifestHost() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastManifest
}

// startBlob starts counting a fetch of d afresh (the last fetch wins).
func (h *hostLog) startBlob(d digest.Digest) {
	h.mu.Lock()
	h.bytes[d] = 0
	delete(h.kept, d)
	h.mu.Unlock()
}

// setKept records that the fetch of d starts with n bytes kept in the
// partial-blob cache by an earlier pull (not read from the registry).
func (h *hostLog) setKept(d digest.Digest, n int64) {
	h.mu.Lock()
	if n > 0 {
		h.kept[d] = n
	}
	h.mu.Unlock()
}

// keptOf is how many bytes of d's last fetch the partial-blob cache served.
func (h *hostLog) keptOf(d digest.Digest) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.kept[d]
}

// keptTotal is the bytes the partial-blob cache served, over every blob's
// last fetch: the result's kept_bytes.
func (h *hostLog) keptTotal() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var n int64
	for _, k := range h.kept {
		n += k
	}
	return n
}

// addBytes counts n bytes of blob d read from the registry.
func (h *hostLog) addBytes(d digest.Digest, n int64) {
	h.mu.Lock()
	h.bytes[d] += n
	h.mu.Unlock()
}

// endpoints is the result's endpoints block: every host that served a
// manifest or a blob, in the order of its first request, with the blob
// bytes read from it (a resumed blob's kept prefix is not: keptTotal).
func (h *hostLog) endpoints() []api.EndpointUse {
	h.mu.Lock()
	defer h.mu.Unlock()
	use := map[string]*api.EndpointUse{}
	get := func(host string) *api.EndpointUse {
		if use[host] == nil {
			use[host] = &api.EndpointUse{Host: host}
		}
		return use[host]
	}
	for _, host := range h.manifests {
		get(host).Manifests++
	}
	for d, host := range h.blobs {
		e := get(host)
		e.Blobs++
		e.Bytes += h.bytes[d]
	}
	var out []api.EndpointUse
	for _, host := range h.order {
		if e := use[host]; e != nil {
			out = append(out, *e)
		}
	}
	return out
}
