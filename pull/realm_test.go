package pull

import (
	"net/url"
	"strings"
	"testing"

	"github.com/pullhelper/pullhelper/internal/failure"
)

func TestCheckRequest(t *testing.T) {
	p := &Request{Registry: "reg.example:5000"}
	hosts := []string{"reg.example:5000"}
	ep := &endpoints{allowed: map[string]bool{}}
	ep.add(&url.URL{Scheme: "https", Host: "reg.example:5000"})
	ep.add(&url.URL{Scheme: "https", Host: "reg.example:5001"}) // its realm
	for _, tc := range []struct {
		url      string
		verified bool
		refused  string
	}{
		{"https://reg.example:5000/v2/", true, ""},
		{"https://reg.example:5001/token", true, ""},
		{"https://cdn.example/blob", true, ""},
		{"https://REG.example:5000/v2/", true, ""},
		{"http://auth.example/token", true, "plain-http"},
		{"http://reg.example:5000/v2/", true, "plain-http"},
		{"http://auth.example/token", false, ""},
		{"https://reg.example:6000/v2/x", true, "another port"},
		{"https://reg.example/v2/x", true, "another port"},
		{"https://mirror.reg.example:6000/v2/x", true, "another port"},
		{"https://reg.example:6000/v2/x", false, "another port"},
	} {
		u, _ := url.Parse(tc.url)
		err := p.checkRequest(u, hosts, tc.verified, ep)
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s (verified %v): refused: %v", tc.url, tc.verified, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused) || failure.CodeOf(err) != failure.TLS):
			t.Errorf("%s (verified %v): %v, want a tls refusal with %q", tc.url, tc.verified, err, tc.refused)
		}
	}
}
