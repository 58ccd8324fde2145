package auth

// A service-account token used as a registry password, for registries that
// authenticate with the cluster's tokens (OpenShift's integrated registry,
// image-registry.openshift-image-registry.svc:5000).
//
// The username: OpenShift's registry ignores it. Its auth handler
// (openshift/image-registry pkg/dockerregistry/server/auth.go,
// getOpenShiftAPIToken) takes the Basic-auth password as the API token and
// discards the username; an empty password is refused (ErrTokenInvalid).
// The default "serviceaccount" is what OpenShift itself writes into the
// dockercfg pull secrets it generates for service accounts
// (openshift-controller-manager, create_dockercfg_secrets.go:
// Username "serviceaccount", Password = the token), so a registry or proxy
// that does look at the username sees the same value as for those secrets.
//
// The token is read when the credential is requested, never cached:
// projected tokens (kube-api-access-*, expirationSeconds 3607) are rotated
// by the kubelet, which swaps the volume's ..data symlink.

import (
	"errors"
	"fmt"
	"strings"

	"github.com/pullhelper/pullhelper/internal/regpattern"
	"github.com/pullhelper/pullhelper/internal/safefile"
	"github.com/pullhelper/pullhelper/internal/wire"
)

const (
	sourceServiceAccountToken = "service-account-token"

	// DefaultServiceAccountUsername is the username sent with the token.
	DefaultServiceAccountUsername = "serviceaccount"

	satMaxTokenSize = 1 << 20
)

// serviceAccountToken returns the token in tokenFile as the password for
// imageRegistry (the endpoint host[:port]; anything from the first "/" on
// is ignored) when it matches one of pats, or nil when it matches none (the
// file is then not read). Patterns follow internal/regpattern (the same
// rule as trust.ca_files and trust.insecure_registries): "host[:port]" or
// "*.domain[:port]", hosts case-insensitive, ports equal -- so the
// in-cluster registry needs "*.svc:5000", not "*.svc". username "" means
// DefaultServiceAccountUsername. Surrounding whitespace (the trailing
// newline) is trimmed from the token; an empty token is an error. Errors
// name the file or the pattern, never the token.
//
// data, when not nil, is the token already read (--service-account-token-fd;
// tokenFile then only names it).
func serviceAccountToken(tokenFile string, data []byte, username string, pats []regpattern.Pattern, imageRegistry string) (*wire.Credential, error) {
	registry, _, _ := strings.Cut(imageRegistry, "/")
	if registry == "" {
		return nil, errors.New("service account token: the image registry is empty")
	}
	p, ok := regpattern.First(pats, registry)
	if !ok {
		return nil, nil
	}
	token, err := satToken(tokenFile, data)
	if err != nil {
		return nil, err
	}
	if username == "" {
		username = DefaultServiceAccountUsername
	}
	return &wire.Credential{
		Source: sourceServiceAccountToken, File: tokenFile, Key: p.String(),
		Username: username, Password: token,
	}, nil
}

// satToken reads file, or takes data when not nil (an inline token), with
// the same bounds and checks either way.
func satToken(file string, data []byte) (string, error) {
	if file == "" {
		return "", errors.New("service account token: no token file configured")
	}
	if data == nil {
		var err error
		data, err = safefile.ReadFile(file, satMaxTokenSize)
		if safefile.TooBig(err) {
			return "", fmt.Errorf("service account token %s is larger than %d bytes", file, satMaxTokenSize)
		} else if err != nil {
			return "", fmt.Errorf("reading service account token %s: %v", file, cpPathErr(err))
		}
	}
	if len(data) > satMaxTokenSize {
		return "", fmt.Errorf("service account token %s is larger than %d bytes", file, satMaxTokenSize)
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("service account token %s is empty", file)
	}
	if strings.ContainsAny(token, "\r\n") {
		return "", fmt.Errorf("service account token %s holds more than one line", file)
	}
	return token, nil
}
