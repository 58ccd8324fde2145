// Command hostilereg is a fake container registry for the pullhelper system
// tests (tests/090-hostile-registry.bats): it serves one image,
// hostile/img:latest, and misbehaves in the way -mode names. It listens on
// loopback only and never resolves a name.
//
//	hostilereg -mode MODE -port-file F [-tls-dir DIR] [-log F] [-lifetime 10m]
//
// With -tls-dir it generates a CA and a certificate for 127.0.0.1 and
// 127.0.0.2, writes DIR/ca.crt (for pullhelper --cert-dir DIR) and serves
// https; without it, plain http (pull with --tls-verify=false). The port is
// written to F (atomically) when the server is ready. Each request is
// logged as one line: "req METHOD PATH auth=yes|no"; modes with a second
// listener write its port to F.2 and log its requests as "side ...".
//
// Modes:
//
//	ok               a valid image
//	endless-layer    the layer is declared as 1024 bytes and streamed without end
//	huge-declared    the manifest declares a 100 GiB layer
//	big-manifest     the manifest is 5 MiB
//	nested-index     the tag is an index whose amd64 entry is another index
//	bad-digest       a layer descriptor's digest is "sha256:not-a-digest"
//	sha384           every descriptor uses sha384 digests
//	unauthorized-bare   the manifest GET answers 401 with the body UNAUTHORIZED
//	unauthorized-json   ... 401 {"errors":[{"code":"UNAUTHORIZED"}]}
//	manifest-unknown-bare  ... 404 MANIFEST_UNKNOWN
//	name-unknown-json      ... 404 {"errors":[{"code":"NAME_UNKNOWN"}]}
//	slow-manifest    the manifest response stops after 10 bytes
//	slow-config      the config blob response stops after 10 bytes
//	http-realm       /v2/ names a bearer realm http://127.0.0.2:PORT2/token
//	redirect-port    basic auth; the manifest GET redirects to 127.0.0.1:PORT2
//	                 (same IP, another port, same certificate)
//	cdn-challenge    basic auth; every blob GET redirects to a "CDN" at
//	                 https://127.0.0.2:PORT2, which answers 401 with a Bearer
//	                 challenge naming its own realm https://127.0.0.2:PORT2/token
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

var (
	mode     = flag.String("mode", "ok", "misbehaviour")
	portFile = flag.String("port-file", "", "write the listening port here")
	tlsDir   = flag.String("tls-dir", "", "serve https with a generated CA written to DIR/ca.crt")
	logFile  = flag.String("log", "", "request log")
	lifetime = flag.Duration("lifetime", 10*time.Minute, "exit after this long")
)

var (
	logMu sync.Mutex
	logW  *os.File
)

func logf(format string, args ...any) {
	logMu.Lock()
	defer logMu.Unlock()
	if logW != nil {
		fmt.Fprintf(logW, format+"\n", args...)
	}
}

type blob struct {
	mediaType string
	data      []byte
	digest    string
}

func sha256d(b []byte) string { s := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(s[:]) }
func sha384d(b []byte) string { s := sha512.Sum384(b); return "sha384:" + hex.EncodeToString(s[:]) }

type image struct {
	manifest     []byte
	manifestType string
	manifests    map[string][]byte // by digest, with their media types
	types        map[string]string
	blobs        map[string]blob
}

