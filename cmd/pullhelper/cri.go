package main

import (
	"context"
	"net"
	"os"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/pullhelper/pullhelper/auth"
	"github.com/pullhelper/pullhelper/cgroup"
	"github.com/pullhelper/pullhelper/cri"
	"github.com/pullhelper/pullhelper/dest"
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
	Runtime         string `json:"runtime"`
	Pulls           int    `json:"pulls"`
}

// criOptions are the runtime flags of `pullhelper cri`.
type criOptions struct {
	runtime, crioConfig, crioConfigDir, crioStore, storageConf string
}

// detectTimeout bounds the wait for the runtime's Version answer at start
// (the socket may appear meanwhile: the runtime is starting).
const detectTimeout = 15 * time.Second

// criCommand is `pullhelper cri`.
func criCommand(c *common, result *any) *cobra.Command {
	var listen, runtimeEndpoint, listenGroup, metricsListen string
	var maxParallel int
	var ro criOptions
	cmd := &cobra.Command{
		Use:   "cri --listen unix:///PATH --runtime-endpoint unix:///PATH [options]",
		Short: "Serve the CRI image service: every PullImage an isolated pull, the rest of the image service forwarded",
		Long: `Serve runtime.v1.ImageService (the CRI, k8s.io/cri-api) on the unix socket --listen, for
the kubelet's imageServiceEndpoint (crictl --image-endpoint), in front of the runtime's
own CRI at --runtime-endpoint: containerd (1.6 and 2.x) or CRI-O.

The runtime is --runtime: with auto (the default), containerd when --containerd-config
is given, cri-o when --crio-config, --crio-config-dir, --crio-store or --storage-conf
is, else what the runtime answers runtime.v1.RuntimeService/Version with at start
(runtime_name "containerd" or "cri-o"; no answer within 15 s, or another name, is exit 2).
Every flag and local resource is checked before the runtime is asked (the policy,
--max-parallel, --listen's directory and path, --listen-group, --metrics-listen's port,
which is bound then): a usage error comes at once, not after that wait.

PullImage runs one pull per request as pullhelper pull would (the policy, its profile
and the setting flags; isolated: its own cgroup, a dropped uid) into the runtime's store
and answers the image ID (image_ref) as the runtime's CRI does:
  containerd  containerd:REF of the runtime's socket, namespace k8s.io, with the CRI's
              labels; image_ref sha256:ID, answered once the runtime's CRI lists it
              (its ImageStatus answers that ID; at most 30 s, else Internal), so that
              an ImageStatus right after the pull finds it. A short name is docker.io's.
  cri-o       containers-storage:[DRIVER@GRAPHROOT+RUNROOT]REF, the store CRI-O reads:
              storage.conf (--storage-conf), then crio.conf's [crio] root, runroot,
              storage_driver and storage_option (--crio-config), then every file
              below --crio-config-dir in lexical order, as CRI-O merges them (a file
              CRI-O could not load is exit 2); --crio-store names the store instead.
              Their [crio.image] signature_policy is the node's policy unless
              --signature-policy names one; a pod namespace's own
              signature_policy_dir/NAMESPACE.json replaces it for that pod's pulls.
              image_ref is the storage ID without sha256:, as CRI-O answers. A short
              name is resolved through registries.conf (an alias, or the one
              unqualified-search registry), the DEST named after it. A pull by digest
              goes to containers-storage:[STORE]REPO@DIGEST, stored with no tag as
              CRI-O stores it; image_ref the bare storage ID as for a tag.

The request's auth (username/password, auth, identity_token) is the credential for its
registry (server_address's host, else the image's as sent), in memory only; without
one, the node's own sources apply. The same image asked for twice at once (with the same credential) is pulled
once; at most --max-parallel pulls run at once. A cancelled or timed-out request
stops its pull (the cgroup is killed, the staging removed). Errors are gRPC statuses:
unauthorized Unauthenticated, not_found NotFound, network/tls Unavailable, usage
InvalidArgument, others Internal.

stderr has one log line ("msg":"pull") per request: image, pod_namespace, pod_name,
pod_uid, duration_ms, shared (joined a pull in flight), registry and username of the
request's credential; on success digest, image_id, bytes (the result's), wire_bytes
(the registries' blob bytes), pull_duration_ms, cgroup, isolated, uid and usage (the
cgroup's cpu_usage_ns, memory_peak_bytes, io_read_bytes, io_write_bytes, ... as the
result JSON names them); result (the failure code: ok, unauthorized, not_found,
network, ...) beside code (the gRPC code), and error on failure. Each field a request
sets is bounded (the image 1024 bytes, a namespace 63, a pod name 253, a pod UID 128)
and escaped.

--metrics-listen HOST:PORT serves Prometheus metrics at /metrics (client_golang, a
registry of its own with the Go and process collectors):
  pullhelper_cri_pull_requests_total{result,grpc_code}  requests answered
  pullhelper_cri_pulls_total{result}                    pulls run (joined requests share one)
  pullhelper_cri_pull_request_duration_seconds          histogram, request to answer (0.5 s..1 h: the kubelet's buckets)
  pullhelper_cri_pull_bytes_total                       the successful pulls' result bytes
  pullhelper_cri_pull_wire_bytes_total                  the blob bytes the registries sent
  pullhelper_cri_pulls_in_flight                        pulls running now
  pullhelper_cri_pulls_waiting                          pulls waiting for a --max-parallel slot
  pullhelper_cri_pull_requests_joined_total             requests that joined a pull in flight
No label holds an image, pod or registry. The endpoint has no authentication: bind it
to loopback (or firewall it). The server bounds a scrape (10 s to read the request, 30
s to write the answer, 8 KiB of headers, 4 scrapes at once) and stops with the
service; a port that cannot be bound is exit 2.

Per pod, the policy's [cri] table reads the request's sandbox_config: the annotation
cri.profile_annotation chooses the pull's profile among cri.pod_profiles (any other
value is InvalidArgument; without it, --profile applies); that profile's
cri.pull_cgroup = "pod" puts the pull's cgroup under the pod's linux.cgroup_parent
(an existing cgroup) instead of --cgroup-parent, and cri.pod_dns = true makes the pod's
dns_config the child's resolv.conf. Requests share a pull only with equal pod settings.

The rest of the image service (ListImages, ImageStatus, RemoveImage, ImageFsInfo,
StreamImages, any newer runtime.v1.ImageService method) and RuntimeService/Version
are forwarded to --runtime-endpoint as they came; no other call is (Unimplemented:
a runtime service call through this socket would make its callers root on the runtime).

The socket is created root-only (0600), or with --listen-group GROUP root:GROUP 0660
(born so: never more open, not even for a moment; a setgid directory of another
group is refused); a stale socket is replaced, anything else there is refused; its
directory and each one above it must be root's and not writable by others (sticky
allowed), since the kubelet's credentials arrive there. The runtime endpoint is
connected to only when it is a socket of root's in such directories (checked at each
connection). Under systemd (NOTIFY_SOCKET), READY=1 is sent once it listens
(Type=notify). SIGTERM or SIGINT stops the service: pulls in flight are stopped
and cleaned up, the socket is removed, and one JSON object is printed:
  {"listen":..., "runtime_endpoint":..., "runtime":..., "pulls":N}`,
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
			var gid int
			if cmd.Flags().Changed("listen-group") {
				if gid, err = cri.ListenGroup(listenGroup); err != nil {
					return err
				}
			}
			if metricsListen != "" {
				if _, err := cri.MetricsAddr(metricsListen); err != nil {
					return err
				}
			}
			if err := needRoot("cri", os.Geteuid()); err != nil {
				return err
			}
			kind, err := cri.ParseRuntime(ro.runtime)
			if err != nil {
				return err
			}
			// The policy and flags are checked once now; each pull
			// resolves them again (a fresh Loaded per plan).
			l, err := criPolicy(cmd.Flags(), c, cri.Runtime{}, rpath, ro, "")
			if err != nil {
				return err
			}
			// Everything checked without the runtime comes before it is
			// asked (--runtime auto waits up to 15 s for its Version):
			// the metrics port is bound now, Serve's from here, closed
			// on any error before.
			ml, err := cri.Preflight(cri.Config{Listen: lpath, ListenGID: gid, MetricsListen: metricsListen, MaxParallel: maxParallel})
			if err != nil {
				return err
			}
			handed := false
			defer func() {
				if ml != nil && !handed {
					ml.Close()
				}
			}()
			rt, err := criRuntime(cmd, kind, l, rpath, ro)
			if err != nil {
				return err
			}
			base, err := criPolicy(cmd.Flags(), c, rt, rpath, ro, "")
			if err != nil {
				return err
			}
			// What every pull's plan would refuse whatever its image (the
			// user, the cgroup on this host, registries.conf, the
			// signature policy, the network) is refused now, not at
			// each PullImage.
			warnings, err := pipeline.CheckSettings(base, pipeline.Inputs{Env: auth.OSEnv(), Version: version, StateRoot: state.Default})
			if err != nil {
				return err
			}
			for _, w := range warnings {
				log.Warn(w)
			}
			if rt.Name == cri.RuntimeCRIO {
				log.Info("cri-o store", "dest", rt.Dest("IMAGE"), "storage_conf", l.Dest.StorageConf)
			}
			podPolicy := func(profile string) (cri.PodPolicy, error) {
				l, err := criPolicy(cmd.Flags(), c, rt, rpath, ro, profile)
				if err != nil {
					return cri.PodPolicy{}, err
				}
				sd, err := cgroup.UsesSystemd(l.Cgroup.Driver)
				if err != nil {
					return cri.PodPolicy{}, failure.New(failure.Usage, "%v", err)
				}
				return cri.PodPolicy{CRI: l.CRI, Systemd: sd}, nil
			}
			plan := func(r cri.Request) (*pipeline.Plan, error) {
				l, err := criPolicy(cmd.Flags(), c, rt, rpath, ro, r.Settings.Profile)
				if err != nil {
					return nil, err
				}
				if err := applyPodSettings(l, r.Settings); err != nil {
					return nil, err
				}
				in := pipeline.Inputs{Image: r.Image, Dest: r.Dest, Env: auth.OSEnv(), Version: version, StateRoot: state.Default}
				if in.Dest == "" {
					// A short name for CRI-O: resolved through
					// registries.conf as the pipeline resolves a short
					// IMAGE (an alias, or the one unqualified-search
					// registry: CRI-O's enforcing short-name mode), and
					// the DEST names the resolved image, as CRI-O's
					// store does.
					if in.Image, err = pipeline.ResolveImage(l, r.Image); err != nil {
						return nil, err
					}
					in.Dest = r.Runtime.Dest(in.Image)
				}
				if cred := r.Cred; cred != nil {
					in.Request = cred.Request
				}
				p, err := pipeline.NewPlan(l, in)
				if err == nil && r.Settings.CgroupParent != "" && p.Isolation.Cgroup != nil {
					// The pod's cgroup: never created (nor removed) by
					// the pull, should the pod end before it starts.
					p.Isolation.Cgroup.ParentMustExist = true
				}
				return p, err
			}
			handed = true
			n, err := cri.Serve(cmd.Context(), cri.Config{
				Listen: lpath, Runtime: rpath, RuntimeKind: rt, MaxParallel: maxParallel, Plan: plan, Run: pipeline.Run, PodPolicy: podPolicy,
				ListenGID: gid, MetricsListen: metricsListen, MetricsListener: ml,
				Options: pipeline.Options{Log: log, LogFormat: c.logFormat, Debug: c.debug}, Log: log,
				// systemd Type=notify: ready once the socket listens.
				// NOTIFY_SOCKET is unset then, so that no pull child
				// inherits it.
				Dial: dialRuntime,
				Ready: func() {
					if _, err := daemon.SdNotify(true, daemon.SdNotifyReady); err != nil {
						log.Warn("telling systemd the service is ready", "error", err)
					}
				},
			})
			if err != nil {
				return err
			}
			*result = criResult{Listen: listen, RuntimeEndpoint: runtimeEndpoint, Runtime: rt.Name, Pulls: n}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&listen, "listen", "", "serve the CRI image service on this `unix:///PATH` socket (created root-only, 0600, unless --listen-group; in a directory only root can write)")
	fs.StringVar(&listenGroup, "listen-group", "", "create the --listen socket root:`GROUP` 0660 (a name of /etc/group or a numeric GID) so that this group's members may call it; default root-only 0600")
	fs.StringVar(&metricsListen, "metrics-listen", "", "serve Prometheus metrics at http://`HOST:PORT`/metrics (HOST an IP address, no name, e.g. 127.0.0.1:9471; no authentication: keep it on loopback or firewalled)")
	fs.StringVar(&runtimeEndpoint, "runtime-endpoint", "", "the runtime's CRI socket, `unix:///PATH`, root's, in directories only root can write (containerd's, also its API socket: pulls import into it, namespace k8s.io; or CRI-O's): the rest of the image service is forwarded to it")
	fs.StringVar(&ro.runtime, "runtime", "auto", "the runtime behind --runtime-endpoint, `auto|containerd|cri-o`; auto: containerd with --containerd-config, cri-o with a --crio-* or --storage-conf flag, else what the runtime's Version answer names")
	fs.StringVar(&ro.crioConfig, "crio-config", cri.CRIOConfigDefault, "CRI-O: its crio.conf `FILE` ([crio] root, runroot, storage_driver, storage_option over storage.conf; [crio.image] signature_policy, signature_policy_dir, global_auth_file; a missing default is skipped, as CRI-O does)")
	fs.StringVar(&ro.crioConfigDir, "crio-config-dir", cri.CRIOConfigDirDefault, "CRI-O: its drop-in `DIR`, every file below it applied after --crio-config in lexical order, as CRI-O does")
	fs.StringVar(&ro.crioStore, "crio-store", "", "CRI-O: its store in the containers-storage: spelling, `[DRIVER@GRAPHROOT+RUNROOT:OPTIONS]`, instead of what --crio-config and its drop-ins say (a CRI-O started with --root, --runroot, --storage-driver or --storage-opt)")
	fs.StringVar(&ro.storageConf, "storage-conf", "", "CRI-O: the containers-storage.conf(5) `FILE` CRI-O reads (default: dest.storage_conf of the policy, else $CONTAINERS_STORAGE_CONF, else /etc/containers/storage.conf)")
	fs.IntVar(&maxParallel, "max-parallel", 4, "run at most `N` pulls at once (equal requests in flight share one pull)")
	fs.StringVar(&c.policyFile, "policy", "", "policy file (default $PULLHELPER_POLICY, else /etc/pullhelper/policy.toml when present)")
	fs.StringVar(&c.profile, "profile", "", "use [profiles.NAME] of the policy file")
	fs.StringVar(&c.logFormat, "log-format", "text", "stderr log format: text or json")
	fs.BoolVar(&c.debug, "debug", false, "log debug messages")
	addSettingFlagsExcept(fs, "containerd-address", "containerd-namespace")
	return cmd
}

