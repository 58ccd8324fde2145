package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pullhelper/pullhelper/api"
	"github.com/pullhelper/pullhelper/auth"
	"github.com/pullhelper/pullhelper/hosts"
	"github.com/pullhelper/pullhelper/internal/failure"
	_ "github.com/pullhelper/pullhelper/internal/prefault"
	"github.com/pullhelper/pullhelper/internal/state"
	"github.com/pullhelper/pullhelper/internal/wire"
	"github.com/pullhelper/pullhelper/pipeline"
	"github.com/pullhelper/pullhelper/policy"
	"github.com/pullhelper/pullhelper/pull"
	"github.com/pullhelper/pullhelper/reexec"
	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
	storagereexec "go.podman.io/storage/pkg/reexec"
	"golang.org/x/sys/unix"
)

// version is set with -ldflags "-X main.version=…" by make build.
var version = "dev"

func main() {
	// Before anything opens or marks a descriptor (--pull-secret-fd).
	recordInheritedFDs()
	// go.podman.io/storage re-executes the binary to apply a layer in a
	// chroot (storage-applyLayer, as root, for the containers-storage:
	// import in the parent); that process never reaches the CLI either.
	if storagereexec.Init() {
		return
	}
	// The re-executed pull child never reaches the CLI.
	if isChild, code := reexec.Dispatch(); isChild {
		os.Exit(code)
	}
	stop := startProfile()
	code := run(os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// inspectCommands, when set (by tests only), is shown the complete command
// tree before it runs.
var inspectCommands func(root *cobra.Command)

// common holds the flags that are not policy settings.
type common struct {
	policyFile  string
	profile     string
	progressFD  int
	progressFmt string
	logFormat   string
	noIsolation bool
	debug       bool
	quiet       bool
	format      string // explain --format
	secrets     secretFDs
}

// textDoc is a result written as explain --format text writes it, not as
// JSON.
type textDoc struct{ doc any }

func run(args []string, stdout, stderr io.Writer) int {
	var (
		c       common
		result  any
		sigSeen firstSignal
	)
	ctx, stop := signalContext(&sigSeen)
	defer stop()

	root := &cobra.Command{
		Use:   "pullhelper",
		Short: "Pull a container image the way the kubelet and the runtime would, isolated",
		Long: `pullhelper pulls one container image with the kubelet's and the container runtime's
credentials, trust and DNS, for node agents (OS updates, prefetchers).

stdout carries exactly one JSON object: the result, or {"error":{"code","message"}}.
stderr carries logs (and progress bars on a terminal). Exit codes:
  0 ok   1 internal   2 usage   3 unauthorized   4 tls   5 not_found   6 network
  7 isolation   8 verification   9 destination   129/130/143 interrupted (SIGHUP/SIGINT/SIGTERM)`,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetOut(stderr)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return failure.New(failure.Usage, "%w (see --help)", err)
	})
	root.CompletionOptions.DisableDefaultCmd = true

	addCommon := func(cmd *cobra.Command) {
		fs := cmd.Flags()
		fs.StringVar(&c.policyFile, "policy", "", "policy file (default $PULLHELPER_POLICY, else /etc/pullhelper/policy.toml when present)")
		fs.StringVar(&c.profile, "profile", "", "use [profiles.NAME] of the policy file")
		fs.StringVar(&c.logFormat, "log-format", "text", "stderr log format: text or json")
		fs.BoolVar(&c.debug, "debug", false, "log debug messages")
		fs.BoolVarP(&c.quiet, "quiet", "q", false, "write nothing on stderr (no log line, warning, progress bar or error line, the isolated child's included): only the result, or the error, on stdout")
		addSettingFlags(fs)
		addSecretFDFlags(fs, &c.secrets)
	}

	pullCmd := &cobra.Command{
		Use:   "pull [options] IMAGE DEST",
		Short: "Pull IMAGE into DEST",
		Long: `Pull IMAGE (host[:port]/repo[:tag][@digest]) into DEST, one of
  oci:PATH[:TAG]   dir:PATH   oci-archive:PATH[:TAG]   docker-archive:PATH[:REF]
  containerd:REF   containers-storage:[DRIVER@GRAPHROOT+RUNROOT]REF
(a containers-storage: REF may be NAME@sha256:DIGEST, the digest pulled: the image is
stored under that name, no tag, as CRI-O stores a pull by digest)

The tag is resolved to a digest first and exactly that digest is copied. The image is
written into a staging directory beside DEST and moved into place only when complete:
DEST is either untouched or fully committed (a store DEST: imported only once verified).
The result is one JSON object on stdout; exit codes: pullhelper(1), EXIT STATUS.`,
		Args: exactArgs(2, "IMAGE DEST"),
		RunE: func(cmd *cobra.Command, args []string) error {
			events, closeEvents, err := progressSink(c.progressFD, c.progressFmt, stderr)
			if err != nil {
				return err
			}
			defer closeEvents()
			res, err := pullImage(ctx, cmd, &c, args, events, stderr)
			if err != nil {
				if n := sigSeen.get(); n != 0 {
					// The error event says what stdout will.
					err = signalError(n, err)
				}
				if events != nil {
					events(api.Event{Type: api.EventError, TS: time.Now().UTC(), Code: string(failure.CodeOf(err)), Message: oneLine(err.Error())})
				}
				return err
			}
			result = res
			return nil
		},
	}
	addCommon(pullCmd)
	pullCmd.Flags().IntVar(&c.progressFD, "progress-fd", -1, "write JSON Lines progress events to this open file descriptor")
	pullCmd.Flags().StringVar(&c.progressFmt, "progress-format", progressFormatPullhelper, "the `FORMAT` of the --progress-fd events: pullhelper (start, layer_*, config_*, done, error) or bootc (bootc's progress-v0: Start, ProgressBytes, ProgressSteps; at most 5 a second)")
	pullCmd.Flags().BoolVar(&c.noIsolation, "no-isolation", false, "pull in-process, without cgroup, namespace or privilege isolation (debugging, benchmarks)")

	explainCmd := &cobra.Command{
		Use:   "explain [options] IMAGE [DEST]",
		Short: "Print the resolved plan as JSON; no network, no side effects",
		Long: `Resolve IMAGE, DEST, the policy, profile and flags exactly as pull would, and print the
plan as JSON: the reference, the credential that will be offered (source, file, key,
username; never a secret), the certificate directory, the signature policy and every
setting. Nothing is contacted and nothing is written. What pull refuses in its plan
explain refuses with the same exit code: a file it cannot read or parse (one only root
may read is a warning when explain runs as another user), a user or a cgroup setting
this host cannot apply. DEST itself is not opened: a DEST pull cannot write is pull's
to refuse (exit 9).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return failure.New(failure.Usage, "explain takes IMAGE [DEST], got %d arguments (see --help)", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if c.format != "json" && c.format != "text" {
				return failure.New(failure.Usage, "--format: want json or text, not %q", c.format)
			}
			if err := checkLogFormat(c.logFormat); err != nil {
				return err // as pull refuses it
			}
			dest := ""
			if len(args) == 2 {
				dest = args[1]
			}
			plan, settings, err := resolve(cmd, &c, args[0], dest)
			if err != nil {
				return err
			}
			defer plan.Close()
			// The files pull reads before its first step (the signature
			// policy, certificates and CA files, registries.d), read and
			// checked as pull reads them: what pull refuses there,
			// explain refuses with the same code. Their contents are
			// dropped. Another user than root may be unable to read one
			// of root's (a client key): said in a warning, not an error.
			if _, err := plan.LoadMaterial(); err != nil {
				euid := os.Geteuid()
				if euid == 0 || !errors.Is(err, fs.ErrPermission) {
					return err
				}
				plan.Warnings = append(plan.Warnings, fmt.Sprintf("explain as uid %d cannot read a file pull reads as root, and checked the files pull reads only up to it: %s", euid, oneLine(err.Error())))
			}
			for _, w := range plan.Warnings {
				if !c.quiet {
					fmt.Fprintf(stderr, "pullhelper: warning: %s\n", w)
				}
			}
			view := *plan
			if view.Credentials == nil {
				view.Credentials = []wire.Credential{}
			}
			doc := struct {
				Plan     pipeline.Plan `json:"plan"`
				Settings policy.Policy `json:"settings"`
			}{view, settings.Policy}
			result = doc
			if c.format == "text" {
				result = textDoc{doc}
			}
			return nil
		},
	}
	addCommon(explainCmd)
	explainCmd.Flags().BoolVar(&c.noIsolation, "no-isolation", false, "explain an in-process pull")
	explainCmd.Flags().StringVar(&c.format, "format", "json", "the `FORMAT` of the plan on stdout: json (the plan and the settings) or text (a readable summary: the endpoints in order, each host once, the isolation)")

	policyCmd := &cobra.Command{Use: "policy", Short: "Policy file tools"}
	checkCmd := &cobra.Command{
		Use:   "check [FILE]",
		Short: "Validate a policy file; exit 0, or 2 with FILE:LINE: KEY: problem",
		Long: `Validate a policy file and every profile in it. FILE defaults to $PULLHELPER_POLICY, else
/etc/pullhelper/policy.toml. Unknown keys, wrong types, impossible values and settings
this version does not support yet are errors naming the file, line and key. When the
base sets [cri] (pods choose profiles, or every pull takes the pod's cgroup or DNS), it
also prints what pullhelper cri takes from pods: "cri": {"base": the base's [cri],
"pod_profiles": each choosable profile's pull_cgroup and pod_dns}.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := os.Getenv(policy.EnvPolicy)
			if len(args) == 1 {
				path = args[0]
			}
			if path == "" {
				path = policy.DefaultPath
			}
			f, err := policy.LoadFile(path)
			if err != nil {
				return failure.Wrap(failure.Usage, err, "")
			}
			out := map[string]any{"file": path, "valid": true, "profiles": orEmpty(f.Profiles())}
			// What pullhelper cri takes from pods: the base's [cri] and,
			// for each profile a pod may choose, its cgroup and DNS.
			base, err := f.Select("")
			if err != nil {
				return failure.Wrap(failure.Usage, err, "")
			}
			if c := base.CRI; c.ProfileAnnotation != "" || c.PullCgroup != policy.PullCgroupOwn || c.PodDNS {
				pods := map[string]policy.CRI{}
				for _, n := range base.CRI.PodProfiles {
					pl, err := f.Select(n)
					if err != nil {
						return failure.Wrap(failure.Usage, err, "")
					}
					pods[n] = policy.CRI{PullCgroup: pl.CRI.PullCgroup, PodDNS: pl.CRI.PodDNS}
				}
				out["cri"] = map[string]any{"base": base.CRI, "pod_profiles": pods}
			}
			result = out
			return nil
		},
	}
	policyCmd.AddCommand(checkCmd)

	versionCmd := &cobra.Command{
		Use:   "version",
		Short: "Print version information as JSON",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			result = api.Version{Version: version, Go: runtime.Version(), OSArch: runtime.GOOS + "/" + runtime.GOARCH, Protocol: api.Protocol}
			return nil
		},
	}
	root.AddCommand(pullCmd, explainCmd, policyCmd, gcCommand(&c, &result), criCommand(&c, &result), versionCmd)
	root.SetArgs(args)
	if inspectCommands != nil {
		inspectCommands(root) // docs_test.go walks the command tree
	}

	logrus.SetOutput(stderr)
	logrus.SetLevel(logrus.WarnLevel)

	err := root.ExecuteContext(ctx)
	if err == nil && result == nil {
		// --help, or a command group without a subcommand.
		if len(args) == 0 {
			return writeError(stdout, stderr, failure.New(failure.Usage, "missing command: use pull, explain, policy check, gc, cri or version (see --help)"))
		}
		return 0
	}
	if err != nil {
		if failure.CodeOf(err) == failure.Internal && (strings.HasPrefix(err.Error(), "unknown command") || strings.HasPrefix(err.Error(), "unknown shorthand") || strings.HasPrefix(err.Error(), "accepts ") || strings.HasPrefix(err.Error(), "unknown flag")) {
			err = failure.New(failure.Usage, "%w (see --help)", err)
		}
		if c.quiet {
			stderr = io.Discard
		}
		if n := sigSeen.get(); n != 0 {
			err = signalError(n, err)
			code := writeError(stdout, stderr, err)
			switch n {
			case syscall.SIGTERM:
				return 143
			case syscall.SIGHUP:
				return 129
			}
			return code
		}
		return writeError(stdout, stderr, err)
	}
	if t, ok := result.(textDoc); ok {
		if err := explainText(stdout, t.doc); err != nil {
			fmt.Fprintf(stderr, "pullhelper: writing result: %v\n", err)
			return 1
		}
		return 0
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(result); err != nil {
		fmt.Fprintf(stderr, "pullhelper: writing result: %v\n", err)
		return 1
	}
	return 0
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return failure.New(failure.Usage, "%s takes %s, got %d arguments (see --help)", cmd.Name(), names, len(args))
		}
		return nil
	}
}

