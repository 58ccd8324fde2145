package policy

import (
	"time"
)

// DefaultPath is read when neither --policy nor PULLHELPER_POLICY names a file.
const DefaultPath = "/etc/pullhelper/policy.toml"

// EnvPolicy names the environment variable that selects the policy file.
const EnvPolicy = "PULLHELPER_POLICY"

// Policy is every setting of one pull. Field names are the TOML keys.
type Policy struct {
	Version    int        `toml:"version" json:"version"`
	Pull       Pull       `toml:"pull" json:"pull"`
	Auth       Auth       `toml:"auth" json:"auth"`
	Trust      Trust      `toml:"trust" json:"trust"`
	Cgroup     Cgroup     `toml:"cgroup" json:"cgroup"`
	Network    Network    `toml:"network" json:"network"`
	Privileges Privileges `toml:"privileges" json:"privileges"`
	Dest       Dest       `toml:"dest" json:"dest"`
	CRI        CRI        `toml:"cri" json:"cri"`
}

// Pull is the [pull] section: how the copy itself behaves.
type Pull struct {
	// SignaturePolicy is a containers-policy.json(5) file. Empty: use
	// /etc/containers/policy.json when present, else accept anything (and
	// say so in the result).
	SignaturePolicy string `toml:"signature_policy" json:"signature_policy,omitempty"`
	// RegistriesConf is a containers-registries.conf(5) file (short-name
	// aliases, unqualified-search registries, insecure and blocked entries).
	RegistriesConf string `toml:"registries_conf" json:"registries_conf,omitempty"`
	// Retries is how many times a network failure is retried (default 3).
	Retries Count `toml:"retries" json:"retries"`
	// RetryDelay is the first back-off; it doubles after each try (default 1s).
	RetryDelay Duration `toml:"retry_delay" json:"retry_delay"`
	// Timeout bounds the whole pull, retries included (0: none).
	Timeout Duration `toml:"timeout" json:"timeout"`
	// StallTimeout fails an attempt in which no byte arrived for this long
	// (default 2m; 0: never).
	StallTimeout Duration `toml:"stall_timeout" json:"stall_timeout"`
	// ParallelLayers is how many layers download at once (default 6).
	ParallelLayers Count `toml:"parallel_layers" json:"parallel_layers"`
	// MaxImageSize bounds one image: the sum of its declared blob sizes,
	// the bytes read and the bytes written into staging (default 64Gi);
	// a registry that declares or sends more is refused (exit 8).
	MaxImageSize Size `toml:"max_image_size" json:"max_image_size,omitempty"`
	// MaxBandwidth caps this pull's download rate, on the bytes read from
	// the network (0: none).
	MaxBandwidth Rate `toml:"max_bandwidth" json:"max_bandwidth,omitempty"`
	// NodeBandwidth is a node-wide cap shared by every concurrent pull
	// that sets it, split evenly among the live ones (coordinated through
	// /run/pullhelper/bandwidth; 0: none). MaxBandwidth still caps each.
	NodeBandwidth Rate `toml:"node_bandwidth" json:"node_bandwidth,omitempty"`
	// NodeParallelLayers is a node-wide limit on concurrent layer
	// downloads, split the same way (at least one per pull; 0: none).
	NodeParallelLayers Count `toml:"node_parallel_layers" json:"node_parallel_layers,omitempty"`
	// MinRate fails a blob whose bytes arrive slower than this, averaged
	// over StallWindow (default 1KiB/s; 0 disables): a trickle that keeps
	// the no-byte stall timeout at bay still ends the attempt (exit 6).
	MinRate     Rate     `toml:"min_rate" json:"min_rate"`
	StallWindow Duration `toml:"stall_window" json:"stall_window"`
	// AllArchitectures copies every instance of a multi-arch index instead of
	// the one for this machine's platform.
	AllArchitectures bool `toml:"all_architectures" json:"all_architectures"`
	// Platform, OS/ARCH[/VARIANT], is the platform whose instance of an
	// index is copied, verified and unpacked ("": this machine's).
	Platform string `toml:"platform" json:"platform,omitempty"`
}

