package cri

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/distribution/reference"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/pull"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The runtimes the service stands in front of, by the runtime_name their
// CRI answers Version with: containerd's criService.Version
// ("containerd"), CRI-O's server.Version (containerName, "cri-o").
const (
	RuntimeContainerd = "containerd"
	RuntimeCRIO       = "cri-o"
)

// Runtime is the runtime behind the service: where a pull goes and what
// PullImage answers.
type Runtime struct {
	// Name is RuntimeContainerd ("" too) or RuntimeCRIO.
	Name string
	// Version is the runtime's runtime_version ("" when it was not
	// asked), From what chose it (logged).
	Version, From string
	// Store is, for CRI-O, the store specifier of the containers-storage:
	// DEST ([DRIVER@GRAPHROOT+RUNROOT:OPTIONS], from CRI-O's
	// configuration), "" for storage.conf's store.
	Store string
	// Snapshotters are, for containerd, the snapshotters of the runtime
	// handlers that name their own in its config
	// (dest.ContainerdDaemon.RuntimeSnapshotters; handlerSnapshotter).
	Snapshotters map[string]string
	// SignaturePolicy and SignaturePolicyDir are, for CRI-O, its
	// configuration's [crio.image] signature_policy (the node's, "" for
	// none) and signature_policy_dir (namespacePolicy).
	SignaturePolicy, SignaturePolicyDir string
	// GlobalAuthFile is, for CRI-O, its configuration's [crio.image]
	// global_auth_file: the node's only credential file when set
	// (CRI-O's SystemContext.AuthFilePath), "" for the default search.
	GlobalAuthFile string
}

// namespacePolicy is, for CRI-O, the signature policy of the pod's
// namespace (its pullImage: SignaturePolicyDir/NAMESPACE.json when the pod
// names a namespace and that file exists; it replaces the node's policy),
// "" when there is none. A namespace that is not a Kubernetes namespace
// name (a DNS-1123 label) is a usage error (InvalidArgument), never joined
// into a path; a stat error other than a missing file fails the pull, as
// CRI-O's does.
func (r Runtime) namespacePolicy(sc *runtimeapi.PodSandboxConfig) (string, error) {
	ns := sc.GetMetadata().GetNamespace()
	if !r.crio() || ns == "" || r.SignaturePolicyDir == "" {
		return "", nil
	}
	if !dnsLabel(ns) {
		return "", failure.New(failure.Usage, "sandbox_config metadata.namespace %q is not a namespace name (a DNS-1123 label): it names the signature policy %s/NAMESPACE.json", clip(ns, maxLogNamespace), r.SignaturePolicyDir)
	}
	p := filepath.Join(r.SignaturePolicyDir, ns+".json")
	switch _, err := os.Stat(p); {
	case err == nil:
		return p, nil
	case errors.Is(err, fs.ErrNotExist):
		return "", nil
	default:
		return "", failure.New(failure.Internal, "the signature policy of namespace %s, %s: %s", ns, p, failure.Reason(err))
	}
}

// runtimeHandlerAnnotation is the sandbox annotation containerd's CRI
// reads the runtime handler from when the request does not name it
// (annotations.RuntimeHandler, deprecated there).
const runtimeHandlerAnnotation = "io.containerd.cri.runtime-handler"

// handlerSnapshotter is, for containerd, the snapshotter the request's
// runtime handler names, as containerd's snapshotterFromPodSandboxConfig
// picks it: only for a request with a sandbox_config, the handler is
// ImageSpec.runtime_handler, else the sandbox's runtimeHandlerAnnotation;
// "" (the CRI's own snapshotter) when it names none.
func (r Runtime) handlerSnapshotter(req *runtimeapi.PullImageRequest) string {
	if r.crio() || req.GetSandboxConfig() == nil || len(r.Snapshotters) == 0 {
		return ""
	}
	h := req.GetImage().GetRuntimeHandler()
	if h == "" {
		h = req.GetSandboxConfig().GetAnnotations()[runtimeHandlerAnnotation]
	}
	return r.Snapshotters[h]
}

