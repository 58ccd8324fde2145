// Command faultproxy is a fault-injecting HTTP reverse proxy for the
// pullhelper system tests: it stands between pullhelper and the test
// registry, as a mirror or as the registry itself, forwards every request
// and injects the faults a rules file names. It listens on 127.0.0.1 only.
//
//	faultproxy -upstream URL -port-file F [-tls-cert C -tls-key K | -plain]
//	           [-upstream-ca CA] [-rules R] [-log L] [-log-header NAME,...]
//	           [-max-hold 60s] [-lifetime 15m]
//	faultproxy -check R
//
// Forwarding keeps the method, path, query, headers (Authorization and
// Range included; hop-by-hop headers excepted; Host becomes the upstream's)
// and streams the bodies both ways; nothing else is rewritten (a
// WWW-Authenticate realm or a Location still names the upstream). No
// compression is added, no User-Agent either, redirects are passed back,
// and the environment's proxy settings are ignored. It speaks HTTP/1.1 only
// (the faults need the connection).
//
// The rules file R is a JSON array, re-read whenever it is replaced (see
// RuleSet); the first rule that matches a request and has applications
// left applies to it:
//
//	[{"match": {"method": "GET", "path": "/blobs/", "query": ["ns"], "header": ["!Range"]},
//	  "count": 2, "status": 503, "retry_after": 1}]
//
// Actions (exactly one per rule):
//
//	status CODE         answer CODE (with retry_after, headers, body) without forwarding
//	reset_after N       send the headers and N body bytes, then reset the connection (RST)
//	close_after N       send the headers and N body bytes, then close it (FIN): a truncated body
//	stall_after N       send the headers and N body bytes, then nothing until the client
//	                    goes, -max-hold passes or the proxy stops
//	trickle R           send the body at R bytes per second (writes of R/20 bytes)
//	flip_byte OFFSET    invert the body byte at OFFSET
//	content_length N    announce Content-Length N and send at most N bytes
//	require_header H=V  answer status (default 403) unless the request has header H
//	                    with value V (or any value, without =V); else forward
//	ignore_range        drop Range and If-Range before forwarding (a full 200 answer)
//	drop                close the connection without answering
//
// The access log L gets one JSON line per request (see entry), written
// before the client can see the end of the response (before its last body
// byte or the connection's end), so a test may read it as soon as its client
// returns. Its time is when the request came, its end when the line was
// written: the interval lies within the client's request. Header values are never logged except those named by
// -log-header; Authorization, Proxy-Authorization and Cookie cannot be.
//
// The port is written to F (atomically) once the proxy listens. SIGTERM or
// SIGINT, or -lifetime passing, stops it at once: every connection is
// closed and "faultproxy: stopped" is printed on stderr.
//
// Invariants: it listens on 127.0.0.1 only; every request gets exactly one
// log line, written before the client can see the end of its response; no
// header value outside -log-header reaches the log; nothing runs longer
// than the client's connection, -max-hold or the proxy's life.
package main
