package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	genlIDCtrl          = 0x10
	ctrlCmdGetFamily    = 3
	ctrlAttrFamilyID    = 1
	ctrlAttrFamilyName  = 2
	taskstatsCmdGet     = 1
	cmdAttrRegisterMask = 3
	typePID             = 1
	typeStats           = 3
	typeAggrPID         = 4

	// offsets in struct taskstats (linux/taskstats.h, version >= 12)
	offVersion = 0
	offComm    = 80
	offPID     = 128
	offPPID    = 132
	offUtime   = 152
	offStime   = 160
	offHWM     = 200
	offTGID    = 368
)

type record struct {
	tid, tgid, ppid  uint32
	comm             string
	utimeUS, stimeUS uint64
	hwmKiB           uint64
}

type proc struct {
	PID     uint32  `json:"pid"`
	Comm    string  `json:"comm"`
	Threads int     `json:"threads"`
	UserS   float64 `json:"user_s"`
	SysS    float64 `json:"sys_s"`
	CPUS    float64 `json:"cpu_s"`
	PeakKiB uint64  `json:"peak_rss_kib"`
}

type report struct {
	WallS    float64 `json:"wall_s"`
	ExitCode int     `json:"exit_code"`
	// Rusage is wait4's: CPU of the command and its reaped descendants,
	// MaxRSS the largest of them.
	Rusage struct {
		UserS     float64 `json:"user_s"`
		SysS      float64 `json:"sys_s"`
		CPUS      float64 `json:"cpu_s"`
		MaxRSSKiB int64   `json:"max_rss_kib"`
	} `json:"rusage"`
	// FirstRequestS and FirstResponseS (with -proxy-listen): seconds from
	// the command's start to the first byte a client sent through the
	// proxy, and to the first byte the registry sent back.
	FirstRequestS  *float64 `json:"first_request_s,omitempty"`
	FirstResponseS *float64 `json:"first_response_s,omitempty"`
	Self           *proc    `json:"self"`
	Descendants    []proc   `json:"descendants"`
}

func main() {
	out := flag.String("o", "", "write the JSON report here")
	flag.StringVar(&proxyListen, "proxy-listen", "", "relay TCP from this address to -proxy-to, timing the first bytes")
	flag.StringVar(&proxyTo, "proxy-to", "", "the registry's address for -proxy-listen")
	flag.StringVar(&fd3File, "fd3", "", "open this file for writing and hand it to the command as descriptor 3 (e.g. --progress-fd 3)")
	flag.Parse()
	if *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: meter -o OUT.json -- CMD [ARGS...]")
		os.Exit(2)
	}
	rep, err := run(flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "meter:", err)
		os.Exit(125)
	}
	data, _ := json.Marshal(rep)
	if err := os.WriteFile(*out, append(data, '\n'), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "meter:", err)
		os.Exit(125)
	}
	os.Exit(rep.ExitCode)
}

