package pull

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/docker/distribution/registry/api/errcode"
	v2 "github.com/docker/distribution/registry/api/v2"
	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/wire"
	"github.com/pullhelper/pullhelper/registry"
	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/signature"
	"go.podman.io/image/v5/types"
)

// manifestError makes containers/image fetch a manifest from a loopback
// server that answers with status and body, and returns the error the
// library really produces.
func manifestError(t *testing.T, status int, body string) error {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	named, err := reference.ParseNormalizedNamed(strings.TrimPrefix(srv.URL, "http://") + "/x:latest")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := docker.NewReference(named)
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "registries.conf")
	if err := os.WriteFile(conf, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	sys := &types.SystemContext{DockerInsecureSkipTLSVerify: types.OptionalBoolTrue, DockerCertPath: "/nonexistent",
		SystemRegistriesConfPath: conf, SystemRegistriesConfDirPath: "/nonexistent", DockerAuthConfig: &types.DockerAuthConfig{}}
	src, err := ref.NewImageSource(context.Background(), sys)
	if err != nil {
		return err
	}
	defer src.Close()
	_, _, err = src.GetManifest(context.Background(), nil)
	if err == nil {
		t.Fatalf("status %d %q: no error", status, body)
	}
	return err
}

func TestClassifyRegistryBodies(t *testing.T) {
	p := &Request{Registry: "r", Reference: "r/x:latest"}
	huge := `{"schemaVersion":2,"pad":"` + strings.Repeat("a", 5<<20) + `"}`
	for _, tc := range []struct {
		status int
		body   string
		want   failure.Code
	}{
		{401, `UNAUTHORIZED`, failure.Unauthorized},
		{401, `{"errors":[{"code":"UNAUTHORIZED"}]}`, failure.Unauthorized},
		{403, `DENIED`, failure.Unauthorized},
		{404, `MANIFEST_UNKNOWN`, failure.NotFound},
		{404, `{"errors":[{"code":"MANIFEST_UNKNOWN"}]}`, failure.NotFound},
		{404, `NAME_UNKNOWN`, failure.NotFound},
		{400, `NAME_UNKNOWN`, failure.NotFound},
		{400, `BLOB_UNKNOWN`, failure.NotFound},
		{404, `{"errors":[{"code":"NAME_UNKNOWN"}]}`, failure.NotFound},
		{404, `not json at all`, failure.NotFound},
		{200, huge, failure.Verification},
		{400, `{"errors":[{"code":"UNAVAILABLE","message":"` + strings.Repeat("x", 1<<20) + `"}]}`, failure.Network},
		{400, `{"errors":[{"code":"SOMETHING_ELSE"}]}`, failure.Network},
	} {
		err := manifestError(t, tc.status, tc.body)
		short := tc.body
		if len(short) > 40 {
			short = short[:40]
		}
		if got := failure.CodeOf(p.classify(err)); got != tc.want {
			t.Errorf("%d %q: %v classified %s, want %s", tc.status, short, err, got, tc.want)
		}
	}
}

func TestClassifyLibraryErrors(t *testing.T) {
	p := &Request{Registry: "r", Reference: "r/x:latest"}
	for _, tc := range []struct {
		err  error
		want failure.Code
	}{
		{docker.ErrUnauthorizedForCredentials{Err: errcode.ErrorCodeUnauthorized.WithMessage("")}, failure.Unauthorized},
		{fmt.Errorf("reading manifest: %w", errcode.ErrorCodeUnauthorized.WithDetail(nil)), failure.Unauthorized},
		{fmt.Errorf("reading manifest: %w", errcode.Errors{v2.ErrorCodeManifestUnknown.WithMessage("")}), failure.NotFound},
		{fmt.Errorf("reading blob: %w", v2.ErrorCodeBlobUnknown.WithMessage("")), failure.NotFound},
		{fmt.Errorf("x: %w", v2.ErrorCodeNameUnknown.WithMessage("")), failure.NotFound},
		{fmt.Errorf("parsing: %w", digest.ErrDigestInvalidFormat), failure.Verification},
		{fmt.Errorf("parsing: %w", digest.ErrDigestUnsupported), failure.Verification},
		{fmt.Errorf("reading manifest: %w", errors.New("exceeded maximum allowed size of 4194304 bytes")), failure.Verification},
		{fmt.Errorf("copying: %w", verification(errBlobTooLarge, "blob x is larger")), failure.Verification},
		{fmt.Errorf("pinging: %w", &failure.Error{Code: failure.TLS, Message: "refused", Err: errRefusedRequest}), failure.TLS},
		// A registry's answer is never exit 1: a code of the table
		// decides whatever the status, else the status.
		{&registry.StatusError{Host: "r", StatusCode: 400, Code: "UNAVAILABLE"}, failure.Network},
		{&registry.StatusError{Host: "r", StatusCode: 400, Code: "TOOMANYREQUESTS"}, failure.Network},
		{&registry.StatusError{Host: "r", StatusCode: 400, Code: "MANIFEST_INVALID"}, failure.Network},
		{&registry.StatusError{Host: "r", StatusCode: 405}, failure.Network},
		{&registry.StatusError{Host: "r", StatusCode: 400, Code: "DENIED"}, failure.Unauthorized},
		// A signature the policy's key does not verify: the policy's
		// rejection (exit 8), as a missing one is.
		{fmt.Errorf("copying: %w", signature.InvalidSignatureError{}), failure.Verification},
		{fmt.Errorf("copying: %w", signature.PolicyRequirementError("rejected")), failure.Verification},
	} {
		got := p.classify(tc.err)
		if failure.CodeOf(got) != tc.want {
			t.Errorf("%v: classified %s, want %s", tc.err, failure.CodeOf(got), tc.want)
		}
		if strings.Contains(got.Error(), "\n") {
			t.Errorf("%v: message has a newline", tc.err)
		}
	}
}

