// Package auth finds the credential candidates for each host a pull
// contacts, reading each file with the semantics of the tool that owns it.
// Each source is one Keychain (keychain.go: Resolve(hosts.Query) → the
// candidates in order, and the problems met, which become warnings, except
// a *LookupError: a lookup its owner fails, which fails the pull), as
// go-containerregistry's authn.Keychain; sources.go adapts them:
//
//   - kubelet (kubelet.go): pull secrets (.dockerconfigjson / .dockercfg,
//     raw or as Secret manifests) and the node's docker config search, one
//     KubeletKeyring each: keys normalised, sorted reverse
//     lexicographically, matched label by label with globs, every matching
//     key contributing, index.docker.io as the default-registry fallback;
//   - kubelet credential-provider plugins (provider.go types and matching,
//     provider_config.go strict decoding and validation, provider_exec.go the
//     exec protocol, provider_cache.go the per-node cache, read and written
//     through its directory held open with state.OpenDir, provider_sa.go
//     the service-account token mode of KEP-4412);
//   - a service-account token offered to listed registries (satoken.go);
//   - a CRI PullImage request's credential (request.go Request, from
//     pullhelper cri): offered to its one registry host (and containerd's
//     hosts.toml server of the image's own registry), never to a mirror on
//     another host, never by pattern; with it containerd's configs auth are
//     not read, as containerd's CRI reads them only without one;
//   - containerd's configs.HOST.auth (containerd.go ParseContainerdAuth;
//     package hosts reads config.toml and picks the key per endpoint);
//   - containers/image (containers.go): auth.json search order, path-aware
//     key matching, credHelpers, and registries.conf credential-helpers in
//     their order (First), run by the parent; a file that does not parse,
//     an auth not padded base64, a failing helper fail the lookup (a
//     *LookupError) unless a later helper has the credential, and are
//     warnings when the kubelet's sources have one (Fallback).
//
// NewKeyring(Config, *hosts.Resolver) reads every source once and composes
// them in one documented order (NewKeyring, with keychain.go's Multi,
// OrElse, First and Kubelet, as authn.NewMultiKeychain composes
// keychains); the resolver supplies what auth reads from the files package
// hosts owns (containerd's configs.*.auth, registries.conf's
// credential-helpers). Fill gives the resolver's endpoints their
// candidates: what the chain offers for each endpoint's hosts.Query, equal
// secrets sharing one ID. The pipeline joins the two; endpoints, mirrors
// and TLS trust are package hosts', and the values handed to the copy are
// internal/wire's.
//
// Invariants: only the parent process calls this package, because the files
// may be readable by root alone. A credential's secret fields never appear
// in its JSON form, in errors or in logs: errors name the file and key only.
// Every file is read through internal/safefile (readFile: a regular file, at
// most 4 MiB, symlinks followed as the owners do); a file that does not
// decode is described by position and kind, without its keys or values (it
// may be a symlink to a root-only file of another format): a docker config
// entry is named only when shaped like one, a foreign kind is not repeated.
package auth
