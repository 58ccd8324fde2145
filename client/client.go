package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pullhelper/pullhelper/api"
)

// DefaultGrace is how long Pull waits after SIGTERM before SIGKILL when ctx
// ends (Client.Grace zero).
const DefaultGrace = 10 * time.Second

// Client runs one pullhelper binary. The zero value is ready to use: it runs
// "pullhelper" from $PATH with the process's environment. A Client is safe
// for concurrent use.
type Client struct {
	// Binary is the pullhelper executable: a path, or a name looked up in
	// $PATH (default "pullhelper").
	Binary string
	// Grace is how long the helper may take to clean up after SIGTERM once
	// ctx ends, before SIGKILL (default DefaultGrace). A helper killed so
	// leaves its cgroup and staging for the next run to reclaim.
	Grace time.Duration
	// Env is the helper's environment (nil: this process's). Secrets do not
	// belong here; use Request.PullSecrets and Request.AuthFile.
	Env []string
	// Stderr receives the helper's logs (nil: discarded). They never hold
	// a secret.
	Stderr io.Writer
}

// Request is one pull. Empty fields leave the setting to the policy file
// and the binary's defaults; each maps to one flag of `pullhelper pull`
// (pullhelper(1)).
type Request struct {
	// Image is the docker reference to pull (host[:port]/repo[:tag][@digest]).
	Image string
	// Dest is the containers transport to pull into (oci:PATH[:TAG], dir:PATH, ...).
	Dest string

	Policy  string // --policy FILE
	Profile string // --profile NAME

	// PullSecrets are Kubernetes pull secrets (a .dockerconfigjson or
	// .dockercfg document, or a Secret manifest), each passed over its own
	// pipe (--pull-secret-fd), after PullSecretFiles.
	PullSecrets [][]byte
	// AuthFile is a containers-auth.json(5) document passed over a pipe
	// (--authfile-fd); it is then the only auth file. Exclusive with
	// AuthFilePath.
	AuthFile []byte
	// ServiceAccountToken is a token offered as the password (user
	// "serviceaccount") to the registries matching ServiceAccountRegistries
	// (host[:port] or *.domain[:port]; --service-account-registry), passed
	// over a pipe (--service-account-token-fd).
	ServiceAccountToken      []byte
	ServiceAccountRegistries []string
	// ProviderServiceAccountToken is the pod's service-account token for
	// kubelet credential providers with tokenAttributes (KEP-4412), passed
	// over a pipe (--provider-service-account-token-fd); its annotations go
	// in ProviderServiceAccountAnnotations (KEY=VALUE,
	// --provider-service-account-annotation).
	ProviderServiceAccountToken       []byte
	ProviderServiceAccountAnnotations []string
	// PullSecretFiles (--pull-secret FILE) and AuthFilePath (--authfile
	// FILE) name credential files the helper reads itself.
	PullSecretFiles []string
	AuthFilePath    string

	CertDir      string        // --cert-dir DIR
	TLSVerify    *bool         // --tls-verify (nil: the policy's, default true)
	CgroupParent string        // --cgroup-parent PATH
	Cgroup       string        // --cgroup PATH (join an existing cgroup)
	Netns        string        // --netns PATH|NAME|pid:PID
	Timeout      time.Duration // --timeout (0: the policy's)
	Retries      *int          // --retries N (nil: the policy's)
	NoIsolation  bool          // --no-isolation
	User         string        // --user dynamic|NAME|UID

	// The pull cgroup's limits ("" or 0: the policy's). Sizes and rates
	// are as the flags take them (e.g. "256Mi", "10MB/s"); IO limits are
	// PATH=RATE, one flag each.
	CPUQuota   float64  // --cpu-quota CORES
	MemoryMax  string   // --memory-max SIZE
	PidsMax    int      // --pids-max N
	IOReadBPS  []string // --io-read-bps PATH=RATE
	IOWriteBPS []string // --io-write-bps PATH=RATE
	// The pull's own bounds ("" or 0: the policy's).
	MaxBandwidth   string // --max-bandwidth RATE
	MaxImageSize   string // --max-image-size SIZE
	ParallelLayers int    // --parallel-layers N

	// A containerd:REF Dest's settings ("": the policy's, or containerd's
	// defaults): --containerd-config FILE, --containerd-address SOCKET,
	// --containerd-namespace NS, --containerd-snapshotter NAME,
	// --containerd-staging DIR; Pin is --pin (true) or --pin=false
	// (false: unpin the records this pull writes); nil: the policy's.
	ContainerdConfig      string
	ContainerdAddress     string
	ContainerdNamespace   string
	ContainerdSnapshotter string
	ContainerdStaging     string
	Pin                   *bool

	// Extra are further flags for `pullhelper pull`, put before IMAGE and
	// DEST (e.g. "--memory-max", "256Mi").
	Extra []string

	// OnEvent, when set, receives every progress event (--progress-fd) in
	// order, from one goroutine, and never after Pull returns. A slow
	// callback loses progress events, never the pull's speed: the helper
	// drops what its reader does not take in time (done and error excepted).
	OnEvent func(api.Event)
}

