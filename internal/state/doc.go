// Package state names pullhelper's one state root (/run/pullhelper by
// default) and the directories under it, each owned by one package: the
// cgroup parents pullhelper created (cgroup), the commit and pull locks
// (dest), the dynamic uid locks (privdrop), the node bandwidth share
// (pipeline) and the credential-provider cache (pipeline). The root is
// chosen once, by the owner of the process (cmd/pullhelper), and passed
// down as a Root: no package declares a path of its own. OpenDir (and
// CheckDir) is how each package gets its directory: created 0700 when
// missing, and refused unless only root can change it or anything above it
// (no symbolic link on the way, every ancestor root's and not writable by
// others unless sticky, the directory root's and writable by nobody else),
// so that what root later locks, reads or removes there by name only root
// can have put there. OpenExistingDir checks the same and creates nothing
// (the sweeps). RemoveIfUnheld is the one way a lock file there is
// reclaimed: through the held directory, and only a regular file of the
// euid's with one link that nobody holds. LockAt is the one way a lock file
// there is taken (the pull and commit locks, the uid locks, the cgroup
// parents lock): never through a symbolic link, again on the file at the
// name when its holder removed the one it locked, and never waited for in
// flock(2) itself: it polls, bounded by a wait and by the context.
package state
