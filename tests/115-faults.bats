#!/usr/bin/env bats
#
# The fault table of issue 13: pullhelper pulls through tests/faultproxy
# standing in for the registry itself (the proxy's host is the image's host,
# its CA the only trust, the registry's credential keyed by it), and the proxy
# breaks one request in one way. For each fault: the pull succeeds after a
# retry or a resume, or it fails with the documented exit code (README "Exit
# codes"); on failure DEST (an OCI layout holding an earlier complete pull)
# is byte for byte unchanged; nothing is left beside DEST; and the proxy's log
# shows what happened (how often each blob was asked for, the Range of each
# resume). teardown_file prints the table (fault | expected | outcome) on
# fd 3, so CI output shows it.
#
# No assertion depends on timing: a wait is checked by what the retry log line
# announces and by the request the proxy saw after it, never by elapsed time.
# Network: 127.0.0.1 only.

load helpers
load faultproxy

setup_file() {
    build_faultproxy
    start_registry
    push_fixture tiny
    # Two incompressible layers of 256 KiB (about as large compressed), so
    # that a fault can land mid-layer, and a config of a few hundred bytes.
    push_fixture_args faults115 fixtures/faults -layers 2 -layer-size 262144 -compressible 0 -seed 115
    IMG_DIGEST=$(fixture_digest faults115)
    local m
    m=$(fixture_blob faults115 "$IMG_DIGEST")
    L1=$(json_get '.layers[0].digest' <"$m")
    L2=$(json_get '.layers[1].digest' <"$m")
    CFG=$(json_get '.config.digest' <"$m")
    L1_SIZE=$(json_get '.layers[0].size' <"$m")
    CFG_SIZE=$(json_get '.config.size' <"$m")
    ((L1_SIZE > 200000)) || fail "the first layer has $L1_SIZE bytes; the tests need > 200000"
    ((CFG_SIZE > 100 && CFG_SIZE < 2000)) || fail "the config has $CFG_SIZE bytes; the trickle test wants 100-2000"
    L1_PATH="/v2/fixtures/faults/blobs/$L1"
    CFG_PATH="/v2/fixtures/faults/blobs/$CFG"

    # The earlier complete pull every test's DEST starts from: tiny, tagged
    # old, in an OCI layout (pulled straight from the registry).
    BASE=$BATS_FILE_TMPDIR/base
    mkdir -p "$BASE"
    run_pullhelper pull --authfile "$REGISTRY_AUTHFILE" --cert-dir "$REGISTRY_CERT_DIR" \
        "$REGISTRY_HOST/fixtures/tiny:latest" "oci:$BASE/dest:old"
    TABLE=$BATS_FILE_TMPDIR/fault-table
    : >"$TABLE"
    export IMG_DIGEST L1 L2 CFG L1_SIZE CFG_SIZE L1_PATH CFG_PATH BASE TABLE
}

teardown_file() {
    stop_all_faultproxies
    stop_registry
    if [[ -s ${TABLE:-} ]]; then
        {
            printf '# %-58s | %-44s | %s\n' fault expected outcome
            printf '# %s\n' "$(printf '%.0s-' {1..150})"
            sed 's/^/# /' "$TABLE"
        } >&3
    fi
}

setup() {
    OUT=$BATS_TEST_TMPDIR/out
    mkdir -p "$OUT"
    cp -a "$BASE/dest" "$OUT/dest"
    SUM_BEFORE=$(tree_sum "$OUT/dest")
    start_faultproxy X "$REGISTRY_URL"
    FAULT="" EXPECTED="" OUTCOME="(not run)"
}

teardown() {
    if [[ -n ${BG_PID:-} ]] && _ph_pid_alive "$BG_PID"; then
        _ph_stop_pid "$BG_PID" "background pullhelper" 5
    fi
    stop_all_faultproxies
    local verdict=FAIL
    if [[ -n ${BATS_TEST_SKIPPED:-} ]]; then
        verdict="SKIP" OUTCOME=$BATS_TEST_SKIPPED
    elif [[ ${BATS_TEST_COMPLETED:-} == 1 ]]; then
        verdict=ok
    fi
    [[ -z $FAULT ]] || printf '%-58s | %-44s | %s: %s\n' "$FAULT" "$EXPECTED" "$verdict" "$OUTCOME" >>"$TABLE"
}

