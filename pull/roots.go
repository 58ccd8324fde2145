package pull

import (
	"crypto/x509"
	"sync"
)

// rootPool is the pool built from Material.SystemRoots, once.
type rootPool struct {
	once sync.Once
	pool *x509.CertPool
}

// systemPool is a pool of m.SystemRoots for one endpoint's TLS
// configuration (a copy: certificate directories add to it), or nil when
// the parent sent none (Go's system roots apply, loaded by x509 itself).
func (m *Material) systemPool() *x509.CertPool {
	if len(m.SystemRoots) == 0 {
		return nil
	}
	m.roots.once.Do(func() {
		p := x509.NewCertPool()
		if p.AppendCertsFromPEM(m.SystemRoots) {
			m.roots.pool = p
		}
	})
	if m.roots.pool == nil {
		return nil
	}
	return m.roots.pool.Clone()
}