// A plain-http answer to https where plain http is not allowed is exit 4
// (tls), naming the ways to allow it: containers/image's (insecure, whose
// detectPropertiesHelper then falls back to http) for a registries.conf
// endpoint, containerd's (an http:// host) for a containerd one.
func TestClassifyPlainHTTPAnswer(t *testing.T) {
	err := &registry.HostError{Host: "registry.local:80", Op: "fetching the manifest latest",
		Err: &url.Error{Op: "Get", URL: "https://registry.local:80/v2/x/manifests/latest", Err: http.ErrSchemeMismatch}}
	p := &Request{Registry: "registry.local:80", Reference: "registry.local:80/x:latest",
		Endpoints: []wire.Endpoint{{Host: "registry.local:80", Source: wire.EndpointRegistry}}}
	got := p.classify(err)
	if failure.CodeOf(got) != failure.TLS {
		t.Fatalf("classified %s, want tls", failure.CodeOf(got))
	}
	for _, want := range []string{"insecure = true", "trust.insecure_registries", "--insecure-registry registry.local:80", "--tls-verify=false"} {
		if !strings.Contains(got.Error(), want) {
			t.Errorf("message lacks %q: %v", want, got)
		}
	}
	p.Endpoints[0].Source = wire.EndpointContainerdServer
	if got := p.classify(err).Error(); !strings.Contains(got, `server = "http://registry.local:80"`) || strings.Contains(got, "insecure = true") {
		t.Errorf("containerd endpoint: %v", got)
	}
}

// The CRI's reasons, as CRI-O's PullImage names them: a connection refused
// (however deep in the registry client's errors) is RegistryUnavailable, a
// signature policy's rejection SignatureValidationFailed; anything else,
// a refused credential or a timeout included, has none.
func TestClassifyCRIReasons(t *testing.T) {
	p := &Request{Registry: "r", Reference: "r/x:latest"}
	refused := &registry.HostError{Host: "r:1", Op: "fetching the manifest latest",
		Err: &url.Error{Op: "Get", URL: "https://r:1/v2/x/manifests/latest", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}}
	for _, tc := range []struct {
		err  error
		want failure.CRIReason
	}{
		{fmt.Errorf("initializing source: %w", refused), failure.ReasonRegistryUnavailable},
		{fmt.Errorf("copying: %w", signature.PolicyRequirementError("Source image rejected: A signature was required, but no signature exists")), failure.ReasonSignatureValidationFailed},
		{&registry.StatusError{Host: "r", StatusCode: 401, Code: "UNAUTHORIZED"}, ""},
		{&url.Error{Op: "Get", URL: "https://r/v2/", Err: os.ErrDeadlineExceeded}, ""},
	} {
		if got := failure.CRIReasonOf(p.classify(tc.err)); got != tc.want {
			t.Errorf("%v: reason %q, want %q", tc.err, got, tc.want)
		}
	}
}

// A registry that closes the connection without an answer, or answers what
// is no HTTP response, is a network failure (exit 6), not a bug (exit 1):
// the errors are net/http's own, from a listener on loopback.
func TestClassifyBrokenAnswers(t *testing.T) {
	p := &Request{Registry: "r", Reference: "r/x:latest"}
	for _, answer := range []string{"", "garbage\r\n\r\n", "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("y", 2<<20) + "\r\n\r\n"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4096)
			_, _ = c.Read(buf) // the request line
			_, _ = io.WriteString(c, answer)
			c.Close()
		}()
		client := &http.Client{Transport: &http.Transport{MaxResponseHeaderBytes: 1 << 20}}
		_, err = client.Get("http://" + ln.Addr().String() + "/v2/x/manifests/1")
		ln.Close()
		<-done
		if err == nil {
			t.Fatalf("answer %.20q: no error", answer)
		}
		if got := failure.CodeOf(p.classify(fmt.Errorf("fetching the manifest: %w", err))); got != failure.Network {
			t.Errorf("answer %.20q (%v): classified %s, want network", answer, err, got)
		}
	}
}