// dnsLabel: s is a DNS-1123 label, what a Kubernetes namespace name is
// (lower-case letters, digits and '-', starting and ending with a letter
// or digit, at most 63).
func dnsLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range []byte(s) {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// ParseRuntime checks a --runtime value: auto, containerd or cri-o.
func ParseRuntime(v string) (string, error) {
	switch v {
	case "auto", RuntimeContainerd, RuntimeCRIO:
		return v, nil
	}
	return "", failure.New(failure.Usage, "--runtime %q: want auto, containerd or cri-o", pull.Printable(v))
}

// maxVersionField bounds each string of the runtime's Version answer that
// is used or logged.
const maxVersionField = 128

// Detect asks the runtime's CRI at socket for its Version
// (runtime.v1.RuntimeService/Version; waiting up to timeout for the socket
// to answer) and returns the runtime it names: containerd or cri-o, with
// its runtime_version. Anything else, or no answer, is exit 2 naming
// --runtime.
func Detect(ctx context.Context, socket string, timeout time.Duration, dial DialFunc) (Runtime, error) {
	// The last refusal of dial (a socket not root's) is the reason when
	// no answer comes: gRPC only retries it.
	var mu sync.Mutex
	var dialErr error
	if dial != nil {
		inner := dial
		dial = func(ctx context.Context, path string) (net.Conn, error) {
			c, err := inner(ctx, path)
			mu.Lock()
			dialErr = err
			mu.Unlock()
			return c, err
		}
	}
	conn, err := runtimeConn(socket, dial)
	if err != nil {
		return Runtime{}, failure.New(failure.Usage, "--runtime-endpoint unix://%s: %v", socket, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := runtimeapi.NewRuntimeServiceClient(conn).Version(ctx, &runtimeapi.VersionRequest{Version: "v1"}, grpc.WaitForReady(true))
	if err != nil {
		msg := err.Error()
		if ctx.Err() != nil {
			msg = "no answer within " + timeout.String()
			mu.Lock()
			if dialErr != nil {
				msg += " (" + dialErr.Error() + ")"
			}
			mu.Unlock()
		}
		return Runtime{}, failure.New(failure.Usage, "--runtime auto: asking the runtime at unix://%s for its Version (runtime.v1.RuntimeService/Version): %s; start the runtime first, or name it with --runtime containerd or --runtime cri-o",
			socket, pull.Printable(limit(msg, 4*maxVersionField)))
	}
	name, version := limit(resp.GetRuntimeName(), maxVersionField), limit(resp.GetRuntimeVersion(), maxVersionField)
	switch name {
	case RuntimeContainerd, RuntimeCRIO:
		return Runtime{Name: name, Version: version, From: "Version"}, nil
	}
	return Runtime{}, failure.New(failure.Usage, "--runtime auto: the runtime at unix://%s is %q (its Version's runtime_name), neither containerd nor cri-o; name the store's runtime with --runtime containerd or --runtime cri-o",
		socket, pull.Printable(name))
}

// limit cuts s to n bytes.
func limit(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// crio reports whether the runtime is CRI-O.
func (r Runtime) crio() bool { return r.Name == RuntimeCRIO }

// name is the runtime's name for logs and messages.
func (r Runtime) name() string {
	if r.Name == "" {
		return RuntimeContainerd
	}
	return r.Name
}

// Dest is the DEST of a pull of the qualified image ref into the
// runtime's store: containerd:REF (the runtime's socket, namespace
// k8s.io), or for CRI-O containers-storage:[STORE]REF.
func (r Runtime) Dest(ref string) string {
	if r.crio() {
		return "containers-storage:" + r.Store + ref
	}
	return "containerd:" + ref
}

// normalize is the request's image as the runtime's own CRI reads it, and
// whether it is a short name still to be resolved.
//   - containerd: reference.ParseDockerRef (criService.PullImage): a name
//     without a registry host is docker.io's, no tag means latest.
//   - CRI-O: a qualified name is the name (no tag: latest); a short name
//     is resolved through registries.conf (CRI-O's
//     CandidatesForPotentiallyShortImageName: shortnames.Resolve, which
//     CRI-O runs in enforcing mode: an alias or exactly one
//     unqualified-search registry), by the plan hook (short is true).
//     A digest names the image: REPO@DIGEST, the name CRI-O stores a
//     pull by digest under (a tag beside it is dropped).
func (r Runtime) normalize(raw string) (image string, short bool, err error) {
	if !r.crio() {
		named, err := reference.ParseDockerRef(raw)
		if err != nil {
			return "", false, failure.New(failure.Usage, "image %q: %v", clip(raw, maxLogImage), err)
		}
		return named.String(), false, nil
	}
	named, err := reference.ParseNormalizedNamed(raw)
	if err != nil {
		return "", false, failure.New(failure.Usage, "image %q: %v", clip(raw, maxLogImage), err)
	}
	first, _, hasSlash := strings.Cut(raw, "/")
	if !hasSlash || !(strings.ContainsAny(first, ".:") || first == "localhost") {
		return raw, true, nil
	}
	if d, ok := named.(reference.Digested); ok {
		// A pull by digest: CRI-O stores the image as REPO@DIGEST
		// (containers-storage:[STORE]REPO@DIGEST); a tag beside the
		// digest is dropped, the digest names the image.
		byDigest, err := reference.WithDigest(reference.TrimNamed(named), d.Digest())
		if err != nil {
			return "", false, failure.New(failure.Usage, "image %q: %v", clip(raw, maxLogImage), err)
		}
		return byDigest.String(), false, nil
	}
	return reference.TagNameOnly(named).String(), false, nil
}

// imageRef is PullImage's image_ref for the pulled image's ID
// (sha256:HEX, as the containerd and containers-storage imports report
// it): containerd's CRI answers the ID as it is (criService.PullImage),
// CRI-O the storage ID without "sha256:" (server.resolveImageRefToID:
// StorageImageID.IDStringForOutOfProcessConsumptionOnly).
func (r Runtime) imageRef(id string) string {
	if r.crio() {
		return strings.TrimPrefix(id, "sha256:")
	}
	return id
}

// authConfig is the request's AuthConfig as the runtime's CRI reads it,
// for credentialFor (which has containerd's precedence: username, then
// identity_token, then auth). CRI-O's PullImage (server/image_pull.go)
// reads username and password, replaced by auth when auth is set, decoded
// by its decodeDockerAuth (base64 that does not decode is an error; a
// decoded value without a colon is no credential; the password's NULs
// trimmed), and nothing else: identity_token and registry_token are
// ignored (crioIgnored says so in the log line). A credential without a
// username is none (the node's own sources then apply, as containers/image
// reads its auth files without a DockerAuthConfig). So for CRI-O the copy
// holds a username and password, or nothing.
func (r Runtime) authConfig(a *runtimeapi.AuthConfig) (*runtimeapi.AuthConfig, error) {
	if !r.crio() || a == nil {
		return a, nil
	}
	out := &runtimeapi.AuthConfig{ServerAddress: a.GetServerAddress()}
	user, password := a.GetUsername(), a.GetPassword()
	if a.GetAuth() != "" {
		decoded, err := base64.StdEncoding.DecodeString(a.GetAuth())
		if err != nil {
			return nil, fmt.Errorf("the request's auth config: auth is not base64 (%v)", err)
		}
		var ok bool
		if user, password, ok = strings.Cut(string(decoded), ":"); !ok {
			user, password = "", ""
		}
		password = strings.Trim(password, "\x00")
	}
	if user != "" {
		out.Username, out.Password = user, password
	}
	return out, nil
}

// crioIgnored is cred (credentialFor of authConfig's copy) with Ignored
// naming the request's identity_token and registry_token, which CRI-O's
// PullImage does not read (server/image_pull.go: only username, password
// and auth become the SystemContext's DockerAuthConfig); a request with
// nothing else gets an anonymous Credential so that the log line says so.
// Their values are kept only to be redacted.
func crioIgnored(cred *Credential, a *runtimeapi.AuthConfig, image string) *Credential {
	var names []string
	if a.GetIdentityToken() != "" {
		names = append(names, "identity_token")
	}
	if a.GetRegistryToken() != "" {
		names = append(names, "registry_token")
	}
	if len(names) == 0 {
		return cred
	}
	if cred == nil {
		cred = &Credential{Identity: "anonymous"}
		cred.Host, _ = credentialHost(a.GetServerAddress(), image)
	}
	cred.Ignored = strings.Join(names, ", ") + " (not read by CRI-O's PullImage)"
	cred.secrets = append(cred.secrets, a.GetIdentityToken(), a.GetRegistryToken())
	return cred
}
