package client_test

// The tests' world: the real pullhelper binary (built here with the
// Makefile's tags, or $PULLHELPER_BIN), and the real registry of the system
// tests (Debian's docker-registry, distribution 2.8) on 127.0.0.1 with TLS
// from a per-run CA and htpasswd auth with a random password, holding
// images made by tests/imagegen and pushed with skopeo. It is set up once,
// by the first test that needs it, and torn down by TestMain.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Generator arguments of the images (tests/helpers.bash tiny, and one
// incompressible 4 MiB layer for pulls that must last: with
// --max-bandwidth 256KiB/s it takes about 16 s, and the tests that use it
// stop it at its first progress event).
var images = map[string][]string{
	"tiny": {"-layers", "1", "-layer-size", "4096", "-compressible", "0.5", "-seed", "1"},
	"slow": {"-layers", "1", "-layer-size", "4194304", "-compressible", "0", "-seed", "7"},
}

type world struct {
	bin      string // pullhelper
	dir      string
	host     string // 127.0.0.1:PORT
	certDir  string // holds ca.crt only
	user     string
	password string
	token    string // the password of user "serviceaccount"
	authJSON []byte // containers auth.json with the right password
	badJSON  []byte // same user, wrong password
	digests  map[string]string
	reg      *exec.Cmd
	regLog   string
}

var (
	theWorld  *world
	worldErr  error
	worldSkip string
	worldOnce sync.Once
	tmpRoot   string
)

func TestMain(m *testing.M) {
	if os.Getenv(agentEnv) != "" {
		os.Exit(runAgent())
	}
	code := m.Run()
	if theWorld != nil && theWorld.reg != nil && theWorld.reg.Process != nil {
		_ = theWorld.reg.Process.Kill()
		_ = theWorld.reg.Wait()
	}
	if tmpRoot != "" {
		_ = os.RemoveAll(tmpRoot)
	}
	os.Exit(code)
}

// env returns the world, skipping t (with the reason) where it cannot exist.
func env(t *testing.T) *world {
	t.Helper()
	worldOnce.Do(func() {
		if os.Getuid() != 0 {
			worldSkip = "not root: the isolated pull needs root (cgroups, namespaces, the uid drop); CI runs as root"
			return
		}
		for _, c := range []string{"docker-registry", "skopeo", "htpasswd"} {
			if _, err := exec.LookPath(c); err != nil {
				worldSkip = fmt.Sprintf("%s not installed (make deps installs docker-registry, skopeo, apache2-utils)", c)
				return
			}
		}
		theWorld, worldErr = setup()
	})
	if worldSkip != "" {
		t.Skip(worldSkip)
	}
	if worldErr != nil {
		t.Fatalf("setting up the registry and the binary: %v", worldErr)
	}
	return theWorld
}

func setup() (*world, error) {
	var err error
	if tmpRoot, err = os.MkdirTemp("", "pullhelper-client-test-"); err != nil {
		return nil, err
	}
	w := &world{dir: tmpRoot, user: "clientuser", digests: map[string]string{}}
	if w.bin, err = buildBinary(w.dir); err != nil {
		return nil, err
	}
	if err := w.makeCerts(); err != nil {
		return nil, err
	}
	pw := make([]byte, 16)
	_, _ = rand.Read(pw)
	w.password = hex.EncodeToString(pw)
	_, _ = rand.Read(pw)
	w.token = "sa." + hex.EncodeToString(pw)
	w.authJSON = w.authFile(w.password)
	w.badJSON = w.authFile("wrong-" + w.password)
	if err := w.startRegistry(); err != nil {
		return nil, err
	}
	gen := filepath.Join(w.dir, "imagegen")
	if out, err := goCmd("build", "-o", gen, "../tests/imagegen").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building tests/imagegen: %v\n%s", err, out)
	}
	authPath := filepath.Join(w.dir, "auth.json")
	if err := os.WriteFile(authPath, w.authJSON, 0o600); err != nil {
		return nil, err
	}
	for name, args := range images {
		layout := filepath.Join(w.dir, "images", name)
		if out, err := exec.Command(gen, append([]string{"-out", layout}, args...)...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("imagegen %s: %v\n%s", name, err, out)
		}
		var idx struct {
			Manifests []struct {
				Digest string `json:"digest"`
			} `json:"manifests"`
		}
		b, err := os.ReadFile(filepath.Join(layout, "index.json"))
		if err != nil || json.Unmarshal(b, &idx) != nil || len(idx.Manifests) == 0 {
			return nil, fmt.Errorf("reading %s/index.json: %v", layout, err)
		}
		w.digests[name] = idx.Manifests[0].Digest
		cmd := exec.Command("skopeo", "--insecure-policy", "copy", "--quiet", "--preserve-digests",
			"--dest-authfile", authPath, "--dest-cert-dir", w.certDir,
			"oci:"+layout+":latest", "docker://"+w.host+"/client/"+name+":latest")
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("skopeo copy %s: %v\n%s\nregistry log:\n%s", name, err, out, w.logTail())
		}
	}
	return w, nil
}

