package pull

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"syscall"

	"github.com/docker/distribution/registry/api/errcode"
	v2 "github.com/docker/distribution/registry/api/v2"
	"github.com/opencontainers/go-digest"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/registry"
	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/signature"
)

// classify gives an error from containers/image its failure.Code and a
// message that tells the user what to fix. Already classified errors pass
// through unchanged.
func (p *Request) classify(err error) error {
	if err == nil {
		return nil
	}
	var fe *failure.Error
	if errors.As(err, &fe) {
		if err == error(fe) {
			return err
		}
		// Raised inside containers/image (the guarded source, the request
		// guard) and wrapped there: keep the code, one line of message.
		return &failure.Error{Code: fe.Code, Message: rootCause(err), Err: err, Reason: reasonOf(err)}
	}
	code := codeOf(err)
	var errs errcode.Errors
	if code == failure.Internal && errors.As(err, &errs) && len(errs) > 0 {
		// A list of registry errors: the first is the primary one (as
		// containers/image's registryHTTPResponseToError chooses).
		code = codeOf(errs[0])
	}
	msg := err.Error()
	switch {
	case code == failure.TLS && errors.Is(err, http.ErrSchemeMismatch):
		msg = p.plainHTTPHint(err)
	case code == failure.TLS:
		where := "no per-host certificate directory exists; searched " + strings.Join(p.Trust.Searched, ", ")
		if p.Trust.CertDir != "" {
			where = "CA files (*.crt) read from " + p.Trust.CertDir
			if len(p.Trust.Searched) > 1 {
				where += "; searched " + strings.Join(p.Trust.Searched, ", ")
			}
		}
		msg = fmt.Sprintf("TLS with %s failed: %v (%s; add the registry's CA as a .crt file there or pass --cert-dir)", p.Registry, rootCause(err), where)
	case code == failure.NotFound:
		msg = fmt.Sprintf("%s not found on %s: %v", p.Reference, p.Registry, rootCause(err))
	case code == failure.Destination:
		// ENOSPC, EDQUOT, EROFS while the copy writes into staging (on
		// DEST's filesystem): say so first, in the user's terms.
		what := "no space left on DEST's filesystem"
		switch {
		case errors.Is(err, syscall.EDQUOT):
			what = "the disk quota on DEST's filesystem is exhausted"
		case errors.Is(err, syscall.EROFS):
			what = "DEST's filesystem is read-only"
		}
		msg = fmt.Sprintf("%s while writing %s (%s); free space there or choose another DEST", what, p.Reference, strings.TrimSpace(rootCause(err)))
	}
	return &failure.Error{Code: code, Message: msg, Err: err, Reason: reasonOf(err)}
}

// reasonOf is the CRI's name for err as CRI-O's PullImage gives it: a
// connection refused is RegistryUnavailable (errors.Is ECONNREFUSED), a
// signature policy's rejection SignatureValidationFailed
// (storage.WrapSignatureCRIErrorIfNeeded: a PolicyRequirementError or an
// InvalidSignatureError).
func reasonOf(err error) failure.CRIReason {
	var polErr signature.PolicyRequirementError
	var sigErr signature.InvalidSignatureError
	switch {
	case errors.As(err, &polErr), errors.As(err, &sigErr):
		return failure.ReasonSignatureValidationFailed
	case errors.Is(err, syscall.ECONNREFUSED):
		return failure.ReasonRegistryUnavailable
	}
	return failure.CRIReasonOf(err)
}

// plainHTTPHint is the message for a server that answers plain HTTP where
// HTTPS was asked and plain HTTP is not allowed: how to allow it, by the
// rules of whoever decides the endpoint. containers/image (registries.conf
// endpoints) falls back to plain HTTP for an insecure registry
// (detectPropertiesHelper); containerd only for a host named http:// in
// its configuration (or a loopback one), whatever skip_verify says.
func (p *Request) plainHTTPHint(err error) string {
	host := p.Registry
	var he *registry.HostError
	if errors.As(err, &he) {
		host = he.Host
	}
	for _, e := range p.Endpoints {
		if e.Host == host && strings.HasPrefix(e.Source, "containerd") {
			return fmt.Sprintf("%s answers plain HTTP where HTTPS was asked (%s); with containerd's configuration a host is reached over plain HTTP only when it is named with http:// (hosts.toml server = \"http://%s\" or [host.\"http://%s\"], or an http:// mirror endpoint); skip_verify, trust.insecure_registries and --tls-verify=false only turn certificate verification off there",
				host, rootCause(err), host, host)
		}
	}
	return fmt.Sprintf("%s answers plain HTTP where HTTPS was asked (%s); to allow plain HTTP mark it insecure, as containers/image does: insecure = true in its registries.conf [[registry]] (location = \"%s\"), trust.insecure_registries = [\"%s\"] (or --insecure-registry %s), or --tls-verify=false",
		host, rootCause(err), host, host, host)
}

