package state

import "path/filepath"

// Root is the state root: a root-owned directory on a tmpfs, emptied by
// a reboot.
type Root string

// Default is the state root of a node.
const Default Root = "/run/pullhelper"

// Path is the root itself (Default when r is empty).
func (r Root) Path() string {
	if r == "" {
		return string(Default)
	}
	return string(r)
}

// CgroupParents marks the cgroup parents pullhelper created (cgroup).
func (r Root) CgroupParents() string { return filepath.Join(r.Path(), "parents") }

// Locks holds the commit and pull lock files (dest).
func (r Root) Locks() string { return filepath.Join(r.Path(), "locks") }

// UIDs holds the dynamic uid locks (privdrop).
func (r Root) UIDs() string { return filepath.Join(r.Path(), "uids") }

// Bandwidth holds one file per pull sharing the node's bandwidth
// (pipeline).
func (r Root) Bandwidth() string { return filepath.Join(r.Path(), "bandwidth") }

// ProviderCache holds the kubelet credential-provider responses the
// provider allowed to be cached (pipeline).
func (r Root) ProviderCache() string { return filepath.Join(r.Path(), "credential-provider-cache") }
