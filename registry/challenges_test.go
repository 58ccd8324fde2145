package registry

import (
	"bufio"
	"context"
	"net"
	"strings"
	"testing"
)

// rawServer answers every request on a loopback listener with head (the
// status line and headers, without the blank line that ends them).
func rawServer(t *testing.T, head string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					l, err := br.ReadString('\n')
					if err != nil || l == "\r\n" {
						break
					}
				}
				w := bufio.NewWriterSize(c, 1<<20)
				_, _ = w.WriteString(head + "\r\n")
				_ = w.Flush()
			}()
		}
	}()
	return ln.Addr().String()
}

// One 401 carrying many challenges keeps at most maxChallenges of at most
// maxChallengeParams parameters each; headers past maxHeaderBytes fail the
// request (Go's default would take 10 MiB of them, which a review measured
// as 283,288 challenges and 112 MB held by the client).
func TestChallengesBounded(t *testing.T) {
	params := strings.Repeat("a=b,", 100)
	line := "WWW-Authenticate: Basic " + params + "c=d\r\n"
	for name, tc := range map[string]struct {
		lines   int
		tooMany bool
	}{
		"under the header bound": {lines: (maxHeaderBytes - 4096) / len(line)},
		"over the header bound":  {lines: 2 * maxHeaderBytes / len(line), tooMany: true},
	} {
		t.Run(name, func(t *testing.T) {
			addr := rawServer(t, "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n"+strings.Repeat(line, tc.lines))
			c := New([]Endpoint{{Scheme: "http", Host: addr, Path: "/v2", Repository: "app", Resolve: true,
				Credential: &Credential{Username: "u", Password: "p"}}}, Hooks{})
			defer c.Close()
			_, _, _, err := c.Manifest(context.Background(), "latest", nil, 1<<20)
			if err == nil {
				t.Fatal("served")
			}
			chs := c.hosts[0].challenges
			if len(chs) > maxChallenges {
				t.Errorf("%d challenges kept from one answer", len(chs))
			}
			for _, ch := range chs {
				if len(ch.params) > maxChallengeParams {
					t.Errorf("a challenge kept %d parameters", len(ch.params))
				}
			}
			if tc.tooMany && !strings.Contains(err.Error(), "header") {
				t.Errorf("headers of %d bytes: %v; want the transport's refusal", tc.lines*len(line), err)
			}
			if !tc.tooMany && len(chs) == 0 {
				t.Errorf("no challenge kept: %v", err)
			}
		})
	}
}
