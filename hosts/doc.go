// Package hosts decides which hosts a pull contacts and how it trusts them,
// reading each file with the semantics of the tool that owns it:
//
//   - containerd (containerd_config.go): the CRI registry section of
//     config.toml (versions 1-4 and imports as containerd's LoadConfig
//     reads them), and from the same walk the daemon's socket and the
//     CRI's snapshotter (ReadContainerdDaemon, which dest reads a
//     containerd: DEST's defaults with); legacy mirrors with configs.HOST.tls
//     (containerd_legacy.go); config_path hosts directories, hosts.toml or
//     the Docker layout (containerd_hostsdir.go);
//   - containers/image: registries.conf and its drop-ins, checked and read
//     once (registriesconf.go CheckRegistriesConf), mirrors through
//     sysregistriesv2 (endpoints.go), and the registries.conf the copy
//     reads, rendered from the endpoints (render.go);
//   - TLS trust (trust.go): one certs.d directory per host (the linked
//     containers/image's search, DefaultCertsD), trust.ca_files,
//     trust.insecure_registries, tls_verify and registries.conf insecure.
//
// New(Config) reads them once per pull; Resolver.Endpoints(image) lists the
// hosts a pull contacts in order (containerd's hosts.toml [host] entries
// and server, legacy mirrors, or registries.conf mirrors), each a
// wire.Endpoint with its trust and capabilities (a wire.Capabilities
// bitmask) and a Query: what package auth's credential sources are asked
// for that host (the image's repository, the repository on the host,
// whether the kubelet's credentials go there, which containerd
// configs."KEY".auth applies), which auth.Keyring.Fill answers; the
// pipeline joins the two. Registry patterns are internal/regpattern's.
//
// Invariants: hosts imports no credential source (pipeline/depcheck_test.go):
// it hands auth the containerd configs.*.auth tables undecoded
// (ContainerdAuth) and the credential-helpers list. Only the parent process
// calls it, because the files may be readable by root alone. Every file is
// read through internal/safefile (a regular file, at most 4 MiB, symlinks
// followed as the owners do); registries.conf's bytes are handed to
// containers/image as a snapshot (the pipeline's), never the caller's paths
// again; a file that does not decode is described by position and kind,
// without its keys or values.
package hosts
