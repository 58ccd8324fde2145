package pull

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/pullhelper/pullhelper/internal/testcert"
)

// The roots the parent sends are the pool every endpoint starts from: a
// server whose CA is among them is verified, one whose CA is not fails,
// and without any the pool is left to Go (nil).
func TestSystemPoolFromMaterial(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer srv.Close()
	get := func(pool *tls.Config) error {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: pool}}
		resp, err := c.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if p := (&Material{}).systemPool(); p != nil {
		t.Fatal("no SystemRoots: want a nil pool (Go's system roots)")
	}
	caPEM := pemOf(srv.Certificate().Raw)
	m := &Material{SystemRoots: caPEM}
	if err := get(&tls.Config{RootCAs: m.systemPool()}); err != nil {
		t.Fatalf("the server's CA is among the roots sent, yet: %v", err)
	}
	m2 := &Material{SystemRoots: pemOf(testcert.CA(t, "other"))}
	if err := get(&tls.Config{RootCAs: m2.systemPool()}); err == nil {
		t.Fatal("a server whose CA is not among the roots sent was verified")
	}
	// Each call is a copy: adding an endpoint's CA to one does not add it
	// to another endpoint's pool.
	p1 := m2.systemPool()
	p1.AppendCertsFromPEM(caPEM)
	if err := get(&tls.Config{RootCAs: m2.systemPool()}); err == nil {
		t.Fatal("a CA added to one endpoint's pool reached another's")
	}
}

func pemOf(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// parsePool builds the pool x509.CertPool.AppendCertsFromPEM builds (equal
// pools), skipping what it skips (another block type, a block with
// headers, a certificate that does not parse; duplicates), on the
// system's bundle and on a hand-made one, and nil where it adds nothing;
// WarmRoots' pool is systemPool's.
func TestParsePoolIsAppendCertsFromPEM(t *testing.T) {
	a, b := pemOf(testcert.CA(t, "a")), pemOf(testcert.CA(t, "b"))
	headed := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Headers: map[string]string{"Proc-Type": "4,ENCRYPTED"}, Bytes: testcert.CA(t, "c")})
	cases := map[string][]byte{
		"hand-made": bytes.Join([][]byte{
			[]byte("# a comment before\n"), a,
			pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("not a key")}),
			headed, pemOf([]byte("not a certificate")), b, a, []byte("trailing text"),
		}, nil),
		"nothing that parses": bytes.Join([][]byte{headed, pemOf([]byte("not a certificate"))}, nil),
		"empty":               nil,
	}
	if bundle, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		cases["the system's bundle"] = bundle
	} else {
		t.Logf("no system bundle to compare with: %v", err)
	}
	for name, in := range cases {
		want := x509.NewCertPool()
		if !want.AppendCertsFromPEM(in) {
			want = nil
		}
		got := parsePool(in)
		if (got == nil) != (want == nil) || got != nil && !got.Equal(want) {
			t.Errorf("%s: parsePool's pool differs from AppendCertsFromPEM's (nil: %v, %v)", name, got == nil, want == nil)
		}
	}
	m := &Material{SystemRoots: bytes.Join([][]byte{a, b}, nil)}
	m.WarmRoots()
	want := x509.NewCertPool()
	want.AppendCertsFromPEM(m.SystemRoots)
	if got := m.systemPool(); got == nil || !got.Equal(want) {
		t.Fatal("the pool WarmRoots built is not the roots' pool")
	}
}