func desc(mt, d string, size int) map[string]any {
	return map[string]any{"mediaType": mt, "digest": d, "size": size}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func build(m string) *image {
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	payload := []byte("hello from the hostile registry\n")
	_ = tw.WriteHeader(&tar.Header{Name: "hello.txt", Mode: 0o644, Size: int64(len(payload)), ModTime: time.Unix(946684800, 0)})
	_, _ = tw.Write(payload)
	_ = tw.Close()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(tb.Bytes())
	_ = zw.Close()
	hash := sha256d
	if m == "sha384" {
		hash = sha384d
	}
	config := mustJSON(map[string]any{"architecture": "amd64", "os": "linux",
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{hash(tb.Bytes())}}})
	im := &image{manifests: map[string][]byte{}, types: map[string]string{}, blobs: map[string]blob{}}
	cfg := blob{"application/vnd.oci.image.config.v1+json", config, hash(config)}
	layer := blob{"application/vnd.oci.image.layer.v1.tar+gzip", gz.Bytes(), hash(gz.Bytes())}
	im.blobs[cfg.digest], im.blobs[layer.digest] = cfg, layer
	ld := desc(layer.mediaType, layer.digest, len(layer.data))
	switch m {
	case "endless-layer":
		ld["size"] = 1024
	case "huge-declared":
		ld["size"] = int64(100) << 30
	case "bad-digest":
		ld["digest"] = "sha256:not-a-digest"
	}
	man := map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": desc(cfg.mediaType, cfg.digest, len(cfg.data)), "layers": []any{ld}}
	if m == "big-manifest" {
		man["annotations"] = map[string]string{"pad": strings.Repeat("x", 5<<20)}
	}
	im.manifest, im.manifestType = mustJSON(man), "application/vnd.oci.image.manifest.v1+json"
	if m == "nested-index" {
		inner := mustJSON(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
			"manifests": []any{map[string]any{"mediaType": im.manifestType, "digest": sha256d(im.manifest), "size": len(im.manifest),
				"platform": map[string]string{"architecture": "amd64", "os": "linux"}}}})
		im.manifests[sha256d(im.manifest)], im.types[sha256d(im.manifest)] = im.manifest, im.manifestType
		im.manifests[sha256d(inner)], im.types[sha256d(inner)] = inner, "application/vnd.oci.image.index.v1+json"
		outer := mustJSON(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
			"manifests": []any{map[string]any{"mediaType": "application/vnd.oci.image.index.v1+json", "digest": sha256d(inner), "size": len(inner),
				"platform": map[string]string{"architecture": "amd64", "os": "linux"}}}})
		im.manifest, im.manifestType = outer, "application/vnd.oci.image.index.v1+json"
	}
	im.manifests[sha256d(im.manifest)], im.types[sha256d(im.manifest)] = im.manifest, im.manifestType
	return im
}

