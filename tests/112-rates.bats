#!/usr/bin/env bats
#
# Rates (issue 13): the minimum-rate watchdog a trickle cannot fool
# (pull.min_rate over pull.stall_window) and the per-pull bandwidth cap
# (pull.max_bandwidth), through tests/faultproxy standing in for the real
# registry. Network: 127.0.0.1 only.

load helpers
load faultproxy

setup_file() {
    start_registry
    push_fixture tiny
    push_fixture big
    push_fixture many
}

teardown_file() {
    stop_all_faultproxies
    stop_registry
}

setup() {
    ph_test_setup
    start_faultproxy REG "$REGISTRY_URL"
}

teardown() {
    stop_all_faultproxies
}

# tiny_layer_path: the blob path regexp of tiny's (only) layer.
tiny_layer_path() {
    local d
    d=$(registry_manifest fixtures/tiny:latest | "$PH_PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["layers"][0]["digest"])')
    [[ $d == sha256:* ]] || fail "no layer digest: $d"
    echo "/blobs/$d\$"
}

@test "min_rate: a layer trickling at 200 B/s under --min-rate 1KiB/s over 2s ends the pull (exit 6) naming the blob, the host and the rate" {
    local layer
    layer=$(tiny_layer_path)
    faultproxy_rules REG "[{\"match\": {\"path\": \"$layer\"}, \"trickle\": 200}]"
    run_pullhelper 6 pull --authfile "$FP_REG_AUTHFILE" --cert-dir "$FP_REG_CERT_DIR" --retries 0 \
        --min-rate 1KiB/s --stall-window 2s "$FP_REG_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_error network
    [[ $ph_error_message == *"below the minimum rate of 1024 B/s"* ]] || fail "not the rate watchdog: $ph_error_message"
    [[ $ph_error_message == *"${layer:7:71}"* && $ph_error_message == *"from $FP_REG_HOST"* ]] ||
        fail "the blob or host is not named: $ph_error_message"
    [[ ! -e $OUT/dest ]] || fail "DEST was created"
    assert_no_staging "$OUT"
}

@test "min_rate: a trickle above the minimum (2000 B/s over --min-rate 500) is not a stall: the pull completes" {
    local layer
    layer=$(tiny_layer_path)
    faultproxy_rules REG "[{\"match\": {\"path\": \"$layer\"}, \"trickle\": 2000}]"
    run_pullhelper pull --authfile "$FP_REG_AUTHFILE" --cert-dir "$FP_REG_CERT_DIR" --retries 0 \
        --min-rate 500 --stall-window 1s "$FP_REG_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_result
    assert_equal "$(faultproxy_count REG "$layer")" 1
}

@test "min_rate: explain shows the defaults (1KiB/s over 60s) and a bad window is a usage error" {
    run_pullhelper explain "$FP_REG_HOST/fixtures/tiny"
    assert_equal "$(json_get .plan.min_rate <<<"$output")" 1024
    assert_equal "$(json_get .plan.stall_window_ns <<<"$output")" 60000000000
    run_pullhelper 2 explain --min-rate 1KiB/s --stall-window 100ms "$FP_REG_HOST/fixtures/tiny"
    assert_json_error usage
    [[ $ph_error_message == *"--stall-window"* ]] || fail "the error does not name the setting: $ph_error_message"
}

@test "max_bandwidth: --max-bandwidth 20MiB/s holds the pull of big at or below the cap (never faster), and reports the rate" {
    run_pullhelper pull --authfile "$FP_REG_AUTHFILE" --cert-dir "$FP_REG_CERT_DIR" --max-bandwidth 20MiB/s \
        "$FP_REG_HOST/fixtures/big" "oci:$OUT/dest"
    assert_json_result
    local net ms
    net=$(faultproxy_bytes REG '/blobs/')
    ms=$(json_get .duration_ms <<<"$output")
    ((net > 50000000)) || fail "only $net bytes went over the network"
    # The cap is a floor on the time: net bytes at 20 MiB/s, less one
    # burst (a quarter second) and 15 %. Faster means the cap did not hold.
    local floor_ms=$(((net * 1000 / (20 * 1048576) - 250) * 85 / 100))
    ((ms >= floor_ms)) || fail "$net bytes in ${ms}ms: faster than the cap allows (at least ${floor_ms}ms)"
    echo "# max_bandwidth 20MiB/s: $net bytes in ${ms}ms = $((net * 1000 / ms / 1024)) KiB/s (cap 20480 KiB/s)" >&3
}

@test "node_bandwidth: two pulls at once under --node-bandwidth 20MiB/s share it — together never faster than the cap" {
    local t0 t1 net
    t0=$(date +%s%N)
    { "$PULLHELPER" pull --authfile "$FP_REG_AUTHFILE" --cert-dir "$FP_REG_CERT_DIR" --node-bandwidth 20MiB/s \
        "$FP_REG_HOST/fixtures/big" "oci:$OUT/a" >"$BATS_TEST_TMPDIR/a.out" 2>&1; echo $? >"$BATS_TEST_TMPDIR/a.rc"; } 3>&- &
    local pa=$!
    { "$PULLHELPER" pull --authfile "$FP_REG_AUTHFILE" --cert-dir "$FP_REG_CERT_DIR" --node-bandwidth 20MiB/s \
        "$FP_REG_HOST/fixtures/big" "oci:$OUT/b" >"$BATS_TEST_TMPDIR/b.out" 2>&1; echo $? >"$BATS_TEST_TMPDIR/b.rc"; } 3>&- &
    local pb=$!
    wait "$pa" "$pb" || true
    t1=$(date +%s%N)
    assert_equal "$(cat "$BATS_TEST_TMPDIR/a.rc")" 0
    assert_equal "$(cat "$BATS_TEST_TMPDIR/b.rc")" 0
    net=$(faultproxy_bytes REG '/blobs/')
    ((net > 100000000)) || fail "only $net bytes went over the network for two pulls of big"
    local ms=$(((t1 - t0) / 1000000))
    # Both together at most 20 MiB/s (+15 %, and a burst each): the pair
    # cannot have finished sooner.
    local floor_ms=$(((net * 1000 / (20 * 1048576) - 500) * 85 / 100))
    ((ms >= floor_ms)) || fail "$net bytes in ${ms}ms for both: faster than the node cap allows (at least ${floor_ms}ms)"
    echo "# node_bandwidth 20MiB/s, two pulls: $net bytes in ${ms}ms = $((net * 1000 / ms / 1024)) KiB/s together (cap 20480 KiB/s)" >&3
    [[ -z $(ls -A /run/pullhelper/bandwidth 2>/dev/null) ]] || fail "registrations left in /run/pullhelper/bandwidth: $(ls -A /run/pullhelper/bandwidth)"
}

@test "node_parallel_layers: under --node-parallel-layers 1 one blob downloads at a time — with every blob stalled, only one is ever asked for" {
    # Every blob stalls after its headers: with one slot, the first holds it
    # and no second blob request is made until the stall timeout ends the
    # attempt. (Without the limit, --parallel-layers 6 asks for six.)
    # The config is read first, alone: it passes (ignore_range forwards it
    # as it is); every layer stalls.
    local cfg
    cfg=$(registry_manifest fixtures/many:latest | "$PH_PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["config"]["digest"])')
    faultproxy_rules REG "[{\"match\": {\"path\": \"/blobs/$cfg\$\"}, \"ignore_range\": true}, {\"match\": {\"path\": \"/blobs/\"}, \"stall_after\": 0}]"
    run_pullhelper 6 pull --authfile "$FP_REG_AUTHFILE" --cert-dir "$FP_REG_CERT_DIR" --retries 0 --stall-timeout 3s \
        --node-parallel-layers 1 "$FP_REG_HOST/fixtures/many" "oci:$OUT/dest"
    assert_json_error network
    assert_equal "$(faultproxy_count REG '/blobs/')" 2 # the config, then one layer
    # The same pull with two slots asks for exactly two layers.
    : >"$FP_REG_LOG"
    run_pullhelper 6 pull --authfile "$FP_REG_AUTHFILE" --cert-dir "$FP_REG_CERT_DIR" --retries 0 --stall-timeout 3s \
        --node-parallel-layers 2 "$FP_REG_HOST/fixtures/many" "oci:$OUT/dest"
    assert_equal "$(faultproxy_count REG '/blobs/')" 3
    assert_no_staging "$OUT"
}