// Pull runs a pull with the zero Client.
func Pull(ctx context.Context, r Request) (*api.Result, error) {
	return (&Client{}).Pull(ctx, r)
}

// Limits on what is read from the helper.
const (
	maxStdout    = 16 << 20 // the result is a few KiB
	maxEventLine = 16 << 20 // the helper's own bound on a line
	stderrTail   = 8 << 10  // kept for a message when stdout has none
)

// Pull checks the binary's protocol (once per binary file), then runs
// `pullhelper pull` for r and returns its result. A failure the helper
// reports is an *Error matching one sentinel (ErrUnauthorized, ...); when ctx
// ended the pull, the error also matches ctx.Err().
func (c *Client) Pull(ctx context.Context, r Request) (*api.Result, error) {
	if r.Image == "" || r.Dest == "" {
		return nil, newError("usage", 2, "client: Request needs Image and Dest")
	}
	if r.AuthFile != nil && r.AuthFilePath != "" {
		return nil, newError("usage", 2, "client: Request.AuthFile and Request.AuthFilePath both name the auth file; give one")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	bin, err := c.binary()
	if err != nil {
		return nil, err
	}
	if _, err := c.checkVersion(ctx, bin); err != nil {
		return nil, err
	}

	args := []string{"pull"}
	var extra []*os.File // the helper's fds 3, 4, ...
	var secrets []pipeSecret
	defer func() {
		for _, f := range extra {
			f.Close()
		}
		for _, s := range secrets {
			s.w.Close()
		}
	}()
	nextFD := func(f *os.File) string {
		extra = append(extra, f)
		return strconv.Itoa(2 + len(extra))
	}
	var events *os.File
	if r.OnEvent != nil {
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("client: creating the progress pipe: %w", err)
		}
		events = pr
		defer pr.Close()
		args = append(args, "--progress-fd", nextFD(pw))
	}
	addSecret := func(flag string, data []byte) error {
		pr, pw, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("client: creating a pipe for %s: %w", flag, err)
		}
		secrets = append(secrets, pipeSecret{pw, data})
		args = append(args, flag, nextFD(pr))
		return nil
	}
	for _, s := range r.PullSecrets {
		if err := addSecret("--pull-secret-fd", s); err != nil {
			return nil, err
		}
	}
	if r.AuthFile != nil {
		if err := addSecret("--authfile-fd", r.AuthFile); err != nil {
			return nil, err
		}
	}
	if r.ServiceAccountToken != nil {
		if err := addSecret("--service-account-token-fd", r.ServiceAccountToken); err != nil {
			return nil, err
		}
	}
	if r.ProviderServiceAccountToken != nil {
		if err := addSecret("--provider-service-account-token-fd", r.ProviderServiceAccountToken); err != nil {
			return nil, err
		}
	}
	args = append(args, r.flags()...)
	args = append(args, "--", r.Image, r.Dest)

	cmd := exec.Command(bin, args...)
	cmd.Env = c.Env
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	stdout := &capWriter{max: maxStdout}
	stderr := &tailWriter{w: c.Stderr}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// Stop waiting for stdout and stderr this long after the helper exited
	// (a process it left behind may still hold them).
	cmd.WaitDelay = 5 * time.Second

	p, err := start(cmd)
	if err != nil {
		return nil, fmt.Errorf("client: starting %s: %w", bin, err)
	}
	// The helper holds its ends now.
	for _, f := range extra {
		f.Close()
	}
	extra = nil
	var wg sync.WaitGroup
	for _, s := range secrets {
		wg.Add(1)
		go func(s pipeSecret) {
			defer wg.Done()
			// An error (EPIPE: the helper exited before reading) is the
			// helper's to report.
			_, _ = s.w.Write(s.data)
			s.w.Close()
		}(s)
	}
	evDone := make(chan struct{})
	evReader := &exitReader{f: events}
	if events != nil {
		go func() {
			defer close(evDone)
			readEvents(evReader, r.OnEvent)
		}()
	} else {
		close(evDone)
	}

	state, killed := c.wait(ctx, p)
	// Every secret was read or is no longer wanted.
	for _, s := range secrets {
		s.w.Close()
	}
	wg.Wait()
	// The helper's end of the event pipe closed when it exited (its child
	// never holds it); the reader drains what is left, however slowly the
	// callback takes it, and stops at EOF. A process that still held it
	// would be a bug: a read that waits 5 s for a byte ends the reading.
	if events != nil {
		evReader.exited.Store(true)
		_ = events.SetReadDeadline(time.Now().Add(5 * time.Second))
	}
	<-evDone

	herr := c.outcome(state, killed || ctx.Err() != nil, stdout, stderr)
	if herr == nil {
		var res api.Result
		var top map[string]json.RawMessage
		if err := json.Unmarshal(stdout.Bytes(), &top); err != nil || top == nil {
			return nil, newError("", 0, fmt.Sprintf("exited 0 but its result on stdout is not JSON (%v)", err))
		}
		if _, isErr := top["error"]; isErr {
			return nil, newError("", 0, "exited 0 but printed an error object")
		}
		if err := json.Unmarshal(stdout.Bytes(), &res); err != nil || res.Digest == "" {
			return nil, newError("", 0, fmt.Sprintf("exited 0 but its result on stdout is not a result (%v)", err))
		}
		return &res, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%w (%w)", herr, ctx.Err())
	}
	return nil, herr
}