// pullImage is pull's work once the progress sink exists, so that every
// failure, usage errors included, also ends the event stream.
func pullImage(ctx context.Context, cmd *cobra.Command, c *common, args []string, events func(api.Event), stderr io.Writer) (*api.Result, error) {
	if c.quiet {
		stderr = io.Discard
	}
	log, err := newLogger(stderr, c.logFormat, c.debug)
	if err != nil {
		return nil, err
	}
	if err := needRoot("pull", os.Geteuid()); err != nil {
		return nil, err
	}
	plan, _, err := resolve(cmd, c, args[0], args[1])
	if err != nil {
		return nil, err
	}
	defer plan.Close()
	for _, w := range plan.Warnings {
		log.Warn(w)
	}
	opts := pipeline.Options{Events: events, Log: log, LogFormat: c.logFormat, Debug: c.debug, Quiet: c.quiet}
	if f, ok := stderr.(*os.File); ok && pull.IsTerminal(f) {
		opts.Report = stderr
	}
	res, err := pipeline.Run(ctx, plan, opts)
	if err != nil {
		return nil, err
	}
	log.Info("pulled", "reference", res.Reference, "destination", res.Destination, "layers", res.Layers, "bytes", res.Bytes, "duration_ms", res.DurationMS)
	return res, nil
}

