// Package testcert makes throwaway certificates for tests: CA is a
// self-signed CA certificate (ECDSA P-256, valid an hour either side of
// now) as DER. Only tests import it; no binary links it.
package testcert