// flags are r's typed settings as flags.
func (r *Request) flags() []string {
	var a []string
	add := func(flag, v string) {
		if v != "" {
			a = append(a, flag, v)
		}
	}
	add("--policy", r.Policy)
	add("--profile", r.Profile)
	add("--authfile", r.AuthFilePath)
	for _, f := range r.PullSecretFiles {
		add("--pull-secret", f)
	}
	for _, p := range r.ServiceAccountRegistries {
		add("--service-account-registry", p)
	}
	for _, kv := range r.ProviderServiceAccountAnnotations {
		add("--provider-service-account-annotation", kv)
	}
	add("--cert-dir", r.CertDir)
	if r.TLSVerify != nil {
		a = append(a, "--tls-verify="+strconv.FormatBool(*r.TLSVerify))
	}
	add("--cgroup-parent", r.CgroupParent)
	add("--cgroup", r.Cgroup)
	add("--netns", r.Netns)
	if r.Timeout > 0 {
		add("--timeout", r.Timeout.String())
	}
	if r.Retries != nil {
		add("--retries", strconv.Itoa(*r.Retries))
	}
	if r.NoIsolation {
		a = append(a, "--no-isolation")
	}
	add("--user", r.User)
	if r.CPUQuota > 0 {
		add("--cpu-quota", strconv.FormatFloat(r.CPUQuota, 'g', -1, 64))
	}
	add("--memory-max", r.MemoryMax)
	if r.PidsMax > 0 {
		add("--pids-max", strconv.Itoa(r.PidsMax))
	}
	for _, v := range r.IOReadBPS {
		add("--io-read-bps", v)
	}
	for _, v := range r.IOWriteBPS {
		add("--io-write-bps", v)
	}
	add("--max-bandwidth", r.MaxBandwidth)
	add("--max-image-size", r.MaxImageSize)
	if r.ParallelLayers > 0 {
		add("--parallel-layers", strconv.Itoa(r.ParallelLayers))
	}
	add("--containerd-config", r.ContainerdConfig)
	add("--containerd-address", r.ContainerdAddress)
	add("--containerd-namespace", r.ContainerdNamespace)
	add("--containerd-snapshotter", r.ContainerdSnapshotter)
	add("--containerd-staging", r.ContainerdStaging)
	if r.Pin != nil {
		a = append(a, "--pin="+strconv.FormatBool(*r.Pin))
	}
	return append(a, r.Extra...)
}

// exitReader reads the event pipe; once the helper exited, each read may
// wait at most 5 s for data.
type exitReader struct {
	f      *os.File
	exited atomic.Bool
}

func (r *exitReader) Read(p []byte) (int, error) {
	if r.exited.Load() {
		_ = r.f.SetReadDeadline(time.Now().Add(5 * time.Second))
	}
	return r.f.Read(p)
}

type pipeSecret struct {
	w    *os.File
	data []byte
}
