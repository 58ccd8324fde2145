// Package regpattern is the one registry-pattern type of pullhelper. It serves
// trust.ca_files, trust.insecure_registries and auth.service_account_registries,
// so that the three settings can never disagree on which registries a pattern
// names.
//
// A pattern is "host[:port]" or "*.domain[:port]". The rule, in one line: the
// port must be equal, and a pattern without a port matches only a registry
// written without one. "*." stands for one or more whole labels. Host names
// compare case-insensitively.
//
// Why this port rule: it is the rule of the kubelet's keyring (kubernetes
// pkg/credentialprovider/keyring.go URLsMatch: "ports equal", "" ≠ "5000"),
// of containerd (configs."HOST:PORT" and certs.d/HOST:PORT are exact
// host:port lookups), and of the Docker daemon's insecure-registries. The one
// tool that lets "example.com" match "example.com:5000" is containers/image's
// registries.conf prefix matching (pkg/sysregistriesv2 refMatchingPrefix),
// whose own comment calls it "unintended ... DON'T RELY ON THE CURRENT
// BEHAVIOR". A pattern that turns verification off or hands out a token must
// not widen silently to every port of a host.
//
// The depth rule for "*." (one or more labels, "*.svc" matches "a.b.svc") is
// containers/image's (refMatchingSubdomainPrefix); the kubelet's per-label
// globs are not offered here.
//
// Invariant: Parse accepts exactly the patterns Match can answer for; Match
// never panics and a malformed host simply does not match.
package regpattern
