#!/usr/bin/env bats
#
# The containerd:REF destination (issue 14) against containerd 2.x
# (github.com/containerd/containerd/v2, the version make deps builds into
# tests/.cache/bin), started by the tests as in tests/135-containerd.bats
# and judged the same way, with a version-3 daemon config (its CRI split
# into io.containerd.cri.v1.images and io.containerd.cri.v1.runtime, the
# native snapshotter for both the CRI and the transfer service). The case
# bodies are tests/containerd-cases.bash, shared with 135.

load helpers
load containerd-cases

CTRD_FLAVOR=2

@test "containerd 2.x: the import is listed by ctr and crictl with the registry's digest; the result reports the image ID and the store" {
    ctrd_case_listed
}

@test "containerd 2.x: after the import, crictl pull and a second pullhelper import fetch no blob from the registry" {
    ctrd_case_no_refetch
}

@test "containerd 2.x: a multi-arch image keeps the index digest (REPO@index) and unpacks this platform's image" {
    ctrd_case_multi
}

@test "containerd 2.x: --platform linux/arm64 imports and unpacks the arm64 instance (ctr lists it for linux/arm64; issue 24 item 14)" {
    ctrd_case_platform
}

@test "containerd 2.x: a forced GC keeps every blob and the unpacked snapshot (the gc.ref labels); --pin labels every record" {
    ctrd_case_gc
}

@test "containerd 2.x: --pin labels every record io.cri-containerd.pinned=pinned" {
    ctrd_case_pin
}

@test "containerd 2.x: kill -9 mid-import leaves no image ctr or crictl lists; the rerun completes" {
    ctrd_case_kill
}

@test "containerd 2.x: the next pull removes the shared partial-blob cache of older pullhelpers (.pullhelper-partial-image); another user's is left" {
    ctrd_case_legacy_cache
}

@test "containerd 2.x: SIGTERM while containerd does not answer mid-import ends the pull (143): no staging, no image record" {
    ctrd_case_sigterm_stopped
}

@test "containerd 2.x: ctr run of the pulled shell image prints the expected output (issue 24 item 9)" {
    ctrd_case_run
}

@test "containerd 2.x: --all-architectures imports every platform's content, unpacks this one's, the index is the target (issue 24 item 5)" {
    ctrd_case_all_arch
}

@test "containerd 2.x: pinning follows the pull: a re-pull without --pin unpins, --pin=false unpins, a moved tag unpins what it leaves (issue 24 item 6)" {
    ctrd_case_pin_follows
}

@test "containerd 2.x: --containerd-config gives the socket, the CRI's snapshotter and namespace (imports followed); flags win with a warning (issue 24 item 7)" {
    ctrd_case_config
}

@test "containerd 2.x: every blob carries the CRI's distribution source label, appended to as the CRI appends (issue 24 item 8)" {
    ctrd_case_source_labels
}

@test "containerd 2.x: each layer is unpacked while the next ones are written, with Unpack's labels and snapshot chain (issue 26)" {
    ctrd_case_unpack_ahead
}

@test "containerd 2.x: each layer of a Docker manifest list's instance is unpacked while the next ones are written (the served instance is the one Unpack picks)" {
    ctrd_case_unpack_ahead fixtures/multiv2
}

@test "containerd 2.x: a Docker schema 2 image is stored as served (the registry's digest and Docker type the records' target); crictl pull then fetches no manifest; containerd:REPO:TAG@DIGEST is REPO@DIGEST" {
    ctrd_case_docker_v2s2
}

@test "containerd 2.x: a Docker schema 2 image with a docker build config is stored with the registry's manifest and config (the image ID the registry's config digest); crictl pull then fetches nothing" {
    ctrd_case_docker_config
}

@test "containerd 2.x: an image with an uncompressed layer and one with the same layer twice land as served; crictl pull then fetches nothing" {
    ctrd_case_odd_layers
}

@test "containerd 2.x: a Docker manifest list lands: the list the target, the served instance stored and unpacked; crictl pull then fetches no manifest" {
    ctrd_case_docker_list
}

@test "containerd 2.x: --all-architectures of a Docker manifest list stores the list and every instance as served, every platform's blobs; crictl pull then fetches no manifest" {
    ctrd_case_docker_list --all-architectures
}

@test "containerd 2.x: an image containerd cannot unpack (a wrong diff_id) is exit 9 naming it; what was applied ahead goes with the lease" {
    ctrd_case_unpack_fails
}

@test "containerd 2.x: Verify leaves each layer's digest to containerd's own check: a layer the child rewrote is exit 8 naming the blob; the next pull resumes no ingest of it, also one a killed import left (issue 26)" {
    ctrd_case_store_checks
}