// stall writes n bytes of b, then holds the connection open until the
// client goes away.
func stall(w http.ResponseWriter, r *http.Request, b []byte, n int) {
	_, _ = w.Write(b[:n])
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

func registry(im *image, side string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization") != ""
		logf("req %s %s auth=%s", r.Method, r.URL.Path, yes(auth))
		p := r.URL.Path
		switch {
		case p == "/v2/" || p == "/v2":
			switch *mode {
			case "http-realm":
				w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="http://127.0.0.2:%s/token",service="hostile"`, side))
				w.WriteHeader(http.StatusUnauthorized)
				return
			case "redirect-port", "cdn-challenge":
				if !auth {
					w.Header().Set("WWW-Authenticate", `Basic realm="hostile"`)
					w.WriteHeader(http.StatusUnauthorized)
					return
				}
			}
			w.WriteHeader(http.StatusOK)
		case strings.HasPrefix(p, "/v2/hostile/img/manifests/"):
			ref := strings.TrimPrefix(p, "/v2/hostile/img/manifests/")
			// A client that learns the challenge from the request itself
			// (containerd's way, and pullhelper's) must meet it here too.
			switch {
			case *mode == "http-realm" && !auth:
				w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="http://127.0.0.2:%s/token",service="hostile"`, side))
				w.WriteHeader(http.StatusUnauthorized)
				return
			case (*mode == "redirect-port" || *mode == "cdn-challenge") && !auth:
				w.Header().Set("WWW-Authenticate", `Basic realm="hostile"`)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			switch *mode {
			case "unauthorized-bare":
				http.Error(w, "UNAUTHORIZED", http.StatusUnauthorized)
				return
			case "unauthorized-json":
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED"}]}`))
				return
			case "manifest-unknown-bare":
				http.Error(w, "MANIFEST_UNKNOWN", http.StatusNotFound)
				return
			case "name-unknown-json":
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusNotFound)
				_, _ = w.Write([]byte(`{"errors":[{"code":"NAME_UNKNOWN"}]}`))
				return
			case "redirect-port":
				http.Redirect(w, r, fmt.Sprintf("https://127.0.0.1:%s%s", side, p), http.StatusTemporaryRedirect)
				return
			}
			body, mt := im.manifest, im.manifestType
			if ref != "latest" {
				var ok bool
				if body, ok = im.manifests[ref]; !ok {
					http.Error(w, `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown","detail":{}}]}`, http.StatusNotFound)
					return
				}
				mt = im.types[ref]
			}
			w.Header().Set("Content-Type", mt)
			w.Header().Set("Docker-Content-Digest", sha256d(body))
			if *mode == "slow-manifest" {
				stall(w, r, body, 10)
				return
			}
			w.Header().Set("Content-Length", fmt.Sprint(len(body)))
			if r.Method != http.MethodHead {
				_, _ = w.Write(body)
			}
		case strings.HasPrefix(p, "/v2/hostile/img/blobs/"):
			d := strings.TrimPrefix(p, "/v2/hostile/img/blobs/")
			if *mode == "cdn-challenge" {
				http.Redirect(w, r, fmt.Sprintf("https://127.0.0.2:%s/cdn/%s", side, d), http.StatusTemporaryRedirect)
				return
			}
			b, ok := im.blobs[d]
			if !ok && *mode != "endless-layer" {
				http.Error(w, `{"errors":[{"code":"BLOB_UNKNOWN","message":"blob unknown","detail":{}}]}`, http.StatusNotFound)
				return
			}
			w.Header().Set("Content-Type", "application/octet-stream")
			switch {
			case *mode == "slow-config" && strings.Contains(b.mediaType, "config"):
				stall(w, r, b.data, 10)
				return
			case *mode == "endless-layer" && strings.Contains(b.mediaType, "layer"):
				// No Content-Length: chunked, without end (bounded at 1 GiB so
				// that a client without a cap cannot fill the disk for good).
				chunk := make([]byte, 64<<10)
				var sent int64
				defer func() { logf("sent %s %d", d, sent) }()
				for sent < 1<<30 {
					_, _ = rand.Read(chunk)
					n, err := w.Write(chunk)
					sent += int64(n)
					if err != nil {
						return
					}
				}
				return
			}
			w.Header().Set("Content-Length", fmt.Sprint(len(b.data)))
			if r.Method != http.MethodHead {
				_, _ = w.Write(b.data)
			}
		default:
			http.NotFound(w, r)
		}
	})
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// certificate returns a server certificate for 127.0.0.1 and 127.0.0.2
// signed by a fresh CA, written to dir/ca.crt.
func certificate(dir string) (tls.Certificate, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hostilereg test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(127, 0, 0, 2)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

func writePort(f string, l net.Listener) {
	port := fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
	if err := os.WriteFile(f+".tmp", []byte(port), 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.Rename(f+".tmp", f); err != nil {
		log.Fatal(err)
	}
}

func main() {
	flag.Parse()
	if *portFile == "" {
		log.Fatal("-port-file is required")
	}
	if *logFile != "" {
		f, err := os.OpenFile(*logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			log.Fatal(err)
		}
		logW = f
	}
	time.AfterFunc(*lifetime, func() { os.Exit(0) })
	var tlsConf *tls.Config
	if *tlsDir != "" {
		cert, err := certificate(*tlsDir)
		if err != nil {
			log.Fatal(err)
		}
		tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}}
	}
	listen := func(ip string) net.Listener {
		l, err := net.Listen("tcp", ip+":0")
		if err != nil {
			log.Fatal(err)
		}
		return l
	}
	ml := listen("127.0.0.1")
	side := ""
	switch *mode {
	case "http-realm", "redirect-port", "cdn-challenge":
		ip := "127.0.0.2" // another host name than the registry's 127.0.0.1
		if *mode == "redirect-port" {
			ip = "127.0.0.1" // the same IP, another port
		}
		sl := listen(ip)
		side = fmt.Sprint(sl.Addr().(*net.TCPAddr).Port)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			logf("side %s %s auth=%s", r.Method, r.URL.Path, yes(r.Header.Get("Authorization") != ""))
			if *mode == "cdn-challenge" && r.URL.Path != "/token" {
				w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="https://127.0.0.2:%s/token",service="cdn"`, side))
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"token":"hostile-token"}`))
		})
		s := &http.Server{Handler: h}
		if *mode != "http-realm" {
			s.TLSConfig = tlsConf
			go func() { _ = s.ServeTLS(sl, "", "") }()
		} else {
			go func() { _ = s.Serve(sl) }()
		}
		writePort(*portFile+".2", sl)
	}
	s := &http.Server{Handler: registry(build(*mode), side), TLSConfig: tlsConf}
	writePort(*portFile, ml)
	var err error
	if tlsConf != nil {
		err = s.ServeTLS(ml, "", "")
	} else {
		err = s.Serve(ml)
	}
	log.Fatal(err)
}
