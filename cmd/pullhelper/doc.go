// Command pullhelper pulls one container image the way the kubelet and the
// container runtime would, for node agents.
//
// This package is the CLI only: flags, subcommands, exit codes and output.
// stdout carries exactly one JSON object (the result, or
// {"error":{"code","message"}}); stderr carries human logs and, on a
// terminal, progress bars; --progress-fd carries JSON Lines events. Every
// setting flag maps to one policy key in one table (flags.go), and flags win
// over the policy file, which wins over the built-in defaults.
package main
