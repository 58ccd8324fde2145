# Shared by tests/135-containerd.bats (Debian's containerd 1.6) and
# tests/136-containerd2.bats (containerd 2.x, built by make deps): the file
# lifecycle, the helpers and the bodies of the containerd:REF cases, each
# run against the daemon CTRD_FLAVOR names (1.6, the default, or 2).

# busybox-static (make deps), the shell fixture's one binary.
BUSYBOX=${BUSYBOX:-/bin/busybox}
# Loaded after helpers.bash; the .bats files hold only the @test wrappers.

setup_file() {
    fixture tiny
    fixture multi
    start_registry
    push_fixture tiny
    push_fixture multi
    # The shell fixture of tests/130-containers-storage.bats: busybox-static
    # as /bin/busybox, /bin/sh a symlink to it (named by the binary's digest).
    if [[ -x $BUSYBOX ]]; then
        local sum
        sum=$(sha256sum "$BUSYBOX" | cut -c1-16)
        push_fixture_args "shell-$sum" fixtures/shell -layers 0 -platforms "linux/$("$(_ph_go)" env GOARCH)" \
            -file "$BUSYBOX:/bin/busybox" -symlink /bin/sh=busybox -cmd '["/bin/sh"]'
    fi
    TINY_DIGEST=$(registry_digest fixtures/tiny:latest)
    MULTI_DIGEST=$(registry_digest fixtures/multi:latest)
    export TINY_DIGEST MULTI_DIGEST
}

teardown_file() {
    ctrd_stop_all
    stop_registry
}

setup() {
    ph_test_setup
    T=$BATS_TEST_TMPDIR
    CTRD_DIR=""
}

teardown() {
    [[ -z ${CTRD_STOPPED:-} ]] || kill -CONT "$CTRD_STOPPED" 2>/dev/null || true
    [[ -z ${BG_PID:-} ]] || _ph_stop_pid "$BG_PID" pullhelper
    [[ -z ${CTRD_DIR:-} ]] || ctrd_stop "$CTRD_DIR"
}

cred() {
    "$PH_PYTHON" "$PH_TESTS_DIR/cred-files.py" "$@" || fail "cred-files.py $* failed"
}

# ctrd_up: a containerd below $T/ctrd whose CRI reaches the test registry
# (its CA and credentials), and the pullhelper options that import into it
# (staging below $T too). CTRD_FLAVOR=2: the containerd 2.x of make deps
# with a version-3 config; otherwise Debian's 1.6 with a version-2 one.
# Sets CTRD_DIR, SOCK, CTRD_OPTS (and CTRD_BIN, CTRD_CONFIG_VERSION).
ctrd_up() {
    if [[ ${CTRD_FLAVOR:-1.6} == 2 ]]; then
        ctrd2_require
    else
        ctrd_require
        CTRD_BIN=""
        CTRD_CONFIG_VERSION=2
    fi
    CTRD_DIR="$T/ctrd"
    mkdir -p "$CTRD_DIR"
    cred containerd "$CTRD_DIR/config.toml" --state-dir "$CTRD_DIR" --ca "$REGISTRY_CA" --version "$CTRD_CONFIG_VERSION"
    ctrd_start "$CTRD_DIR"
    SOCK="$CTRD_DIR/c.sock"
    CTRD_OPTS=(--containerd-address "$SOCK" --containerd-snapshotter native --containerd-staging "$T/staging")
}

# ctr ARGS...: Debian's ctr (1.6; containerd 2.x serves the same v1 API)
# against the test's containerd, namespace k8s.io.
ctr_k8s() {
    timeout --kill-after=5 60 ctr -a "$SOCK" -n k8s.io "$@"
}

# ctr_own ARGS...: the ctr of the daemon's own version (2.x: the one make
# deps builds beside it; 1.6: Debian's), namespace k8s.io.
ctr_own() {
    local bin=ctr
    [[ -z ${CTRD_BIN:-} ]] || bin=$(dirname "$CTRD_BIN")/ctr
    timeout --kill-after=5 60 "$bin" -a "$SOCK" -n k8s.io "$@"
}

# ctr_image_line REF: the `ctr images ls` line of exactly REF (empty if none).
ctr_image_line() {
    ctr_k8s images ls | awk -v r="$1" '$1 == r'
}

# cri_lists REF: crictl inspecti knows REF (the CRI follows image events).
cri_lists() {
    ctrd_crictl inspecti -o json "$1" >/dev/null 2>&1
}

# wait_cri REF: wait, at most 20 s, until the CRI lists REF.
wait_cri() {
    local deadline=$((SECONDS + 20))
    until cri_lists "$1"; do
        if ((SECONDS >= deadline)); then
            fail "crictl does not list $1 after 20s: $(ctrd_crictl images 2>&1)"
            return 1
        fi
        sleep 0.05
    done
}

# config_digest REPO:TAG: the config digest of this platform's image.
config_digest() {
    # shellcheck disable=SC2046
    registry_skopeo inspect --config --raw $(registry_skopeo_opts) "docker://$REGISTRY_HOST/$1" | sha256sum |
        sed 's/^\([0-9a-f]*\).*/sha256:\1/'
}

# blob_gets BEFORE: the registry's blob GETs after access-log line BEFORE.
blob_gets() {
    registry_log_barrier >/dev/null
    tail -n "+$(($1 + 1))" "$REGISTRY_LOG" | grep -E '"GET /v2/fixtures/[^ ]*/blobs/' || true
}


# the import is listed by ctr and crictl with the registry's digest; the result reports the image ID and the store
ctrd_case_listed() {
    ctrd_up
    local img="$REGISTRY_HOST/fixtures/tiny:latest" id
    id=$(config_digest fixtures/tiny:latest)
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" "$img" "containerd:$img"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$TINY_DIGEST"
    assert_equal "$(json_get .destination <<<"$output")" "containerd:$img"
    assert_equal "$(json_get .image_id <<<"$output")" "$id"
    assert_equal "$(json_get .store.type <<<"$output")" containerd
    assert_equal "$(json_get .store.address <<<"$output")" "$SOCK"
    assert_equal "$(json_get .store.namespace <<<"$output")" k8s.io
    assert_equal "$(json_get .store.snapshotter <<<"$output")" native
    assert_equal "$(json_get .store.names <<<"$output")" "[\"$img\",\"$REGISTRY_HOST/fixtures/tiny@$TINY_DIGEST\",\"$id\"]"
    assert_no_staging "$T/staging"

    # containerd's API: the three records, each at the registry's digest,
    # with the CRI's label and no pin.
    local line
    for r in "$img" "$REGISTRY_HOST/fixtures/tiny@$TINY_DIGEST" "$id"; do
        line=$(ctr_image_line "$r")
        [[ -n $line ]] || fail "ctr images ls does not list $r: $(ctr_k8s images ls)"
        [[ $line == *" $TINY_DIGEST "* ]] || fail "ctr lists $r without the registry's digest: $line"
        [[ $line == *io.cri-containerd.image=managed* ]] || fail "no CRI label on $r: $line"
        [[ $line != *io.cri-containerd.pinned* ]] || fail "$r is pinned without --pin: $line"
    done
    # Complete and unpacked for the snapshotter the CRI uses here.
    assert_ctr_complete "$img"

    # The CRI: the same image, its ID and the registry's digest.
    wait_cri "$img" || return
    run ctrd_crictl inspecti -o json "$img"
    assert_success
    assert_equal "$(json_get .status.id <<<"$output")" "$id"
    assert_equal "$(json_get .status.repoTags <<<"$output")" "[\"$img\"]"
    assert_equal "$(json_get .status.repoDigests <<<"$output")" "[\"$REGISTRY_HOST/fixtures/tiny@$TINY_DIGEST\"]"
    [[ $(json_get .status.pinned <<<"$output") != true ]] || fail "the CRI lists $img pinned without --pin"
    run ctrd_crictl images --digests
    assert_success
    grep -E "^$REGISTRY_HOST/fixtures/tiny +latest +${TINY_DIGEST#sha256:}" <<<"$output" >/dev/null ||
        grep -E "^$REGISTRY_HOST/fixtures/tiny +latest +${TINY_DIGEST:7:13}" <<<"$output" >/dev/null ||
        fail "crictl images --digests: $output"
}

