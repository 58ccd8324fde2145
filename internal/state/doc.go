// Package state names pullhelper's one state root (/run/pullhelper by
// default) and the directories under it, each owned by one package: the
// cgroup parents pullhelper created (cgroup), the commit and pull locks
// (dest), the dynamic uid locks (privdrop), the node bandwidth share
// (pipeline) and the credential-provider cache (pipeline). The root is
// chosen once, by the owner of the process (cmd/pullhelper), and passed
// down as a Root: no package declares a path of its own.
package state