# row FAULT EXPECTED: name this test's row of the table.
row() {
    FAULT=$1 EXPECTED=$2
}

# tree_sum DIR: one checksum of every entry's path, mode and size and every
# file's content.
tree_sum() {
    (cd "$1" && find . -printf '%p %m %s\n' | sort && find . -type f -exec sha256sum {} + | sort) | sha256sum
}

# pull EXPECTED_RC [OPTIONS...]: pull fixtures/faults through proxy X into
# oci:$OUT/dest:new, with small retry delays; records the outcome.
pull() {
    local rc=$1
    shift
    run_pullhelper '?' pull --authfile "$FP_X_AUTHFILE" --cert-dir "$FP_X_CERT_DIR" --retry-delay 10ms "$@" \
        "$FP_X_HOST/fixtures/faults:latest" "oci:$OUT/dest:new"
    outcome
    [[ $rc == '?' || $status == "$rc" ]] || fail "pullhelper exited $status, want $rc (its stdout and stderr are above)"
}

# outcome: the last pull's outcome, for the table: the exit code and error
# code, and the first layer's GETs with their Range headers.
outcome() {
    local code=""
    [[ $status == 0 ]] || code=" $(json_get .error.code <<<"$output" 2>/dev/null)"
    OUTCOME="exit $status$code; $(gets "$L1_PATH") GET(s) of layer 1$(ranges_note "$L1_PATH")"
}

# gets PATH: GET requests the proxy logged for exactly PATH.
gets() {
    faultproxy_count X "^$1\$" GET
}

# ranges PATH: the Range header of each GET of exactly PATH, in order, one
# line each ("-" for none).
ranges() {
    "$PH_PYTHON" -c '
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["path"] == sys.argv[2] and e["method"] == "GET":
        print(e["range"] or "-")' "$FP_X_LOG" "$1"
}

ranges_note() {
    local r
    r=$(ranges "$1" | grep -v '^-$' | paste -sd, -)
    [[ -z $r ]] || echo " (Range: $r)"
}

# assert_gets PATH N: the proxy logged exactly N GETs of PATH.
assert_gets() {
    local n
    n=$(gets "$1")
    [[ $n == "$2" ]] || fail "$n GETs of $1, want $2; proxy log:
$(faultproxy_log X)"
}

# assert_unchanged: DEST is byte for byte the earlier pull, and nothing is
# left beside it.
assert_unchanged() {
    assert_equal "$(tree_sum "$OUT/dest")" "$SUM_BEFORE"
    assert_no_staging "$OUT"
    assert_no_staging "$OUT/dest"
    OUTCOME+="; DEST unchanged, no staging"
}

# assert_committed: the pull's result names the image; DEST holds the new
# tag (the image's digest), the old tag still, and every blob of the new
# image with the right hash; nothing is left beside it.
assert_committed() {
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$IMG_DIGEST"
    "$PH_PYTHON" - "$OUT/dest" "$IMG_DIGEST" <<'EOF' || fail "DEST is not complete"
import hashlib, json, os, sys
layout, want = sys.argv[1:3]
idx = json.load(open(os.path.join(layout, "index.json")))
tags = {m.get("annotations", {}).get("org.opencontainers.image.ref.name"): m["digest"] for m in idx["manifests"]}
assert tags.get("new") == want, "tag new is %r, want %s" % (tags.get("new"), want)
assert "old" in tags, "the old tag is gone: %r" % tags
def blob(d):
    p = os.path.join(layout, "blobs", *d.split(":"))
    b = open(p, "rb").read()
    assert "sha256:" + hashlib.sha256(b).hexdigest() == d, "%s does not hash to its name" % p
    return b
m = json.loads(blob(want))
for d in [m["config"]] + m["layers"]:
    assert len(blob(d["digest"])) == d["size"], d["digest"]
EOF
    assert_no_staging "$OUT"
    assert_no_staging "$OUT/dest"
    OUTCOME+="; committed"
}

# retry_lines: stderr's "request failed; retrying" lines.
retry_lines() {
    grep 'request failed; retrying' <<<"$stderr" || true
}

# rules JSON: the rules of proxy X.
rules() {
    faultproxy_rules X "$1"
}

