package main

import (
	"errors"
	"path/filepath"

	"github.com/pullhelper/pullhelper/policy"
	"github.com/spf13/pflag"
)

// settingFlag maps one command-line flag to one policy key. This table is the
// only place flags become settings.
type settingFlag struct {
	name  string
	key   string
	kind  policy.Kind
	arg   string
	usage string
	path  bool // made absolute against the working directory
}

var settingFlags = []settingFlag{
	{"signature-policy", "pull.signature_policy", policy.String, "FILE", "containers-policy.json(5) judging the image (default: /etc/containers/policy.json if present, else accept anything)", true},
	{"registries-conf", "pull.registries_conf", policy.String, "FILE", "containers-registries.conf(5) for short names, mirrors and insecure/blocked registries", true},
	{"retries", "pull.retries", policy.Int, "N", "retry a failed manifest or blob request N times, with doubling, jittered back-off; Retry-After is honoured (default 3)", false},
	{"retry-delay", "pull.retry_delay", policy.String, "DURATION", "first back-off between retries; doubles after each (default 1s)", false},
	{"timeout", "pull.timeout", policy.String, "DURATION", "give up after DURATION, retries included (e.g. 10m; default none)", false},
	{"stall-timeout", "pull.stall_timeout", policy.String, "DURATION", "fail an attempt when no byte arrives for DURATION (default 2m; 0 disables)", false},
	{"parallel-layers", "pull.parallel_layers", policy.Int, "N", "download up to N layers at once (default 6)", false},
	{"all-architectures", "pull.all_architectures", policy.Bool, "", "copy every instance of a multi-arch index, not only this platform's", false},
	{"platform", "pull.platform", policy.String, "OS/ARCH[/VARIANT]", "copy, verify and unpack this platform's instance of a multi-arch index (e.g. linux/arm64, linux/arm/v7; default this machine's)", false},
	{"max-image-size", "pull.max_image_size", policy.String, "SIZE", "refuse an image declaring, sending or writing more than SIZE (default 64Gi)", false},
	{"lock-timeout", "dest.lock_timeout", policy.String, "DURATION", "wait at most DURATION for another pull of the image into DEST, and for the commit lock (default 2m; then exit 9)", false},
	{"containerd-address", "dest.containerd_address", policy.String, "SOCKET", "containerd:REF DEST: containerd's API socket (default: --containerd-config's, else /run/containerd/containerd.sock)", true},
	{"containerd-namespace", "dest.containerd_namespace", policy.String, "NS", "containerd:REF DEST: containerd namespace (default k8s.io, the CRI's)", false},
	{"containerd-snapshotter", "dest.containerd_snapshotter", policy.String, "NAME", "containerd:REF DEST: unpack for this snapshotter (default: the CRI's in --containerd-config, else overlayfs)", false},
	{"containerd-staging", "dest.containerd_staging", policy.String, "DIR", "containerd:REF DEST: stage the image in DIR before the import (default /var/lib/pullhelper/containerd)", true},
	{"pin", "dest.pin", policy.Bool, "", "containerd:REF DEST: label the records this pull writes io.cri-containerd.pinned=pinned (kept by the kubelet's image GC); without it this tool's pins on them go, --pin=false removes every pin", false},
	{"max-bandwidth", "pull.max_bandwidth", policy.String, "RATE", "cap this pull's download rate (e.g. 20MiB/s; TCP flow control slows the sender; default none)", false},
	{"node-bandwidth", "pull.node_bandwidth", policy.String, "RATE", "a node-wide cap shared evenly by every concurrent pull that sets it (e.g. 100MiB/s; default none)", false},
	{"node-parallel-layers", "pull.node_parallel_layers", policy.Int, "N", "a node-wide limit on concurrent layer downloads, split evenly among concurrent pulls that set it (at least 1 each; default none)", false},
	{"min-rate", "pull.min_rate", policy.String, "RATE", "fail a blob or manifest arriving slower than RATE over --stall-window (default 1KiB/s; 0 disables)", false},
	{"stall-window", "pull.stall_window", policy.String, "DURATION", "the window --min-rate is averaged over (default 60s)", false},
	{"authfile", "auth.authfile", policy.String, "FILE", "containers-auth.json(5) file; the only one read (also REGISTRY_AUTH_FILE)", true},
	{"pull-secret", "auth.pull_secrets", policy.Strings, "FILE", "Kubernetes pull secret: .dockerconfigjson/.dockercfg file or Secret manifest (repeatable; kubelet semantics)", true},
	{"kubelet-docker-config", "auth.kubelet_docker_config", policy.String, "auto|DIR", "search the node's docker config like the kubelet (auto: root dir /var/lib/kubelet)", false},
	{"credential-provider-config", "auth.credential_provider_config", policy.String, "FILE|DIR", "kubelet CredentialProviderConfig (exec plugins); a directory's *.json, *.yaml, *.yml are merged in lexical order", true},
	{"credential-provider-bin-dir", "auth.credential_provider_bin_dir", policy.String, "DIR", "directory of the credential-provider plugins", true},
	{"provider-service-account-token", "auth.provider_service_account_token", policy.String, "FILE", "pod service-account token file for credential providers with tokenAttributes (read at pull time)", true},
	{"provider-service-account-annotation", "auth.provider_service_account_annotations", policy.Strings, "KEY=VALUE", "the service account's annotation, sent to providers that list KEY in tokenAttributes (repeatable)", false},
	{"containerd-config", "auth.containerd_config", policy.String, "FILE", "containerd config.toml: CRI registry auth and TLS (containerd semantics); a containerd: DEST's socket, snapshotter and namespace", true},
	{"service-account-token", "auth.service_account_token", policy.String, "FILE", "token file offered to --service-account-registry registries (read at pull time)", true},
	{"service-account-registry", "auth.service_account_registries", policy.Strings, "PATTERN", "registry (host[:port] or *.domain[:port]) that gets the service-account token (repeatable)", false},
	{"cert-dir", "trust.cert_dir", policy.String, "DIR", "one flat directory of *.crt CAs and X.cert/X.key client pairs for every registry", true},
	{"tls-verify", "trust.tls_verify", policy.Bool, "BOOL", "verify registry certificates (default true)", false},
	{"insecure-registry", "trust.insecure_registries", policy.Strings, "PATTERN", "registry (host[:port] or *.domain[:port]) whose certificate is not verified and that may be reached over plain HTTP (repeatable)", false},
	{"cgroup-parent", "cgroup.parent", policy.String, "PATH", "parent of the per-pull cgroup", false},
	{"cgroup", "cgroup.path", policy.String, "PATH", "join this existing cgroup, e.g. a pod's", false},
	{"cpu-quota", "cgroup.cpu_quota", policy.String, "CORES", "CPU limit in cores, e.g. 0.5 or 500m ", false},
	{"memory-max", "cgroup.memory_max", policy.String, "SIZE", "memory limit, e.g. 256Mi", false},
	{"pids-max", "cgroup.pids_max", policy.Int, "N", "process/thread limit", false},
	{"io-read-bps", "cgroup.io_read_bps", policy.Strings, "PATH=RATE", "read bandwidth limit on PATH's disk, e.g. /var/lib=20MB/s (repeatable)", false},
	{"io-write-bps", "cgroup.io_write_bps", policy.Strings, "PATH=RATE", "write bandwidth limit on PATH's disk (repeatable)", false},
	{"netns", "network.netns", policy.String, "PATH|NAME|pid:PID", "run the pull child in this network namespace (/run/netns/NAME, /proc/PID/ns/net, a bind-mounted nsfs file)", false},
	{"dns", "network.dns.nameservers", policy.Strings, "IP", "cluster DNS server for the child's resolv.conf (repeatable; at most 3 are used)", false},
	{"dns-search", "network.dns.search", policy.Strings, "DOMAIN", "extra search domain (repeatable)", false},
	{"dns-option", "network.dns.options", policy.Strings, "OPT", "extra resolv.conf option, e.g. ndots:2 (repeatable)", false},
	{"dns-policy", "network.dns.policy", policy.String, "POLICY", "the pod dnsPolicy to follow: ClusterFirst (default), ClusterFirstWithHostNet, Default (the host's resolv.conf) or None (only --dns/--dns-search/--dns-option)", false},
	{"dns-namespace", "network.dns.namespace", policy.String, "NS", "Kubernetes namespace: search <NS>.svc.<domain> svc.<domain> <domain> first", false},
	{"kubelet-config", "network.dns.kubelet_config", policy.String, "FILE", "KubeletConfiguration to take clusterDNS, clusterDomain and resolvConf from", true},
	{"user", "privileges.user", policy.String, "dynamic|NAME|UID", "user the network-facing child runs as: dynamic (a free uid from 61184-65519, the default), a name or a uid; never root", false},
}

