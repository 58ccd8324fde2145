package main

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

const accept = "application/vnd.oci.image.manifest.v1+json,application/vnd.docker.distribution.manifest.v2+json"

type descriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

type manifest struct {
	MediaType string       `json:"mediaType"`
	Config    descriptor   `json:"config"`
	Layers    []descriptor `json:"layers"`
}

type client struct {
	http  *http.Client
	base  string
	authz string // Authorization header value
}

func main() {
	ca := flag.String("ca", "", "CA certificate (PEM) the registry's certificate chains to")
	authfile := flag.String("authfile", "", "containers auth.json holding the registry's credential")
	parallel := flag.Int("parallel", 6, "blobs fetched at once")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: floor -ca CA -authfile FILE [-parallel N] HOST/REPO:TAG DIR")
		os.Exit(2)
	}
	if err := run(*ca, *authfile, *parallel, flag.Arg(0), flag.Arg(1)); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}

func run(caFile, authfile string, parallel int, ref, dir string) error {
	host, rest, ok := strings.Cut(ref, "/")
	if !ok {
		return fmt.Errorf("reference %q has no host", ref)
	}
	repo, tag, ok := strings.Cut(rest, ":")
	if !ok {
		tag = "latest"
	}
	pool := x509.NewCertPool()
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return err
		}
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s: no certificate", caFile)
		}
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, MaxIdleConnsPerHost: parallel, ForceAttemptHTTP2: true}
	c := &client{http: &http.Client{Transport: tr}, base: "https://" + host + "/v2/" + repo}
	if err := c.login(host, repo, authfile); err != nil {
		return err
	}

	blobDir := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobDir, 0o755); err != nil {
		return err
	}
	raw, err := c.get("/manifests/"+tag, accept)
	if err != nil {
		return err
	}
	var m manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	sum := sha256.Sum256(raw)
	mdigest := "sha256:" + hex.EncodeToString(sum[:])

	blobs := append([]descriptor{m.Config}, m.Layers...)
	sem := make(chan struct{}, max(parallel, 1))
	errs := make([]error, len(blobs))
	var wg sync.WaitGroup
	for i, d := range blobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = c.fetchBlob(d, blobDir)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := writeSynced(filepath.Join(blobDir, mdigest[len("sha256:"):]), raw); err != nil {
		return err
	}
	mt := m.MediaType
	if mt == "" {
		mt = "application/vnd.oci.image.manifest.v1+json"
	}
	idx := fmt.Sprintf(`{"schemaVersion":2,"manifests":[{"mediaType":%q,"digest":%q,"size":%d,"annotations":{"org.opencontainers.image.ref.name":%q}}]}`,
		mt, mdigest, len(raw), tag)
	if err := writeSynced(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := writeSynced(filepath.Join(dir, "index.json"), []byte(idx)); err != nil {
		return err
	}
	for _, d := range []string{blobDir, filepath.Dir(blobDir), dir} {
		if err := syncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// login reads the credential for host and, when the registry answers /v2/
// with a Bearer challenge, exchanges it for a token.
func (c *client) login(host, repo, authfile string) error {
	var basic string
	if authfile != "" {
		data, err := os.ReadFile(authfile)
		if err != nil {
			return err
		}
		var af struct {
			Auths map[string]struct {
				Auth string `json:"auth"`
			} `json:"auths"`
		}
		if err := json.Unmarshal(data, &af); err != nil {
			return fmt.Errorf("%s: %w", authfile, err)
		}
		basic = af.Auths[host].Auth
	}
	resp, err := c.http.Get("https://" + host + "/v2/")
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	ch := resp.Header.Get("WWW-Authenticate")
	switch {
	case strings.HasPrefix(ch, "Basic"):
		c.authz = "Basic " + basic
		return nil
	case strings.HasPrefix(ch, "Bearer"):
		params := map[string]string{}
		for _, kv := range strings.Split(strings.TrimPrefix(ch, "Bearer "), ",") {
			k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
			params[k] = strings.Trim(v, `"`)
		}
		u, err := url.Parse(params["realm"])
		if err != nil {
			return err
		}
		q := u.Query()
		q.Set("service", params["service"])
		q.Set("scope", "repository:"+repo+":pull")
		u.RawQuery = q.Encode()
		req, _ := http.NewRequest(http.MethodGet, u.String(), nil)
		if basic != "" {
			req.Header.Set("Authorization", "Basic "+basic)
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var tok struct {
			Token       string `json:"token"`
			AccessToken string `json:"access_token"`
		}
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&tok); err != nil {
			return fmt.Errorf("token: %w", err)
		}
		c.authz = "Bearer " + tok.Token + tok.AccessToken
		return nil
	}
	return fmt.Errorf("/v2/: status %d, challenge %q", resp.StatusCode, ch)
}

func (c *client) do(path, accept string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, err
	}
	if c.authz != "" {
		req.Header.Set("Authorization", c.authz)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: status %d", path, resp.StatusCode)
	}
	return resp, nil
}

func (c *client) get(path, accept string) ([]byte, error) {
	resp, err := c.do(path, accept)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, 4<<20))
}

// fetchBlob streams one blob into blobDir, hashing while writing, then checks
// size and digest and fsyncs the file before naming it by its digest.
func (c *client) fetchBlob(d descriptor, blobDir string) error {
	hexSum, ok := strings.CutPrefix(d.Digest, "sha256:")
	if !ok || len(hexSum) != 64 || strings.ContainsAny(hexSum, "/.") {
		return fmt.Errorf("unsupported digest %q", d.Digest)
	}
	resp, err := c.do("/blobs/"+d.Digest, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.CreateTemp(blobDir, ".partial-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(f, h), resp.Body, make([]byte, 256<<10))
	if err != nil {
		return fmt.Errorf("blob %s: %w", d.Digest, err)
	}
	if n != d.Size {
		return fmt.Errorf("blob %s: %d bytes, want %d", d.Digest, n, d.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != hexSum {
		return fmt.Errorf("blob %s: digest sha256:%s", d.Digest, got)
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), filepath.Join(blobDir, hexSum))
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