###############################################################################
# Faults that a resume or a retry overcomes

@test "reset after N bytes mid-layer: the layer is resumed with Range at N; nothing else is fetched again" {
    row "reset_after 100000 (layer 1, once)" "success; 1 resume, Range bytes=100000-"
    rules "[{\"match\": {\"path\": \"^$L1_PATH\$\"}, \"count\": 1, \"reset_after\": 100000}]"
    pull 0
    assert_committed
    assert_gets "$L1_PATH" 2
    assert_equal "$(ranges "$L1_PATH" | paste -sd' ' -)" "- bytes=100000-"
    assert_equal "$(faultproxy_bytes X "^$L1_PATH\$" GET)" "$L1_SIZE"
    # Per blob, not per image: the other blobs were asked for once.
    assert_gets "/v2/fixtures/faults/blobs/$L2" 1
    assert_gets "$CFG_PATH" 1
}

@test "truncated body (close_after) mid-layer: resumed with Range at the offset reached" {
    row "close_after 150000 (layer 1, once)" "success; 1 resume, Range bytes=150000-"
    rules "[{\"match\": {\"path\": \"^$L1_PATH\$\"}, \"count\": 1, \"close_after\": 150000}]"
    pull 0
    assert_committed
    assert_gets "$L1_PATH" 2
    assert_equal "$(ranges "$L1_PATH" | paste -sd' ' -)" "- bytes=150000-"
    assert_equal "$(faultproxy_bytes X "^$L1_PATH\$" GET)" "$L1_SIZE"
    assert_gets "/v2/fixtures/faults/blobs/$L2" 1
}

