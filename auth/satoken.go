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
	"io"
	"os"
	"strconv"
	"strings"
)

const (
	sourceServiceAccountToken = "service-account-token"

	// DefaultServiceAccountUsername is the username sent with the token.
	DefaultServiceAccountUsername = "serviceaccount"

	satMaxTokenSize = 1 << 20
)

// ServiceAccountToken returns the token in tokenFile as the password for
// imageRegistry (a registry host[:port]; anything from the first "/" on is
// ignored, so a repository name also works) when it matches one of the
// registries patterns, or nil when it matches none (the file is then not
// read). A pattern is "host[:port]", matched exactly, or "*.domain[:port]",
// matching any host with one or more labels before ".domain". Hosts compare
// case-insensitively; a port must be equal, and a pattern without a port
// matches only a registry without one (as the kubelet's matching does), so
// the in-cluster registry needs "*.svc:5000", not "*.svc". username ""
// means DefaultServiceAccountUsername. Surrounding whitespace (the trailing
// newline) is trimmed from the token; an empty token is an error. Errors
// name the file or the pattern, never the token.
func ServiceAccountToken(tokenFile, username string, registries []string, imageRegistry string) (*Credential, error) {
	type pattern struct {
		raw, host, port string
		wildcard        bool
	}
	pats := make([]pattern, 0, len(registries))
	for _, r := range registries {
		host, port, wildcard, err := satParsePattern(r)
		if err != nil {
			return nil, fmt.Errorf("service account token registry pattern %q: %v", r, err)
		}
		pats = append(pats, pattern{r, host, port, wildcard})
	}
	registry, _, _ := strings.Cut(imageRegistry, "/")
	if registry == "" {
		return nil, errors.New("service account token: the image registry is empty")
	}
	host, port := satSplitHostPort(registry)
	host = strings.ToLower(host)
	for _, p := range pats {
		if p.port != port {
			continue
		}
		if p.wildcard {
			if !strings.HasSuffix(host, "."+p.host) || len(host) == len(p.host)+1 {
				continue
			}
		} else if host != p.host {
			continue
		}
		token, err := satReadToken(tokenFile)
		if err != nil {
			return nil, err
		}
		if username == "" {
			username = DefaultServiceAccountUsername
		}
		return &Credential{
			Source: sourceServiceAccountToken, File: tokenFile, Key: p.raw,
			Username: username, Password: token,
		}, nil
	}
	return nil, nil
}

// satParsePattern splits "[*.]host[:port]" and lowercases the host.
func satParsePattern(p string) (host, port string, wildcard bool, err error) {
	if p == "" {
		return "", "", false, errors.New("empty pattern")
	}
	if strings.Contains(p, "://") {
		return "", "", false, errors.New("a pattern is host[:port] or *.domain[:port], without a scheme")
	}
	if strings.ContainsAny(p, "/@?# \t") {
		return "", "", false, errors.New("a pattern is host[:port] or *.domain[:port], without a path")
	}
	rest, wildcard := strings.CutPrefix(p, "*.")
	host, port = satSplitHostPort(rest)
	if host == "" {
		return "", "", false, errors.New("no host")
	}
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") && !wildcard {
		if strings.ContainsAny(host[1:len(host)-1], "*?[]") {
			return "", "", false, errors.New("a wildcard is allowed only as a leading \"*.\"")
		}
	} else if strings.ContainsAny(host, "*?[]") {
		return "", "", false, errors.New("a wildcard is allowed only as a leading \"*.\"")
	}
	if strings.HasPrefix(host, ".") || strings.HasSuffix(host, ".") || strings.Contains(host, "..") {
		return "", "", false, errors.New("empty host label")
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "", "", false, errors.New("the port must be a number from 1 to 65535")
		}
	}
	return strings.ToLower(host), port, wildcard, nil
}

// satSplitHostPort splits host[:port], including "[v6]:port".
func satSplitHostPort(s string) (host, port string) {
	if strings.HasPrefix(s, "[") {
		if i := strings.Index(s, "]"); i >= 0 {
			host, rest := s[:i+1], s[i+1:]
			if p, ok := strings.CutPrefix(rest, ":"); ok {
				return host, p
			}
			return host, ""
		}
		return s, ""
	}
	if i := strings.LastIndex(s, ":"); i >= 0 {
		return s[:i], s[i+1:]
	}
	return s, ""
}

func satReadToken(file string) (string, error) {
	if file == "" {
		return "", errors.New("service account token: no token file configured")
	}
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("reading service account token %s: %v", file, cpPathErr(err))
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, satMaxTokenSize+1))
	if err != nil {
		return "", fmt.Errorf("reading service account token %s: %v", file, cpPathErr(err))
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