// resolve loads the policy, applies the flags and builds the plan.
func resolve(cmd *cobra.Command, c *common, image, dest string) (*pipeline.Plan, *policy.Loaded, error) {
	l, err := policy.Resolve(c.policyFile, c.profile)
	if err != nil {
		return nil, nil, failure.Wrap(failure.Usage, err, "")
	}
	l.DefaultCertsD(hosts.DefaultCertsD())
	if err := applySettingFlags(cmd.Flags(), l); err != nil {
		return nil, nil, failure.Wrap(failure.Usage, err, "")
	}
	// The provider token on a descriptor stands for the policy's file, so
	// that annotations validate against it (read() refuses both forms).
	if v := c.secrets.provToken.vals; len(v) == 1 && !cmd.Flags().Changed("provider-service-account-token") {
		l.Auth.ProviderServiceAccountToken = "fd:" + v[0]
	}
	if err := l.Validate(); err != nil {
		return nil, nil, failure.Wrap(failure.Usage, err, "")
	}
	in := pipeline.Inputs{Image: image, Dest: dest, NoIsolation: c.noIsolation, Env: auth.OSEnv(), Explain: cmd.Name() == "explain",
		Version: version, StateRoot: state.Default}
	// The descriptors are read within the pull's --timeout (a writer that
	// never closes its end): the whole pull is bounded, not just Run.
	rctx := cmd.Context()
	if t := time.Duration(l.Pull.Timeout); t > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(rctx, t)
		defer cancel()
	}
	inl, err := c.secrets.read(rctx, cmd.Flags(), c.progressFD, l.Auth.ServiceAccountRegistries)
	if err != nil {
		return nil, nil, err
	}
	in.PullSecrets, in.Authfile, in.ServiceAccountToken, in.ProviderServiceAccountToken = inl.pullSecrets, inl.authfile, inl.saToken, inl.provToken
	plan, err := pipeline.NewPlan(l, in)
	if err != nil {
		return nil, nil, err
	}
	return plan, l, nil
}

