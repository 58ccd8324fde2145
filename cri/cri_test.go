package cri

import (
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/auth"
	"github.com/pullhelper/pullhelper/internal/failure"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The failure code → gRPC code table, and the caller's own end
// (cancelled, deadline) winning over the pull's error.
func TestStatusOf(t *testing.T) {
	for _, tc := range []struct {
		err    error
		ctxErr error
		want   codes.Code
		prefix string
	}{
		{failure.New(failure.Unauthorized, "reg: 401"), nil, codes.Unauthenticated, "pullhelper: unauthorized: reg: 401"},
		{failure.New(failure.NotFound, "reg/x: manifest unknown"), nil, codes.NotFound, "pullhelper: not_found: "},
		{failure.New(failure.Network, "reg: connection refused"), nil, codes.Unavailable, "pullhelper: network: "},
		{failure.New(failure.TLS, "reg: x509"), nil, codes.Unavailable, "pullhelper: tls: "},
		{failure.New(failure.Usage, "bad image"), nil, codes.InvalidArgument, "pullhelper: usage: "},
		{failure.New(failure.Destination, "import"), nil, codes.Internal, "pullhelper: destination: "},
		{failure.New(failure.Isolation, "cgroup"), nil, codes.Internal, "pullhelper: isolation: "},
		{errors.New("plain"), nil, codes.Internal, "pullhelper: internal: plain"},
		{context.Canceled, context.Canceled, codes.Canceled, "pullhelper: interrupted: the request was cancelled"},
		{failure.New(failure.Network, "x"), context.DeadlineExceeded, codes.DeadlineExceeded, "pullhelper: interrupted: the request's deadline"},
		{failure.New(failure.Network, "line one\nline two"), nil, codes.Unavailable, "pullhelper: network: line one line two"},
	} {
		st := statusOf(tc.err, tc.ctxErr, nil)
		if st.Code() != tc.want || !strings.HasPrefix(st.Message(), tc.prefix) {
			t.Errorf("statusOf(%q, %v) = %s %q, want %s %q…", tc.err, tc.ctxErr, st.Code(), st.Message(), tc.want, tc.prefix)
		}
	}
}

// In front of CRI-O a pull that failed for one of the CRI's named reasons
// fails as CRI-O's PullImage does: code Unknown, the message prefixed with
// the reason (what the kubelet's evalCRIPullErr looks for once its client
// has stripped the Unknown status); in front of containerd, and for a
// cancelled or timed-out request, the status is unchanged.
func TestWithReason(t *testing.T) {
	refused := &failure.Error{Code: failure.Network, Message: "reg: dial tcp: connection refused", Reason: failure.ReasonRegistryUnavailable}
	rejected := failure.Wrap(failure.Verification, &failure.Error{Code: failure.Verification, Message: "policy rejects", Reason: failure.ReasonSignatureValidationFailed}, "")
	crio := Runtime{Name: RuntimeCRIO}
	for _, tc := range []struct {
		rt     Runtime
		err    error
		ctxErr error
		want   codes.Code
		prefix string
	}{
		{crio, refused, nil, codes.Unknown, "RegistryUnavailable: pullhelper: network: reg: dial tcp: connection refused"},
		{crio, rejected, nil, codes.Unknown, "SignatureValidationFailed: pullhelper: verification: policy rejects"},
		{crio, failure.New(failure.Network, "reg: 503"), nil, codes.Unavailable, "pullhelper: network: "},
		{crio, refused, context.DeadlineExceeded, codes.DeadlineExceeded, "pullhelper: interrupted: "},
		{Runtime{}, refused, nil, codes.Unavailable, "pullhelper: network: "},
		{Runtime{}, rejected, nil, codes.Internal, "pullhelper: verification: "},
	} {
		st := tc.rt.withReason(statusOf(tc.err, tc.ctxErr, nil), tc.err)
		if st.Code() != tc.want || !strings.HasPrefix(st.Message(), tc.prefix) {
			t.Errorf("%s: %v: %s %q, want %s %q…", tc.rt.name(), tc.err, st.Code(), st.Message(), tc.want, tc.prefix)
		}
	}
}

// containerd's ParseAuth (internal/cri/server/images, via
// auth.ParseContainerdAuth): username wins, then identity_token, then
// auth; server_address names the one registry host the credential goes
// to; registry_token is ignored.
func TestCredentialFor(t *testing.T) {
	const img = "reg.example:5000/app:v1"
	b64 := base64.StdEncoding.EncodeToString([]byte("bob:s3cr3t-b"))
	for _, tc := range []struct {
		name    string
		a       *runtimeapi.AuthConfig
		want    *auth.Request // nil: no credential
		ignored bool
	}{
		{"nil", nil, nil, false},
		{"empty", &runtimeapi.AuthConfig{}, nil, false},
		{"server only", &runtimeapi.AuthConfig{ServerAddress: "reg.example:5000"}, nil, false},
		{"user", &runtimeapi.AuthConfig{Username: "alice", Password: "s3cr3t-a"}, &auth.Request{Host: "reg.example:5000", Username: "alice", Password: "s3cr3t-a"}, false},
		{"user wins over auth", &runtimeapi.AuthConfig{Username: "alice", Password: "s3cr3t-a", Auth: b64}, &auth.Request{Host: "reg.example:5000", Username: "alice", Password: "s3cr3t-a"}, false},
		{"auth", &runtimeapi.AuthConfig{Auth: b64}, &auth.Request{Host: "reg.example:5000", Username: "bob", Password: "s3cr3t-b"}, false},
		// The review's gap: the identity token was written as an auth.json
		// entry without "auth", which decodeDockerAuth skips (anonymous).
		{"identity token", &runtimeapi.AuthConfig{IdentityToken: "tok-s3cr3t"}, &auth.Request{Host: "reg.example:5000", IdentityToken: "tok-s3cr3t"}, false},
		{"server address URL", &runtimeapi.AuthConfig{Username: "u", Password: "p4ss", ServerAddress: "https://Other.example/v2/"}, &auth.Request{Host: "other.example", Username: "u", Password: "p4ss"}, false},
		{"server address host:port", &runtimeapi.AuthConfig{Username: "u", Password: "p4ss", ServerAddress: "127.0.0.1:5000"}, &auth.Request{Host: "127.0.0.1:5000", Username: "u", Password: "p4ss"}, false},
		{"server address IPv6", &runtimeapi.AuthConfig{Username: "u", Password: "p4ss", ServerAddress: "http://[::1]:5000"}, &auth.Request{Host: "[::1]:5000", Username: "u", Password: "p4ss"}, false},
		{"docker hub", &runtimeapi.AuthConfig{Username: "u", Password: "p4ss", ServerAddress: "https://index.docker.io/v1/"}, &auth.Request{Host: "docker.io", Username: "u", Password: "p4ss"}, false},
		{"registry token only", &runtimeapi.AuthConfig{RegistryToken: "rt-s3cr3t"}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := credentialFor(tc.a, img)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == nil {
				if c != nil && c.Request != nil {
					t.Fatalf("want no credential, got %+v", c.Request)
				}
				if tc.ignored && (c == nil || c.Ignored == "") {
					t.Fatalf("want registry_token reported as ignored, got %+v", c)
				}
				return
			}
			if c == nil || c.Request == nil || *c.Request != *tc.want {
				t.Fatalf("got %+v, want %+v", c, tc.want)
			}
			if c.Host != tc.want.Host || c.Identity == "" || strings.Contains(c.Identity, "s3cr3t") {
				t.Fatalf("host %q identity %q", c.Host, c.Identity)
			}
		})
	}
	// Different secrets, different flights; the same, the same.
	a1, _ := credentialFor(&runtimeapi.AuthConfig{Username: "u", Password: "one"}, img)
	a2, _ := credentialFor(&runtimeapi.AuthConfig{Username: "u", Password: "two"}, img)
	a3, _ := credentialFor(&runtimeapi.AuthConfig{Auth: base64.StdEncoding.EncodeToString([]byte("u:one"))}, img)
	if a1.Identity == a2.Identity || a1.Identity != a3.Identity {
		t.Fatalf("identities %s %s %s", a1.Identity, a2.Identity, a3.Identity)
	}
}