// criPolicy is the policy of one pull of `pullhelper cri`: the file, its
// profile (the pod's choice, else --profile), the setting flags, then for
// containerd the runtime's socket as the containerd address and the CRI's
// namespace, for CRI-O --storage-conf.
func criPolicy(fs *pflag.FlagSet, c *common, rt cri.Runtime, runtimeSocket string, ro criOptions, podProfile string) (*policy.Loaded, error) {
	profile := c.profile
	if podProfile != "" {
		profile = podProfile
	}
	l, err := policy.Resolve(c.policyFile, profile)
	if err != nil {
		return nil, failure.Wrap(failure.Usage, err, "")
	}
	l.DefaultCertsD(hosts.DefaultCertsD())
	if err := applySettingFlags(fs, l); err != nil {
		return nil, failure.Wrap(failure.Usage, err, "")
	}
	if ro.storageConf != "" {
		if err := l.Set("--storage-conf", "dest.storage_conf", policy.String, ro.storageConf); err != nil {
			return nil, failure.Wrap(failure.Usage, err, "")
		}
	}
	if _, set := l.Defined("pull.signature_policy"); !set && rt.SignaturePolicy != "" {
		// CRI-O's node policy ([crio.image] signature_policy), when
		// pullhelper's own (--signature-policy, pull.signature_policy)
		// names none.
		if err := l.Set("crio.conf [crio.image] signature_policy", "pull.signature_policy", policy.String, rt.SignaturePolicy); err != nil {
			return nil, failure.Wrap(failure.Usage, err, "")
		}
	}
	if _, set := l.Defined("auth.authfile"); !set && rt.GlobalAuthFile != "" {
		// CRI-O's node credentials ([crio.image] global_auth_file: its
		// only auth file, SystemContext.AuthFilePath), when pullhelper's
		// own (--authfile, auth.authfile) names none. While it is not
		// there no file gives a credential, as containers/image reads a
		// missing AuthFilePath (the pipeline does not require it).
		if err := l.Set(policy.SourceCRIOGlobalAuthFile, "auth.authfile", policy.String, rt.GlobalAuthFile); err != nil {
			return nil, failure.Wrap(failure.Usage, err, "")
		}
	}
	if rt.Name != cri.RuntimeCRIO {
		if err := l.Set("--runtime-endpoint", "dest.containerd_address", policy.String, runtimeSocket); err != nil {
			return nil, failure.Wrap(failure.Usage, err, "")
		}
		if err := l.Set("--runtime-endpoint", "dest.containerd_namespace", policy.String, "k8s.io"); err != nil {
			return nil, failure.Wrap(failure.Usage, err, "")
		}
	}
	if err := l.Validate(); err != nil {
		return nil, failure.Wrap(failure.Usage, err, "")
	}
	return l, nil
}