# after the import, crictl pull and a second pullhelper import fetch no blob from the registry
ctrd_case_no_refetch() {
    ctrd_up
    local img="$REGISTRY_HOST/fixtures/tiny:latest" before id layer gets
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" "$img" "containerd:$img"
    id=$(json_get .image_id <<<"$output")
    wait_cri "$img" || return

    before=$(registry_log_barrier)
    run ctrd_crictl pull "$img"
    assert_success
    assert_equal "$(blob_gets "$before")" ""

    # pullhelper: every layer is in the content store (Known) and is not
    # fetched; containers/image reads the small config blob of every copy
    # (as for oci:), and only that.
    before=$(registry_log_barrier)
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" --progress-fd 3 "$img" "containerd:$img" 3>"$T/events"
    assert_json_result
    gets=$(blob_gets "$before")
    assert_equal "$(grep -c . <<<"$gets")" 1
    [[ $gets == *"/blobs/$id "* ]] || fail "fetched a blob other than the config: $gets"
    layer=$(json_get .digest < <(grep '"type":"layer_done"' "$T/events"))
    [[ -n $layer && $layer != "$id" ]] || fail "no layer_done event: $(cat "$T/events")"
    grep '"type":"layer_done"' "$T/events" | grep -q '"skipped":true' || fail "the layer was not skipped: $(cat "$T/events")"
}

# a multi-arch image keeps the index digest (REPO@index) and unpacks this platform's image
ctrd_case_multi() {
    ctrd_up
    local img="$REGISTRY_HOST/fixtures/multi:latest" id
    id=$(config_digest fixtures/multi:latest)
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" "$img" "containerd:$img"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$MULTI_DIGEST"
    assert_equal "$(json_get .image_id <<<"$output")" "$id"
    local line
    line=$(ctr_image_line "$img")
    [[ $line == *" $MULTI_DIGEST "* ]] || fail "ctr lists $img without the index digest: $line"
    run ctr_k8s images check --snapshotter native "name==$img"
    assert_success
    [[ $output == *true* ]] || fail "ctr images check: $output"
    wait_cri "$img" || return
    run ctrd_crictl inspecti -o json "$img"
    assert_success
    assert_equal "$(json_get .status.id <<<"$output")" "$id"
    assert_equal "$(json_get .status.repoDigests <<<"$output")" "[\"$REGISTRY_HOST/fixtures/multi@$MULTI_DIGEST\"]"
    # crictl pull of the same image then fetches no blob either.
    local before
    before=$(registry_log_barrier)
    run ctrd_crictl pull "$img"
    assert_success
    assert_equal "$(blob_gets "$before")" ""
}

# --platform linux/arm64 (issue 24 item 14): the arm64 instance is imported
# and unpacked (containerd's Image.Unpack with the platforms.Only matcher, as
# the CRI unpacks for a platform): ctr lists the image (with the index's
# platforms), the arm64 config carries the snapshot's gc.ref label (what
# Unpack sets once the layers are in the snapshotter), and this machine's
# instance was never fetched. Without the platform, containerd's unpack
# looks for this machine's manifest, which is not there, and fails.
ctrd_case_platform() {
    ctrd_up
    local img="$REGISTRY_HOST/fixtures/multi:arm64" index want cfg other
    index=$(registry_manifest fixtures/multi:latest)
    want=$(index_instance "$index" linux/arm64)
    other=$(index_instance "$index" "linux/$("$(_ph_go)" env GOARCH)")
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" --platform linux/arm64 "$REGISTRY_HOST/fixtures/multi" "containerd:$img"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$MULTI_DIGEST"
    assert_equal "$(json_get .instance_digest <<<"$output")" "$want"
    local line
    line=$(ctr_image_line "$img")
    echo "ctr images ls: $line"
    [[ $line == *" $MULTI_DIGEST "* ]] || fail "ctr lists $img without the index digest: $line"
    [[ $line == *linux/arm64* ]] || fail "ctr does not list linux/arm64 for $img: $line"
    # The arm64 manifest and config are in the content store, the config
    # labelled with the snapshot it was unpacked to; this machine's
    # instance is not there.
    run ctr_k8s content get "$want"
    assert_success
    cfg=$(json_get .config.digest <<<"$output")
    run ctr_k8s content ls
    assert_success
    local cline
    cline=$(awk -v d="$cfg" '$1 == d' <<<"$output")
    [[ $cline == *containerd.io/gc.ref.snapshot.native=* ]] || fail "the arm64 config $cfg was not unpacked: $cline"
    [[ $other == "$want" ]] || ! awk '{print $1}' <<<"$output" | grep -qx "$other" || fail "this machine's instance $other was fetched"
}

# force_gc: containerd's garbage collector, synchronously (deleting a lease
# with --sync collects everything unreferenced), after our import's lease
# is gone (none is left: ctr leases ls).
force_gc() {
    local id
    assert_equal "$(ctr_k8s leases ls -q)" ""
    id=$(ctr_k8s leases create | awk '{print $NF}')
    [[ -n $id ]] || fail "ctr leases create gave no id"
    ctr_k8s leases delete --sync "$id" || fail "ctr leases delete --sync failed"
}


# a forced GC keeps every blob and the unpacked snapshot (the gc.ref labels); --pin labels every record
ctrd_case_gc() {
    ctrd_up
    local img="$REGISTRY_HOST/fixtures/multi:latest" line
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" --pin "$img" "containerd:$img"
    assert_equal "$(json_get .store.pinned <<<"$output")" true
    for r in "$img" "$REGISTRY_HOST/fixtures/multi@$MULTI_DIGEST" "$(json_get .image_id <<<"$output")"; do
        line=$(ctr_image_line "$r")
        [[ $line == *io.cri-containerd.pinned=pinned* ]] || fail "$r is not pinned: $line"
    done
    local blobs snaps
    blobs=$(ctr_k8s content ls -q | sort)
    snaps=$(ctr_k8s snapshots --snapshotter native ls | wc -l)
    force_gc
    assert_equal "$(ctr_k8s content ls -q | sort)" "$blobs"
    assert_equal "$(ctr_k8s snapshots --snapshotter native ls | wc -l)" "$snaps"
    run ctr_k8s images check --snapshotter native "name==$img"
    assert_success
    [[ $output == *complete* && $output == *true* ]] || fail "ctr images check after GC: $output"
}

# --pin labels every record io.cri-containerd.pinned=pinned
ctrd_case_pin() {
    ctrd_up
    local img="$REGISTRY_HOST/fixtures/tiny:latest" line
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" --pin "$img" "containerd:$img"
    assert_equal "$(json_get .store.pinned <<<"$output")" true
    for r in "$img" "$REGISTRY_HOST/fixtures/tiny@$TINY_DIGEST" "$(json_get .image_id <<<"$output")"; do
        line=$(ctr_image_line "$r")
        [[ $line == *io.cri-containerd.pinned=pinned* ]] || fail "$r is not pinned: $line"
    done
    # containerd 2.x's CRI reads the label: the kubelet sees the image
    # pinned (CRI Image.pinned, which its image GC never removes). 1.6's
    # CRI does not read it.
    if [[ ${CTRD_FLAVOR:-1.6} == 2 ]]; then
        wait_cri "$img" || return
        run ctrd_crictl inspecti -o json "$img"
        assert_success
        assert_equal "$(json_get .status.pinned <<<"$output")" true
    fi
}

