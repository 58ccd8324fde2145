// Package policy is pullhelper's TOML policy file: the schema (version 1), the
// built-in defaults, profiles, validation and the merge with command-line
// flags.
//
// Precedence is flags > selected profile > file > built-in defaults. A policy
// fails closed: an unknown key, a wrong type or an impossible value is an
// error that names the file, the line (where the TOML parser knows it) and the
// key. A setting that is accepted takes effect; one this version cannot honour
// yet is rejected with "not supported yet" instead of being ignored.
//
// Policy is plain data: this package imports nothing from containers/image,
// the cgroup library or the network code (a depcheck test keeps it so).
package policy