// applyPodSettings applies what the policy took from the pull's pod (the
// checked sandbox_config): the pull's cgroup under the pod's cgroup parent,
// the pod's DNS as the child's resolv.conf (dns policy None: only the
// pod's servers, searches and options, as the kubelet's dnsPolicy None
// builds it in GetPodDNS; the policy's search and options are replaced,
// its hosts entries kept). It overrides the flags, as the policy said.
func applyPodSettings(l *policy.Loaded, st cri.PodSettings) error {
	var err error
	set := func(flag, key string, kind policy.Kind, vals ...string) {
		if err == nil {
			err = l.Set(flag, key, kind, vals...)
		}
	}
	if st.CgroupParent != "" {
		set("sandbox_config linux.cgroup_parent", "cgroup.parent", policy.String, st.CgroupParent)
	}
	if st.Snapshotter != "" {
		set(pipeline.RuntimeHandlerSetting, "dest.containerd_snapshotter", policy.String, st.Snapshotter)
	}
	if st.SignaturePolicy != "" {
		set("sandbox_config metadata.namespace (CRI-O's signature_policy_dir)", "pull.signature_policy", policy.String, st.SignaturePolicy)
	}
	if d := st.DNS; d != nil {
		set("sandbox_config dns_config", "network.mode", policy.String, "cluster-dns")
		set("sandbox_config dns_config", "network.dns.policy", policy.String, "None")
		set("sandbox_config dns_config.servers", "network.dns.nameservers", policy.Strings, d.Servers...)
		set("sandbox_config dns_config.searches", "network.dns.search", policy.Strings, d.Searches...)
		set("sandbox_config dns_config.options", "network.dns.options", policy.Strings, d.Options...)
	}
	if err == nil {
		err = l.Validate()
	}
	if err != nil {
		return failure.Wrap(failure.Usage, err, "")
	}
	return nil
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

// criRuntime is the runtime behind the service: --runtime when it names
// one; with auto, containerd when a containerd config is given
// (--containerd-config, auth.containerd_config), cri-o when a --crio-*
// flag is, else what the runtime's Version answer names (cri.Detect). For
// CRI-O, the store comes from --crio-store, else from storage.conf with
// CRI-O's configuration over it (cri.LoadCRIOSettings), and is checked as
// a containers-storage: DEST now (exit 2 naming what to fix).
func criRuntime(cmd *cobra.Command, kind string, l *policy.Loaded, rpath string, ro criOptions) (cri.Runtime, error) {
	fs := cmd.Flags()
	crioFlag := ""
	for _, f := range []string{"crio-config", "crio-config-dir", "crio-store", "storage-conf"} {
		if fs.Changed(f) {
			crioFlag = "--" + f
			break
		}
	}
	ctrdConf := l.Auth.ContainerdConfig != ""
	var rt cri.Runtime
	switch {
	case kind != "auto":
		rt = cri.Runtime{Name: kind, From: "--runtime"}
	case ctrdConf && crioFlag != "":
		return rt, failure.New(failure.Usage, "--containerd-config (auth.containerd_config) is containerd's and %s is CRI-O's: name the runtime with --runtime containerd or --runtime cri-o and drop the other", crioFlag)
	case ctrdConf:
		rt = cri.Runtime{Name: cri.RuntimeContainerd, From: "--containerd-config"}
	case crioFlag != "":
		rt = cri.Runtime{Name: cri.RuntimeCRIO, From: crioFlag}
	default:
		var err error
		if rt, err = cri.Detect(cmd.Context(), rpath, detectTimeout, dialRuntime); err != nil {
			return rt, err
		}
	}
	if rt.Name != cri.RuntimeCRIO {
		if crioFlag != "" {
			return rt, failure.New(failure.Usage, "%s is CRI-O's, and the runtime is containerd (from %s); drop it, or use --runtime cri-o", crioFlag, rt.From)
		}
		if path := l.Auth.ContainerdConfig; path != "" {
			// The runtime handlers' own snapshotters, for PullImage.
			cfg, err := dest.ReadContainerdConfig(path)
			if err != nil {
				return rt, failure.New(failure.Usage, "--containerd-config (auth.containerd_config): %v", err)
			}
			rt.Snapshotters = cfg.RuntimeSnapshotters
		}
		return rt, nil
	}
	if ctrdConf {
		return rt, failure.New(failure.Usage, "--containerd-config (auth.containerd_config) is containerd's, and the runtime is cri-o (from %s); drop it", rt.From)
	}
	for _, f := range []string{"containerd-snapshotter", "containerd-staging", "pin"} {
		if fs.Changed(f) {
			return rt, failure.New(failure.Usage, "--%s is for a containerd: DEST, and the runtime is cri-o (from %s): its pulls go to containers-storage:; drop it", f, rt.From)
		}
	}
	const probe = "localhost/pullhelper-cri-check:latest"
	opts := dest.ParseOptions{StorageConf: l.Dest.StorageConf}
	d, err := dest.ParseWith("containers-storage:"+probe, opts)
	if err != nil {
		return rt, failure.Wrap(failure.Usage, err, "the store of storage.conf (CRI-O's defaults)")
	}
	st := d.Spec().Store
	base := cri.CRIOSettings{Root: st.GraphRoot, RunRoot: st.RunRoot, Driver: st.Driver, Options: st.DriverOptions}
	s, err := cri.LoadCRIOSettings(base, cri.CRIOConfig{File: ro.crioConfig, FileSet: fs.Changed("crio-config"), Dir: ro.crioConfigDir})
	if err != nil {
		return rt, err
	}
	rt.SignaturePolicy, rt.SignaturePolicyDir, rt.GlobalAuthFile = s.SignaturePolicy, s.SignaturePolicyDir, s.GlobalAuthFile
	if ro.crioStore != "" {
		if _, err := dest.ParseWith("containers-storage:"+ro.crioStore+probe, opts); err != nil {
			return rt, failure.Wrap(failure.Usage, err, "--crio-store")
		}
		rt.Store = ro.crioStore
		return rt, nil
	}
	if rt.Store, err = s.StoreSpec(base); err != nil {
		return rt, err
	}
	if _, err := dest.ParseWith(rt.Dest(probe), opts); err != nil {
		return rt, failure.Wrap(failure.Usage, err, "the store of CRI-O's configuration (%d files read)", len(s.Files))
	}
	return rt, nil
}

// dialRuntime connects to the runtime's socket only when it is root's, in
// root's directories (dest.DialRootSocket, as a containerd: DEST's socket
// is checked): root sends it the kubelet's image calls and trusts what
// answers.
func dialRuntime(ctx context.Context, path string) (net.Conn, error) {
	return dest.DialRootSocket(ctx, path, "runtime socket", "use --runtime-endpoint with a socket of root's, in root's directories")
}
