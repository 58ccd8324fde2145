#!/usr/bin/env bats
#
# The containerd:REF destination (issue 14) against Debian's containerd 1.6,
# started by the tests below their own directory (ctrd_start: its own root,
# state and socket, the native snapshotter) with crictl (CRI) and ctr
# (containerd's API) as the judges. The pull child stages an OCI layout as
# for oci:; the root parent verifies it and imports it through the socket:
# blobs into the content store under a lease, the layers unpacked for the
# snapshotter, then the image records REF, REPO@DIGEST and the image ID with
# the CRI's labels. The registry is the TLS+htpasswd test registry; the
# containerd config carries its CA and credentials so that crictl can pull.
# The cases that need a daemon are tests/containerd-cases.bash, shared with
# tests/136-containerd2.bats (the same cases against containerd 2.x).

load helpers
load containerd-cases

@test "containerd 1.6: the import is listed by ctr and crictl with the registry's digest; the result reports the image ID and the store" {
    ctrd_case_listed
}

@test "containerd 1.6: after the import, crictl pull and a second pullhelper import fetch no blob from the registry" {
    ctrd_case_no_refetch
}

@test "containerd 1.6: a multi-arch image keeps the index digest (REPO@index) and unpacks this platform's image" {
    ctrd_case_multi
}

@test "containerd 1.6: --platform linux/arm64 imports and unpacks the arm64 instance (ctr lists it for linux/arm64; issue 24 item 14)" {
    ctrd_case_platform
}

@test "containerd 1.6: a forced GC keeps every blob and the unpacked snapshot (the gc.ref labels); --pin labels every record" {
    ctrd_case_gc
}

@test "containerd 1.6: --pin labels every record io.cri-containerd.pinned=pinned" {
    ctrd_case_pin
}

@test "containerd: a socket nobody listens on is exit 9 with one line naming it, before any registry request" {
    local before
    mkdir -p "$T/nosock"
    before=$(registry_log_barrier)
    run_pullhelper 9 pull "${PH_OPTS[@]}" --containerd-address "$T/nosock/c.sock" --containerd-staging "$T/staging" \
        "$REGISTRY_HOST/fixtures/tiny" "containerd:$REGISTRY_HOST/fixtures/tiny"
    assert_equal "$(json_get .error.code <<<"$output")" destination
    local msg
    msg=$(json_get .error.message <<<"$output")
    [[ $msg == *"$T/nosock/c.sock"* && $msg == *--containerd-address* ]] || fail "message: $msg"
    [[ $msg != *$'\n'* ]] || fail "message is not one line: $msg"
    assert_equal "$(tail -n "+$((before + 1))" "$REGISTRY_LOG" | grep -c '/v2/fixtures/' || true)" 0

    # A socket that is there but not containerd's (a listener that closes).
    "$PH_PYTHON" -c '
import socket, sys, os
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(8)
os.close(1)
while True:
    c, _ = s.accept(); c.close()
' "$T/nosock/dead.sock" >/dev/null &
    BG_PID=$!
    wait_for_file_match /proc/net/unix "$T/nosock/dead.sock" 10
    run_pullhelper 9 pull "${PH_OPTS[@]}" --containerd-address "$T/nosock/dead.sock" --containerd-staging "$T/staging" \
        "$REGISTRY_HOST/fixtures/tiny" "containerd:$REGISTRY_HOST/fixtures/tiny"
    msg=$(json_get .error.message <<<"$output")
    [[ $msg == *"$T/nosock/dead.sock"* ]] || fail "message: $msg"
    [[ $msg != *$'\n'* ]] || fail "message is not one line: $msg"
}

@test "containerd: explain shows the store settings; a bad namespace is exit 2" {
    run_pullhelper explain --containerd-address /run/x.sock --containerd-namespace prefetch --pin \
        "$REGISTRY_HOST/fixtures/tiny" "containerd:$REGISTRY_HOST/fixtures/tiny"
    assert_equal "$(json_get .plan.containerd.address <<<"$output")" /run/x.sock
    assert_equal "$(json_get .plan.containerd.namespace <<<"$output")" prefetch
    assert_equal "$(json_get .plan.containerd.snapshotter <<<"$output")" overlayfs
    assert_equal "$(json_get .plan.containerd.pin <<<"$output")" true
    assert_equal "$(json_get .plan.destination.ref <<<"$output")" "$REGISTRY_HOST/fixtures/tiny:latest"

    run_pullhelper 2 explain --containerd-namespace 'bad/ns' "$REGISTRY_HOST/fixtures/tiny" "containerd:$REGISTRY_HOST/fixtures/tiny"
    assert_equal "$(json_get .error.code <<<"$output")" usage
}

@test "containerd 1.6: kill -9 mid-import leaves no image ctr or crictl lists; the rerun completes" {
    ctrd_case_kill
}

@test "containerd 1.6: the next pull removes the shared partial-blob cache of older pullhelpers (.pullhelper-partial-image); another user's is left" {
    ctrd_case_legacy_cache
}

@test "containerd 1.6: SIGTERM while containerd does not answer mid-import ends the pull (143): no staging, no image record" {
    ctrd_case_sigterm_stopped
}

