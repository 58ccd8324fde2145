// Package auth finds the credentials and the TLS trust material for one
// registry, reading each file with the semantics of the tool that owns it:
//
//   - kubelet (kubelet.go): pull secrets (.dockerconfigjson / .dockercfg,
//     raw or as Secret manifests) and the node's docker config search, one
//     BasicDockerKeyring each: keys normalised, sorted reverse
//     lexicographically, matched label by label with globs, every matching
//     key contributing, index.docker.io as the default-registry fallback;
//   - kubelet credential-provider plugins (provider.go types and matching,
//     provider_config.go strict decoding and validation, provider_exec.go the
//     exec protocol, provider_cache.go the per-node cache, provider_sa.go
//     the service-account token mode of KEP-4412), whose responses go into
//     the same kubelet keyring;
//   - containerd (containerd.go): the CRI registry section of config.toml
//     (versions 1-3 and imports as containerd's LoadConfig reads them;
//     configs.HOST.auth and .tls, exact endpoint host, docker.io →
//     registry-1.docker.io) and config_path hosts directories (hosts.toml or
//     the Docker layout);
//   - containers/image (containers.go): auth.json search order, path-aware key
//     matching, credHelpers; one certs.d directory per host (trust.go);
//   - a service-account token file offered to listed registries
//     (satoken.go).
//
// keyring.go and endpoints.go join them per pull: NewKeyring(Config) reads
// every source once; Lookup(host, repository) answers for one contacted host,
// TrustFor(host) gives its TLS trust, and Endpoints(image) lists the hosts a
// pull contacts in order (containerd's hosts.toml [host] entries and server,
// legacy mirrors, or registries.conf mirrors), each with its own candidates
// and trust. Registry patterns (ca_files, insecure_registries,
// service_account_registries) are internal/regpattern's, one port rule.
//
// Invariants: only the parent process calls this package, because the files
// may be readable by root alone. A Credential's secret fields never appear in
// its JSON form, in errors or in logs: errors name the file and key only.
// Every file is read through internal/safefile (readFile: a regular file, at
// most 4 MiB, symlinks followed as the owners do), registries.conf and its
// drop-ins by CheckRegistriesConf, whose bytes the pipeline hands
// containers/image as a snapshot (it never opens the caller's paths);
// a file that does not decode is described by position and kind, without
// its keys or values (it may be a symlink to a root-only file of another
// format): a docker config entry is named only when shaped like one, a
// foreign kind is not repeated.
package auth
