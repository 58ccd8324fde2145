package privdrop

import (
	"fmt"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// socket is allowed for AF_INET and AF_INET6 (containers/image speaks HTTP
// over TCP, Go's resolver (CGO_ENABLED=0) UDP/TCP to the nameservers) with
// type SOCK_STREAM or SOCK_DGRAM (SOCK_NONBLOCK and SOCK_CLOEXEC aside) and
// protocol 0, IPPROTO_TCP or IPPROTO_UDP; and for AF_NETLINK with
// NETLINK_ROUTE only, type SOCK_RAW or SOCK_DGRAM (Go's net package reads
// the interfaces over it: net.Interfaces, IPv6 zones; it opens
// SOCK_RAW|SOCK_CLOEXEC). Every other family gets EPERM: AF_UNIX above
// all, because a Unix socket is how a process hands file descriptors to
// another (SCM_RIGHTS) or talks to a local daemon, and the protocol fds
// are pipes; AF_ALG (kernel crypto) and AF_VSOCK as in Docker's profile;
// AF_PACKET, AF_KEY, AF_BLUETOOTH and the rest. Other netlink protocols
// (sock_diag lists every socket of the host, uevents, audit), raw IP and
// ICMP ("ping") sockets, SCTP and MPTCP are refused too. socketpair is
// outside Allowed.
var (
	allowedSocketDomains   = []uint32{unix.AF_INET, unix.AF_INET6}
	allowedInetTypes       = []uint32{unix.SOCK_STREAM, unix.SOCK_DGRAM}
	allowedInetProtocols   = []uint32{0, unix.IPPROTO_TCP, unix.IPPROTO_UDP}
	allowedNetlinkTypes    = []uint32{unix.SOCK_RAW, unix.SOCK_DGRAM}
	socketTypeFlags        = uint32(unix.SOCK_NONBLOCK | unix.SOCK_CLOEXEC)
	allowedNetlinkProtocol = uint32(unix.NETLINK_ROUTE)
)

// deniedFcntls: fcntl with these commands (arg1) gets EPERM; every other
// command reaches the kernel (Go's runtime and net use F_GETFL/F_SETFL,
// F_GETFD/F_SETFD, F_DUPFD_CLOEXEC and the pipe sizes; containers/storage's
// locks F_SETLK/F_SETLKW; nothing the child runs uses these). F_SETOWN,
// F_SETOWN_EX and F_SETSIG make the kernel signal a process of the caller's
// choosing when the descriptor (O_ASYNC) becomes ready: with F_SETSIG
// SIGKILL and a write, a kill of any process of the child's uid (with
// --user NAME|UID, another service's) past the kill/tgkill rule. F_SETLEASE
// lets the holder stall every other opener of the file for the lease-break
// time. (F_NOTIFY's signal goes to the caller itself, and without F_SETOWN
// an O_ASYNC descriptor has no owner to signal.)
var deniedFcntls = []uint32{unix.F_SETOWN, unix.F_SETOWN_EX, unix.F_SETSIG, unix.F_SETLEASE}

// deniedSockopts: setsockopt(fd, SOL_SOCKET, one of these) gets EPERM.
// With SO_REUSEPORT a socket of the child could join the reuseport group of
// another service of its uid (--user NAME|UID) on the same port and take a
// share of its datagrams or connections; with SO_REUSEADDR on UDP it could
// bind the port of any service that set it too (the kernel checks no uid
// there) and, bound last, receive its unicast datagrams; the two attach
// options steer a reuseport group. A pull only connects: Go sets
// SO_REUSEADDR on listeners and multicast sockets alone, never on a dial.
// (SO_REUSEPORT_LB is FreeBSD's; Linux has no such option.)
var deniedSockopts = []uint32{unix.SO_REUSEADDR, unix.SO_REUSEPORT, unix.SO_ATTACH_REUSEPORT_CBPF, unix.SO_ATTACH_REUSEPORT_EBPF}

// allowedArchPrctls: arch_prctl (amd64) only with what Go's runtime calls
// (runtime/sys_linux_amd64.s settls: ARCH_SET_FS, on every new thread) and
// the matching query; ARCH_MAP_VDSO_* (a new executable mapping),
// ARCH_SET_CPUID, ARCH_REQ_XCOMP_PERM, the shadow-stack controls and the
// rest get EPERM (asm/prctl.h).
var allowedArchPrctls = []uint32{archSetFS, archGetFS}

const (
	archSetFS = 0x1002
	archGetFS = 0x1003
)

// block assembles one rule with named jump targets ("" is the next
// instruction), so the rules with several arguments need no hand-counted
// skips. Every target lies ahead within the block.
type block struct {
	p      []bpf.Instruction
	labels map[string]int
	jumps  []jumpFix
}

type jumpFix struct {
	at   int
	t, f string
}

func newBlock() *block { return &block{labels: map[string]int{}} }

func (b *block) add(i ...bpf.Instruction) { b.p = append(b.p, i...) }

func (b *block) label(name string) { b.labels[name] = len(b.p) }

// jump: to t if A cond val holds, to f otherwise.
func (b *block) jump(cond bpf.JumpTest, val uint32, t, f string) {
	b.jumps = append(b.jumps, jumpFix{at: len(b.p), t: t, f: f})
	b.p = append(b.p, bpf.JumpIf{Cond: cond, Val: val})
}

func (b *block) done() ([]bpf.Instruction, error) {
	skip := func(at int, l string) (uint32, error) {
		if l == "" {
			return 0, nil
		}
		to, ok := b.labels[l]
		if !ok || to <= at || to-at-1 > 255 {
			return 0, fmt.Errorf("seccomp filter: bad jump to %q", l)
		}
		return uint32(to - at - 1), nil
	}
	for _, j := range b.jumps {
		t, err := skip(j.at, j.t)
		if err != nil {
			return nil, err
		}
		f, err := skip(j.at, j.f)
		if err != nil {
			return nil, err
		}
		ji := b.p[j.at].(bpf.JumpIf)
		ji.SkipTrue, ji.SkipFalse = uint8(t), uint8(f)
		b.p[j.at] = ji
	}
	return b.p, nil
}

func loadArg(off uint32) bpf.Instruction { return bpf.LoadAbsolute{Off: off, Size: 4} }

// anyOf jumps to t if A is one of vals, to f otherwise (both labels: ""
// would be the instruction after the first comparison).
func (b *block) anyOf(vals []uint32, t, f string) {
	for i, v := range vals {
		if i == len(vals)-1 {
			b.jump(bpf.JumpEqual, v, t, f)
		} else {
			b.jump(bpf.JumpEqual, v, t, "")
		}
	}
}

// socketRule: EPERM unless (domain, type, protocol) is allowed (above);
// an allowed socket goes on to the allowlist.
func socketRule(need func(string) (uint32, error)) ([]bpf.Instruction, error) {
	n, err := need("socket")
	if err != nil {
		return nil, err
	}
	b := newBlock()
	b.jump(bpf.JumpNotEqual, n, "end", "")
	b.add(loadArg(offArg0))
	b.anyOf(allowedSocketDomains, "inet", "")
	b.jump(bpf.JumpNotEqual, unix.AF_NETLINK, "deny", "")
	b.add(loadArg(offArg2))
	b.jump(bpf.JumpNotEqual, allowedNetlinkProtocol, "deny", "")
	b.add(loadArg(offArg1), bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: ^socketTypeFlags})
	b.anyOf(allowedNetlinkTypes, "end", "deny")
	b.label("inet")
	b.add(loadArg(offArg1), bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: ^socketTypeFlags})
	b.anyOf(allowedInetTypes, "proto", "deny")
	b.label("proto")
	b.add(loadArg(offArg2))
	b.anyOf(allowedInetProtocols, "end", "")
	b.label("deny")
	b.add(retErrno(unix.EPERM))
	b.label("end")
	b.add(bpf.LoadAbsolute{Off: offNr, Size: 4})
	return b.done()
}