# kill -9 mid-import leaves no image ctr or crictl lists; the rerun completes
ctrd_case_kill() {
    [[ -x $PULLHELPER_HOSTILE_BIN ]] || skip "no $PULLHELPER_HOSTILE_BIN (make build-hostile)"
    ctrd_up
    local img="$REGISTRY_HOST/fixtures/multi:latest"
    mkdir -p "$OUT"
    PULLHELPER_HOSTILE_COMMIT=hold-after-blobs:1 "$PULLHELPER_HOSTILE_BIN" pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" \
        "$img" "containerd:$img" >"$OUT/bg.out" 2>"$OUT/bg.err" &
    BG_PID=$!
    wait_for_file_match "$OUT/bg.err" "holding the commit after 1 blobs" 120 || return
    kill -9 "$BG_PID"
    wait "$BG_PID" || true
    BG_PID=""
    assert_equal "$(ctr_image_line "$img")" ""
    assert_equal "$(ctr_k8s images ls -q)" ""
    run ctrd_crictl images -q
    assert_success
    assert_output ""

    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" "$img" "containerd:$img"
    assert_json_result
    [[ $(ctr_image_line "$img") == *" $MULTI_DIGEST "* ]] || fail "not listed after the rerun: $(ctr_k8s images ls)"
    wait_cri "$img"
    assert_no_staging "$T/staging"
}

# the shared partial-blob cache of older pullhelpers (.pullhelper-partial-image,
# from before the per-image names image-<16 hex>) is removed by the next
# containerd: pull's sweep of its staging directory (dest.sweepOtherCaches),
# whatever its age; another user's in its place is neither entered nor removed
ctrd_case_legacy_cache() {
    ctrd_up
    local img="$REGISTRY_HOST/fixtures/tiny:latest" old=$T/staging/.pullhelper-partial-image
    mkdir -m 700 "$T/staging" "$old" "$old/blobs"
    echo kept >"$old/blobs/sha256-aa.partial"
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" "$img" "containerd:$img"
    assert_json_result
    [[ ! -e $old ]] || fail "the pull left the old shared cache: $(ls -la "$old")"
    [[ $stderr == *"removed a partial-blob cache"*"$old"* ]] || fail "the pull did not log removing $old: $stderr"

    mkdir -m 700 "$old" "$old/blobs"
    echo theirs >"$old/blobs/f"
    chown -R 65534:65534 "$old"
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" "$img" "containerd:$img"
    assert_json_result
    [[ $(stat -c %u "$old/blobs") == 65534 && $(cat "$old/blobs/f") == theirs ]] || fail "the pull entered another user's old cache"
    [[ $stderr != *"removed a partial-blob cache"* ]] || fail "the pull says it removed another user's cache: $stderr"
}

# ctrd_daemon_pid: the pid of the containerd daemon itself (ctrd_start's
# pid file names the timeout(1) wrapping it).
ctrd_daemon_pid() {
    local wrapper
    wrapper=$(<"$CTRD_DIR/containerd.pid")
    ps -o pid= --ppid "$wrapper" | tr -d ' ' | head -n1
}

# each layer is unpacked as soon as it is in the content store, while the
# next ones are written (dest.unpackAhead), with the labels and snapshots
# containerd's own Image.Unpack leaves: the commit is paused after its third
# blob (the config, layer 0, layer 1 of this platform's instance of multi):
# layer 0's snapshot (its chain ID is its diff ID) is then committed, while
# no image record exists; once the commit goes on, each layer blob carries
# containerd.io/uncompressed=its diff ID, the config
# containerd.io/gc.ref.snapshot.native=the top chain ID, and the two
# snapshots are the chain (layer 1's parent is layer 0's)
ctrd_case_unpack_ahead() {
    [[ -x $PULLHELPER_HOSTILE_BIN ]] || skip "no $PULLHELPER_HOSTILE_BIN (make build-hostile)"
    ctrd_up
    # REPO: fixtures/multi (OCI), or fixtures/multiv2 (a Docker list: the
    # instance the registry serves is not the staging's conversion of it).
    local repo=${1:-fixtures/multi} want
    [[ $repo != fixtures/multiv2 ]] || push_docker_fixtures
    want=$(registry_digest "$repo:latest")
    local img="$REGISTRY_HOST/$repo:latest" index inst cfg d0 d1 l0 l1 chain rc=0
    index=$(registry_manifest "$repo:latest")
    inst=$(index_instance "$index" "linux/$("$(_ph_go)" env GOARCH)")
    mkdir -p "$OUT"
    PULLHELPER_HOSTILE_COMMIT=pause-after-blobs:3 "$PULLHELPER_HOSTILE_BIN" pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" \
        "$img" "containerd:$img" >"$OUT/bg.out" 2>"$OUT/bg.err" &
    BG_PID=$!
    wait_for_file_match "$OUT/bg.err" "pausing the commit after 3 blobs" 120 || return
    # The manifest goes into the content store last; the registry's.
    run registry_manifest "$repo@$inst"
    assert_success
    cfg=$(json_get .config.digest <<<"$output")
    l0=$(json_get .layers[0].digest <<<"$output")
    l1=$(json_get .layers[1].digest <<<"$output")
    run ctr_k8s content get "$cfg"
    assert_success
    d0=$(json_get .rootfs.diff_ids[0] <<<"$output")
    d1=$(json_get .rootfs.diff_ids[1] <<<"$output")
    [[ $d0 == sha256:* && $d1 == sha256:* ]] || fail "no diff IDs in the config $cfg: $output"
    # Layer 0 is applied while the commit is paused in layer 1's write (a
    # hang guard, not a timing assertion: the old import applied nothing
    # before its last write, and waits here for ever).
    local deadline=$((SECONDS + 60)) snaps=""
    until [[ $snaps == *"$d0 "*Committed* ]]; do
        if ((SECONDS >= deadline)); then
            fail "layer 0 ($d0) was not unpacked while the commit was paused after 3 blobs: $snaps"
            return
        fi
        sleep 0.1
        snaps=$(ctr_k8s snapshots --snapshotter native ls | awk -v d="$d0" '$1 == d')
    done
    assert_equal "$(ctr_k8s images ls -q)" ""
    kill -USR1 "$BG_PID"
    wait "$BG_PID" || rc=$?
    BG_PID=""
    assert_equal "$rc" 0
    assert_equal "$(json_get .digest <"$OUT/bg.out")" "$want"
    [[ $(ctr_image_line "$img") == *" $want "* ]] || fail "not listed: $(ctr_k8s images ls)"
    assert_ctr_complete "$img"

    # Unpack's labels (identity.ChainID: sha256 of "PARENT DIFFID").
    chain=sha256:$(printf '%s %s' "$d0" "$d1" | sha256sum | cut -d' ' -f1)
    run ctr_k8s content ls
    assert_success
    local line
    line=$(awk -v d="$l0" '$1 == d' <<<"$output")
    [[ $line == *"containerd.io/uncompressed=$d0"* ]] || fail "layer 0 $l0 is not labelled with its diff ID: $line"
    line=$(awk -v d="$l1" '$1 == d' <<<"$output")
    [[ $line == *"containerd.io/uncompressed=$d1"* ]] || fail "layer 1 $l1 is not labelled with its diff ID: $line"
    line=$(awk -v d="$cfg" '$1 == d' <<<"$output")
    [[ $line == *"containerd.io/gc.ref.snapshot.native=$chain"* ]] || fail "the config is not labelled with the chain $chain: $line"
    run ctr_k8s snapshots --snapshotter native ls
    assert_success
    echo "$output"
    assert_equal "$(grep -c Committed <<<"$output")" 2
    [[ $(awk -v d="$chain" '$1 == d {print $2}' <<<"$output") == "$d0" ]] || fail "no snapshot $chain on $d0: $output"
    # The unpacker's snapshot labels (containerd 2.x core/unpack: its
    # chain ID, its diff ID, its parent's chain ID; one layer's chain ID is
    # its diff ID), which a CRI pull sets.
    run ctr_k8s snapshots --snapshotter native info "$d0"
    assert_success
    assert_equal "$(json_get '.Labels["containerd.io/snapshot.ref"]' <<<"$output")" "$d0"
    assert_equal "$(json_get '.Labels["containerd.io/snapshot/diff-id"]' <<<"$output")" "$d0"
    [[ $output != *parent-chain-id* ]] || fail "the first layer's snapshot names a parent: $output"
    run ctr_k8s snapshots --snapshotter native info "$chain"
    assert_success
    assert_equal "$(json_get '.Labels["containerd.io/snapshot.ref"]' <<<"$output")" "$chain"
    assert_equal "$(json_get '.Labels["containerd.io/snapshot/diff-id"]' <<<"$output")" "$d1"
    assert_equal "$(json_get '.Labels["containerd.io/snapshot/parent-chain-id"]' <<<"$output")" "$d0"
    assert_equal "$(ctr_k8s leases ls -q)" ""
    assert_no_staging "$T/staging"
}

