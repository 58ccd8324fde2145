package hosts

import (
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/pullhelper/pullhelper/internal/safefile"
)

// containerd legacy mode (config_path == ""): mirrors[host] then the default
// endpoint, each with configs[HOST].tls.

// ctrdLegacyEndpoints is registryEndpoints: mirrors[host] or mirrors["*"], then
// the default endpoint unless an endpoint's host equals host.
func ctrdLegacyEndpoints(reg *ctrdRegistry, host string) ([]string, error) {
	var endpoints []string
	if m, ok := reg.Mirrors[host]; ok {
		endpoints = append(endpoints, m.Endpoints...)
	} else {
		endpoints = append(endpoints, reg.Mirrors["*"].Endpoints...)
	}
	defaultHost := host
	if host == "docker.io" {
		defaultHost = "registry-1.docker.io"
	}
	for i := range endpoints {
		en, err := ctrdAddDefaultScheme(endpoints[i])
		if err != nil {
			return nil, fmt.Errorf("get registry endpoints: parse endpoint url: %w", err)
		}
		endpoints[i] = en
	}
	for _, e := range endpoints {
		u, err := url.Parse(e)
		if err != nil {
			return nil, fmt.Errorf("get registry endpoints: parse endpoint url: %w", err)
		}
		if u.Host == host {
			return endpoints, nil
		}
	}
	return append(endpoints, containerdDefaultScheme(defaultHost)+"://"+defaultHost), nil
}

func ctrdAddDefaultScheme(endpoint string) (string, error) {
	if strings.Contains(endpoint, "://") {
		return endpoint, nil
	}
	u, err := url.Parse("dummy://" + endpoint)
	if err != nil {
		return "", err
	}
	return containerdDefaultScheme(u.Host) + "://" + endpoint, nil
}

func containerdDefaultScheme(host string) string {
	if containerdIsLocalhost(host) {
		return "http"
	}
	return "https"
}

// containerdIsLocalhost is docker.IsLocalhost / the CRI isLocalHost.
func containerdIsLocalhost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	return net.ParseIP(host).IsLoopback()
}

// ctrdLegacyTLS is getTLSConfig for configs[u.Host].tls, or the localhost
// default when there is none.
func ctrdLegacyTLS(c *ctrdTLSConfig, host string, u *url.URL) (ctrdTLS, error) {
	var t ctrdTLS
	if c == nil {
		t.SkipVerify = containerdIsLocalhost(host) && u.Scheme == "http"
		return t, nil
	}
	if c.CertFile != "" && c.KeyFile == "" {
		return t, fmt.Errorf("cert file %q was specified, but no corresponding key file was specified", c.CertFile)
	}
	if c.CertFile == "" && c.KeyFile != "" {
		return t, fmt.Errorf("key file %q was specified, but no corresponding cert file was specified", c.KeyFile)
	}
	if c.CertFile != "" {
		cert, err := loadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return t, fmt.Errorf("failed to load cert file: %w", err)
		}
		if len(cert.Certificate) != 0 {
			t.ClientPairs = [][2]string{{ctrdAbsPath(c.CertFile), ctrdAbsPath(c.KeyFile)}}
		}
	}
	if c.CAFile != "" {
		data, err := readFile(c.CAFile)
		if err != nil {
			return t, fmt.Errorf("failed to load CA file: %s: %w", c.CAFile, safefile.Cause(err))
		}
		// containerd ignores AppendCertsFromPEM's result here: a file
		// without a certificate adds nothing and is not an error.
		if x509.NewCertPool().AppendCertsFromPEM(data) {
			t.CAFiles = []string{ctrdAbsPath(c.CAFile)}
		}
	}
	t.SkipVerify = c.InsecureSkipVerify
	return t, nil
}

func ctrdAbsPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