# _listener SOCK LOG: a unix socket listener that logs each connection.
_listener() {
    "$PH_PYTHON" -c '
import socket, sys, os
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(8)
os.close(1)
while True:
    c, _ = s.accept()
    with open(sys.argv[2], "a") as f:
        f.write("conn\n")
    c.close()
' "$1" "$2" >/dev/null &
    BG_PID=$!
    wait_for_file_match /proc/net/unix "$1" 10
}

@test "containerd: a socket another user owns (in its own directory, or in root's) is exit 9 naming it and the owner; nothing connects to it" {
    local before msg
    # A user's directory, with a socket of theirs.
    mkdir -p "$T/user"
    : >"$T/conns"
    _listener "$T/user/c.sock" "$T/conns"
    chown -h 65534:65534 "$T/user" "$T/user/c.sock"
    before=$(registry_log_barrier)
    run_pullhelper 9 pull "${PH_OPTS[@]}" --containerd-address "$T/user/c.sock" --containerd-staging "$T/staging" \
        "$REGISTRY_HOST/fixtures/tiny" "containerd:$REGISTRY_HOST/fixtures/tiny"
    assert_json_error destination
    [[ $ph_error_message == *"$T/user"* && $ph_error_message == *"uid 65534"* ]] || fail "message: $ph_error_message"
    assert_equal "$(grep -c conn "$T/conns" || true)" 0
    assert_equal "$(tail -n "+$((before + 1))" "$REGISTRY_LOG" | grep -c '/v2/fixtures/' || true)" 0
    _ph_stop_pid "$BG_PID" listener
    BG_PID=""

    # The user's socket in a directory of root's.
    mkdir -p "$T/rootdir"
    _listener "$T/rootdir/c.sock" "$T/conns"
    chown -h 65534:65534 "$T/rootdir/c.sock"
    run_pullhelper 9 pull "${PH_OPTS[@]}" --containerd-address "$T/rootdir/c.sock" --containerd-staging "$T/staging" \
        "$REGISTRY_HOST/fixtures/tiny" "containerd:$REGISTRY_HOST/fixtures/tiny"
    assert_json_error destination
    [[ $ph_error_message == *"$T/rootdir/c.sock is owned by uid 65534"* ]] || fail "message: $ph_error_message"
    assert_equal "$(grep -c conn "$T/conns" || true)" 0
    [[ ! -e $T/staging ]] || fail "the refused pull created the staging directory"
}

@test "containerd 1.6: ctr run of the pulled shell image prints the expected output (issue 24 item 9)" {
    ctrd_case_run
}

@test "containerd 1.6: --all-architectures imports every platform's content, unpacks this one's, the index is the target (issue 24 item 5)" {
    ctrd_case_all_arch
}

@test "containerd 1.6: pinning follows the pull: a re-pull without --pin unpins, --pin=false unpins, a moved tag unpins what it leaves (issue 24 item 6)" {
    ctrd_case_pin_follows
}

@test "containerd 1.6: --containerd-config gives the socket, the CRI's snapshotter and namespace (imports followed); flags win with a warning (issue 24 item 7)" {
    ctrd_case_config
}

@test "containerd 1.6: every blob carries the CRI's distribution source label, appended to as the CRI appends (issue 24 item 8)" {
    ctrd_case_source_labels
}

@test "containerd 1.6: each layer is unpacked while the next ones are written, with Unpack's labels and snapshot chain (issue 26)" {
    ctrd_case_unpack_ahead
}

@test "containerd 1.6: each layer of a Docker manifest list's instance is unpacked while the next ones are written (the served instance is the one Unpack picks)" {
    ctrd_case_unpack_ahead fixtures/multiv2
}

@test "containerd 1.6: a Docker schema 2 image is stored as served (the registry's digest and Docker type the records' target); crictl pull then fetches no manifest; containerd:REPO:TAG@DIGEST is REPO@DIGEST" {
    ctrd_case_docker_v2s2
}

@test "containerd 1.6: a Docker schema 2 image with a docker build config is stored with the registry's manifest and config (the image ID the registry's config digest); crictl pull then fetches nothing" {
    ctrd_case_docker_config
}

@test "containerd 1.6: an image with an uncompressed layer and one with the same layer twice land as served; crictl pull then fetches nothing" {
    ctrd_case_odd_layers
}

@test "containerd 1.6: a Docker manifest list lands: the list the target, the served instance stored and unpacked; crictl pull then fetches no manifest" {
    ctrd_case_docker_list
}

@test "containerd 1.6: --all-architectures of a Docker manifest list stores the list and every instance as served, every platform's blobs; crictl pull then fetches no manifest" {
    ctrd_case_docker_list --all-architectures
}

@test "containerd 1.6: an image containerd cannot unpack (a wrong diff_id) is exit 9 naming it; what was applied ahead goes with the lease" {
    ctrd_case_unpack_fails
}

@test "containerd 1.6: staged blobs are not fsynced (io_write_bytes below the image on cgroup v1); with an IO write limit they are, so that it holds (issue 26)" {
    ctrd_case_nosync
}

@test "containerd 1.6: Verify leaves each layer's digest to containerd's own check: a layer the child rewrote is exit 8 naming the blob; the next pull resumes no ingest of it, also one a killed import left (issue 26)" {
    ctrd_case_store_checks
}