# an image containerd cannot unpack (every digest verifies, but layer 2's
# diff_id in the config is not its uncompressed digest) is exit 9 with one
# line naming the unpack and containerd's reason; layer 1, applied ahead,
# goes with the import's lease: no image record, no lease, and after a
# forced GC no snapshot and no content
ctrd_case_unpack_fails() {
    ctrd_up
    local img="$REGISTRY_HOST/fixtures/wrongdiff:latest" msg
    push_fixture_args wrongdiff fixtures/wrongdiff -layers 3 -layer-size 4096 -compressible 0.5 -seed 5 -wrong-diff-id 2
    run_pullhelper 9 pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" "$img" "containerd:$img"
    assert_equal "$(json_get .error.code <<<"$output")" destination
    msg=$(json_get .error.message <<<"$output")
    echo "$msg"
    [[ $msg == *"unpacking for snapshotter native"* && $msg == *"wrong diff id"* ]] || fail "message: $msg"
    [[ $msg != *$'\n'* ]] || fail "message is not one line: $msg"
    assert_equal "$(ctr_k8s images ls -q)" ""
    assert_no_staging "$T/staging"
    force_gc
    assert_equal "$(ctr_k8s snapshots --snapshotter native ls | tail -n +2)" ""
    assert_equal "$(ctr_k8s content ls -q)" ""
}

# a layer the (hostile) child rewrites after the copy, keeping its size, is
# left by Verify to containerd's own digest check (the parent hashes no
# layer for containerd): the import fails exit 8 with one line naming the
# blob and containerd's refusal; no image record, no lease, no staging,
# and after a forced GC no snapshot, content or ingest. Then the same child with the import killed (-9) once a layer's bytes are
# in containerd's ingest and not yet committed: the ingest, under the
# killed import's lease, holds the child's bytes; the next pull of the
# image must not resume it (its commit would be refused): it writes the
# layer from its first byte and succeeds; once the killed import's lease is
# gone, a forced GC leaves no ingest
ctrd_case_store_checks() {
    [[ -x $PULLHELPER_HOSTILE_BIN ]] || fail "hostile build missing: $PULLHELPER_HOSTILE_BIN (make build-hostile)"
    ctrd_up
    local img="$REGISTRY_HOST/fixtures/storecheck:latest" msg
    push_fixture_args storecheck fixtures/storecheck -layers 3 -layer-size 1048576 -compressible 0.5 -seed 9
    PULLHELPER_HOSTILE=after-copy:rewrite-handed PULLHELPER=$PULLHELPER_HOSTILE_BIN \
        run_pullhelper 8 pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" "$img" "containerd:$img"
    [[ $stderr == *"hostile: changed 3 handed-over blobs"* ]] || fail "the child did not change the 3 layers: $stderr"
    assert_equal "$(json_get .error.code <<<"$output")" verification
    msg=$(json_get .error.message <<<"$output")
    echo "$msg"
    [[ $msg == *"is not what its digest names: containerd's check refused it"* && $msg == *"unexpected commit digest"* ]] ||
        fail "message: $msg"
    [[ $msg != *$'\n'* ]] || fail "message is not one line: $msg"
    assert_equal "$(ctr_k8s images ls -q)" ""
    assert_equal "$(ctr_k8s leases ls -q)" ""
    assert_no_staging "$T/staging"
    # Nothing of the refused import outlives a GC: so the config is not in
    # the content store when the next import starts, and its first write
    # into it is the config, its second the first layer.
    force_gc
    assert_equal "$(ctr_k8s snapshots --snapshotter native ls | tail -n +2)" ""
    assert_equal "$(ctr_k8s content ls -q)" ""
    assert_equal "$(ctr_k8s content active | tail -n +2)" ""

    mkdir -p "$OUT"
    PULLHELPER_HOSTILE=after-copy:rewrite-handed PULLHELPER_HOSTILE_COMMIT=hold-sent:2 "$PULLHELPER_HOSTILE_BIN" pull \
        "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" "$img" "containerd:$img" >"$OUT/bg.out" 2>"$OUT/bg.err" &
    BG_PID=$!
    wait_for_file_match "$OUT/bg.err" "holding the commit with write 2 sent" 120 || return
    kill -9 "$BG_PID"
    wait "$BG_PID" || true
    BG_PID=""
    [[ $(ctr_k8s content active | tail -n +2) == *pullhelper-sha256:* ]] ||
        fail "no ingest left by the killed import: $(ctr_k8s content active)"
    local killed
    killed=$(ctr_k8s leases ls -q)
    [[ -n $killed ]] || fail "the killed import left no lease"

    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" "$img" "containerd:$img"
    assert_json_result
    [[ -n $(ctr_image_line "$img") ]] || fail "the image is not listed after the honest pull"
    assert_equal "$(ctr_k8s leases ls -q)" "$killed"
    assert_no_staging "$T/staging"
    # shellcheck disable=SC2086
    ctr_k8s leases delete $killed || fail "removing the killed import's lease"
    force_gc
    assert_equal "$(ctr_k8s content active | tail -n +2)" ""
    assert_equal "$(ctr_k8s snapshots --snapshotter native ls | tail -n +2 | wc -l)" 3
}

# SIGTERM while containerd does not answer (SIGSTOPped mid-import) ends the pull (143)
ctrd_case_sigterm_stopped() {
    [[ -x $PULLHELPER_HOSTILE_BIN ]] || skip "no $PULLHELPER_HOSTILE_BIN (make build-hostile)"
    ctrd_up
    local img="$REGISTRY_HOST/fixtures/multi:latest" daemon rc=0
    daemon=$(ctrd_daemon_pid)
    [[ -n $daemon ]] || fail "no containerd pid"
    mkdir -p "$OUT"
    PULLHELPER_HOSTILE_COMMIT=pause-after-blobs:1 "$PULLHELPER_HOSTILE_BIN" pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" \
        "$img" "containerd:$img" >"$OUT/bg.out" 2>"$OUT/bg.err" &
    BG_PID=$!
    wait_for_file_match "$OUT/bg.err" "pausing the commit after 1 blobs" 120 || return
    # containerd stops answering; the import goes on (its next call then
    # waits for an answer), and the pull is told to stop.
    kill -STOP "$daemon"
    CTRD_STOPPED=$daemon
    kill -USR1 "$BG_PID"
    kill -TERM "$BG_PID"
    # A hang guard, not a timing assertion: an import deaf to the signal
    # waits for containerd for ever.
    local deadline=$((SECONDS + 90))
    while kill -0 "$BG_PID" 2>/dev/null && ((SECONDS < deadline)); do
        sleep 0.1
    done
    if kill -0 "$BG_PID" 2>/dev/null; then
        kill -KILL "$BG_PID"
        wait "$BG_PID" || true
        BG_PID=""
        fail "the pull was still importing 90 s after SIGTERM: $(cat "$OUT/bg.err")"
        return
    fi
    wait "$BG_PID" || rc=$?
    BG_PID=""
    cat "$OUT/bg.out" "$OUT/bg.err"
    assert_equal "$rc" 143
    assert_equal "$(json_get .error.code <"$OUT/bg.out")" interrupted
    kill -CONT "$daemon"
    CTRD_STOPPED=""
    assert_no_staging "$T/staging"
    assert_equal "$(ctr_k8s images ls -q)" ""
}

