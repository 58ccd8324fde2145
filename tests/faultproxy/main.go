package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// hopByHop are the headers a proxy does not forward (RFC 9110 7.6.1).
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer",
	"Transfer-Encoding", "Upgrade"}

// dropHopByHop removes the hop-by-hop headers and those Connection names.
func dropHopByHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			h.Del(strings.TrimSpace(name))
		}
	}
	for _, name := range hopByHop {
		h.Del(name)
	}
}

// neverLogged are headers whose values -log-header may not name.
var neverLogged = map[string]bool{"Authorization": true, "Proxy-Authorization": true, "Cookie": true}

// entry is one access-log line.
type entry struct {
	// Time is when the request came, End when the line was written:
	// before the client can see the end of the response, so [Time, End]
	// lies within the client's request (a test may bound how many were
	// in flight at once).
	Time    string            `json:"time"`
	End     string            `json:"end"`
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Query   string            `json:"query"`
	Range   string            `json:"range"`
	Headers []string          `json:"headers"`          // names of the request headers, sorted
	Values  map[string]string `json:"values,omitempty"` // values of the -log-header headers present
	Rule    int               `json:"rule"`             // index in the rules file, -1 for none
	Action  string            `json:"action"`           // the rule's action, "" for none
	// Status is the status sent to the client (0 when none was).
	Status int `json:"status"`
	// Upstream is the upstream's status (0 when not forwarded).
	Upstream int `json:"upstream"`
	// Bytes and Writes count the body bytes sent and the writes they took.
	Bytes  int64  `json:"bytes"`
	Writes int    `json:"writes"`
	Error  string `json:"error,omitempty"`

	done bool
}

type proxy struct {
	upstream  *url.URL
	transport *http.Transport
	rules     *RuleSet
	maxHold   time.Duration
	allow     map[string]bool

	logMu sync.Mutex
	logW  io.Writer
}

// log writes e once (one write call, so lines never interleave).
func (p *proxy) log(e *entry) {
	if e.done {
		return
	}
	e.done = true
	e.End = time.Now().UTC().Format(time.RFC3339Nano)
	line, err := json.Marshal(e)
	if err != nil {
		line = []byte(fmt.Sprintf(`{"error":%q}`, err.Error()))
	}
	p.logMu.Lock()
	defer p.logMu.Unlock()
	if p.logW != nil {
		_, _ = p.logW.Write(append(line, '\n'))
	}
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e := &entry{Time: time.Now().UTC().Format(time.RFC3339Nano), Method: r.Method, Path: r.URL.Path,
		Query: r.URL.RawQuery, Range: r.Header.Get("Range"), Headers: []string{}, Rule: -1}
	for name, vs := range r.Header {
		e.Headers = append(e.Headers, name)
		if p.allow[name] {
			if e.Values == nil {
				e.Values = map[string]string{}
			}
			e.Values[name] = strings.Join(vs, ", ")
		}
	}
	sort.Strings(e.Headers)
	defer p.log(e)

	rule, idx, err := p.rules.Pick(r)
	if err != nil {
		e.Error = err.Error()
		p.answer(w, e, &Rule{Status: http.StatusInternalServerError, Body: "faultproxy: " + err.Error() + "\n"})
		return
	}
	if rule == nil {
		p.forward(w, r, e, nil)
		return
	}
	e.Rule, e.Action = idx, rule.Action()
	switch rule.Action() {
	case "status":
		p.answer(w, e, rule)
	case "require_header":
		if rule.Satisfied(r) {
			p.forward(w, r, e, nil)
			return
		}
		refusal := *rule
		if refusal.Status == 0 {
			refusal.Status = http.StatusForbidden
		}
		p.answer(w, e, &refusal)
	case "drop":
		p.log(e)
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
	case "ignore_range":
		r.Header.Del("Range")
		r.Header.Del("If-Range")
		p.forward(w, r, e, nil)
	default:
		p.forward(w, r, e, rule)
	}
}