// Policy errors about a key a flag also sets name the flag:
// "FILE:LINE: pull.timeout (--timeout): problem".
func init() {
	for _, f := range settingFlags {
		policy.NameFlag(f.key, "--"+f.name)
	}
}

// textFlag is a string flag whose help shows its argument's name (Type) and
// that collects every occurrence, for repeatable flags.
type textFlag struct {
	vals []string
	typ  string
}

func (t *textFlag) String() string {
	if len(t.vals) == 0 {
		return ""
	}
	return t.vals[len(t.vals)-1]
}
func (t *textFlag) Set(v string) error { t.vals = append(t.vals, v); return nil }
func (t *textFlag) Type() string       { return t.typ }

func addSettingFlags(fs *pflag.FlagSet) {
	for _, f := range settingFlags {
		if f.kind == policy.Bool {
			fs.Bool(f.name, false, f.usage)
			continue
		}
		fs.Var(&textFlag{typ: f.arg}, f.name, f.usage)
	}
}

// applySettingFlags overrides the loaded policy with every flag the user set.
// A bad flag does not hide the next one: every bad flag is reported.
func applySettingFlags(fs *pflag.FlagSet, l *policy.Loaded) error {
	var errs policy.Errors
	for _, f := range settingFlags {
		fl := fs.Lookup(f.name)
		if fl == nil || !fl.Changed {
			continue
		}
		vals := []string{fl.Value.String()}
		if tf, ok := fl.Value.(*textFlag); ok {
			vals = append([]string(nil), tf.vals...)
		}
		if f.path {
			for i, v := range vals {
				if v != "" && !filepath.IsAbs(v) {
					if abs, err := filepath.Abs(v); err == nil {
						vals[i] = abs
					}
				}
			}
		}
		if err := l.Set("--"+f.name, f.key, f.kind, vals...); err != nil {
			var pe *policy.Error
			if !errors.As(err, &pe) {
				return err
			}
			errs = append(errs, pe)
		}
	}
	switch len(errs) {
	case 0:
		return implyNetworkMode(fs, l)
	case 1:
		return errs[0]
	}
	return errs
}

// implyNetworkMode: --netns alone means mode "netns", any DNS flag means
// "cluster-dns" (which may also join a netns), unless the policy chose a
// mode other than "host" already.
func implyNetworkMode(fs *pflag.FlagSet, l *policy.Loaded) error {
	dnsFlag := ""
	for _, n := range []string{"dns", "dns-policy", "dns-search", "dns-option", "dns-namespace", "kubelet-config"} {
		if fs.Changed(n) {
			dnsFlag = n
			break
		}
	}
	mode := l.Network.Mode
	switch {
	case dnsFlag != "" && mode != "cluster-dns":
		return l.Set("--"+dnsFlag, "network.mode", policy.String, "cluster-dns")
	case fs.Changed("netns") && mode == "host":
		return l.Set("--netns", "network.mode", policy.String, "netns")
	}
	return nil
}