func (p *Request) authFileList() string {
	var s []string
	for _, f := range p.AuthFiles {
		s = append(s, f.Path)
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func codeOf(err error) failure.Code {
	// Order matters: a TLS failure is wrapped in url/net errors, and a
	// registry error code is more precise than its HTTP status.
	var (
		unknownCA  x509.UnknownAuthorityError
		hostErr    x509.HostnameError
		invalidErr x509.CertificateInvalidError
		verifyErr  *tls.CertificateVerificationError
		alertErr   tls.AlertError
		recordErr  tls.RecordHeaderError
		unauth     docker.ErrUnauthorizedForCredentials
		ec         errcode.Error
		bare       errcode.ErrorCode
		httpErr    docker.UnexpectedHTTPStatusError
		polErr     signature.PolicyRequirementError
		sigErr     signature.InvalidSignatureError
		statusErr  *registry.StatusError
		largeErr   *registry.TooLargeError
		dnsErr     *net.DNSError
		opErr      *net.OpError
		netErr     net.Error
	)
	switch {
	case errors.Is(err, context.Canceled):
		return failure.Interrupted
	case errors.Is(err, http.ErrSchemeMismatch):
		// A plain-http answer to https where plain http is not allowed:
		// the TLS the operator's configuration promises is missing.
		return failure.TLS
	case errors.As(err, &unknownCA), errors.As(err, &hostErr), errors.As(err, &invalidErr),
		errors.As(err, &verifyErr), errors.As(err, &alertErr), errors.As(err, &recordErr):
		return failure.TLS
	case errors.As(err, &polErr), errors.As(err, &sigErr):
		// A signature the policy's key does not verify is the policy's
		// rejection too (prSignedBy passes InvalidSignatureError on as
		// its reason), as skopeo reports it.
		return failure.Verification
	case errors.As(err, &largeErr):
		return failure.Verification
	case errors.Is(err, registry.ErrNoEndpoint):
		return failure.NotFound
	case errors.Is(err, registry.ErrTooManyRedirects):
		return failure.Verification // an answer beyond its bounds, as a manifest over 4 MiB
	case errors.As(err, &statusErr):
		return statusCode(statusErr)
	case isDigestMismatch(err):
		return failure.Verification
	case errors.As(err, &unauth):
		return failure.Unauthorized
	case errors.As(err, &ec) || errors.As(err, &bare):
		// A registry error without message or detail is decoded as a
		// bare errcode.ErrorCode ({"errors":[{"code":"UNAUTHORIZED"}]}).
		if ec.Code == 0 {
			ec.Code = bare
		}
		switch ec.Code {
		case errcode.ErrorCodeUnauthorized, errcode.ErrorCodeDenied:
			return failure.Unauthorized
		case v2.ErrorCodeManifestUnknown, v2.ErrorCodeNameUnknown, v2.ErrorCodeBlobUnknown:
			return failure.NotFound
		default: // TOOMANYREQUESTS, UNAVAILABLE, any other: the registry's
			return failure.Network
		}
	case errors.As(err, &httpErr):
		switch {
		case httpErr.StatusCode == 401 || httpErr.StatusCode == 403:
			return failure.Unauthorized
		case httpErr.StatusCode == 404:
			return failure.NotFound
		default: // 429, a 5xx, another answer: as statusCode
			return failure.Network
		}
	case errors.Is(err, docker.ErrTooManyRequests):
		return failure.Network
	case errors.Is(err, digest.ErrDigestInvalidFormat), errors.Is(err, digest.ErrDigestInvalidLength),
		errors.Is(err, digest.ErrDigestUnsupported), isOversized(err):
		return failure.Verification
	}
	if status, body, ok := unparsedErrorBody(err); ok {
		if c, ok := bareCode(body); ok {
			return c
		}
		switch {
		case status == 401 || status == 403:
			return failure.Unauthorized
		case status == 404:
			return failure.NotFound
		default: // as statusCode: a registry's answer is never internal
			return failure.Network
		}
	}
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT), errors.Is(err, syscall.EROFS):
		return failure.Destination
	case errors.As(err, &dnsErr), errors.As(err, &opErr), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, syscall.EPIPE), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, errStalled):
		return failure.Network
	case errors.As(err, &netErr) && netErr.Timeout():
		return failure.Network
	case errors.As(err, new(*url.Error)):
		// A request to a registry that got no answer the cases above
		// name: the connection closed (EOF), a malformed response,
		// headers past the client's bound. A registry's failure to
		// answer, never a bug of ours.
		return failure.Network
	}
	return failure.Internal
}