// oneLine is an error message as it is written: newlines folded, and every
// other character that is not printable escaped (pull.Printable), since a
// message may quote what the child staged or sent.
func oneLine(msg string) string {
	return pull.Printable(strings.ReplaceAll(msg, "\n", " "))
}

func writeError(stdout, stderr io.Writer, err error) int {
	code := failure.CodeOf(err)
	msg := oneLine(err.Error())
	// Several policy problems: one line each on stderr, "; " in the JSON.
	if ps := policy.Problems(err); len(ps) > 1 {
		for _, p := range ps {
			fmt.Fprintf(stderr, "pullhelper: %s\n", oneLine(p))
		}
	} else {
		fmt.Fprintf(stderr, "pullhelper: %s\n", msg)
	}
	out := map[string]map[string]string{"error": {"code": string(code), "message": msg}}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(out)
	return code.Exit()
}

func newLogger(w io.Writer, format string, debug bool) (*slog.Logger, error) {
	if w == io.Discard {
		logrus.SetOutput(io.Discard) // containers/image's warnings (--quiet)
	}
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	if debug {
		opts.Level = slog.LevelDebug
		logrus.SetLevel(logrus.DebugLevel)
	}
	if err := checkLogFormat(format); err != nil {
		return nil, err
	}
	if format == "json" {
		logrus.SetFormatter(&logrus.JSONFormatter{})
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

// checkLogFormat refuses a --log-format other than text or json.
func checkLogFormat(format string) error {
	if format != "text" && format != "json" {
		return failure.New(failure.Usage, "--log-format: want text or json, not %q", format)
	}
	return nil
}

// signalError is err as a pull ended by signal n reports it (once: an
// error it made already is kept).
func signalError(n syscall.Signal, err error) error {
	var fe *failure.Error
	if errors.As(err, &fe) && fe.Code == failure.Interrupted && strings.HasPrefix(fe.Message, "interrupted by ") {
		return err
	}
	return &failure.Error{Code: failure.Interrupted, Message: fmt.Sprintf("interrupted by %s; nothing was committed", unix.SignalName(n)), Err: err}
}

// firstSignal records the first terminating signal received.
type firstSignal struct {
	mu  sync.Mutex
	sig syscall.Signal
}

func (a *firstSignal) set(s syscall.Signal) {
	a.mu.Lock()
	if a.sig == 0 {
		a.sig = s
	}
	a.mu.Unlock()
}

func (a *firstSignal) get() syscall.Signal {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sig
}

// signalContext is cancelled by SIGINT, SIGTERM or SIGHUP (a caller's
// session or supervisor going away), remembering which.
func signalContext(seen *firstSignal) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	// A caller that dies leaves stdout and stderr broken pipes: a log line
	// or the final JSON must then fail with EPIPE, not kill the process by
	// SIGPIPE in the middle of its cleanup (cgroup, staging). Notify, unlike
	// Ignore, does not pass on to the children (exec resets handlers).
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	go func() {
		select {
		case s := <-ch:
			seen.set(s.(syscall.Signal))
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() { signal.Stop(ch); cancel() }
}

// needRoot refuses a command that must run as root, once, before anything
// is read or created: a pull (isolated or not) creates its cgroup, allocates
// its uid, mounts private filesystems for the checked configuration and
// secrets, and locks under the state root.
func needRoot(what string, euid int) error {
	if euid == 0 {
		return nil
	}
	return failure.New(failure.Isolation, "pullhelper %s must run as root (this is uid %d): it creates the pull's cgroup, drops to a pull uid, mounts private filesystems and locks under %s; run it as root (a root service, or sudo)", what, euid, state.Default.Path())
}
