package pull

import (
	"crypto/tls"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
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