// server_address must name one registry host: a pattern, user info, a
// query, another scheme or a path without a scheme would widen or
// misdirect where the credential goes, and is refused (InvalidArgument).
func TestCredentialForServerAddressRefused(t *testing.T) {
	for _, sa := range []string{"*.*", "*.example.com", "reg.*", "https://*.example.com", "reg.example/ns", "u:p@reg.example",
		"https://u@reg.example", "https://reg.example?x=1", "https://reg.example#f", "ftp://reg.example", "reg.example:port",
		"reg.example:123456", "reg..example", "re g.example", "https://[zz]:5000", "[::1", "https://"} {
		_, err := credentialFor(&runtimeapi.AuthConfig{Username: "u", Password: "s3cr3t-p", ServerAddress: sa}, "reg.example/app")
		if err == nil {
			t.Errorf("server_address %q: accepted", sa)
			continue
		}
		if strings.Contains(err.Error(), "s3cr3t") || !strings.Contains(err.Error(), "server_address") {
			t.Errorf("server_address %q: %v", sa, err)
		}
	}
}

// No secret of the request in any error: a bad auth field, a bad
// server_address, and a pull error quoting a secret (redacted).
func TestNoSecretInErrors(t *testing.T) {
	bad := []*runtimeapi.AuthConfig{
		{Auth: "!!!s3cr3t-not-base64"},
		{Auth: base64.StdEncoding.EncodeToString([]byte("no-colon-s3cr3t"))},
		{Username: "u", Password: "s3cr3t-p", ServerAddress: "https://[bad"},
	}
	for _, a := range bad {
		_, err := credentialFor(a, "reg.example/app")
		if err == nil {
			t.Fatalf("%v: want an error", a.GetServerAddress())
		}
		if strings.Contains(err.Error(), "s3cr3t") {
			t.Fatalf("secret in %q", err)
		}
	}
	c, err := credentialFor(&runtimeapi.AuthConfig{Username: "u", Password: "s3cr3t-pw", IdentityToken: "s3cr3t-tok", RegistryToken: "s3cr3t-rt"}, "reg.example/app")
	if err != nil {
		t.Fatal(err)
	}
	st := statusOf(failure.New(failure.Unauthorized, "echoed s3cr3t-pw, s3cr3t-tok and s3cr3t-rt"), nil, c)
	if strings.Contains(st.Message(), "s3cr3t") {
		t.Fatalf("secret in %q", st.Message())
	}
}