# ctr run of the pulled shell image prints the expected output (the image
# is runnable, not only listed: its snapshot is what the runtime mounts)
ctrd_case_run() {
    [[ -x $BUSYBOX ]] || skip "$BUSYBOX missing (Debian busybox-static; make deps)"
    command -v runc >/dev/null || skip "runc not installed (make deps)"
    ctrd_up
    if [[ ${CTRD_FLAVOR:-1.6} == 2 ]]; then
        [[ -x $(dirname "$CTRD_BIN")/ctr && -x $(dirname "$CTRD_BIN")/containerd-shim-runc-v2 ]] ||
            skip "no ctr or containerd-shim-runc-v2 beside $CTRD_BIN (make deps builds them)"
    fi
    local img="$REGISTRY_HOST/fixtures/shell:v1" id="ph-run-$BATS_TEST_NUMBER"
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" "$REGISTRY_HOST/fixtures/shell" "containerd:$img"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$(registry_digest fixtures/shell:latest)"
    # stdout only: ctr 2.x warns on stderr (cgroup v1, the CRI's configs).
    run --separate-stderr ctr_own run --rm --snapshotter native "$img" "$id" sh -c 'echo hello-from-pullhelper; echo "sh is $(readlink /bin/sh)"'
    echo "$output"
    echo "$stderr"
    assert_success
    assert_output $'hello-from-pullhelper\nsh is busybox'
    # Nothing of the container is left (--rm).
    run --separate-stderr ctr_own containers ls -q
    assert_success
    [[ $output != *"$id"* ]] || fail "the container is still listed: $output"
}

# ctr_labels DIGEST: the content labels of blob DIGEST, one KEY=VALUE a
# line, sorted. `ctr content ls` joins the labels with ',' and a
# distribution source value is itself comma-separated: a piece without '='
# continues the value before it.
ctr_labels() {
    ctr_k8s content ls | awk -v d="$1" '$1 == d {print $NF}' | "$PH_PYTHON" -c '
import sys
out = []
for piece in sys.stdin.read().strip().split(","):
    if "=" in piece or not out:
        out.append(piece)
    else:
        out[-1] += "," + piece
print("\n".join(sorted(p for p in out if p and p != "-")))
'
}

# sorted_csv WORD...: the words sorted bytewise, comma-separated (as
# appendDistributionSourceLabel keeps them).
sorted_csv() {
    printf '%s\n' "$@" | LC_ALL=C sort -u | paste -sd,
}

# ctr_label DIGEST KEY: the value of one content label of blob DIGEST.
ctr_label() {
    ctr_labels "$1" | awk -v k="$2=" 'index($0, k) == 1 {print substr($0, length(k) + 1)}'
}

