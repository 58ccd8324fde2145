// Package safefs holds the descriptor-relative file primitives of the root
// parent: every name is resolved beneath a directory descriptor it holds,
// never through a symbolic link (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
// RESOLVE_NO_MAGICLINKS, O_NOFOLLOW and O_CLOEXEC always; without openat2,
// a walk of one O_PATH|O_NOFOLLOW component at a time), with no "." or ".."
// component (CheckRel). New files get O_EXCL random temporary names
// (CreateTemp), their owner and mode by fchown/fchmod on the descriptor
// opened (SetOwner), and reach their name by renameat2 (WriteFileAt).
// ReadAtMost reads a regular file only, with a bound, opening it
// O_NONBLOCK so that a FIFO or device planted under the name is refused
// instead of blocking the open. ErrnoText renders an error as the errno's
// words (a symlink or an escape named as refused). RootOnly says whether a
// directory is root's alone (root's, writable by nobody else).
//
// RemoveTree (and RemoveHeld, RemoveTreeCtx) removes a directory tree
// without climbing: a stack of held directory descriptors, one per level
// up to a depth bound (deeper levels are moved up first), never "..",
// each level's owner checked against the uids the caller handed parts of
// the tree to, its work bounded so that a tree someone keeps extending is
// left rather than chased.
//
// It knows nothing of images or destinations: package dest builds staging,
// verification and commit on it.
package safefs
