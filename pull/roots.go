package pull

import (
	"crypto/x509"
	"encoding/pem"
	"runtime"
	"sync"
)

// rootPool is the pool built from Material.SystemRoots, once.
type rootPool struct {
	once sync.Once
	pool *x509.CertPool
}

// WarmRoots starts building the pool of m.SystemRoots in the background:
// the child calls it as soon as its request is read, so that the system's
// roots (about 150 certificates, 6–9 ms of parsing on a slow machine) are
// parsed while it mounts and drops its privileges rather than on the way
// to its first TLS handshake. systemPool waits for it.
func (m *Material) WarmRoots() {
	if m == nil || len(m.SystemRoots) == 0 {
		return
	}
	go m.roots.once.Do(m.buildRoots)
}

// systemPool is a pool of m.SystemRoots for one endpoint's TLS
// configuration (a copy: certificate directories add to it), or nil when
// the parent sent none (Go's system roots apply, loaded by x509 itself).
func (m *Material) systemPool() *x509.CertPool {
	if len(m.SystemRoots) == 0 {
		return nil
	}
	m.roots.once.Do(m.buildRoots)
	if m.roots.pool == nil {
		return nil
	}
	return m.roots.pool.Clone()
}

func (m *Material) buildRoots() { m.roots.pool = parsePool(m.SystemRoots) }

// parsePool is x509.CertPool.AppendCertsFromPEM of pemCerts (every
// CERTIFICATE block without headers that parses, in order; nil when none
// does), its certificates parsed by as many goroutines as there are CPUs
// to run them.
func parsePool(pemCerts []byte) *x509.CertPool {
	ders := CertificateDERs(pemCerts)
	certs := make([]*x509.Certificate, len(ders))
	workers := min(runtime.GOMAXPROCS(0), len(ders), 8)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(ders); i += workers {
				if c, err := x509.ParseCertificate(ders[i]); err == nil {
					certs[i] = c
				}
			}
		})
	}
	wg.Wait()
	pool := x509.NewCertPool()
	added := false
	for _, c := range certs {
		if c != nil {
			pool.AddCert(c)
			added = true
		}
	}
	if !added {
		return nil
	}
	return pool
}

// CertificateDERs are the DER bytes of pemData's CERTIFICATE blocks
// without headers, in order: the blocks x509.CertPool.AppendCertsFromPEM
// takes (it then keeps those that parse). The parent reads the system's
// roots with it, the copy builds its pool with it.
func CertificateDERs(pemData []byte) [][]byte {
	var ders [][]byte
	for len(pemData) > 0 {
		var b *pem.Block
		b, pemData = pem.Decode(pemData)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" || len(b.Headers) != 0 {
			continue
		}
		ders = append(ders, b.Bytes)
	}
	return ders
}