// answer sends the rule's status, headers and body.
func (p *proxy) answer(w http.ResponseWriter, e *entry, rule *Rule) {
	for k, v := range rule.Headers {
		w.Header().Set(k, v)
	}
	if ra := rule.RetryAfterValue(); ra != "" {
		w.Header().Set("Retry-After", ra)
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(rule.Body)))
	e.Status, e.Bytes = rule.Status, int64(len(rule.Body))
	if rule.Body != "" {
		e.Writes = 1
	}
	p.log(e)
	w.WriteHeader(rule.Status)
	_, _ = io.WriteString(w, rule.Body)
}

// forward sends r upstream and streams the answer back, faulted by rule
// (nil, or one of the body actions).
func (p *proxy) forward(w http.ResponseWriter, r *http.Request, e *entry, rule *Rule) {
	target := p.upstream.Scheme + "://" + p.upstream.Host + strings.TrimSuffix(p.upstream.Path, "/") + r.URL.RequestURI()
	body := r.Body
	if r.ContentLength == 0 {
		body = http.NoBody
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, target, body)
	if err != nil {
		e.Error = "building upstream request: " + err.Error()
		p.answer(w, e, &Rule{Status: http.StatusBadGateway, Body: "faultproxy: " + e.Error + "\n"})
		return
	}
	out.ContentLength = r.ContentLength
	out.Header = r.Header.Clone()
	dropHopByHop(out.Header)
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = []string{""} // send none, as the client did
	}
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		e.Error = "upstream: " + err.Error()
		p.answer(w, e, &Rule{Status: http.StatusBadGateway, Body: "faultproxy: " + e.Error + "\n"})
		return
	}
	defer resp.Body.Close()
	e.Upstream = resp.StatusCode
	dropHopByHop(resp.Header)
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	limit := int64(-1)
	if rule != nil {
		limit = rule.Limit()
		if rule.Action() == "content_length" {
			w.Header().Set("Content-Length", strconv.FormatInt(limit, 10))
		}
	}
	e.Status = resp.StatusCode
	if r.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified {
		p.log(e)
		w.WriteHeader(resp.StatusCode)
		return
	}
	w.WriteHeader(resp.StatusCode)
	p.stream(w, r, e, rule, resp.Body, limit)
}

// stream copies the upstream body to w. The log line is written before the
// last write of a complete body, or after the last write of a cut one
// (whose end the client sees only when the connection ends).
func (p *proxy) stream(w http.ResponseWriter, r *http.Request, e *entry, rule *Rule, body io.Reader, limit int64) {
	rc := http.NewResponseController(w)
	action, rate := "", int64(0)
	if rule != nil {
		action, rate = rule.Action(), rule.Trickle
	}
	br := bufio.NewReaderSize(body, 32<<10)
	buf := make([]byte, 32<<10)
	start := time.Now()
	for {
		var chunk []byte
		var rerr error
		if limit < 0 || e.Bytes < limit {
			n, err := br.Read(buf)
			chunk, rerr = buf[:n], err
			if limit >= 0 && e.Bytes+int64(n) > limit {
				chunk = chunk[:limit-e.Bytes]
			}
		}
		atLimit := limit >= 0 && e.Bytes+int64(len(chunk)) >= limit
		cut := atLimit && action != "content_length"
		last := rerr != nil || atLimit
		if !last {
			if _, err := br.Peek(1); err != nil {
				last, rerr = true, err
			}
		}
		if rerr != nil && rerr != io.EOF {
			e.Error = "upstream body: " + rerr.Error()
		}
		if action == "flip_byte" {
			if off := *rule.FlipByte - e.Bytes; off >= 0 && off < int64(len(chunk)) {
				chunk[off] ^= 0xff
			}
		}
		offset := e.Bytes
		if last && !cut {
			// Count the last chunk and log before the client can see it.
			e.Bytes += int64(len(chunk))
			e.Writes += writesFor(int64(len(chunk)), rate)
			p.log(e)
		}
		n, writes, err := p.write(w, rc, r.Context(), chunk, offset, rate, start)
		if !e.done {
			e.Bytes += n
			e.Writes += writes
		}
		if err != nil {
			e.Error = "client: " + err.Error()
			return
		}
		if !last {
			continue
		}
		if cut {
			p.fault(rc, r.Context(), e, action)
		}
		return
	}
}

