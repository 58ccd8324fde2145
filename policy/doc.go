// Package policy is pullhelper's TOML policy file: the schema (version 1), the
// built-in defaults, profiles, validation and the merge with command-line
// flags.
//
// Precedence is flags > selected profile > file > built-in defaults. A policy
// fails closed: an unknown key, a wrong type or an impossible value is an
// error that names the file, the line (where the TOML parser knows it) and the
// key (and the flag that sets the same key, once the CLI has named it with
// NameFlag). Every such problem of a document is reported at once, as Errors;
// only a syntax error stops at the first. The file may not be a policy at
// all (a path in another user's directory, a symlink to a root-only file):
// no error quotes it -- a syntax error gives its line and kind without the
// decoder's quoted fragments, and an unknown key is named only inside one
// of the schema's sections. Every setting the schema accepts takes effect:
// none is parsed and then ignored.
//
// The [cri] table is read by `pullhelper cri` alone (what it takes from a
// request's pod); its profile_annotation and pod_profiles are the base's
// word, which no profile may set, and each of pod_profiles must name a
// profile of the file.
//
// Hostile input costs bounded time and memory: the file is read through
// internal/safefile (a regular file only: a FIFO never blocks); a file over MaxFileSize
// (1 MiB) or nested deeper than MaxDepth is refused before the TOML decoder
// sees it; a duration, size or count that does not fit its Go type is an
// error naming the maximum, never a wrapped-around value; strings that end
// up in resolv.conf or hosts cannot carry whitespace, control characters or
// resolv.conf syntax; privileges.user's uid must lie in 1-MaxID
// (4294967295 is "unchanged" to setresuid, 2^32 would wrap to root).
//
// Policy is plain data: this package imports nothing from containers/image,
// the cgroup library or the network code (a depcheck test keeps it so).
package policy