func run(argv []string) (*report, error) {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, syscall.NETLINK_GENERIC)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	defer syscall.Close(fd)
	_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, 64<<20)
	if err := syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	fam, err := familyID(fd)
	if err != nil {
		return nil, err
	}
	mask := fmt.Sprintf("0-%d\x00", runtime.NumCPU()-1)
	if err := send(fd, fam, taskstatsCmdGet, attr(cmdAttrRegisterMask, []byte(mask))); err != nil {
		return nil, fmt.Errorf("taskstats register: %w", err)
	}
	tv := syscall.NsecToTimeval(int64(20 * time.Millisecond))
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		return nil, err
	}

	var (
		mu      sync.Mutex
		recs    []record
		readErr error
		done    = make(chan struct{})
		stopped = make(chan struct{})
	)
	go func() {
		defer close(stopped)
		buf := make([]byte, 1<<16)
		for {
			n, _, err := syscall.Recvfrom(fd, buf, 0)
			if err != nil {
				if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) {
					select {
					case <-done:
						return // reaped and the queue is empty
					default:
						continue
					}
				}
				mu.Lock()
				readErr = fmt.Errorf("netlink receive: %w (exit records lost)", err)
				mu.Unlock()
				return
			}
			rs := parse(buf[:n])
			mu.Lock()
			recs = append(recs, rs...)
			mu.Unlock()
		}
	}()

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if fd3File != "" {
		f, err := os.OpenFile(fd3File, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			close(done)
			return nil, err
		}
		defer f.Close()
		cmd.ExtraFiles = []*os.File{f}
	}
	t0 := time.Now()
	var px *proxy
	if proxyListen != "" {
		if px, err = startProxy(proxyListen, proxyTo, t0); err != nil {
			close(done)
			return nil, err
		}
		defer px.ln.Close()
	}
	if err := cmd.Start(); err != nil {
		close(done)
		return nil, err
	}
	werr := cmd.Wait()
	wall := time.Since(t0)
	close(done)
	<-stopped
	if readErr != nil {
		return nil, readErr
	}
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		return nil, werr
	}
	rep := &report{WallS: wall.Seconds(), ExitCode: cmd.ProcessState.ExitCode()}
	if px != nil {
		rep.FirstRequestS, rep.FirstResponseS = px.first()
	}
	if rep.ExitCode < 0 {
		rep.ExitCode = 128 + int(cmd.ProcessState.Sys().(syscall.WaitStatus).Signal())
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	rep.Rusage.UserS = tvS(ru.Utime)
	rep.Rusage.SysS = tvS(ru.Stime)
	rep.Rusage.CPUS = rep.Rusage.UserS + rep.Rusage.SysS
	rep.Rusage.MaxRSSKiB = ru.Maxrss

	// Group thread records by process; keep the command and its descendants.
	root := uint32(cmd.Process.Pid)
	procs := map[uint32]*proc{}
	parent := map[uint32]uint32{}
	var order []uint32
	for _, r := range recs {
		p := procs[r.tgid]
		if p == nil {
			p = &proc{PID: r.tgid}
			procs[r.tgid] = p
			order = append(order, r.tgid)
		}
		if r.tid == r.tgid || p.Comm == "" {
			p.Comm = r.comm
			parent[r.tgid] = r.ppid
		}
		p.Threads++
		p.UserS += float64(r.utimeUS) / 1e6
		p.SysS += float64(r.stimeUS) / 1e6
		p.PeakKiB = max(p.PeakKiB, r.hwmKiB)
	}
	inTree := func(pid uint32) bool {
		for range 64 {
			if pid == root {
				return true
			}
			pp, ok := parent[pid]
			if !ok || pp == 0 || pp == pid {
				return false
			}
			pid = pp
		}
		return false
	}
	for _, pid := range order {
		p := procs[pid]
		p.CPUS = p.UserS + p.SysS
		if pid == root {
			rep.Self = p
		} else if inTree(pid) {
			rep.Descendants = append(rep.Descendants, *p)
		}
	}
	if rep.Self == nil {
		return nil, fmt.Errorf("no taskstats exit record for pid %d", root)
	}
	return rep, nil
}

var (
	proxyListen, proxyTo string
	fd3File              string
)

// proxy relays TCP connections and notes when the first byte went each way.
type proxy struct {
	ln       net.Listener
	t0       time.Time
	mu       sync.Mutex
	req, rsp time.Duration
}

func startProxy(listen, to string, t0 time.Time) (*proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, t0: t0}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.relay(c, to)
		}
	}()
	return p, nil
}

func (p *proxy) note(d *time.Duration) {
	p.mu.Lock()
	if *d == 0 {
		*d = time.Since(p.t0)
	}
	p.mu.Unlock()
}

func (p *proxy) first() (*float64, *float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := func(d time.Duration) *float64 {
		if d == 0 {
			return nil
		}
		s := d.Seconds()
		return &s
	}
	return f(p.req), f(p.rsp)
}

func (p *proxy) relay(c net.Conn, to string) {
	defer c.Close()
	u, err := net.Dial("tcp", to)
	if err != nil {
		return
	}
	defer u.Close()
	pipe := func(dst, src net.Conn, d *time.Duration) {
		buf := make([]byte, 256<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				p.note(d)
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); pipe(u, c, &p.req) }()
	pipe(c, u, &p.rsp)
	wg.Wait()
}

func tvS(tv syscall.Timeval) float64 { return float64(tv.Sec) + float64(tv.Usec)/1e6 }

var seq uint32

func attr(typ uint16, data []byte) []byte {
	l := 4 + len(data)
	b := make([]byte, (l+3)&^3)
	binary.NativeEndian.PutUint16(b[0:], uint16(l))
	binary.NativeEndian.PutUint16(b[2:], typ)
	copy(b[4:], data)
	return b
}

