// Package dest holds the destinations of a pull (oci:, dir:, oci-archive:,
// docker-archive:, containerd:, containers-storage:) behind one interface,
// and the staging area a pull writes
// into before the root parent verifies and commits it.
//
// Invariant: the parent touches staging and DEST only through directory file
// descriptors it holds, resolving every name beneath them without following
// symbolic links (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
// RESOLVE_NO_MAGICLINKS, O_NOFOLLOW, O_EXCL temporary names, fchown/fchmod on
// descriptors it opened itself). The copy (the unprivileged child) is handed
// only the descriptor of the work directory, never a host path, never DEST's
// bytes: the digests DEST already has travel as a list (Known). Verify commits
// nothing and Commit moves exactly the files the verified manifest graph
// names, so DEST is either as it was or holds the complete new image. A
// containerd: DEST is staged as an oci: one and imported through
// containerd's socket by the parent only, after Verify: content under a
// lease (labelled as containerd's own pull labels it: gc.ref to children,
// the distribution source), unpacked, and the image records created last,
// so a runtime never lists a partial image; an index copied whole
// (--all-architectures) is the records' target. The pins of the records
// follow the pull (containerd_pin.go); ReadContainerdConfig reads the
// socket and the CRI's snapshotter from containerd's config.toml. The
// socket and every directory above it are checked to be root's before the
// parent connects, through the descriptor it checked.
//
// A staged inode is committed in place only when the kernel grants a write
// lease on it once the child is dead and work/ is root's (no other
// descriptor is open on it), taken after it is made the committed owner's
// 0600 and again before it is hashed; otherwise a fresh root-owned copy,
// hashed while copying, is. The partial-blob cache beside DEST (partial.go) is
// root's 0700 always; only its blobs/ is handed to the child, by mount;
// another user's cache is never adopted. Every recursive removal goes
// through removeTree: a stack of held directory descriptors, never "..",
// each level's owner checked (the top one may be a root-owned 0700
// directory this process holds, under a parent of any owner), its work
// bounded (removeMaxWork: past it the tree is left for gc).
//
// containers-storage: stages and verifies exactly as oci: (its staging in
// GRAPHROOT, under the same rules); its Commit imports the verified tree
// (verifiedSource: the taken-back inodes, read through held descriptors,
// never a path, a manifest's urls or the network) into the store, which
// go.podman.io/storage opens by path under its own locks — only after
// checkStorePaths proved GRAPHROOT, RUNROOT, imagestore, the additional
// read-only stores and their ancestors root's alone (prepareRoot; the
// read-write ones created beneath held descriptors when missing, the
// read-only ones never): the store's files are
// that library's, and a store holds the image only once its record is
// written (after every layer).
//
// No descriptor may carry "urls" (refused by the graph check for every
// DEST). Stage's waits (a locked store, containerd), the pull and commit
// locks, Verify and Commit run on the pull's context; the store imports stop
// when it is done, and what they wait for afterwards is bounded.
package dest