// Auth is the [auth] section: where credentials come from.
type Auth struct {
	// Authfile is a containers auth.json(5) file. It replaces the default
	// search (as REGISTRY_AUTH_FILE and --authfile do in skopeo and podman).
	Authfile string `toml:"authfile" json:"authfile,omitempty"`
	// PullSecrets are Kubernetes pull secrets (raw .dockerconfigjson /
	// .dockercfg files or Secret manifests), read with kubelet semantics.
	PullSecrets []string `toml:"pull_secrets" json:"pull_secrets,omitempty"`
	// KubeletDockerConfig searches the node's docker config like the
	// kubelet: "auto" (root dir /var/lib/kubelet) or the kubelet root dir.
	KubeletDockerConfig string `toml:"kubelet_docker_config" json:"kubelet_docker_config,omitempty"`
	// ContainerdConfig is containerd's config.toml (CRI registry section).
	ContainerdConfig string `toml:"containerd_config" json:"containerd_config,omitempty"`
	// CredentialProviderConfig is a kubelet CredentialProviderConfig; the
	// plugins are in CredentialProviderBinDir (default: the config's dir).
	CredentialProviderConfig string `toml:"credential_provider_config" json:"credential_provider_config,omitempty"`
	CredentialProviderBinDir string `toml:"credential_provider_bin_dir" json:"credential_provider_bin_dir,omitempty"`
	// ServiceAccountToken is a token file (read at pull time) offered as the
	// password to the registries matching ServiceAccountRegistries.
	ServiceAccountToken      string   `toml:"service_account_token" json:"service_account_token,omitempty"`
	ServiceAccountRegistries []string `toml:"service_account_registries" json:"service_account_registries,omitempty"`
	ServiceAccountUsername   string   `toml:"service_account_username" json:"service_account_username,omitempty"`
	// ProviderServiceAccountToken is the pod service account's token file
	// (read at pull time) sent to the credential providers with
	// tokenAttributes (KEP-4412); ProviderServiceAccountAnnotations are the
	// service account's annotations, "KEY=VALUE", of which each provider
	// gets the keys its tokenAttributes list.
	ProviderServiceAccountToken       string   `toml:"provider_service_account_token" json:"provider_service_account_token,omitempty"`
	ProviderServiceAccountAnnotations []string `toml:"provider_service_account_annotations" json:"provider_service_account_annotations,omitempty"`
}

// Trust is the [trust] section: TLS material.
type Trust struct {
	// CertDir is one flat directory (*.crt CAs, X.cert/X.key client pairs)
	// used for every registry, like skopeo --src-cert-dir.
	CertDir string `toml:"cert_dir" json:"cert_dir,omitempty"`
	// CertsD are roots of per-host directories ROOT/HOST[:PORT], searched in
	// order; the first existing one is used (containers semantics). The
	// built-in policy leaves it nil: its default is the linked
	// containers/image's search, which the caller supplies
	// (Loaded.DefaultCertsD).
	CertsD []string `toml:"certs_d" json:"certs_d"`
	// TLSVerify checks registry certificates (default true).
	TLSVerify bool `toml:"tls_verify" json:"tls_verify"`
	// InsecureRegistries lists registries ("host[:port]" or "*.domain")
	// whose certificates are not verified.
	InsecureRegistries []string `toml:"insecure_registries" json:"insecure_registries,omitempty"`
	// CAFiles scopes CA files to registry patterns (e.g. the service CA for
	// "*.svc:5000").
	CAFiles []CAFile `toml:"ca_files" json:"ca_files,omitempty"`
}

// CAFile is one CA bundle trusted for the registries matching Registry.
type CAFile struct {
	Registry string `toml:"registry" json:"registry"`
	File     string `toml:"file" json:"file"`
}

// Cgroup is the [cgroup] section: where the pull runs and its limits.
type Cgroup struct {
	Driver        string   `toml:"driver" json:"driver"`
	Parent        string   `toml:"parent" json:"parent"`
	Path          string   `toml:"path" json:"path,omitempty"`
	CPUQuota      Cores    `toml:"cpu_quota" json:"cpu_quota,omitempty"`
	CPUWeight     Count    `toml:"cpu_weight" json:"cpu_weight,omitempty"`
	MemoryMax     Size     `toml:"memory_max" json:"memory_max,omitempty"`
	MemoryHigh    Size     `toml:"memory_high" json:"memory_high,omitempty"`
	MemorySwapMax Size     `toml:"memory_swap_max" json:"memory_swap_max,omitempty"`
	PidsMax       Count    `toml:"pids_max" json:"pids_max,omitempty"`
	IOWeight      Count    `toml:"io_weight" json:"io_weight,omitempty"`
	IOReadBPS     []string `toml:"io_read_bps" json:"io_read_bps,omitempty"`
	IOWriteBPS    []string `toml:"io_write_bps" json:"io_write_bps,omitempty"`
	IOReadIOPS    []string `toml:"io_read_iops" json:"io_read_iops,omitempty"`
	IOWriteIOPS   []string `toml:"io_write_iops" json:"io_write_iops,omitempty"`
}

// Network is the [network] section.
type Network struct {
	Mode  string `toml:"mode" json:"mode"`
	Netns string `toml:"netns" json:"netns,omitempty"`
	DNS   DNS    `toml:"dns" json:"dns"`
}