# image_blobs REPO:TAG: the digests of the manifest (the index and every
# instance's with ALL=1, else this platform's), configs and layers.
image_blobs() {
    local repo=${1%:*} raw m
    raw=$(registry_manifest "$1") || return
    {
        registry_digest "$1"
        if [[ $raw == *'"manifests"'* ]]; then
            for m in $(ALL=${ALL:-0} "$PH_PYTHON" -c '
import json, os, sys
arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
for m in json.load(sys.stdin)["manifests"]:
    p = m.get("platform", {})
    if os.environ["ALL"] == "1" or (p.get("os") == "linux" and p.get("architecture") == arch):
        print(m["digest"])
' <<<"$raw"); do
                echo "$m"
                _blobs_of "$(registry_manifest "$repo@$m")"
            done
        else
            _blobs_of "$raw"
        fi
    } | sort -u
}

# _blobs_of MANIFEST: its config's and layers' digests.
_blobs_of() {
    "$PH_PYTHON" -c 'import json, sys; m = json.loads(sys.argv[1]); print(m["config"]["digest"]); [print(l["digest"]) for l in m["layers"]]' "$1"
}

# --all-architectures: every instance's content in the store, this
# platform's unpacked, the index the target and labelled to every child.
# The owners': containerd's images.SetChildrenMappedLabels with
# images.ChildGCLabels (the gc.ref keys), client.Pull's unpack
# (Image.Unpack picks this platform: platforms.Default()) and the CRI's
# image ID (image.Config: this platform's config, image_pull.go PullImage).
ctrd_case_all_arch() {
    ctrd_up
    local img="$REGISTRY_HOST/fixtures/multi:latest" id raw n d blobs
    id=$(config_digest fixtures/multi:latest)
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" --all-architectures "$img" "containerd:$img"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$MULTI_DIGEST"
    assert_equal "$(json_get .image_id <<<"$output")" "$id"
    assert_equal "$(json_get .store.names <<<"$output")" "[\"$img\",\"$REGISTRY_HOST/fixtures/multi@$MULTI_DIGEST\",\"$id\"]"
    [[ $(ctr_image_line "$img") == *" $MULTI_DIGEST "* ]] || fail "ctr lists $img without the index as its target: $(ctr_k8s images ls)"
    # Every platform's blobs are in the content store.
    blobs=$(ALL=1 image_blobs fixtures/multi:latest)
    [[ $(grep -c . <<<"$blobs") -gt 7 ]] || fail "the fixture has too few blobs: $blobs"
    for d in $blobs; do
        ctr_k8s content ls -q | grep -qx "$d" || fail "blob $d is not in the content store"
    done
    # The index labels every instance (gc.ref.content.m.N, in its order).
    raw=$(registry_manifest fixtures/multi:latest)
    n=0
    for d in $("$PH_PYTHON" -c 'import json,sys; [print(m["digest"]) for m in json.load(sys.stdin)["manifests"]]' <<<"$raw"); do
        assert_equal "$(ctr_label "$MULTI_DIGEST" "containerd.io/gc.ref.content.m.$n")" "$d"
        n=$((n + 1))
    done
    assert_equal "$n" 3
    # This platform's image is unpacked and complete; the CRI lists it.
    assert_ctr_complete "$img"
    wait_cri "$img" || return
    run ctrd_crictl inspecti -o json "$img"
    assert_success
    assert_equal "$(json_get .status.id <<<"$output")" "$id"
    # A forced GC keeps every platform's blobs (the labels hold them).
    force_gc
    for d in $blobs; do
        ctr_k8s content ls -q | grep -qx "$d" || fail "blob $d was collected by the GC"
    done
    # Again, with every blob already in the content store: the same image.
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" --all-architectures "$img" "containerd:$img"
    assert_json_result
    assert_equal "$(json_get .image_id <<<"$output")" "$id"
    [[ $(ctr_image_line "$img") == *" $MULTI_DIGEST "* ]] || fail "ctr lists $img without the index after the re-pull"
}

# pinned REF: REF's image record carries io.cri-containerd.pinned=pinned.
pinned() {
    [[ $(ctr_image_line "$1") == *io.cri-containerd.pinned=pinned* ]]
}

# assert_pins WANT REF...: each REF's record exists and is pinned (WANT=1)
# or not (0).
assert_pins() {
    local want=$1 r
    shift
    for r in "$@"; do
        [[ -n $(ctr_image_line "$r") ]] || fail "no image record $r: $(ctr_k8s images ls)"
        if ((want)); then
            pinned "$r" || fail "$r is not pinned: $(ctr_image_line "$r")"
        else
            ! pinned "$r" || fail "$r is still pinned: $(ctr_image_line "$r")"
        fi
    done
}

# wait_cri_pinned REF WANT: the CRI (2.x, which reads the label) reports
# REF pinned WANT (true/false) within 20 s (it follows image events).
wait_cri_pinned() {
    local deadline=$((SECONDS + 20)) got
    while :; do
        got=$(ctrd_crictl inspecti -o json "$1" 2>/dev/null | json_get .status.pinned 2>/dev/null)
        [[ $got == "$2" ]] && return 0
        if ((SECONDS >= deadline)); then
            fail "crictl inspecti $1: pinned is $got, want $2"
            return 1
        fi
        sleep 0.1
    done
}

# pinning follows the pull: a re-pull without --pin unpins the records it
# writes (its own pins; a pin it did not set stays), --pin=false unpins
# them all, and a moved tag unpins what it leaves behind. The owner's:
# the CRI's createOrUpdateImageReference (Create, then Update of target
# and labels; it only ever adds io.cri-containerd.pinned, for its
# pinned_images) and, in 2.x, the CRI image store's Pinned, read from that
# label (internal/cri/store/image).
ctrd_case_pin_follows() {
    ctrd_up
    local repo="fixtures/pinmove-$BATS_TEST_NUMBER" img d1 id1 d2 id2
    push_fixture tiny "$repo"
    img="$REGISTRY_HOST/$repo:latest"
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" --pin "$img" "containerd:$img"
    assert_json_result
    d1=$(json_get .digest <<<"$output")
    id1=$(json_get .image_id <<<"$output")
    assert_pins 1 "$img" "$REGISTRY_HOST/$repo@$d1" "$id1"

    # A re-pull without --pin unpins every record it writes.
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" "$img" "containerd:$img"
    assert_json_result
    [[ $(json_get .store.pinned <<<"$output") != true ]] || fail "store.pinned: $output"
    assert_pins 0 "$img" "$REGISTRY_HOST/$repo@$d1" "$id1"
    if [[ ${CTRD_FLAVOR:-1.6} == 2 ]]; then
        wait_cri_pinned "$img" false || return
    fi

    # A pin this tool did not set (ctr, or the CRI's pinned_images) stays
    # without --pin; --pin=false removes it.
    ctr_k8s images label "$img" io.cri-containerd.pinned=pinned >/dev/null
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" "$img" "containerd:$img"
    assert_json_result
    assert_pins 1 "$img"
    # With --pin it stays the CRI's (not marked as this tool's), so a later
    # pull without --pin still leaves it (review of issue 24).
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" --pin "$img" "containerd:$img"
    assert_json_result
    [[ $(ctr_image_line "$img") != *io.pullhelper.pinned* ]] || fail "the CRI's pin was marked as pullhelper's: $(ctr_image_line "$img")"
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" "$img" "containerd:$img"
    assert_json_result
    assert_pins 1 "$img"
    run_pullhelper explain "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" --pin=false "$img" "containerd:$img"
    assert_equal "$(json_get .plan.containerd.pin <<<"$output")" false
    assert_equal "$(json_get .plan.containerd.unpin <<<"$output")" true
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" --pin=false "$img" "containerd:$img"
    assert_json_result
    assert_pins 0 "$img" "$REGISTRY_HOST/$repo@$d1" "$id1"

    # The tag moves (another image pushed under it) and is pulled with
    # --pin: the new image's records are pinned, the old image's (its
    # REPO@DIGEST and ID, which this tool pinned) are not any more.
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" --pin "$img" "containerd:$img"
    assert_pins 1 "$img" "$REGISTRY_HOST/$repo@$d1" "$id1"
    push_fixture multi "$repo"
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" --pin "$img" "containerd:$img"
    assert_json_result
    d2=$(json_get .digest <<<"$output")
    id2=$(json_get .image_id <<<"$output")
    [[ $d2 != "$d1" && $id2 != "$id1" ]] || fail "the tag did not move: $d1 $d2"
    assert_pins 1 "$img" "$REGISTRY_HOST/$repo@$d2" "$id2"
    assert_pins 0 "$REGISTRY_HOST/$repo@$d1" "$id1"
    if [[ ${CTRD_FLAVOR:-1.6} == 2 ]]; then
        wait_cri_pinned "$img" true || return
        wait_cri_pinned "$id1" false || return
    fi
}

# --containerd-config gives the socket, the CRI's snapshotter (version 2:
# plugins."io.containerd.grpc.v1.cri".containerd.snapshotter, version 3:
# plugins."io.containerd.cri.v1.images".snapshotter) and namespace, its
# imports followed; explicit flags win, with a warning. The owners':
# containerd's LoadConfig (imports, mergeConfig: a plugin's table
# replaced as a whole), the CRI images plugin's migrateConfig (v2 → v3)
# and constants.K8sContainerdNamespace (the CRI's namespace, no setting).
ctrd_case_config() {
    ctrd_up
    local cfg="$CTRD_DIR/config.toml" img="$REGISTRY_HOST/fixtures/tiny:latest" key
    key='plugins."io.containerd.grpc.v1.cri".containerd.snapshotter'
    [[ $CTRD_CONFIG_VERSION == 3 ]] && key='plugins."io.containerd.cri.v1.images".snapshotter'
    run_pullhelper explain "${PH_OPTS[@]}" --containerd-config "$cfg" "$img" "containerd:$img"
    assert_equal "$(json_get .plan.containerd.address <<<"$output")" "$SOCK"
    assert_equal "$(json_get .plan.containerd.snapshotter <<<"$output")" native
    assert_equal "$(json_get .plan.containerd.namespace <<<"$output")" k8s.io
    assert_equal "$(json_get .plan.containerd.config <<<"$output")" "$cfg"
    assert_equal "$(json_get .plan.containerd.from.address <<<"$output")" "$cfg: [grpc] address"
    assert_equal "$(json_get .plan.containerd.from.snapshotter <<<"$output")" "$cfg: $key"
    [[ $(json_get .plan.warnings <<<"$output") != *differs* ]] || fail "a warning without a flag: $output"

    # The pull goes to the config's socket and snapshotter.
    run_pullhelper pull "${PH_OPTS[@]}" --containerd-config "$cfg" --containerd-staging "$T/staging" "$img" "containerd:$img"
    assert_json_result
    assert_equal "$(json_get .store.address <<<"$output")" "$SOCK"
    assert_equal "$(json_get .store.snapshotter <<<"$output")" native
    assert_ctr_complete "$img"
    wait_cri "$img" || return

    # Explicit flags win; each that differs from the config is a warning.
    run_pullhelper explain "${PH_OPTS[@]}" --containerd-config "$cfg" --containerd-snapshotter overlayfs \
        --containerd-namespace prefetch "$img" "containerd:$img"
    assert_equal "$(json_get .plan.containerd.snapshotter <<<"$output")" overlayfs
    assert_equal "$(json_get .plan.containerd.namespace <<<"$output")" prefetch
    assert_equal "$(json_get .plan.containerd.from.snapshotter <<<"$output")" --containerd-snapshotter
    assert_equal "$(json_get .plan.containerd.address <<<"$output")" "$SOCK"
    local w
    w=$(json_get .plan.warnings <<<"$output")
    [[ $w == *'--containerd-snapshotter \"overlayfs\" differs from the snapshotter'*native* ]] || fail "warnings: $w"
    [[ $w == *'--containerd-namespace \"prefetch\" differs from the namespace'*k8s.io* ]] || fail "warnings: $w"

    # imports: a root config importing the daemon's, then a drop-in that
    # sets the CRI's table again (its snapshotter replaces the earlier).
    mkdir -p "$T/cfg/conf.d"
    printf 'version = %s\nimports = [%s, "conf.d/*.toml"]\n' "$CTRD_CONFIG_VERSION" "\"$cfg\"" >"$T/cfg/root.toml"
    run_pullhelper explain "${PH_OPTS[@]}" --containerd-config "$T/cfg/root.toml" "$img" "containerd:$img"
    assert_equal "$(json_get .plan.containerd.address <<<"$output")" "$SOCK"
    assert_equal "$(json_get .plan.containerd.snapshotter <<<"$output")" native
    if [[ $CTRD_CONFIG_VERSION == 3 ]]; then
        printf 'version = 3\n[plugins."io.containerd.cri.v1.images"]\n  snapshotter = "overlayfs"\n' >"$T/cfg/conf.d/10-snap.toml"
    else
        printf 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  snapshotter = "overlayfs"\n' >"$T/cfg/conf.d/10-snap.toml"
    fi
    run_pullhelper explain "${PH_OPTS[@]}" --containerd-config "$T/cfg/root.toml" "$img" "containerd:$img"
    assert_equal "$(json_get .plan.containerd.snapshotter <<<"$output")" overlayfs
    assert_equal "$(json_get .plan.containerd.from.snapshotter <<<"$output")" "$T/cfg/conf.d/10-snap.toml: $key"
    assert_equal "$(json_get .plan.containerd.address <<<"$output")" "$SOCK"
}

# every blob carries the CRI's distribution source label: key
# containerd.io/distribution.source.HOST (the host without its port),
# value the repositories, sorted and comma-separated; a CRI pull of the
# same blobs from another repository appends to it, and so does
# pullhelper. The owner's: containerd's docker.AppendDistributionSourceLabel
# (core/remotes/docker/handler.go; its appendDistributionSourceLabel and
# distributionSourceLabelKey), which client.Pull and the transfer
# service's pull run on every descriptor they fetch.
ctrd_case_source_labels() {
    ctrd_up
    local a="fixtures/src-a-$BATS_TEST_NUMBER" b="fixtures/src-b-$BATS_TEST_NUMBER" key d blobs
    key="containerd.io/distribution.source.${REGISTRY_HOST%:*}"
    push_fixture tiny "$a"
    push_fixture tiny "$b"
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "containerd:$REGISTRY_HOST/fixtures/tiny"
    assert_json_result
    blobs=$(image_blobs fixtures/tiny:latest)
    [[ $(grep -c . <<<"$blobs") -ge 3 ]] || fail "blobs: $blobs"
    for d in $blobs; do
        assert_equal "$(ctr_label "$d" "$key")" fixtures/tiny
    done
    # The CRI appends its repository to the label pullhelper wrote (on the
    # manifest and config: its unpacker does not dispatch a layer already
    # unpacked, so that one keeps its label).
    run ctrd_crictl pull "$REGISTRY_HOST/$b"
    assert_success
    for d in "$TINY_DIGEST" "$(config_digest fixtures/tiny:latest)"; do
        assert_equal "$(ctr_label "$d" "$key")" "$(sorted_csv fixtures/tiny "$b")"
    done
    # pullhelper appends to the CRI's, in order and once: the source is
    # IMAGE's repository, whatever DEST names it.
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" "$REGISTRY_HOST/$a" "containerd:$REGISTRY_HOST/fixtures/renamed:1"
    assert_json_result
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" "$REGISTRY_HOST/$b" "containerd:$REGISTRY_HOST/$b"
    assert_json_result
    for d in $blobs; do
        assert_equal "$(ctr_label "$d" "$key")" "$(sorted_csv fixtures/tiny "$a" "$b")"
    done
}

# Blobs staged for containerd: are not synced: the content store syncs its
# own copy and the staging is removed (dest.Stage.NoSync). On cgroup v1,
# where a cgroup's IO counts only what it writes itself (the kernel writes
# a buffered page back later, on no cgroup's account), the pull's
# usage.io_write_bytes therefore stays below the image. With an IO write
# limit the pull keeps the syncs so that the limit holds
# (pipeline.Isolation.syncsChargeIO), and its io_write_bytes covers the
# image. A second namespace makes the second pull fetch every blob again.
ctrd_case_nosync() {
    [[ $(stat -fc %T /sys/fs/cgroup) != cgroup2fs ]] ||
        skip "cgroup v2: io.max holds for buffered writes, so the pull never keeps the syncs (the v1 rule is what this checks)"
    ctrd_up
    push_fixture_args nosync fixtures/nosync -layers 3 -layer-size 4194304 -compressible 0.5 -seed 7
    local img="$REGISTRY_HOST/fixtures/nosync:latest" bytes v
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" "$img" "containerd:$img"
    assert_json_result
    bytes=$(json_get .bytes <<<"$output")
    v=$(json_get .usage.io_write_bytes <<<"$output")
    [[ $v =~ ^[0-9]+$ ]] && ((bytes > 0 && v < bytes / 2)) ||
        fail "io_write_bytes $v for $bytes bytes pulled: the staged blobs were synced by the pull"
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" --containerd-namespace nosync-limited \
        --io-write-bps "$T/staging=100GB/s" "$img" "containerd:$img"
    assert_json_result
    assert_equal "$(json_get .bytes <<<"$output")" "$bytes"
    v=$(json_get .usage.io_write_bytes <<<"$output")
    [[ $v =~ ^[0-9]+$ ]] && ((v >= bytes / 2)) ||
        fail "io_write_bytes $v for $bytes bytes pulled under an IO write limit: the pull did not sync its staged blobs"
}

# assert_ctr_complete IMG: ctr images check finds IMG complete and unpacked
# for the native snapshotter (the CRI's here).
assert_ctr_complete() {
    run ctr_k8s images check --snapshotter native "name==$1"
    assert_success
    [[ $output == *complete* && $output == *true* ]] || fail "ctr images check: $output"
}

# assert_cri_pull_fetches_nothing IMG: containerd's own CRI pull of IMG
# asks the registry for no manifest and no blob (all in its store).
assert_cri_pull_fetches_nothing() {
    local before
    before=$(registry_log_barrier)
    run ctrd_crictl pull "$1"
    assert_success
    assert_equal "$(any_manifest_gets "$before")" ""
    assert_equal "$(blob_gets "$before")" ""
}

# any_manifest_gets BEFORE: the registry's manifest GETs after access-log line
# BEFORE (a HEAD resolving a tag is not one).
any_manifest_gets() {
    registry_log_barrier >/dev/null
    tail -n "+$(($1 + 1))" "$REGISTRY_LOG" | grep -E '"GET /v2/fixtures/[^ ]*/manifests/' || true
}

# a Docker schema 2 image is stored as the registry served it, as
# containerd's own pull stores it (remotes.FetchHandler writes the fetched
# bytes): the records' target is the registry's digest with the Docker media
# type, not the OCI manifest the staging converted it to; the result names
# no destination digest; a later crictl pull fetches no manifest and no blob;
# containerd:REPO:TAG@DIGEST writes REPO@DIGEST (the CRI's ParseDockerRef)
ctrd_case_docker_v2s2() {
    ctrd_up
    push_docker_fixtures
    local img="$REGISTRY_HOST/fixtures/v2s2:latest" want id line r
    local v2s2=application/vnd.docker.distribution.manifest.v2+json
    want=$(registry_digest fixtures/v2s2:latest)
    id=$(config_digest fixtures/v2s2:latest)
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" "$img" "containerd:$img"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$want"
    assert_equal "$(json_get .image_id <<<"$output")" "$id"
    [[ $output != *destination_digest* ]] || fail "a destination digest in the result: $output"
    for r in "$img" "$REGISTRY_HOST/fixtures/v2s2@$want" "$id"; do
        line=$(ctr_image_line "$r")
        assert_equal "$(awk '{print $2, $3}' <<<"$line")" "$v2s2 $want"
    done
    # The manifest bytes are the registry's.
    assert_equal "sha256:$(ctr_k8s content get "$want" | sha256sum | cut -d' ' -f1)" "$want"
    assert_ctr_complete "$img"
    wait_cri "$img" || return
    run ctrd_crictl inspecti -o json "$img"
    assert_success
    assert_equal "$(json_get .status.id <<<"$output")" "$id"
    assert_equal "$(json_get .status.repoDigests <<<"$output")" "[\"$REGISTRY_HOST/fixtures/v2s2@$want\"]"
    # The CRI's pull finds the manifest it resolves in the content store.
    assert_cri_pull_fetches_nothing "$img"
    assert_equal "$(ctr_image_line "$img" | awk '{print $2, $3}')" "$v2s2 $want"

    # By digest, a tag beside it: REPO@DIGEST, as the CRI names the image
    # (reference.ParseDockerRef drops the tag), no REPO:TAG@DIGEST record.
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" "$REGISTRY_HOST/fixtures/v2s2@$want" "containerd:$img@$want"
    assert_json_result
    assert_equal "$(json_get .store.names <<<"$output")" "[\"$REGISTRY_HOST/fixtures/v2s2@$want\",\"$id\"]"
    assert_equal "$(ctr_image_line "$img@$want")" ""
    assert_equal "$(ctr_k8s images ls -q | LC_ALL=C sort | paste -sd' ')" "$img $REGISTRY_HOST/fixtures/v2s2@$want $id"
}

# a Docker schema 2 image whose config is as docker build writes one: the
# staging re-encodes the config as OCI; the import writes the registry's
# manifest and config (handed over by the child, checked to re-encode to the
# staged one), as containerd's own pull stores them: the image ID is the
# registry's config digest, the image unpacked, and crictl pull then fetches
# nothing. Before, such an image was refused (exit 8, "names config").
ctrd_case_docker_config() {
    ctrd_up
    push_docker_config_fixture
    local img="$REGISTRY_HOST/fixtures/dockercfg:latest" want cfg
    local v2s2=application/vnd.docker.distribution.manifest.v2+json
    want=$(registry_digest fixtures/dockercfg:latest)
    cfg=$(registry_manifest fixtures/dockercfg:latest | json_get .config.digest)
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" "$img" "containerd:$img"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$want"
    assert_equal "$(json_get .image_id <<<"$output")" "$cfg"
    [[ $output != *destination_digest* ]] || fail "a destination digest in the result: $output"
    assert_equal "$(ctr_image_line "$img" | awk '{print $2, $3}')" "$v2s2 $want"
    assert_equal "sha256:$(ctr_k8s content get "$cfg" | sha256sum | cut -d' ' -f1)" "$cfg"
    assert_ctr_complete "$img"
    wait_cri "$img" || return
    run ctrd_crictl inspecti -o json "$img"
    assert_success
    assert_equal "$(json_get .status.id <<<"$output")" "$cfg"
    assert_cri_pull_fetches_nothing "$img"
}

# ctrd_case_odd_layers: an image with an uncompressed layer and one with the
# same layer twice land as served (the registry's digest the records'
# target, the uncompressed layer its own diff_id), complete and unpacked;
# crictl pull then fetches nothing. Before, the uncompressed layer was
# staged gzipped and the parent refused it (exit 8).
ctrd_case_odd_layers() {
    ctrd_up
    local kind img want
    for kind in uncompressed duplayers; do
        push_layout_fixture "$kind"
        img="$REGISTRY_HOST/fixtures/$kind:latest"
        want=$(registry_digest "fixtures/$kind:latest")
        run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" "$img" "containerd:$img"
        assert_json_result
        assert_equal "$(json_get .digest <<<"$output")" "$want"
        assert_equal "$(ctr_image_line "$img" | awk '{print $3}')" "$want"
        assert_ctr_complete "$img"
        wait_cri "$img" || return
        assert_cri_pull_fetches_nothing "$img"
    done
}

# ctrd_case_docker_list [--all-architectures]: a Docker manifest list
# lands: the list is the target, the instance the registry served is in the
# content store under its own digest (the list's gc.ref.content.m.N labels
# name it) and unpacked; crictl pull then fetches no manifest and no blob
# (containerd's own pull: remotes.FetchHandler stores each manifest as
# served). With --all-architectures every instance as served and every
# platform's blobs are stored (the staging converted the list and its
# instances to OCI; each stored instance is tied to the registry's): before,
# that pull was refused as "an index inside an index" (exit 8).
ctrd_case_docker_list() {
    ctrd_up
    push_docker_fixtures
    local img="$REGISTRY_HOST/fixtures/multiv2:latest" list index inst id n=0 d all=${1:-}
    local mlist=application/vnd.docker.distribution.manifest.list.v2+json
    list=$(registry_digest fixtures/multiv2:latest)
    index=$(registry_manifest fixtures/multiv2:latest)
    inst=$(index_instance "$index" "linux/$("$(_ph_go)" env GOARCH)")
    id=$(config_digest fixtures/multiv2:latest)
    run_pullhelper pull "${PH_OPTS[@]}" "${CTRD_OPTS[@]}" ${all:+"$all"} "$img" "containerd:$img"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$list"
    if [[ -n $all ]]; then
        [[ $output != *instance_digest* ]] || fail "an instance digest in the result of --all-architectures: $output"
    else
        assert_equal "$(json_get .instance_digest <<<"$output")" "$inst"
    fi
    assert_equal "$(json_get .image_id <<<"$output")" "$id"
    [[ $output != *destination_digest* ]] || fail "a destination digest in the result: $output"
    assert_equal "$(ctr_image_line "$img" | awk '{print $2, $3}')" "$mlist $list"
    assert_equal "$(ctr_image_line "$REGISTRY_HOST/fixtures/multiv2@$list" | awk '{print $2, $3}')" "$mlist $list"
    assert_equal "sha256:$(ctr_k8s content get "$list" | sha256sum | cut -d' ' -f1)" "$list"
    for d in $("$PH_PYTHON" -c 'import json,sys; [print(m["digest"]) for m in json.load(sys.stdin)["manifests"]]' <<<"$index"); do
        assert_equal "$(ctr_label "$list" "containerd.io/gc.ref.content.m.$n")" "$d"
        n=$((n + 1))
        # Every instance as served with --all-architectures, else this
        # platform's only.
        [[ -n $all || $d == "$inst" ]] || continue
        assert_equal "sha256:$(ctr_k8s content get "$d" | sha256sum | cut -d' ' -f1)" "$d"
    done
    if [[ -n $all ]]; then
        for d in $(ALL=1 image_blobs fixtures/multiv2:latest); do
            ctr_k8s content ls -q | grep -qx "$d" || fail "blob $d is not in the content store"
        done
    fi
    assert_ctr_complete "$img"
    wait_cri "$img" || return
    run ctrd_crictl inspecti -o json "$img"
    assert_success
    assert_equal "$(json_get .status.id <<<"$output")" "$id"
    assert_cri_pull_fetches_nothing "$img"
}