@test "a reset mid-layer whose Range resume gets a 503: the resume is retried after the delay, from the same offset" {
    row "reset_after 100000, then 503 on the resume" "success; the resume retried at bytes=100000-"
    rules "[{\"match\": {\"path\": \"^$L1_PATH\$\", \"header\": [\"!Range\"]}, \"count\": 1, \"reset_after\": 100000},
            {\"match\": {\"path\": \"^$L1_PATH\$\", \"header\": [\"Range\"]}, \"count\": 1, \"status\": 503}]"
    pull 0 --retries 2
    assert_committed
    assert_gets "$L1_PATH" 3
    assert_equal "$(ranges "$L1_PATH" | paste -sd' ' -)" "- bytes=100000- bytes=100000-"
    assert_equal "$(retry_lines | grep -c "blob $L1")" 1
    assert_equal "$(faultproxy_bytes X "^$L1_PATH\$" GET)" "$L1_SIZE"
    assert_gets "/v2/fixtures/faults/blobs/$L2" 1
}

@test "a reset mid-layer, and the server ignores the Range of the resume: the full answer is read past the offset" {
    row "reset_after 100000, resume answered 200 (Range ignored)" "success; the offset skipped in the full answer"
    rules "[{\"match\": {\"path\": \"^$L1_PATH\$\", \"header\": [\"!Range\"]}, \"count\": 1, \"reset_after\": 100000},
            {\"match\": {\"path\": \"^$L1_PATH\$\", \"header\": [\"Range\"]}, \"ignore_range\": true}]"
    pull 0
    assert_committed
    assert_gets "$L1_PATH" 2
    "$PH_PYTHON" -c '
import json, sys
es = [json.loads(l) for l in open(sys.argv[1])]
es = [e for e in es if e["path"] == sys.argv[2]]
r = es[1]
assert (r["range"], r["action"], r["upstream"], r["bytes"]) == ("bytes=100000-", "ignore_range", 200, int(sys.argv[3])), r
' "$FP_X_LOG" "$L1_PATH" "$L1_SIZE" || fail "the resume was not a Range request answered in full: $(faultproxy_log X)"
}

@test "a reset mid-manifest: the manifest request is retried, then the pull succeeds" {
    row "reset_after 100 (the tag's manifest, once)" "success after 1 retry of the manifest"
    rules '[{"match": {"path": "/manifests/latest$", "header": ["Authorization"]}, "count": 1, "reset_after": 100}]'
    pull 0 --retries 2
    assert_committed
    assert_equal "$(retry_lines | grep -c 'manifest latest')" 1
    # The anonymous challenge, the reset one, the retry.
    assert_equal "$(faultproxy_count X '/manifests/latest$' GET)" 3
    OUTCOME+="; $(faultproxy_count X '/manifests/latest$' GET) GETs of the manifest"
}

@test "Content-Length shorter than the blob: the body ends early, the rest is resumed with Range" {
    # The body ends, cleanly, before the blob's declared size: as a
    # truncated body, it is resumed with a Range request.
    row "content_length 100000 (layer 1, once)" "success; 1 resume, Range bytes=100000-"
    rules "[{\"match\": {\"path\": \"^$L1_PATH\$\"}, \"count\": 1, \"content_length\": 100000}]"
    pull 0
    assert_committed
    assert_gets "$L1_PATH" 2
    assert_equal "$(ranges "$L1_PATH" | paste -sd' ' -)" "- bytes=100000-"
}

@test "500, 502, 503 on a layer, then success: the blob alone is retried, each retry announced" {
    row "500, 502, 503, then the blob (layer 1)" "success after 3 retries of the blob"
    rules "[{\"match\": {\"path\": \"^$L1_PATH\$\"}, \"count\": 1, \"status\": 500},
            {\"match\": {\"path\": \"^$L1_PATH\$\"}, \"count\": 1, \"status\": 502},
            {\"match\": {\"path\": \"^$L1_PATH\$\"}, \"count\": 1, \"status\": 503}]"
    pull 0 --retries 3
    assert_committed
    assert_gets "$L1_PATH" 4
    local n
    n=$(retry_lines | grep -c "blob $L1")
    assert_equal "$n" 3
    assert_gets "/v2/fixtures/faults/blobs/$L2" 1
    assert_gets "$CFG_PATH" 1
    assert_equal "$(json_get .attempts <<<"$output")" 1
}

@test "429 with Retry-After: 1 — the wait is announced as 1s, then the blob is asked again and served" {
    row "429 Retry-After: 1 (layer 1, once)" "success; the retry waits 1s (announced)"
    rules "[{\"match\": {\"path\": \"^$L1_PATH\$\"}, \"count\": 1, \"status\": 429, \"retry_after\": 1}]"
    pull 0 --retries 2
    assert_committed
    assert_gets "$L1_PATH" 2
    # --retry-delay is 10ms: only Retry-After makes the wait 1s.
    retry_lines | grep "blob $L1" | grep -q 'in=1s' ||
        fail "no retry of the blob announced with in=1s: $(retry_lines)"
    local second
    second=$("$PH_PYTHON" -c '
import json, sys
es = [json.loads(l) for l in open(sys.argv[1])]
es = [e for e in es if e["path"] == sys.argv[2]]
print(es[0]["status"], es[1]["status"], es[1]["action"] or "forwarded")' "$FP_X_LOG" "$L1_PATH")
    assert_equal "$second" "429 200 forwarded"
}

@test "a 100 B/s trickle on the config with --stall-timeout 2s: not a stall, the pull succeeds" {
    # A trickle passes the no-byte stall timeout ("no byte arrives for D").
    # The rate watchdog (default 1KiB/s over 60s) judges a blob only once it
    # has been in flight for a whole window: this ${CFG_SIZE}-byte blob at
    # 100 B/s lasts a few seconds, so it passes too. tests/112-rates.bats
    # has the trickle that fails it.
    row "trickle 100 B/s (config, ${CFG_SIZE} bytes)" "success (not a stall; shorter than the rate window)"
    rules "[{\"match\": {\"path\": \"^$CFG_PATH\$\"}, \"trickle\": 100}]"
    pull 0 --stall-timeout 2s
    assert_committed
    assert_gets "$CFG_PATH" 1
    "$PH_PYTHON" -c '
import json, sys
e = [json.loads(l) for l in open(sys.argv[1]) if json.loads(l)["path"] == sys.argv[2]][0]
want = (int(sys.argv[3]) + 4) // 5
assert e["action"] == "trickle" and e["bytes"] == int(sys.argv[3]) and e["writes"] == want, (e, want)
' "$FP_X_LOG" "$CFG_PATH" "$CFG_SIZE" || fail "the config was not trickled in 5-byte writes: $(faultproxy_log X)"
}

###############################################################################
# Faults that end the pull with a documented exit code

@test "Content-Length longer than the declared size: exit 8 (over its bounds), not retried" {
    row "content_length size+1000 (layer 1)" "exit 8 verification; 1 GET"
    rules "[{\"match\": {\"path\": \"^$L1_PATH\$\"}, \"content_length\": $((L1_SIZE + 1000))}]"
    pull 8 --retries 2
    assert_json_error verification
    [[ $ph_error_message == *"$L1"* ]] || fail "the message does not name the blob: $ph_error_message"
    assert_gets "$L1_PATH" 1
    assert_unchanged
}

@test "a full stall mid-layer with --stall-timeout 2s: exit 6 naming the blob and the host" {
    row "stall_after 100000 (layer 1, always)" "exit 6 network, naming blob and host"
    rules "[{\"match\": {\"path\": \"^$L1_PATH\$\"}, \"stall_after\": 100000}]"
    pull 6 --stall-timeout 2s --retries 1
    assert_json_error network
    [[ $ph_error_message == *"$L1"* ]] || fail "the message does not name the blob: $ph_error_message"
    [[ $ph_error_message == *"$FP_X_HOST"* ]] || fail "the message does not name the host: $ph_error_message"
    [[ $ph_error_message == *stall* ]] || fail "the message does not say it stalled: $ph_error_message"
    # A stall fails the attempt (--stall-timeout); --retries 1: two attempts.
    assert_gets "$L1_PATH" 2
    assert_unchanged
}

@test "a manifest trickling at 20 B/s under --min-rate 1KiB/s over 1s: exit 6 below the minimum rate, not a stall" {
    # Each byte of the manifest is data (the 10s stall timeout never ends
    # the attempt, as it did when the manifest's bytes went uncounted) and
    # the rate watchdog judges the manifest as it judges a blob.
    row "trickle 20 B/s (the tag's manifest)" "exit 6 network, below the minimum rate"
    rules '[{"match": {"path": "/manifests/latest$", "header": ["Authorization"]}, "trickle": 20}]'
    pull 6 --retries 0 --stall-timeout 10s --min-rate 1KiB/s --stall-window 1s
    assert_json_error network
    [[ $ph_error_message == *"the manifest"*"from $FP_X_HOST"* ]] || fail "the message does not name the manifest and the host: $ph_error_message"
    [[ $ph_error_message == *"below the minimum rate of 1024 B/s"* ]] || fail "the message does not say the rate was too low: $ph_error_message"
    [[ $ph_error_message != *"no data received"* ]] || fail "reported as a stall: $ph_error_message"
    assert_unchanged
}

@test "a redirect loop on a layer: exit 8 (an answer over its bounds), not retried" {
    # The README names no exit code for a redirect loop. Redirects are one
    # of the bounds registry/doc.go sets on what a server sends ("redirects
    # to 10"), and exit 8 is "a registry answer over its bounds"; a redirect
    # loop is not among the failures that "may pass" (a connection error,
    # 408, 429, 5xx), so it is final: one chain of 10 requests.
    row "307 to itself (layer 1, always)" "exit 8 verification; 10 GETs (one chain)"
    rules "[{\"match\": {\"path\": \"^$L1_PATH\$\"}, \"status\": 307, \"headers\": {\"Location\": \"$L1_PATH\"}}]"
    pull 8 --retries 1
    assert_json_error verification
    [[ $ph_error_message == *redirect* ]] || fail "the message does not say redirect: $ph_error_message"
    [[ $ph_error_message == *"$L1"* ]] || fail "the message does not name the blob: $ph_error_message"
    assert_gets "$L1_PATH" 10
    assert_equal "$(retry_lines | wc -l)" 0
    assert_unchanged
}

@test "the registry down (nothing listens on its port): exit 6 after the retries, each announced" {
    row "registry down (closed port)" "exit 6 network; retries announced"
    stop_faultproxy X
    pull 6 --retries 2
    assert_json_error network
    [[ $ph_error_message == *"$FP_X_HOST"* ]] || fail "the message does not name the host: $ph_error_message"
    assert_equal "$(retry_lines | grep -c 'manifest latest')" 2
    OUTCOME+="; $(retry_lines | wc -l) retries announced"
    assert_unchanged
}

@test "the registry goes down mid-layer (the proxy stops during a stall): exit 6, DEST unchanged, nothing left" {
    row "registry down mid-layer (proxy stopped)" "exit 6 network"
    rules "[{\"match\": {\"path\": \"^$L1_PATH\$\"}, \"stall_after\": 100000}]"
    timeout --kill-after=10 120 "$PULLHELPER" pull --authfile "$FP_X_AUTHFILE" --cert-dir "$FP_X_CERT_DIR" \
        --retry-delay 10ms --retries 2 --stall-timeout 5m \
        "$FP_X_HOST/fixtures/faults:latest" "oci:$OUT/dest:new" \
        >"$BATS_TEST_TMPDIR/bg.out" 2>"$BATS_TEST_TMPDIR/bg.err" 3>&- &
    BG_PID=$!
    # The log line of a stall is written once its bytes are out.
    wait_for_file_match "$FP_X_LOG" '"action":"stall_after"' 30
    stop_faultproxy X
    status=0
    wait "$BG_PID" || status=$?
    BG_PID=""
    output=$(<"$BATS_TEST_TMPDIR/bg.out")
    stderr=$(<"$BATS_TEST_TMPDIR/bg.err")
    mapfile -t lines <<<"$output"
    outcome
    echo "$output"
    echo "[stderr] $stderr"
    assert_equal "$status" 6
    assert_json_error network
    [[ $ph_error_message == *"$FP_X_HOST"* ]] || fail "the message does not name the host: $ph_error_message"
    assert_unchanged
}

@test "401 on a layer: exit 3, never retried (exactly one request for it)" {
    row "401 (layer 1)" "exit 3 unauthorized; 1 GET"
    rules "[{\"match\": {\"path\": \"^$L1_PATH\$\"}, \"status\": 401, \"headers\": {\"WWW-Authenticate\": \"Basic realm=\\\"pullhelper-tests\\\"\"}}]"
    pull 3 --retries 3
    assert_json_error unauthorized
    assert_gets "$L1_PATH" 1
    assert_equal "$(retry_lines | wc -l)" 0
    assert_unchanged
}

@test "404 on a layer: exit 5, never retried (exactly one request for it)" {
    row "404 (layer 1)" "exit 5 not_found; 1 GET"
    rules "[{\"match\": {\"path\": \"^$L1_PATH\$\"}, \"status\": 404, \"body\": \"{\\\"errors\\\":[{\\\"code\\\":\\\"BLOB_UNKNOWN\\\",\\\"message\\\":\\\"blob unknown to registry\\\"}]}\"}]"
    pull 5 --retries 3
    assert_json_error not_found
    assert_gets "$L1_PATH" 1
    assert_equal "$(retry_lines | wc -l)" 0
    assert_unchanged
}

@test "one flipped byte in a layer (digest mismatch): exit 8, never retried" {
    row "flip_byte 1234 (layer 1)" "exit 8 verification; 1 GET"
    rules "[{\"match\": {\"path\": \"^$L1_PATH\$\"}, \"flip_byte\": 1234}]"
    pull 8 --retries 3
    assert_json_error verification
    [[ $ph_error_message == *"$L1"* ]] || fail "the message does not name the blob: $ph_error_message"
    assert_gets "$L1_PATH" 1
    assert_unchanged
}

@test "one flipped byte in the config (digest mismatch): exit 8, never retried" {
    row "flip_byte 10 (config)" "exit 8 verification; 1 GET of the config"
    rules "[{\"match\": {\"path\": \"^$CFG_PATH\$\"}, \"flip_byte\": 10}]"
    pull 8 --retries 3
    OUTCOME+="; $(gets "$CFG_PATH") GET(s) of the config"
    assert_json_error verification
    [[ $ph_error_message == *"$CFG"* ]] || fail "the message does not name the config: $ph_error_message"
    # Not retried by pullhelper (no retry announced, one attempt). The
    # config is asked for twice all the same: containers/image reads it
    # before the layers (copy/single.go prepareImageConfigForDest ignores
    # that read's error, the image might be an artifact) and again when it
    # copies it, which fails.
    assert_equal "$(retry_lines | wc -l)" 0
    assert_gets "$CFG_PATH" 2
    assert_unchanged
}