// writesFor is how many writes write makes for n bytes at rate.
func writesFor(n, rate int64) int {
	if n == 0 {
		return 0
	}
	if rate == 0 {
		return 1
	}
	piece := max(1, rate/20)
	return int((n + piece - 1) / piece)
}

// write sends chunk, the body bytes from offset on; with a rate (trickle)
// in pieces of rate/20 bytes, each flushed when the rate allows. It returns
// the bytes and writes done.
func (p *proxy) write(w http.ResponseWriter, rc *http.ResponseController, ctx context.Context, chunk []byte, offset, rate int64, start time.Time) (int64, int, error) {
	if len(chunk) == 0 {
		return 0, 0, nil
	}
	if rate == 0 {
		n, err := w.Write(chunk)
		return int64(n), 1, err
	}
	piece := max(1, rate/20)
	var sent int64
	writes := 0
	for len(chunk) > 0 {
		due := start.Add(time.Duration(float64(offset+sent) / float64(rate) * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return sent, writes, ctx.Err()
			case <-t.C:
			}
		}
		n, err := w.Write(chunk[:min(int64(len(chunk)), piece)])
		sent += int64(n)
		writes++
		if err == nil {
			err = rc.Flush()
		}
		if err != nil {
			return sent, writes, err
		}
		chunk = chunk[n:]
	}
	return sent, writes, nil
}

// fault ends a cut response as the action says; the log line is written
// once the bytes before the cut are out.
func (p *proxy) fault(rc *http.ResponseController, ctx context.Context, e *entry, action string) {
	if err := rc.Flush(); err != nil {
		e.Error = "client: " + err.Error()
		return
	}
	if action == "stall_after" {
		p.log(e)
		t := time.NewTimer(p.maxHold)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	conn, buf, err := rc.Hijack()
	if err != nil {
		e.Error = "hijacking: " + err.Error()
		return
	}
	_ = buf.Flush()
	if tc, ok := conn.(*tls.Conn); ok && action == "reset_after" {
		// Reset the TCP connection under TLS: tls.Conn.Close would send
		// close_notify first, a clean end of the stream.
		conn = tc.NetConn()
	}
	defer conn.Close()
	if tc, ok := conn.(*net.TCPConn); ok && action == "reset_after" {
		waitSent(tc, 2*time.Second)
		_ = tc.SetLinger(0) // Close sends RST
	}
	p.log(e)
}

// waitSent waits (at most d) until the kernel has no unacknowledged data
// for conn, so that an RST does not discard bytes the client should get.
func waitSent(conn *net.TCPConn, d time.Duration) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return
	}
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		outq := 0
		_ = raw.Control(func(fd uintptr) {
			outq, _ = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) // 0 on error
		})
		if outq == 0 {
			return
		}
	}
}

func main() {
	var (
		upstream   = flag.String("upstream", "", "URL to forward to (https://HOST:PORT or http://...)")
		upstreamCA = flag.String("upstream-ca", "", "CA certificate file (PEM) for an https upstream (default: system roots)")
		portFile   = flag.String("port-file", "", "file to write the listening port to")
		tlsCert    = flag.String("tls-cert", "", "server certificate (PEM)")
		tlsKey     = flag.String("tls-key", "", "server key (PEM)")
		plain      = flag.Bool("plain", false, "serve plain HTTP instead of TLS")
		rulesFile  = flag.String("rules", "", "rules file (JSON array; re-read when replaced)")
		logFile    = flag.String("log", "", "access log (one JSON line per request)")
		logHeaders = flag.String("log-header", "", "comma-separated request headers whose values are logged")
		maxHold    = flag.Duration("max-hold", time.Minute, "longest a stall_after holds a connection")
		lifetime   = flag.Duration("lifetime", 15*time.Minute, "exit after this long")
		check      = flag.String("check", "", "only parse this rules file and exit (0 valid, 2 not)")
	)
	flag.Parse()
	if *check != "" {
		data, err := os.ReadFile(*check)
		if err == nil {
			_, err = ParseRules(data)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "faultproxy: %s: %v\n", *check, err)
			os.Exit(2)
		}
		return
	}
	if err := run(*upstream, *upstreamCA, *portFile, *tlsCert, *tlsKey, *plain, *rulesFile, *logFile, *logHeaders, *maxHold, *lifetime); err != nil {
		fmt.Fprintf(os.Stderr, "faultproxy: %v\n", err)
		os.Exit(2)
	}
	fmt.Fprintln(os.Stderr, "faultproxy: stopped")
}

