// Package safefile reads the files the root parent reads on the caller's
// behalf (policy, credentials, registries and containerd configuration,
// certificates, kubelet configuration): a path the caller names may lie in
// a directory another user can write, who may put a FIFO, a device or a
// symlink to a root-only file there.
//
// Open and ReadFile open the path with O_PATH first (opening a device or a
// FIFO has no effect that way), require a regular file by fstat, and only
// then open that same inode for reading through /proc/self/fd, with
// O_NONBLOCK|O_CLOEXEC|O_NOCTTY (without /proc, the path again with those
// flags, and the inode must be the same); ReadFile reads at most limit bytes and
// refuses a bigger file. NoFollow refuses a symlink at the last component;
// the plain forms follow symlinks, as the owners of the formats read here do
// (a registries.conf, a Kubernetes Secret or ConfigMap volume is often a
// symlink).
//
// ReadDirAtMost lists a directory the caller names, bounded, opened
// O_DIRECTORY (a FIFO there fails instead of blocking). OpenDir opens one
// so, to list it and to read its entries by name relative to it
// (Dir.ReadFileOnce, Dir.Readlink). ReadFileOnce reads a file as ReadFile
// does, into the caller's buffer, unless the caller read that file (device
// and inode) before under another name: for reading every file of a
// directory (the system's trust roots) once each, without an *os.File for
// each. Every read is of raw descriptors, without the runtime's poller.
//
// Errors are one line, name the file and the bound, and never carry the
// file's content. Redact removes quoted fragments (to the end of the message
// at an escaped quote) and bare long numbers (RedactNumbers) from a
// decoder's message,
// for callers that report where and what kind of error a file has without
// repeating its bytes. A missing file's error still matches fs.ErrNotExist,
// so that callers keep their owner's semantics for a missing file.
package safefile