// fcntlRule: fcntl with a command of deniedFcntls gets EPERM.
func fcntlRule(need func(string) (uint32, error)) ([]bpf.Instruction, error) {
	n, err := need("fcntl")
	if err != nil {
		return nil, err
	}
	b := newBlock()
	b.jump(bpf.JumpNotEqual, n, "end", "")
	b.add(loadArg(offArg1))
	b.anyOf(deniedFcntls, "deny", "end")
	b.label("deny")
	b.add(retErrno(unix.EPERM))
	b.label("end")
	b.add(bpf.LoadAbsolute{Off: offNr, Size: 4})
	return b.done()
}

// sockoptRule: setsockopt(fd, SOL_SOCKET, one of deniedSockopts) gets EPERM.
func sockoptRule(need func(string) (uint32, error)) ([]bpf.Instruction, error) {
	n, err := need("setsockopt")
	if err != nil {
		return nil, err
	}
	b := newBlock()
	b.jump(bpf.JumpNotEqual, n, "end", "")
	b.add(loadArg(offArg1))
	b.jump(bpf.JumpNotEqual, unix.SOL_SOCKET, "end", "")
	b.add(loadArg(offArg2))
	b.anyOf(deniedSockopts, "deny", "end")
	b.label("deny")
	b.add(retErrno(unix.EPERM))
	b.label("end")
	b.add(bpf.LoadAbsolute{Off: offNr, Size: 4})
	return b.done()
}
