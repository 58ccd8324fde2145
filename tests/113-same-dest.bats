#!/usr/bin/env bats
#
# The same image into the same DEST at once (issue 13): the second pull
# waits for the first's lock (bounded by --lock-timeout, exit 9) and then
# reuses its blobs, so each blob is fetched once. tests/faultproxy stands
# in for the real registry and counts the requests. Network: 127.0.0.1 only.

load helpers
load faultproxy

setup_file() {
    start_registry
    push_fixture tiny
}

teardown_file() {
    stop_all_faultproxies
    stop_registry
}

setup() {
    ph_test_setup
    T=$BATS_TEST_TMPDIR
    start_faultproxy REG "$REGISTRY_URL"
    LAYER=$(registry_manifest fixtures/tiny:latest | "$PH_PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["layers"][0]["digest"])')
    [[ $LAYER == sha256:* ]] || fail "no layer digest: $LAYER"
}

teardown() {
    local p
    for p in ${BG_PIDS:-}; do
        kill -TERM "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    stop_all_faultproxies
}

# bg_pull NAME ARGS...: pullhelper pull in the background (stdout and
# stderr in $T/NAME.out, exit code in $T/NAME.rc), its pid added to BG_PIDS.
bg_pull() {
    local name=$1
    shift
    { "$PULLHELPER" pull --authfile "$FP_REG_AUTHFILE" --cert-dir "$FP_REG_CERT_DIR" "$@" >"$T/$name.out" 2>&1; echo $? >"$T/$name.rc"; } 3>&- &
    BG_PIDS="${BG_PIDS:-} $!"
}

@test "same image, same DEST: a second pull waits for the first; past --lock-timeout it is exit 9 and asks the registry nothing" {
    faultproxy_rules REG "[{\"match\": {\"path\": \"/blobs/$LAYER\$\"}, \"stall_after\": 100}]"
    bg_pull first --retries 0 --stall-timeout 60s "$FP_REG_HOST/fixtures/tiny" "oci:$OUT/dest:one"
    # The first holds the lock: its layer is stalled at the proxy.
    wait_for_file_match "$FP_REG_LOG" '"action":"stall_after"' 60
    local before
    before=$(wc -l <"$FP_REG_LOG")
    run_pullhelper 9 pull --authfile "$FP_REG_AUTHFILE" --cert-dir "$FP_REG_CERT_DIR" --lock-timeout 1s \
        "$FP_REG_HOST/fixtures/tiny" "oci:$OUT/dest:two"
    assert_json_error destination
    [[ $ph_error_message == *"another pull of $FP_REG_HOST/fixtures/tiny into $OUT/dest"*"--lock-timeout"* ]] ||
        fail "the message does not say what waited for what: $ph_error_message"
    assert_equal "$(wc -l <"$FP_REG_LOG")" "$before"
    # Only the first's staging is there (the second made none).
    assert_equal "$(find "$OUT" -maxdepth 1 -name '.pullhelper-staging-*' | wc -l)" 1
}

@test "same image, same DEST: two pulls at once fetch each blob once; both tags land" {
    # The first's layer trickles (1000 B/s, a few seconds), so the second
    # starts while the first holds the lock.
    faultproxy_rules REG "[{\"match\": {\"path\": \"/blobs/$LAYER\$\"}, \"count\": 1, \"trickle\": 1000}]"
    bg_pull first "$FP_REG_HOST/fixtures/tiny" "oci:$OUT/dest:one"
    wait_for_file_match "$FP_REG_LOG" '/manifests/' 60
    bg_pull second "$FP_REG_HOST/fixtures/tiny" "oci:$OUT/dest:two"
    local p
    for p in $BG_PIDS; do wait "$p" || true; done
    BG_PIDS=
    assert_equal "$(cat "$T/first.rc")" 0
    assert_equal "$(cat "$T/second.rc")" 0
    # Every blob once over the network: the second found the layer in DEST
    # and was handed DEST's config.
    assert_equal "$(faultproxy_count REG "/blobs/$LAYER\$")" 1
    assert_equal "$(faultproxy_count REG '/blobs/')" 2
    ph_skopeo inspect --raw "oci:$OUT/dest:one" >/dev/null || fail "tag one is not in DEST"
    ph_skopeo inspect --raw "oci:$OUT/dest:two" >/dev/null || fail "tag two is not in DEST"
    assert_no_staging "$OUT"
}