// statusCode is the code of a registry's answer: its error code first
// (as registryHTTPResponseToError prefers it), then its HTTP status.
func statusCode(e *registry.StatusError) failure.Code {
	switch e.Code {
	case "UNAUTHORIZED", "DENIED":
		return failure.Unauthorized
	case "MANIFEST_UNKNOWN", "NAME_UNKNOWN", "BLOB_UNKNOWN":
		return failure.NotFound
	case "TOOMANYREQUESTS", "UNAVAILABLE":
		return failure.Network
	}
	switch {
	case e.StatusCode == 401 || e.StatusCode == 403:
		return failure.Unauthorized
	case e.StatusCode == 404:
		return failure.NotFound
	}
	// 429, a 5xx, and any other answer a registry gave instead of the
	// one asked for (a 400, 405, 410 without a code of the table): the
	// registry's failure, never pullhelper's own (exit 1 is for bugs).
	return failure.Network
}

// isOversized recognises containers/image's size limits
// (internal/iolimits.ReadAtMost: manifests, configs, tokens, error bodies).
func isOversized(err error) bool {
	return strings.Contains(err.Error(), "exceeded maximum allowed size of")
}

// unparsedErrorBody finds containers/image's unexported
// *docker.unexpectedHTTPResponseError (an error body that is not the
// registry's JSON error format) in err's chain and returns its status and
// body. containers/image wraps it without a type callers can name, so its
// fields are read by reflection; a change of the type only loses this
// refinement (the code falls back to the message).
func unparsedErrorBody(err error) (int, string, bool) {
	for e := err; e != nil; {
		v := reflect.ValueOf(e)
		if v.Kind() == reflect.Pointer && !v.IsNil() && v.Elem().Kind() == reflect.Struct &&
			v.Type().String() == "*docker.unexpectedHTTPResponseError" {
			st, body := v.Elem().FieldByName("StatusCode"), v.Elem().FieldByName("Response")
			if st.IsValid() && st.Kind() == reflect.Int && body.IsValid() && body.Kind() == reflect.Slice && body.Type().Elem().Kind() == reflect.Uint8 {
				return int(st.Int()), string(body.Bytes()), true
			}
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			e = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				if st, body, ok := unparsedErrorBody(x); ok {
					return st, body, true
				}
			}
			return 0, "", false
		default:
			return 0, "", false
		}
	}
	return 0, "", false
}

// bareCode maps an error body that is only a registry error code
// ("UNAUTHORIZED", "MANIFEST_UNKNOWN", optionally quoted) to its code.
func bareCode(body string) (failure.Code, bool) {
	b := strings.Trim(strings.TrimSpace(body), `"`)
	switch strings.ToUpper(b) {
	case "UNAUTHORIZED", "DENIED":
		return failure.Unauthorized, true
	case "MANIFEST_UNKNOWN", "NAME_UNKNOWN", "BLOB_UNKNOWN":
		return failure.NotFound, true
	case "TOOMANYREQUESTS", "UNAVAILABLE":
		return failure.Network, true
	}
	return "", false
}

// isDigestMismatch recognises containers/image's digest verification
// failures, which carry no type of their own.
func isDigestMismatch(err error) bool {
	s := err.Error()
	for _, m := range []string{"Digest did not match", "digest mismatch", "does not match provided manifest digest",
		"does not match selected manifest digest", "does not match expected", "Manifest does not match"} {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

// rootCause is the error on one line (containers/image's messages may span
// several), for messages that add their own context in front.
func rootCause(err error) string {
	s := err.Error()
	return strings.ReplaceAll(s, "\n", " ")
}

// retryable reports whether another attempt of the whole image may
// succeed: a network failure the registry client did not already retry
// (a stall, a body that could not be resumed, a failure of the copy's own
// reads).
func retryable(err error) bool {
	var fb *registry.FallbackError
	return failure.CodeOf(err) == failure.Network && !errors.Is(err, context.DeadlineExceeded) && !errors.As(err, &fb)
}