func send(fd int, family uint16, cmd uint8, attrs []byte) error {
	seq++
	b := make([]byte, 16+4+len(attrs))
	binary.NativeEndian.PutUint32(b[0:], uint32(len(b)))
	binary.NativeEndian.PutUint16(b[4:], family)
	binary.NativeEndian.PutUint16(b[6:], syscall.NLM_F_REQUEST|syscall.NLM_F_ACK)
	binary.NativeEndian.PutUint32(b[8:], seq)
	b[16] = cmd
	b[17] = 1 // genl version
	copy(b[20:], attrs)
	if err := syscall.Sendto(fd, b, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return err
	}
	// Read until the ACK (an NLMSG_ERROR with error 0) for this request.
	buf := make([]byte, 1<<16)
	for {
		n, _, err := syscall.Recvfrom(fd, buf, 0)
		if err != nil {
			return err
		}
		for m := buf[:n]; len(m) >= 16; {
			l := int(binary.NativeEndian.Uint32(m[0:]))
			if l < 16 || l > len(m) {
				break
			}
			typ := binary.NativeEndian.Uint16(m[4:])
			s := binary.NativeEndian.Uint32(m[8:])
			if typ == syscall.NLMSG_ERROR && s == seq {
				if e := int32(binary.NativeEndian.Uint32(m[16:])); e != 0 {
					return syscall.Errno(-e)
				}
				return nil
			}
			if family == genlIDCtrl && s == seq && typ == genlIDCtrl {
				lastReply = append([]byte(nil), m[:l]...)
			}
			m = m[(l+3)&^3:]
		}
	}
}

var lastReply []byte

func familyID(fd int) (uint16, error) {
	lastReply = nil
	if err := send(fd, genlIDCtrl, ctrlCmdGetFamily, attr(ctrlAttrFamilyName, []byte("TASKSTATS\x00"))); err != nil {
		return 0, fmt.Errorf("genetlink family TASKSTATS (CONFIG_TASKSTATS): %w", err)
	}
	for a := range attrs(lastReply[20:]) {
		if a.typ == ctrlAttrFamilyID && len(a.data) >= 2 {
			return binary.NativeEndian.Uint16(a.data), nil
		}
	}
	return 0, errors.New("genetlink: no TASKSTATS family id")
}

type nlattr struct {
	typ  uint16
	data []byte
}

func attrs(b []byte) func(func(nlattr) bool) {
	return func(yield func(nlattr) bool) {
		for len(b) >= 4 {
			l := int(binary.NativeEndian.Uint16(b[0:]))
			if l < 4 || l > len(b) {
				return
			}
			if !yield(nlattr{typ: binary.NativeEndian.Uint16(b[2:]) & 0x3fff, data: b[4:l]}) {
				return
			}
			b = b[min((l+3)&^3, len(b)):]
		}
	}
}

// parse extracts the per-thread exit records from one datagram.
func parse(buf []byte) []record {
	var out []record
	for m := buf; len(m) >= 20; {
		l := int(binary.NativeEndian.Uint32(m[0:]))
		if l < 20 || l > len(m) {
			break
		}
		for a := range attrs(m[20:l]) {
			if a.typ != typeAggrPID {
				continue
			}
			var r record
			ok := false
			for n := range attrs(a.data) {
				switch n.typ {
				case typePID:
					if len(n.data) >= 4 {
						r.tid = binary.NativeEndian.Uint32(n.data)
					}
				case typeStats:
					s := n.data
					if len(s) < offTGID+4 || binary.NativeEndian.Uint16(s[offVersion:]) < 12 {
						continue
					}
					r.comm = strings.TrimRight(string(s[offComm:offComm+32]), "\x00")
					r.ppid = binary.NativeEndian.Uint32(s[offPPID:])
					r.tgid = binary.NativeEndian.Uint32(s[offTGID:])
					r.utimeUS = binary.NativeEndian.Uint64(s[offUtime:])
					r.stimeUS = binary.NativeEndian.Uint64(s[offStime:])
					r.hwmKiB = binary.NativeEndian.Uint64(s[offHWM:])
					if r.tid == 0 {
						r.tid = binary.NativeEndian.Uint32(s[offPID:])
					}
					ok = true
				}
			}
			if ok {
				out = append(out, r)
			}
		}
		m = m[min((l+3)&^3, len(m)):]
	}
	return out
}
