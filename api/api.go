package api

import "time"

// Result is the JSON object printed on stdout on success. Layers and Bytes
// are what the parent verified of the stored image: its distinct layers
// (every instance's for an index stored whole) and the declared sizes of
// its distinct blobs (configs and layers).
type Result struct {
	Image             string          `json:"image"`
	Reference         string          `json:"reference"`
	Digest            string          `json:"digest"`
	MediaType         string          `json:"media_type"`
	InstanceDigest    string          `json:"instance_digest,omitempty"`
	DestinationDigest string          `json:"destination_digest,omitempty"`
	Destination       string          `json:"destination"`
	Layers            int             `json:"layers"`
	Bytes             int64           `json:"bytes"`
	DurationMS        int64           `json:"duration_ms"`
	Attempts          int             `json:"attempts"`
	Credential        *Credential     `json:"credential"`
	SignaturePolicy   SignaturePolicy `json:"signature_policy"`
	Isolation         Isolation       `json:"isolation"`
	Usage             *Usage          `json:"usage,omitempty"`
	// Timings says where the pull's wall time went (informational).
	Timings *Timings `json:"timings,omitempty"`
	// Endpoints are the hosts that served this pull (its successful
	// attempt): a registries.conf mirror, a containerd hosts.toml host or
	// the registry itself. Informational only: it is the copy's own
	// account (in the isolated child, the child's: only hosts of the plan's
	// endpoints, each once, at most 64, counts at most what the parent
	// verified, never checked further), and nothing may rely on it for a
	// security decision.
	Endpoints []EndpointUse `json:"endpoints,omitempty"`
	// KeptBytes are the blob bytes not fetched in this pull because an
	// earlier, interrupted one kept them in DEST's partial-blob cache (a
	// resumed blob's prefix, or all of a blob kept whole); the endpoints'
	// bytes are only what the registry sent. Informational, like
	// Endpoints (the copy's account, at most Bytes).
	KeptBytes int64 `json:"kept_bytes,omitempty"`
	// ImageID is the image as the runtime sees it when DEST is a store
	// (containerd:, containers-storage:): sha256:<config digest>, what
	// podman --no-trunc and crictl show; Store says which store. Both are
	// what the store reported to the parent after its commit, never the
	// copy's word; absent for oci:, dir: and the archives.
	ImageID string `json:"image_id,omitempty"`
	Store   *Store `json:"store,omitempty"`
}

// Store is the runtime store a store DEST went to: Type "containerd"
// (Address, Namespace, Snapshotter, Pinned) or "containers-storage"
// (Driver, the graph driver the store runs with; GraphRoot, RunRoot;
// StorageConf, the storage.conf named by dest.storage_conf, "" for the
// system's); Names are the image's names in the store.
type Store struct {
	Type        string   `json:"type"`
	Address     string   `json:"address,omitempty"`
	Namespace   string   `json:"namespace,omitempty"`
	Snapshotter string   `json:"snapshotter,omitempty"`
	Pinned      bool     `json:"pinned,omitempty"`
	Driver      string   `json:"driver,omitempty"`
	GraphRoot   string   `json:"graph_root,omitempty"`
	RunRoot     string   `json:"run_root,omitempty"`
	StorageConf string   `json:"storage_conf,omitempty"`
	Names       []string `json:"names,omitempty"`
}

// EndpointUse is what one host served in a pull: the manifests (one per
// tag or digest asked) and blobs that were last requested from it (a
// fallback or retry may ask several hosts for the same one), and the blob
// bytes read from it (manifests are not counted). Like every view the
// child reports, it is informational, not a verified fact.
type EndpointUse struct {
	Host      string `json:"host"`
	Manifests int    `json:"manifests"`
	Blobs     int    `json:"blobs"`
	Bytes     int64  `json:"bytes"`
}

// Event is one JSON Lines progress event (--progress-fd).
type Event struct {
	Type        string    `json:"type"`
	TS          time.Time `json:"ts"`
	Image       string    `json:"image,omitempty"`
	Destination string    `json:"destination,omitempty"`
	Digest      string    `json:"digest,omitempty"`
	MediaType   string    `json:"media_type,omitempty"`
	Size        int64     `json:"size,omitempty"`
	Bytes       int64     `json:"bytes,omitempty"`
	Skipped     bool      `json:"skipped,omitempty"`
	Layers      int       `json:"layers,omitempty"`
	Attempt     int       `json:"attempt,omitempty"`
	Code        string    `json:"code,omitempty"`
	Message     string    `json:"message,omitempty"`
	// Host is the host a layer_* or config_* event's blob is being fetched
	// from, when known at the time of the event (layer_start often has
	// none). Informational, as the child reports it.
	Host string `json:"host,omitempty"`
	// InstanceDigest and ConfigSize are a resolved event's: the instance
	// chosen from an index (this platform's, or --platform's), and the
	// part of Size that is configs (Size - ConfigSize is the layers').
	InstanceDigest string `json:"instance_digest,omitempty"`
	ConfigSize     int64  `json:"config_size,omitempty"`
	// KeptBytes: of a layer_* or config_* event's Bytes, those the
	// partial-blob cache served (kept by an earlier, interrupted pull),
	// not the registry; on done, the pull's total (the result's
	// kept_bytes). Informational, as the child reports it.
	KeptBytes int64 `json:"kept_bytes,omitempty"`
}

