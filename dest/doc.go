// Package dest is the root parent's side of a pull's destination (oci:,
// dir:, oci-archive:, docker-archive:, containerd:, containers-storage:;
// the one list is dest/target's Kinds): Stage checks DEST and creates the
// staging area the copy writes into, Verify takes it back and checks it,
// Commit moves it into DEST or imports it into a store. What the copy
// itself knows of DEST (the Spec without its path, the blobs DEST has, where
// to write) is package dest/target, which the copy imports instead of this
// one: the containerd client and containers-storage are linked here only.
//
// Its files, by job: dest.go (the Destination interface, Parse, the kinds'
// registry), one file per kind (oci.go, dir.go, ociarchive.go,
// dockerarchive.go, archive.go, containerd.go with containerdsock.go and
// containerd_unpack.go,
// storage.go with storageconf.go (storage.conf: a named one, or the
// system's search in storageconf_search.go, read into a private snapshot
// that containers/storage then reads), storepaths.go, storeroot.go,
// importsrc.go and storage_preapply.go, which applies a single image's
// layers under DiffIDs computed from their verified blobs before
// containers/image's import writes the record, each gzip'd layer inflated
// once, into an unnamed file below GRAPHROOT that the store applies);
// staging (stage.go),
// taking the staged tree back (takeback.go), the taken-back tree (tree.go)
// and the manifest graph verified on it (graph.go; the instance of an index
// is the one the parent chooses itself for the pull's platform, which
// stores import and containerd unpacks: platform.go; an index the staging
// converted must be exactly containers/image's conversion of the
// registry's, checked before the walk, and each stored instance is tied to
// the registry's in its place: checkConvertedIndex, tieIndexToServed); the partial-blob cache
// (partial.go, partialtake.go, salvage.go, handover.go, prehash.go);
// removal (remove.go), locks (locks.go) and gc (gc.go). The
// descriptor-relative primitives are package internal/safefs.
//
// Invariant: the parent touches staging and DEST only through directory file
// descriptors it holds, resolving every name beneath them without following
// symbolic links (internal/safefs; fchown/fchmod on descriptors it opened
// itself). The copy (the unprivileged child) is handed only the descriptor
// of the work directory, never a host path, never DEST's bytes: the
// digests DEST already has travel as a list (Known). Verify commits
// nothing and Commit moves exactly the files the verified manifest graph
// names, so DEST is either as it was or holds the complete new image; a
// store (containerd:, containers-storage:) lists the image only once all
// of it is imported. An existing DEST is replaced only when it is its
// kind's own (an empty or oci: layout, a dir: image, an empty file or an
// archive of its kind, recognised by a bounded read of its members:
// archive.go checkReplaceable). A containerd: DEST is staged as an oci: one
// (in the staging directory, under image-<16 hex of sha256(REF)>, so that
// its staging and partial-blob cache are the image's own: concurrent
// pulls of different images each resume, and a pull sweeps the other
// images' caches unchanged for PartialMaxAge and held by no one, and the
// shared .pullhelper-partial-image older versions kept for every image,
// at any age; OpenSweep with the staging directory finds both for gc) and
// imported through containerd's socket by the parent only, after Verify,
// which checks each layer's size and leaves its digest to the content
// store (Stage.storeChecks: containerd's writer commits a blob only if what
// it was sent hashes to the digest it was told; Commit reports a refusal as
// a verification failure), so that the parent hashes the manifests and
// configs it reads and containerd each layer, once; nothing is hashed
// ahead for it:
// content under a lease (labelled as containerd's own pull labels it:
// gc.ref to children, the distribution source), the image manifest the
// registry served (Expect.Served: as containerd's pull stores it, a Docker
// one too, which the staging converted to OCI; Verify checks it names the
// staged config and layers, servedIsStaged, shared with containers-storage:,
// or the registry's config where the conversion re-encoded it, handed over
// as Expect.ServedConfigs: convertedConfig)
// and the registry's index when there is one, unpacked, and the image
// records created last; the layers of a single image are unpacked as they
// are written, each applied once it and the layers below it are in the
// content store while the next is written (containerd_unpack.go: what
// Image.Unpack does after the last write, started earlier; Unpack then
// finds every snapshot and labels the config); an index copied whole
// (--all-architectures) is the records' target, unpacked after its writes,
// the registry's index and instances when the staging converted them (a
// Docker manifest list, an OCI index with Docker or zstd instances:
// Expect.ServedInstances, servedIndex). The pins of the records follow the pull
// (containerd_pin.go); ReadContainerdConfig (containerd_config.go) takes
// the socket and the CRI's snapshotter of containerd's config.toml from
// hosts' reader of it (hosts.ReadContainerdDaemon), with containerd's
// defaults. The
// socket and every directory above it are checked to be root's before the
// parent connects, through the descriptor it checked (containerdsock.go:
// openRootSocket; DialRootSocket, which pullhelper cri's forwarding uses, dials
// through it; pullhelper cri uses
// CheckRootDir for the directory of the socket it serves on).
//
// A staged inode is committed in place only when the kernel grants a write
// lease on it once the child is dead and work/ is root's (no other
// descriptor is open on it), taken after it is made the committed owner's
// 0600 and again before it is hashed; otherwise a fresh root-owned copy,
// hashed while copying, is. The partial-blob cache beside DEST (partial.go) is
// root's 0700 always; only its blobs/ is handed to the child, by mount;
// another user's cache is never adopted. Hashing ahead (prehash.go) holds
// read leases; the owner of the process installs the SIGIO handler that
// lets a broken one go and passes its channel in (dest installs no signal
// handler). Every recursive removal goes through safefs.RemoveTree: a stack of
// held directory descriptors, never "..", each level's owner checked (the
// top one may be a root-owned 0700 directory this process holds, under a
// parent of any owner), its work bounded (past a bound the tree
// is left for gc).
//
// containers-storage: stages and verifies exactly as oci: (its staging in
// GRAPHROOT, under the same rules); its Commit imports the verified tree
// (verifiedSource: the taken-back inodes, read through held descriptors,
// never a path, a manifest's urls or the network) into the store, which
// go.podman.io/storage opens by path under its own locks — only after
// checkStorePaths proved GRAPHROOT, RUNROOT, imagestore, the additional
// read-only stores and their ancestors root's alone (prepareRoot; the
// read-write ones created beneath held descriptors when missing, the
// read-only ones never): the store's files are that library's, and a store
// holds the image only once its record is written (after every layer).
// Its name is NAME:TAG, or NAME@sha256:DIGEST as CRI-O stores a pull by
// digest (storageName); Verify refuses a pull whose top-level digest is
// not DEST's, and an index's digest names the platform image imported.
// The import stores the registry's manifests, as containers/image's copy
// from the registry does: the manifest as served (Expect.Served) rather
// than the OCI one the staging converted a Docker manifest to (Verify
// checks both name the same staged config and layers), and for one
// platform of an index the index (Expect.IndexRaw) as the top-level
// manifest, its pulled instance the only one served and the one the
// stored image must hold; for an index copied whole and converted (a
// Docker manifest list or an OCI index with Docker or zstd instances,
// --all-architectures) the registry's index and
// every instance as served, each naming the staged blobs of the converted
// instance in its place (servedIndex).
//
// The lock files (the pull lock of an image into a DEST, the commit lock of
// a directory) are root-only files in the state root's lock directory,
// which the caller passes (StageOptions.Locks, LockPull, SweepLocks): dest
// declares no path of its own. The directory is opened with state.OpenDir
// (only root can change it or anything above it) and held while a lock is:
// each lock file is created, checked, swept and removed through it.
//
// No descriptor may carry "urls" (refused by the graph check for every
// DEST). Stage's waits (a locked store, containerd), the pull and commit
// locks, Verify and Commit run on the pull's context; the store imports stop
// when it is done, and what they wait for afterwards is bounded.
package dest