func goCmd(args ...string) *exec.Cmd {
	gobin := "go"
	if _, err := exec.LookPath(gobin); err != nil {
		gobin = "/usr/local/go/bin/go"
	}
	cmd := exec.Command(gobin, args...)
	// The Makefile's build environment.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0",
		"GOFLAGS=-tags=containers_image_openpgp,exclude_graphdriver_btrfs,exclude_graphdriver_devicemapper")
	return cmd
}

// buildBinary returns $PULLHELPER_BIN, or builds cmd/pullhelper into dir.
func buildBinary(dir string) (string, error) {
	if b := os.Getenv("PULLHELPER_BIN"); b != "" {
		return filepath.Abs(b)
	}
	bin := filepath.Join(dir, "pullhelper")
	if out, err := goCmd("build", "-o", bin, "../cmd/pullhelper").CombinedOutput(); err != nil {
		return "", fmt.Errorf("building cmd/pullhelper: %v\n%s", err, out)
	}
	return bin, nil
}

func (w *world) authFile(password string) []byte {
	auth := base64.StdEncoding.EncodeToString([]byte(w.user + ":" + password))
	return []byte(fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, w.host, auth))
}

// makeCerts writes a per-run CA (certs/ca.crt) and a server certificate
// for 127.0.0.1 signed by it.
func (w *world) makeCerts() error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pullhelper client test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	srv := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, caCert, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	w.certDir = filepath.Join(w.dir, "certs")
	if err := os.MkdirAll(w.certDir, 0o755); err != nil {
		return err
	}
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{
		{filepath.Join(w.certDir, "ca.crt"), "CERTIFICATE", caDER},
		{filepath.Join(w.dir, "server.crt"), "CERTIFICATE", srvDER},
		{filepath.Join(w.dir, "server.key"), "EC PRIVATE KEY", keyDER},
	} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// freePort is a port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (w *world) startRegistry() error {
	htpasswd := filepath.Join(w.dir, "htpasswd")
	cmd := exec.Command("htpasswd", "-B", "-i", "-c", htpasswd, w.user)
	cmd.Stdin = strings.NewReader(w.password)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("htpasswd: %v\n%s", err, out)
	}
	cmd = exec.Command("htpasswd", "-B", "-i", htpasswd, "serviceaccount")
	cmd.Stdin = strings.NewReader(w.token)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("htpasswd: %v\n%s", err, out)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		w.host = fmt.Sprintf("127.0.0.1:%d", port)
		w.authJSON, w.badJSON = w.authFile(w.password), w.authFile("wrong-"+w.password)
		secret := make([]byte, 16)
		_, _ = rand.Read(secret)
		cfg := fmt.Sprintf(`version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: %s/data
http:
  addr: %s
  secret: %x
  tls:
    certificate: %s/server.crt
    key: %s/server.key
auth:
  htpasswd:
    realm: pullhelper-client-tests
    path: %s
health:
  storagedriver:
    enabled: false
`, w.dir, w.host, secret, w.dir, w.dir, htpasswd)
		cfgPath := filepath.Join(w.dir, "config.yml")
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
			return err
		}
		w.regLog = filepath.Join(w.dir, "registry.log")
		logf, err := os.Create(w.regLog)
		if err != nil {
			return err
		}
		w.reg = exec.Command("docker-registry", "serve", cfgPath)
		w.reg.Stdout, w.reg.Stderr = logf, logf
		err = w.reg.Start()
		logf.Close()
		if err != nil {
			return fmt.Errorf("starting docker-registry: %v", err)
		}
		if lastErr = w.waitRegistry(20 * time.Second); lastErr == nil {
			return nil
		}
		_ = w.reg.Process.Kill()
		_ = w.reg.Wait()
	}
	return lastErr
}

// waitRegistry polls GET /v2/ until the registry answers 401 (it is up and
// checks credentials), the process exits, or the deadline passes.
func (w *world) waitRegistry(limit time.Duration) error {
	pool := x509.NewCertPool()
	ca, _ := os.ReadFile(filepath.Join(w.certDir, "ca.crt"))
	pool.AppendCertsFromPEM(ca)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	exited := make(chan struct{})
	go func() { _, _ = w.reg.Process.Wait(); close(exited) }()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		resp, err := hc.Get("https://" + w.host + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("docker-registry exited:\n%s", w.logTail())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("docker-registry did not answer on %s within %v:\n%s", w.host, limit, w.logTail())
}

func (w *world) logTail() string {
	b, _ := os.ReadFile(w.regLog)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(bytes.TrimSpace(b))
}

// ctx is a test's context, bounded so that a hung pull fails the test.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}
