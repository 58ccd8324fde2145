// Package dnsconf renders the resolv.conf (and hosts file) of the cluster-DNS
// override, in the kubelet's ClusterFirst format as containerd and CRI-O
// write it for a pod:
//
//	search <ns>.svc.<domain> svc.<domain> <domain> <host search…>
//	nameserver <clusterDNS[0]>
//	options ndots:5
//
// with the kubelet's limits (3 nameservers; 32 search domains and 2048
// characters), excess dropped with a warning. Settings come from the policy
// and flags, or from the kubelet's configuration file (clusterDNS,
// clusterDomain, resolvConf) plus a namespace. The kubelet config and the
// host resolv.conf are read through internal/safefile (regular files,
// bounded; a decode error without the file's content).
//
// The child bind-mounts the rendered files over /etc/resolv.conf and
// /etc/hosts in its private mount namespace before it drops privileges, so
// the host's files and mount table are untouched. pullhelper is a static Go
// binary, so its resolver is Go's, which reads /etc/resolv.conf and
// /etc/hosts; glibc's would read the same files.
package dnsconf
