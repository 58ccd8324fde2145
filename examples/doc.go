// Package examples holds pullhelper's deployable examples, not code: policy
// files (each checked by `pullhelper policy check` and `explain` in
// tests/140-examples.bats) and daemonset-prefetch.yaml, a DaemonSet that
// runs a prefetch on every node, which this package's test decodes strictly
// into the k8s.io/api types.
//
// Invariant: only the test imports Kubernetes' API types, so none of them
// reaches the pullhelper binary (the test checks that too).
package examples