func run(upstream, upstreamCA, portFile, tlsCert, tlsKey string, plain bool, rulesFile, logFile, logHeaders string, maxHold, lifetime time.Duration) error {
	u, err := url.Parse(upstream)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" {
		return fmt.Errorf("-upstream %q: want http(s)://HOST[:PORT][/PATH]", upstream)
	}
	if portFile == "" {
		return errors.New("-port-file is required")
	}
	// The files it writes are named absolutely: a relative -log landed in
	// whatever directory the proxy was started from (a stray access log,
	// ./log, was once committed at the repository's root).
	for _, f := range []struct{ flag, path string }{{"-port-file", portFile}, {"-log", logFile}} {
		if f.path != "" && !filepath.IsAbs(f.path) {
			return fmt.Errorf("%s %q: give an absolute path (a test's tmp dir), not one relative to the working directory", f.flag, f.path)
		}
	}
	if plain == (tlsCert != "" || tlsKey != "") || (!plain && (tlsCert == "" || tlsKey == "")) {
		return errors.New("give -tls-cert and -tls-key, or -plain")
	}
	p := &proxy{upstream: u, rules: NewRuleSet(rulesFile), maxHold: maxHold, allow: map[string]bool{}}
	for _, h := range strings.Split(logHeaders, ",") {
		if h = http.CanonicalHeaderKey(strings.TrimSpace(h)); h == "" {
			continue
		} else if neverLogged[h] {
			return fmt.Errorf("-log-header: the value of %s is never logged", h)
		}
		p.allow[h] = true
	}
	tlsClient := &tls.Config{}
	if upstreamCA != "" {
		pem, err := os.ReadFile(upstreamCA)
		if err != nil {
			return fmt.Errorf("reading -upstream-ca: %w", err)
		}
		tlsClient.RootCAs = x509.NewCertPool()
		if !tlsClient.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("-upstream-ca %s: no PEM certificate", upstreamCA)
		}
	}
	p.transport = &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		TLSClientConfig:     tlsClient,
		TLSHandshakeTimeout: 10 * time.Second,
		DisableCompression:  true,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     30 * time.Second,
	}
	defer p.transport.CloseIdleConnections()
	if logFile != "" {
		f, err := os.OpenFile(logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("opening -log: %w", err)
		}
		defer f.Close()
		p.logW = f
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, lifetime)
	defer cancel()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           p,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ReadHeaderTimeout: 30 * time.Second,
		// HTTP/1.1 only: faults need the connection (Hijack).
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
		ErrorLog:     nil,
	}
	if !plain {
		cert, err := tls.LoadX509KeyPair(tlsCert, tlsKey)
		if err != nil {
			return fmt.Errorf("loading -tls-cert/-tls-key: %w", err)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
		ln = tls.NewListener(ln, srv.TLSConfig)
	}
	tmp := filepath.Join(filepath.Dir(portFile), "."+filepath.Base(portFile)+".tmp")
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, portFile); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// Close, not Shutdown: a test's teardown must not wait for a stalled
	// or trickling client. Handlers see ctx done and return.
	_ = srv.Close()
	return nil
}
