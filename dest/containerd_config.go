package dest

import "github.com/pullhelper/pullhelper/hosts"

// ContainerdDaemon is what a containerd config.toml says about where the
// kubelet's images go: the daemon's socket, the CRI's snapshotter and
// namespace. Each *Key names the file and key that set the value ("" when
// it is containerd's default).
type ContainerdDaemon struct {
	Address, AddressKey         string
	Snapshotter, SnapshotterKey string
	// Namespace is always the CRI's, k8s.io: containerd's CRI has no
	// setting for it (constants.K8sContainerdNamespace).
	Namespace string
	// RuntimeSnapshotters maps a runtime handler to the snapshotter the
	// CRI unpacks its images for, when it names its own
	// (hosts.ContainerdDaemon.RuntimeSnapshotters).
	RuntimeSnapshotters map[string]string
}

// ReadContainerdConfig reads a containerd config.toml's socket and CRI
// snapshotter through hosts' reader of config.toml
// (hosts.ReadContainerdDaemon: containerd's LoadConfig, imports and
// versions 1 to 4, the one reader the registry settings come from too),
// with containerd's defaults for what it leaves unset. A missing file
// means containerd's defaults; an import that is missing, a file that does
// not parse or a version above 4 is an error naming the file.
func ReadContainerdConfig(path string) (*ContainerdDaemon, error) {
	d, err := hosts.ReadContainerdDaemon(path)
	if err != nil {
		return nil, err
	}
	out := &ContainerdDaemon{Address: DefaultContainerdAddress, Snapshotter: DefaultContainerdSnapshotter, Namespace: DefaultContainerdNamespace,
		RuntimeSnapshotters: d.RuntimeSnapshotters()}
	if d.Address != "" {
		out.Address, out.AddressKey = d.Address, d.AddressKey
	}
	if d.Snapshotter != "" {
		out.Snapshotter, out.SnapshotterKey = d.Snapshotter, d.SnapshotterKey
	}
	return out, nil
}