func TestSocketPath(t *testing.T) {
	for v, ok := range map[string]bool{"unix:///run/x.sock": true, "/run/x.sock": false, "unix://run/x.sock": false,
		"unix:///run/../x.sock": false, "tcp://127.0.0.1:1": false, "": false} {
		_, err := SocketPath("--listen", v)
		if (err == nil) != ok {
			t.Errorf("SocketPath(%q): %v", v, err)
		}
		if err != nil && failure.CodeOf(err) != failure.Usage {
			t.Errorf("SocketPath(%q): code %s", v, failure.CodeOf(err))
		}
	}
}

// join: callers of one key share one run; the run's context ends only
// when its last caller has gone (singleflight semantics, with
// cancellation counted by waiters).
func TestJoin(t *testing.T) {
	s := &Server{base: context.Background(), flights: map[string]*flight{}, log: discardLog()}
	started := make(chan context.Context, 4)
	release := make(chan struct{})
	runs := 0
	do := func(ctx context.Context) (*api.Result, error) {
		runs++
		started <- ctx
		select {
		case <-release:
			return &api.Result{ImageID: "sha256:x"}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	type answer struct {
		res    *api.Result
		shared bool
		err    error
	}
	call := func(ctx context.Context) chan answer {
		ch := make(chan answer, 1)
		go func() { r, sh, err := s.join(ctx, "k", do); ch <- answer{r, sh, err} }()
		return ch
	}
	// Two callers, one run; the first caller leaving does not stop it.
	ctx1, cancel1 := context.WithCancel(context.Background())
	a1 := call(ctx1)
	runCtx := <-started
	a2 := call(context.Background())
	for {
		s.mu.Lock()
		n := s.flights["k"].waiters
		s.mu.Unlock()
		if n == 2 {
			break
		}
	}
	cancel1()
	if got := <-a1; !errors.Is(got.err, context.Canceled) {
		t.Fatalf("first caller: %+v", got)
	}
	if runCtx.Err() != nil {
		t.Fatal("the run was cancelled while a caller still waits")
	}
	close(release)
	if got := <-a2; got.err != nil || !got.shared || got.res.ImageID != "sha256:x" {
		t.Fatalf("second caller: %+v", got)
	}
	s.running.Wait()
	if runs != 1 {
		t.Fatalf("%d runs, want 1", runs)
	}
	// The only caller leaving cancels the run.
	release = make(chan struct{})
	ctx3, cancel3 := context.WithCancel(context.Background())
	a3 := call(ctx3)
	runCtx = <-started
	cancel3()
	<-a3
	<-runCtx.Done()
	s.running.Wait()
	if len(s.flights) != 0 {
		t.Fatalf("flights left: %v", s.flights)
	}
}

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }
