package pipeline

import (
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/testcert"
)

// A host's client certificates are checked as the copy's
// SetupCertificates checks them, before any setup: a pair that loads
// passes; a certificate without its key, a key without its certificate and
// a pair that does not load are exit 4 with its messages.
func TestCheckClientPairs(t *testing.T) {
	cert, key := testcert.Pair(t)
	for _, tc := range []struct {
		name  string
		files map[string][]byte
		want  string
	}{
		{"a pair and a CA bundle that holds nothing", map[string][]byte{"c.cert": cert, "c.key": key, "ca.crt": []byte("not a certificate")}, ""},
		{"a certificate without its key", map[string][]byte{"c.cert": cert}, "missing key c.key for client certificate c.cert. Note that CA certificates should use the extension .crt"},
		{"a key without its certificate", map[string][]byte{"c.key": key}, "missing client certificate c.cert for key c.key"},
		{"a pair that does not load", map[string][]byte{"c.cert": cert, "c.key": []byte("garbage")}, "client certificate c.cert and key c.key: tls: "},
	} {
		err := checkClientPairs("reg.example", tc.files)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || failure.CodeOf(err) != failure.TLS || !strings.HasPrefix(err.Error(), "loading the certificates of reg.example: "+tc.want) {
			t.Errorf("%s: %v, want exit 4: %q", tc.name, err, tc.want)
		}
		if strings.Contains(err.Error(), "garbage") {
			t.Errorf("%s: the error quotes the key: %v", tc.name, err)
		}
	}
}