// Event types. The pipeline emits start, done and error itself; only the
// progress types may come from the copy (in the isolated child, the parent
// drops any other type the child sends).
const (
	EventStart         = "start"
	EventDone          = "done"
	EventError         = "error"
	EventLayerStart    = "layer_start"
	EventLayerProgress = "layer_progress"
	EventLayerDone     = "layer_done"
	EventConfigStart   = "config_start"
	EventConfigProg    = "config_progress"
	EventConfigDone    = "config_done"
	// EventResolved comes once an attempt resolved the manifest, before
	// any blob: Digest and MediaType the manifest's (an index's, with
	// InstanceDigest the instance chosen), Layers the distinct layers and
	// Size the declared sizes of the distinct configs and layers of what
	// the attempt copies (this platform's image; every instance's with
	// --all-architectures), as Result's Layers and Bytes count them.
	EventResolved = "resolved"
)

// IsProgress reports whether t is a progress event type, the only kind the
// copy may emit.
func IsProgress(t string) bool {
	switch t {
	case EventResolved, EventLayerStart, EventLayerProgress, EventLayerDone, EventConfigStart, EventConfigProg, EventConfigDone:
		return true
	}
	return false
}

// Credential names the credential a registry accepted (never the secret).
type Credential struct {
	Source   string `json:"source"`
	File     string `json:"file,omitempty"`
	Key      string `json:"key,omitempty"`
	Username string `json:"username,omitempty"`
}

// SignaturePolicy says which policy.json judges the image.
type SignaturePolicy struct {
	// Source is "flag", "policy-file", "system" or "builtin".
	Source string `json:"source"`
	File   string `json:"file,omitempty"`
	Note   string `json:"note,omitempty"`
}

// Isolation describes how the pull was isolated.
type Isolation struct {
	Enabled       bool     `json:"enabled"`
	Mode          string   `json:"mode"`
	Reason        string   `json:"reason,omitempty"`
	Cgroup        string   `json:"cgroup,omitempty"`
	CgroupVersion string   `json:"cgroup_version,omitempty"`
	CgroupDriver  string   `json:"cgroup_driver,omitempty"`
	CgroupJoined  bool     `json:"cgroup_joined,omitempty"`
	Limits        *Limits  `json:"limits,omitempty"`
	Reclaimed     []string `json:"reclaimed,omitempty"`
	ChildPID      int      `json:"child_pid,omitempty"`
	UID           int      `json:"uid,omitempty"`
	GID           int      `json:"gid,omitempty"`
	User          string   `json:"user,omitempty"`
	Seccomp       bool     `json:"seccomp,omitempty"`
	Netns         string   `json:"netns,omitempty"`
	DNS           []string `json:"dns,omitempty"`
}

// Limits are the resource limits of a per-pull cgroup, as cgroup applies
// them (cgroup.Limits is this type) and the result reports them. Zero means
// "no limit".
type Limits struct {
	CPUQuota   float64    `json:"cpu_quota,omitempty"`  // cores
	CPUWeight  uint64     `json:"cpu_weight,omitempty"` // 1..10000 (v2 scale)
	MemoryMax  int64      `json:"memory_max,omitempty"`
	MemoryHigh int64      `json:"memory_high,omitempty"`
	SwapMax    *int64     `json:"swap_max,omitempty"` // nil: unset
	PidsMax    int64      `json:"pids_max,omitempty"`
	IOWeight   uint64     `json:"io_weight,omitempty"` // 1..10000 (v2 scale)
	IO         []IODevice `json:"io,omitempty"`
}

// Any reports whether any limit is set.
func (l Limits) Any() bool {
	return l.CPUQuota > 0 || l.CPUWeight > 0 || l.MemoryMax > 0 || l.MemoryHigh > 0 || l.SwapMax != nil ||
		l.PidsMax > 0 || l.IOWeight > 0 || len(l.IO) > 0
}

// IODevice is a throttle on one block device.
type IODevice struct {
	Source    string `json:"source"` // the path or MAJ:MIN the policy named
	Major     int64  `json:"major"`
	Minor     int64  `json:"minor"`
	ReadBPS   uint64 `json:"read_bps,omitempty"`
	WriteBPS  uint64 `json:"write_bps,omitempty"`
	ReadIOPS  uint64 `json:"read_iops,omitempty"`
	WriteIOPS uint64 `json:"write_iops,omitempty"`
}

// Usage is what the pull's cgroup reported; a field the kernel does not
// report is omitted.
type Usage struct {
	CPUUsageNS      *uint64 `json:"cpu_usage_ns,omitempty"`
	MemoryPeakBytes *uint64 `json:"memory_peak_bytes,omitempty"`
	IOReadBytes     *uint64 `json:"io_read_bytes,omitempty"`
	IOWriteBytes    *uint64 `json:"io_write_bytes,omitempty"`
	PidsPeak        *uint64 `json:"pids_peak,omitempty"`
	OOMKills        *uint64 `json:"oom_kills,omitempty"`
	PidsMaxHits     *uint64 `json:"pids_max_hits,omitempty"`
}

// Timings splits a pull's wall time (DurationMS) into its phases, in
// milliseconds: Setup, from the start to the copy's start (configuration,
// locks, staging; isolated, also the cgroup and starting the child in it);
// Copy, until the copy ended (isolated: the child setting itself up,
// dropping its privileges, copying and exiting); Verify, the parent taking the staged
// image back and hashing and checking it (and the signature policy's
// re-check); Commit, moving it into DEST (or importing it into a store);
// Cleanup, the rest (removing the cgroup and the staging area, releasing
// the pull uid): the five add up to DurationMS.
type Timings struct {
	SetupMS   int64 `json:"setup_ms"`
	CopyMS    int64 `json:"copy_ms"`
	VerifyMS  int64 `json:"verify_ms"`
	CommitMS  int64 `json:"commit_ms"`
	CleanupMS int64 `json:"cleanup_ms"`
}