// DNS is [network.dns]: the cluster DNS override.
type DNS struct {
	// Policy is the pod dnsPolicy the override follows: ClusterFirst
	// (default), ClusterFirstWithHostNet, Default or None.
	Policy        string   `toml:"policy" json:"policy,omitempty"`
	Nameservers   []string `toml:"nameservers" json:"nameservers,omitempty"`
	Search        []string `toml:"search" json:"search,omitempty"`
	Options       []string `toml:"options" json:"options,omitempty"`
	Hosts         []string `toml:"hosts" json:"hosts,omitempty"`
	KubeletConfig string   `toml:"kubelet_config" json:"kubelet_config,omitempty"`
	Namespace     string   `toml:"namespace" json:"namespace,omitempty"`
	ClusterDomain string   `toml:"cluster_domain" json:"cluster_domain,omitempty"`
}

// Dest is the [dest] section: how DEST is treated.
type Dest struct {
	// AllowOtherOwner accepts an existing DEST (or DEST's parent) owned by
	// a user other than root and the caller. Default false: such a DEST is
	// refused (exit 9), because its owner could swap its entries under the
	// root parent.
	AllowOtherOwner bool `toml:"allow_other_owner" json:"allow_other_owner"`
	// LockTimeout bounds the wait for another pull of the same image into
	// the same DEST, and for the commit lock (default 2m; exit 9 past it).
	LockTimeout Duration `toml:"lock_timeout" json:"lock_timeout"`
	// Containerd* say where a containerd:REF DEST goes: the API socket,
	// the namespace (the CRI's k8s.io), the snapshotter the layers are
	// unpacked for (the CRI's default overlayfs), the directory the image
	// is staged in before the import, and whether the image records get
	// the CRI's pinned label (Pin).
	ContainerdAddress     string `toml:"containerd_address" json:"containerd_address"`
	ContainerdNamespace   string `toml:"containerd_namespace" json:"containerd_namespace"`
	ContainerdSnapshotter string `toml:"containerd_snapshotter" json:"containerd_snapshotter"`
	ContainerdStaging     string `toml:"containerd_staging" json:"containerd_staging"`
	Pin                   bool   `toml:"pin" json:"pin"`
	// StorageConf is the storage.conf of a containers-storage: DEST
	// (default: the system's, /etc/containers/storage.conf); the DEST's
	// [DRIVER@GRAPHROOT+RUNROOT] overrides what it sets.
	StorageConf string `toml:"storage_conf" json:"storage_conf,omitempty"`
}

// CRI is the [cri] section: what `pullhelper cri` takes from a pull's pod
// (the request's sandbox_config).
type CRI struct {
	// ProfileAnnotation is the pod annotation whose value names the
	// [profiles.NAME] its pulls use ("": pods cannot choose). Only the
	// service's own policy (the base or its --profile) sets it.
	ProfileAnnotation string `toml:"profile_annotation" json:"profile_annotation,omitempty"`
	// PodProfiles are the profiles a pod may choose by that annotation;
	// any other value is refused. Set with ProfileAnnotation.
	PodProfiles []string `toml:"pod_profiles" json:"pod_profiles,omitempty"`
	// PullCgroup is where a pull's per-pull cgroup goes: "own" (default)
	// under cgroup.parent, or "pod" under the pod's cgroup parent
	// (linux.cgroup_parent), charged to the pod.
	PullCgroup string `toml:"pull_cgroup" json:"pull_cgroup"`
	// PodDNS makes the pod's dns_config (servers, searches, options) the
	// pull child's resolv.conf (network.dns.policy "None"); default false:
	// the policy's DNS.
	PodDNS bool `toml:"pod_dns" json:"pod_dns"`
}

// Pull cgroup placements of the cri service (CRI.PullCgroup).
const (
	PullCgroupOwn = "own"
	PullCgroupPod = "pod"
)

// Privileges is the [privileges] section.
type Privileges struct {
	User    string `toml:"user" json:"user"`
	Seccomp bool   `toml:"seccomp" json:"seccomp"`
}

// Default returns the built-in policy. Its trust.certs_d is nil: policy is
// plain data and does not compute the per-host certificate search of the
// linked containers/image; Loaded.DefaultCertsD sets it.
func Default() *Policy {
	return &Policy{
		Version: 1,
		Pull: Pull{
			Retries:        3,
			RetryDelay:     Duration(time.Second),
			StallTimeout:   Duration(2 * time.Minute),
			ParallelLayers: 6,
			MinRate:        1 << 10,
			StallWindow:    Duration(time.Minute),
		},
		Trust:      Trust{TLSVerify: true},
		Cgroup:     Cgroup{Driver: "auto", Parent: "/pullhelper"},
		Network:    Network{Mode: "host"},
		Privileges: Privileges{User: "dynamic", Seccomp: true},
		CRI:        CRI{PullCgroup: PullCgroupOwn},
		Dest: Dest{LockTimeout: Duration(2 * time.Minute), ContainerdAddress: "/run/containerd/containerd.sock",
			ContainerdNamespace: "k8s.io", ContainerdSnapshotter: "overlayfs", ContainerdStaging: "/var/lib/pullhelper/containerd"},
	}
}
