// Command tokenserver is a test-only Docker registry token server (the
// "auth: token" of distribution's registry) for tests/157-cri-credentials.bats:
// it issues JWTs that docker-registry 2.8 verifies (ES256, its signing
// certificate in the x5c header and in the bundle the registry trusts).
//
//	tokenserver -listen 127.0.0.2:0 -port-file F -dir D -bundle B -log L
//	            [-service S] [-issuer I] [-lifetime DUR]
//
// At start it makes a fresh P-256 key and a self-signed certificate for it
// and writes the certificate to B (the registry's rootcertbundle). It
// serves HTTPS with D/server.crt and D/server.key, read at each handshake
// (so D may be a link made after the start, to the registry's directory).
// POST /token with grant_type=refresh_token is OAuth2 (containerd's
// FetchTokenWithOAuth, containers/image's getBearerTokenOAuth2): it
// grants the requested scope when refresh_token equals D/refresh-token's
// first line, or answers 404 while D/no-oauth exists (a realm without
// OAuth2, as GCR's was); GET /token with Basic credentials whose password
// equals D/password's first line (the registry's user, for pushes), or
// with no user and D/refresh-token as password (containerd's fallback,
// FetchToken), grants it too; anything else is 401 (a password grant
// POST too: containerd then falls back to the GET). The log L gets one line a request:
// "METHOD grant=G result=ok|denied scope=S" -- never a credential's value.
// It listens where -listen says (a loopback address), and exits after
// -lifetime or on SIGTERM.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.2:0", "loopback address to listen on")
	portFile := flag.String("port-file", "", "write the port here once listening")
	dir := flag.String("dir", "", "directory of server.crt, server.key, password, refresh-token")
	bundle := flag.String("bundle", "", "write the token signing certificate here (PEM)")
	logFile := flag.String("log", "", "access log")
	service := flag.String("service", "pullhelper-tests", "the registry's service name (aud)")
	issuer := flag.String("issuer", "pullhelper-token", "the token issuer (iss)")
	lifetime := flag.Duration("lifetime", 10*time.Minute, "exit after this long")
	flag.Parse()
	if *portFile == "" || *dir == "" || *bundle == "" || *logFile == "" {
		log.Fatal("tokenserver: -port-file, -dir, -bundle and -log are required")
	}
	host, _, err := net.SplitHostPort(*listen)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		log.Fatalf("tokenserver: -listen %q: not a loopback address", *listen)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		log.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pullhelper test token signer"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*bundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		log.Fatal(err)
	}
	lf, err := os.OpenFile(*logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		log.Fatal(err)
	}
	var mu sync.Mutex
	logLine := func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(lf, format+"\n", a...)
	}
	firstLine := func(name string) string {
		b, err := os.ReadFile(filepath.Join(*dir, name))
		if err != nil {
			return ""
		}
		l, _, _ := strings.Cut(string(b), "\n")
		return strings.TrimSpace(l)
	}
	sign := func(scope string) (string, error) {
		hdr, _ := json.Marshal(map[string]any{"typ": "JWT", "alg": "ES256", "x5c": []string{base64.StdEncoding.EncodeToString(der)}})
		var access []map[string]any
		for _, s := range strings.Fields(scope) {
			parts := strings.Split(s, ":")
			if len(parts) < 3 {
				continue
			}
			access = append(access, map[string]any{"type": parts[0], "name": strings.Join(parts[1:len(parts)-1], ":"),
				"actions": strings.Split(parts[len(parts)-1], ",")})
		}
		now := time.Now().Unix()
		nonce := make([]byte, 8)
		_, _ = rand.Read(nonce)
		claims, _ := json.Marshal(map[string]any{"iss": *issuer, "sub": "test", "aud": *service, "exp": now + 300,
			"nbf": now - 10, "iat": now, "jti": fmt.Sprintf("%x", nonce), "access": access})
		enc := base64.RawURLEncoding
		input := enc.EncodeToString(hdr) + "." + enc.EncodeToString(claims)
		sum := sha256.Sum256([]byte(input))
		r, s, err := ecdsa.Sign(rand.Reader, key, sum[:])
		if err != nil {
			return "", err
		}
		sig := make([]byte, 64)
		r.FillBytes(sig[:32])
		s.FillBytes(sig[32:])
		return input + "." + enc.EncodeToString(sig), nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		grant, ok := "", false
		var scope string
		switch r.Method {
		case http.MethodPost:
			if err := r.ParseForm(); err != nil {
				http.Error(w, "bad form", http.StatusBadRequest)
				logLine("POST grant=? result=bad-form")
				return
			}
			grant, scope = r.PostForm.Get("grant_type"), r.PostForm.Get("scope")
			if _, err := os.Stat(filepath.Join(*dir, "no-oauth")); err == nil {
				logLine("POST grant=%s result=not-found scope=%s", grant, scope)
				http.NotFound(w, r)
				return
			}
			want := firstLine("refresh-token")
			ok = grant == "refresh_token" && want != "" && r.PostForm.Get("refresh_token") == want
		case http.MethodGet:
			grant, scope = "basic", strings.Join(r.URL.Query()["scope"], " ")
			user, pass, has := r.BasicAuth()
			want, tok := firstLine("password"), firstLine("refresh-token")
			ok = has && want != "" && pass == want
			if has && user == "" && tok != "" && pass == tok {
				grant, ok = "basic-identity-token", true
			}
		}
		_, _ = io.Copy(io.Discard, r.Body)
		if !ok {
			logLine("%s grant=%s result=denied scope=%s", r.Method, grant, scope)
			http.Error(w, `{"error":"invalid_grant"}`, http.StatusUnauthorized)
			return
		}
		tok, err := sign(scope)
		if err != nil {
			http.Error(w, "signing", http.StatusInternalServerError)
			return
		}
		logLine("%s grant=%s result=ok scope=%s", r.Method, grant, scope)
		w.Header().Set("Content-Type", "application/json")
		body := map[string]any{"token": tok, "expires_in": 300}
		if r.Method == http.MethodPost {
			body = map[string]any{"access_token": tok, "expires_in": 300}
		}
		_ = json.NewEncoder(w).Encode(body)
	})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	tlsc := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		c, err := tls.LoadX509KeyPair(filepath.Join(*dir, "server.crt"), filepath.Join(*dir, "server.key"))
		return &c, err
	}}
	srv := &http.Server{Handler: mux, TLSConfig: tlsc, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	tmp := *portFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(port+"\n"), 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.Rename(tmp, *portFile); err != nil {
		log.Fatal(err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		select {
		case <-sig:
		case <-time.After(*lifetime):
		}
		_ = srv.Close()
	}()
	if err := srv.ServeTLS(ln, "", ""); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
