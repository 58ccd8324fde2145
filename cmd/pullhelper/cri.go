package main

import (
	"os"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/pullhelper/pullhelper/auth"
	"github.com/pullhelper/pullhelper/cri"
	"github.com/pullhelper/pullhelper/hosts"
	"github.com/pullhelper/pullhelper/internal/failure"
	"github.com/pullhelper/pullhelper/internal/state"
	"github.com/pullhelper/pullhelper/pipeline"
	"github.com/pullhelper/pullhelper/policy"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// criResult is what `pullhelper cri` prints when it stops.
type criResult struct {
	Listen          string `json:"listen"`
	RuntimeEndpoint string `json:"runtime_endpoint"`
	Pulls           int    `json:"pulls"`
}

// criCommand is `pullhelper cri`.
func criCommand(c *common, result *any) *cobra.Command {
	var listen, runtimeEndpoint string
	var maxParallel int
	cmd := &cobra.Command{
		Use:   "cri --listen unix:///PATH --runtime-endpoint unix:///PATH [options]",
		Short: "Serve the CRI image service: every PullImage an isolated pull, the rest forwarded",
		Long: `Serve runtime.v1.ImageService (the CRI, k8s.io/cri-api) on the unix socket --listen, for
the kubelet's imageServiceEndpoint (crictl --image-endpoint), in front of containerd's
own CRI at --runtime-endpoint.

PullImage runs one pull per request as pullhelper pull would (the policy, its profile
and the setting flags; isolated: its own cgroup, a dropped uid) into containerd:REF of
the runtime's socket, namespace k8s.io, and answers the image ID (image_ref), as
containerd's CRI does. The request's auth (username/password, auth, identity_token) is
the credential for its registry, in memory only; without one, the node's own sources
apply. The same image asked for twice at once (with the same credential) is pulled
once; at most --max-parallel pulls run at once. A cancelled or timed-out request
stops its pull (the cgroup is killed, the staging removed). Errors are gRPC statuses:
unauthorized Unauthenticated, not_found NotFound, network/tls Unavailable, usage
InvalidArgument, others Internal. stderr has one log line per pull.

Every other call (ListImages, ImageStatus, RemoveImage, ImageFsInfo, StreamImages,
any method or service) is forwarded to --runtime-endpoint as it came.

The socket is created root-only (0600); a stale socket is replaced, anything else
there is refused; its directory and each one above it must be root's and not
writable by others (sticky allowed), since the kubelet's credentials arrive there.
The runtime endpoint is connected to only when it is a socket of root's in such
directories (checked at each connection). Under systemd (NOTIFY_SOCKET), READY=1 is sent once it listens
(Type=notify). SIGTERM or SIGINT stops the service: pulls in flight are stopped
and cleaned up, the socket is removed, and one JSON object is printed:
  {"listen":..., "runtime_endpoint":..., "pulls":N}`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := newLogger(cmd.ErrOrStderr(), c.logFormat, c.debug)
			if err != nil {
				return err
			}
			if listen == "" || runtimeEndpoint == "" {
				return failure.New(failure.Usage, "cri needs --listen unix:///PATH and --runtime-endpoint unix:///PATH (see --help)")
			}
			lpath, err := cri.SocketPath("--listen", listen)
			if err != nil {
				return err
			}
			rpath, err := cri.SocketPath("--runtime-endpoint", runtimeEndpoint)
			if err != nil {
				return err
			}
			if err := needRoot("cri", os.Geteuid()); err != nil {
				return err
			}
			// The policy and flags are checked once now; each pull
			// resolves them again (a fresh Loaded per plan).
			if _, err := criPolicy(cmd.Flags(), c, rpath); err != nil {
				return err
			}
			plan := func(r cri.Request) (*pipeline.Plan, error) {
				l, err := criPolicy(cmd.Flags(), c, rpath)
				if err != nil {
					return nil, err
				}
				in := pipeline.Inputs{Image: r.Image, Dest: r.Dest, Env: auth.OSEnv(), Version: version, StateRoot: state.Default}
				if cred := r.Cred; cred != nil {
					if cred.PullSecret != nil {
						in.PullSecrets = []auth.Inline{*cred.PullSecret}
					}
					in.Authfile = cred.Authfile
				}
				return pipeline.NewPlan(l, in)
			}
			n, err := cri.Serve(cmd.Context(), cri.Config{
				Listen: lpath, Runtime: rpath, MaxParallel: maxParallel, Plan: plan, Run: pipeline.Run,
				Options: pipeline.Options{Log: log, LogFormat: c.logFormat, Debug: c.debug}, Log: log,
				// systemd Type=notify: ready once the socket listens.
				// NOTIFY_SOCKET is unset then, so that no pull child
				// inherits it.
				Ready: func() {
					if _, err := daemon.SdNotify(true, daemon.SdNotifyReady); err != nil {
						log.Warn("telling systemd the service is ready", "error", err)
					}
				},
			})
			if err != nil {
				return err
			}
			*result = criResult{Listen: listen, RuntimeEndpoint: runtimeEndpoint, Pulls: n}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&listen, "listen", "", "serve the CRI image service on this `unix:///PATH` socket (created root-only, 0600, in a directory only root can write)")
	fs.StringVar(&runtimeEndpoint, "runtime-endpoint", "", "containerd's CRI and API socket, `unix:///PATH` (root's, in directories only root can write): pulls import into it (namespace k8s.io), every other call is forwarded to it")
	fs.IntVar(&maxParallel, "max-parallel", 4, "run at most `N` pulls at once (equal requests in flight share one pull)")
	fs.StringVar(&c.policyFile, "policy", "", "policy file (default $PULLHELPER_POLICY, else /etc/pullhelper/policy.toml when present)")
	fs.StringVar(&c.profile, "profile", "", "use [profiles.NAME] of the policy file")
	fs.StringVar(&c.logFormat, "log-format", "text", "stderr log format: text or json")
	fs.BoolVar(&c.debug, "debug", false, "log debug messages")
	addSettingFlagsExcept(fs, "containerd-address", "containerd-namespace")
	return cmd
}

// criPolicy is the policy of one pull of `pullhelper cri`: the file, its
// profile, the setting flags, then the runtime's socket as the containerd
// address and the CRI's namespace.
func criPolicy(fs *pflag.FlagSet, c *common, runtimeSocket string) (*policy.Loaded, error) {
	l, err := policy.Resolve(c.policyFile, c.profile)
	if err != nil {
		return nil, failure.Wrap(failure.Usage, err, "")
	}
	l.DefaultCertsD(hosts.DefaultCertsD())
	if err := applySettingFlags(fs, l); err != nil {
		return nil, failure.Wrap(failure.Usage, err, "")
	}
	if err := l.Set("--runtime-endpoint", "dest.containerd_address", policy.String, runtimeSocket); err != nil {
		return nil, failure.Wrap(failure.Usage, err, "")
	}
	if err := l.Set("--runtime-endpoint", "dest.containerd_namespace", policy.String, "k8s.io"); err != nil {
		return nil, failure.Wrap(failure.Usage, err, "")
	}
	if err := l.Validate(); err != nil {
		return nil, failure.Wrap(failure.Usage, err, "")
	}
	return l, nil
}

// addSettingFlagsExcept adds every setting flag but the named ones.
func addSettingFlagsExcept(fs *pflag.FlagSet, names ...string) {
	skip := map[string]bool{}
	for _, n := range names {
		skip[n] = true
	}
	for _, f := range settingFlags {
		if skip[f.name] {
			continue
		}
		if f.kind == policy.Bool {
			fs.Bool(f.name, false, f.usage)
			continue
		}
		fs.Var(&textFlag{typ: f.arg}, f.name, f.usage)
	}
}
