// Package target is what the copy knows of DEST: the parsed destination as
// it crosses the pipe to the child (Spec; Anonymous names no host path), the
// blobs DEST already has (KnownBlob, reported as present so that they are
// never fetched or read), the reference containers/image writes the staged
// image to (StagedReference), the names of the partial-blob cache's
// entries (PartialEntry, IsPartialEntry) and the form of a digest's hex
// (IsHex, by which package dest checks every blob name). Kinds is the one
// table of DEST's transports and their forms, from which package dest's
// parser, its error text and the usage lists are derived.
//
// It links containers/image's transports for the staged formats only: not
// package dest, the containerd client or containers-storage, which only the
// root parent needs (Stage, Verify, Commit).
package target
