#!/usr/bin/env bats
#
# tests/faultproxy, the fault-injecting reverse proxy the reliability and
# mirror suites put between pullhelper and the registry, does what its rules
# say in front of the real registry (docker-registry with TLS and htpasswd),
# observed with curl and through its access log. No assertion depends on
# timing: a trickle is checked by its log (bytes, writes), a stall by what
# the client got and how it ended.

load helpers
load faultproxy

setup_file() {
    build_faultproxy
    start_registry
    push_fixture tiny
    MANIFEST_DIGEST=$(fixture_digest tiny)
    LAYER_DIGEST=$(json_get '.layers[0].digest' <"$(fixture_blob tiny "$MANIFEST_DIGEST")")
    LAYER_SIZE=$(stat -c %s "$(fixture_blob tiny "$LAYER_DIGEST")")
    ((LAYER_SIZE > 2000)) || fail "the tiny fixture's layer has $LAYER_SIZE bytes; the tests need > 2000"
    BLOB_PATH="/v2/fixtures/tiny/blobs/$LAYER_DIGEST"
    MANIFEST_PATH="/v2/fixtures/tiny/manifests/latest"
    export MANIFEST_DIGEST LAYER_DIGEST LAYER_SIZE BLOB_PATH MANIFEST_PATH
}

teardown_file() {
    stop_all_faultproxies
    stop_registry
}

setup() {
    start_faultproxy P "$REGISTRY_URL" --log-header X-Dragonfly-Registry
    BODY=$BATS_TEST_TMPDIR/body
}

teardown() {
    stop_all_faultproxies
}

OCI_MANIFEST=application/vnd.oci.image.manifest.v1+json

# fp [--anon] CURL_ARGS... PATH: curl proxy P (its CA, the registry's
# credential unless --anon, Accept: an OCI manifest), body to $BODY; prints
# the HTTP code. Use with run: $status is curl's exit code.
fp() {
    local -a auth=(-K "$REGISTRY_DIR/curlrc")
    if [[ $1 == --anon ]]; then
        auth=()
        shift
    fi
    local path=${*: -1}
    curl -sS --max-time 30 --cacert "$FP_P_CA" "${auth[@]}" -o "$BODY" -w '%{http_code}' \
        -H "Accept: $OCI_MANIFEST" "${@:1:$#-1}" "$FP_P_URL$path"
}

# last_log FIELD: FIELD (a json_get path without the leading dot) of the
# proxy's last log line.
last_log() {
    tail -n 1 "$FP_P_LOG" | json_get ".$1"
}

# assert_log FIELD VALUE: the last log line has FIELD = VALUE.
assert_log() {
    local got
    got=$(last_log "$1")
    [[ $got == "$2" ]] || fail "log .$1 is '$got', want '$2'; log: $(tail -n 1 "$FP_P_LOG")"
}

@test "faultproxy: a clean proxy forwards method, path, query, Authorization and Range byte for byte" {
    run fp "$MANIFEST_PATH"
    assert_success
    assert_output 200
    [[ sha256:$(sha256sum <"$BODY" | cut -d' ' -f1) == "$MANIFEST_DIGEST" ]] ||
        fail "the manifest through the proxy is not the pushed one"
    assert_log bytes "$(stat -c %s "$BODY")"
    assert_log action ""
    assert_log rule -1

    # Range and the query reach the registry; the registry answers 206.
    run fp -H 'Range: bytes=100-199' -H 'X-Dragonfly-Registry: https://example.test' "$BLOB_PATH?ns=example.test"
    assert_output 206
    cmp "$BODY" <(tail -c +101 "$(fixture_blob tiny "$LAYER_DIGEST")" | head -c 100) ||
        fail "the ranged body is not bytes 100-199 of the layer"
    assert_log range "bytes=100-199"
    assert_log query "ns=example.test"
    assert_log 'values."X-Dragonfly-Registry"' "https://example.test"
    assert_log upstream 206
    last_log headers | grep -q '"Authorization"' || fail "Authorization not among the logged names: $(last_log headers)"
    grep -q 'ns=example.test' "$REGISTRY_LOG" || fail "the query did not reach the registry"
    assert_secret_absent -f "$FP_P_LOG"

    # HEAD: headers only; the challenge of an anonymous request is the
    # registry's own (realm untouched).
    run fp -I "$BLOB_PATH"
    assert_output 200
    grep -qi "^content-length: $LAYER_SIZE" "$BODY" || fail "HEAD: $(cat "$BODY")"
    assert_log method HEAD
    run fp --anon -D - "/v2/"
    assert_output --partial 'Www-Authenticate: Basic realm="pullhelper-tests"'
    assert_log status 401
}

@test "faultproxy: status 503 with Retry-After for the first 2 matching requests, then the registry's answer" {
    faultproxy_rules P '[{"match": {"path": "/manifests/"}, "count": 2, "status": 503, "retry_after": 7, "body": "busy"}]'
    local i before
    before=$(grep -c 'GET /v2/fixtures/tiny/manifests/latest' "$REGISTRY_LOG" || true)
    for i in 1 2; do
        run fp -D "$BATS_TEST_TMPDIR/headers" "$MANIFEST_PATH"
        assert_output 503
        grep -qi '^retry-after: 7' "$BATS_TEST_TMPDIR/headers" || fail "no Retry-After: $(cat "$BATS_TEST_TMPDIR/headers")"
        [[ $(<"$BODY") == busy ]] || fail "body: $(cat "$BODY")"
        assert_log action status
        assert_log upstream 0
    done
    run fp "/v2/"
    assert_output 200 # another path: not matched, not counted
    run fp "$MANIFEST_PATH"
    assert_output 200
    assert_log rule -1
    [[ $(faultproxy_count P /manifests/) == 3 ]] || fail "log: $(faultproxy_log P)"
    # Only the third manifest request reached the registry.
    registry_log_barrier >/dev/null
    [[ $(grep -c 'GET /v2/fixtures/tiny/manifests/latest' "$REGISTRY_LOG") == $((before + 1)) ]] ||
        fail "the registry saw $(($(grep -c 'GET /v2/fixtures/tiny/manifests/latest' "$REGISTRY_LOG") - before)) manifest requests, want 1"
}

@test "faultproxy: status with headers: a 401 with a bearer challenge, a 429, a redirect to itself" {
    faultproxy_rules P '[
      {"match": {"path": "^/v2/$"}, "status": 401, "headers": {"WWW-Authenticate": "Bearer realm=\"https://127.0.0.1:1/token\""}},
      {"match": {"path": "/manifests/"}, "status": 429, "retry_after": "Wed, 21 Oct 2026 07:28:00 GMT"},
      {"match": {"path": "/blobs/"}, "status": 307, "headers": {"Location": "/v2/fixtures/tiny/blobs/'"$LAYER_DIGEST"'"}}]'
    run fp -D - "/v2/"
    assert_output --partial 'Www-Authenticate: Bearer realm="https://127.0.0.1:1/token"'
    run fp -D - "$MANIFEST_PATH"
    assert_output --partial 'Retry-After: Wed, 21 Oct 2026 07:28:00 GMT'
    run fp -L --max-redirs 3 "$BLOB_PATH"
    assert_failure 47 # too many redirects
    [[ $(faultproxy_count P /blobs/) == 4 ]] || fail "log: $(faultproxy_log P)"
}

@test "faultproxy: reset_after: the headers and exactly N body bytes, then a connection reset" {
    faultproxy_rules P '[{"match": {"path": "/blobs/"}, "count": 1, "reset_after": 1000}]'
    run fp "$BLOB_PATH"
    assert_failure 56
    assert_output --partial 200
    [[ $(stat -c %s "$BODY") == 1000 ]] || fail "got $(stat -c %s "$BODY") bytes, want 1000"
    cmp "$BODY" <(head -c 1000 "$(fixture_blob tiny "$LAYER_DIGEST")")
    assert_log action reset_after
    assert_log bytes 1000
    # The count is spent: the next request gets the whole blob.
    run fp "$BLOB_PATH"
    assert_success
    cmp "$BODY" "$(fixture_blob tiny "$LAYER_DIGEST")"
    assert_log bytes "$LAYER_SIZE"
}

@test "faultproxy: close_after: a truncated body, the connection closed cleanly" {
    faultproxy_rules P '[{"match": {"path": "/blobs/"}, "close_after": 1500}]'
    run fp "$BLOB_PATH"
    assert_failure 18 # transfer closed with bytes remaining (not 56, a reset)
    [[ $(stat -c %s "$BODY") == 1500 ]] || fail "got $(stat -c %s "$BODY") bytes, want 1500"
    assert_log action close_after
    assert_log bytes 1500
}

@test "faultproxy: stall_after: N bytes, then the connection is held until the client gives up" {
    faultproxy_rules P '[{"match": {"path": "/blobs/"}, "stall_after": 700}]'
    run fp --max-time 2 "$BLOB_PATH"
    assert_failure 28 # curl's own timeout: the proxy neither finished nor closed
    [[ $(stat -c %s "$BODY") == 700 ]] || fail "got $(stat -c %s "$BODY") bytes, want 700"
    assert_log action stall_after
    assert_log bytes 700
    # The proxy still serves.
    faultproxy_rules P '[]'
    run fp "$MANIFEST_PATH"
    assert_output 200
}

@test "faultproxy: stall_after with --max-hold: the proxy ends the hold by closing the connection" {
    stop_faultproxy P
    start_faultproxy P "$REGISTRY_URL" --max-hold 1s
    faultproxy_rules P '[{"match": {"path": "/blobs/"}, "stall_after": 700}]'
    run fp --max-time 60 "$BLOB_PATH"
    assert_failure
    ((status != 28)) || fail "curl timed out: the proxy did not end the hold"
    [[ $(stat -c %s "$BODY") == 700 ]] || fail "got $(stat -c %s "$BODY") bytes, want 700"
}

@test "faultproxy: trickle: the whole body, in writes of rate/20 bytes" {
    # 4000 B/s: pieces of 200 bytes, about half a second for the layer.
    faultproxy_rules P '[{"match": {"path": "/blobs/"}, "trickle": 4000}]'
    run fp "$BLOB_PATH"
    assert_success
    cmp "$BODY" "$(fixture_blob tiny "$LAYER_DIGEST")"
    assert_log action trickle
    assert_log bytes "$LAYER_SIZE"
    assert_log writes $(((LAYER_SIZE + 199) / 200))
}

@test "faultproxy: a Range passes through (206); ignore_range makes the registry answer 200 with the whole blob" {
    run fp -H 'Range: bytes=10-' "$BLOB_PATH"
    assert_output 206
    [[ $(stat -c %s "$BODY") == $((LAYER_SIZE - 10)) ]] || fail "206 body: $(stat -c %s "$BODY") bytes"
    faultproxy_rules P '[{"match": {"path": "/blobs/", "header": ["Range"]}, "ignore_range": true}]'
    run fp -H 'Range: bytes=10-' "$BLOB_PATH"
    assert_output 200
    cmp "$BODY" "$(fixture_blob tiny "$LAYER_DIGEST")"
    assert_log action ignore_range
    assert_log range "bytes=10-" # what the client asked for
    assert_log upstream 200
}

@test "faultproxy: flip_byte and content_length: a 200 whose body is corrupted or short" {
    faultproxy_rules P '[{"match": {"path": "/blobs/"}, "count": 1, "flip_byte": 1234},
                         {"match": {"path": "/blobs/"}, "count": 1, "content_length": 100}]'
    run fp "$BLOB_PATH"
    assert_success
    assert_output 200
    run cmp -l "$BODY" "$(fixture_blob tiny "$LAYER_DIGEST")"
    [[ ${#lines[@]} == 1 && ${lines[0]} =~ ^\ *1235\  ]] || fail "not exactly byte 1234 differs: $output"
    run fp -D "$BATS_TEST_TMPDIR/headers" "$BLOB_PATH"
    assert_success
    grep -qi '^content-length: 100' "$BATS_TEST_TMPDIR/headers" || fail "headers: $(cat "$BATS_TEST_TMPDIR/headers")"
    cmp "$BODY" <(head -c 100 "$(fixture_blob tiny "$LAYER_DIGEST")")
}

@test "faultproxy: require_header: 403 without the header or with another value, the registry's answer with it" {
    faultproxy_rules P '[{"require_header": "X-Dragonfly-Registry=https://registry.test"}]'
    run fp "$MANIFEST_PATH"
    assert_output 403
    run fp -H 'X-Dragonfly-Registry: https://other.test' "$MANIFEST_PATH"
    assert_output 403
    assert_log 'values."X-Dragonfly-Registry"' "https://other.test"
    run fp -H 'X-Dragonfly-Registry: https://registry.test' "$MANIFEST_PATH"
    assert_output 200
    assert_log action require_header
    assert_log upstream 200
    faultproxy_rules P '[{"require_header": "X-Mirror-Token", "status": 401}]'
    run fp "$MANIFEST_PATH"
    assert_output 401
}

@test "faultproxy: drop: the connection closes without an answer" {
    faultproxy_rules P '[{"match": {"path": "/manifests/"}, "drop": true}]'
    run fp "$MANIFEST_PATH"
    assert_failure 52 # empty reply from server
    assert_log action drop
    assert_log status 0
}

@test "faultproxy: method, query and header presence select requests; replacing the rules restarts the counts" {
    local rules='[{"match": {"method": "GET", "path": "/blobs/", "query": ["ns"], "header": ["!Range"]}, "count": 1, "status": 500}]'
    faultproxy_rules P "$rules"
    run fp "$BLOB_PATH"
    assert_output 200 # no ns
    run fp -I "$BLOB_PATH?ns=r.test"
    assert_output 200 # HEAD
    run fp -H 'Range: bytes=0-9' "$BLOB_PATH?ns=r.test"
    assert_output 206 # has Range
    run fp "$BLOB_PATH?ns=r.test"
    assert_output 500
    assert_log rule 0
    run fp "$BLOB_PATH?ns=r.test"
    assert_output 200 # count spent
    faultproxy_rules P "$rules"
    run fp "$BLOB_PATH?ns=r.test"
    assert_output 500
}

@test "faultproxy: a bad rule is refused by faultproxy_rules; a bad file behind its back answers 500 naming it" {
    run faultproxy_rules P '[{"match": {"path": "/blobs/"}, "reset_after": 1, "drop": true}]'
    assert_failure
    assert_output --partial "exactly one action"
    echo '[{"stauts": 500}]' >"$FP_P_RULES.new"
    mv "$FP_P_RULES.new" "$FP_P_RULES"
    run fp "$MANIFEST_PATH"
    assert_output 500
    grep -q 'rules file' "$BODY" || fail "body: $(cat "$BODY")"
    [[ $(last_log error) == *stauts* ]] || fail "log error: $(last_log error)"
}

@test "faultproxy: --plain serves http in front of the https registry; a registry that is down is a 502" {
    start_faultproxy PLAIN "$REGISTRY_URL" --plain
    run curl -sS --max-time 30 -K "$REGISTRY_DIR/curlrc" -o "$BODY" -w '%{http_code}' -H "Accept: $OCI_MANIFEST" \
        "$FP_PLAIN_URL$MANIFEST_PATH"
    assert_output 200
    [[ $FP_PLAIN_URL == http://127.0.0.1:* ]] || fail "FP_PLAIN_URL=$FP_PLAIN_URL"

    local port
    port=$(_ph_free_port)
    start_faultproxy DOWN "https://127.0.0.1:$port"
    run curl -sS --max-time 30 --cacert "$FP_DOWN_CA" -o "$BODY" -w '%{http_code}' "$FP_DOWN_URL/v2/"
    assert_output 502
    grep -q "127.0.0.1:$port" "$BODY" || fail "body: $(cat "$BODY")"
}

@test "faultproxy: SIGTERM stops it at once while it holds a stalled connection" {
    faultproxy_rules P '[{"match": {"path": "/blobs/"}, "stall_after": 10}]'
    curl -sS --max-time 60 --cacert "$FP_P_CA" -K "$REGISTRY_DIR/curlrc" -o "$BODY" \
        "$FP_P_URL$BLOB_PATH" 2>"$BATS_TEST_TMPDIR/curl.err" 3>&- &
    local curl_pid=$!
    wait_for_file_match "$FP_P_LOG" '"action":"stall_after"' 30
    stop_faultproxy P 2>"$BATS_TEST_TMPDIR/stop.err"
    local rc=0
    wait "$curl_pid" || rc=$?
    [[ ! -s $BATS_TEST_TMPDIR/stop.err ]] || fail "stop: $(cat "$BATS_TEST_TMPDIR/stop.err")"
    grep -q '^faultproxy: stopped$' "$FP_P_DIR/out" || fail "no clean stop: $(cat "$FP_P_DIR/out")"
    ((rc != 0 && rc != 28)) || fail "curl exit $rc: the held connection was not closed by the stop"
}

@test "faultproxy: pullhelper pulls through a clean proxy standing in for the registry; the log counts its blobs" {
    local out=$BATS_TEST_TMPDIR/out
    mkdir -p "$out"
    run_pullhelper pull --authfile "$FP_P_AUTHFILE" --cert-dir "$FP_P_CERT_DIR" \
        "$FP_P_HOST/fixtures/tiny:latest" "oci:$out/dest:latest"
    assert_json_result
    [[ -f $out/dest/blobs/sha256/${LAYER_DIGEST#sha256:} ]] || fail "the layer is not in DEST"
    local config config_size
    config=$(json_get '.config.digest' <"$(fixture_blob tiny "$MANIFEST_DIGEST")")
    config_size=$(stat -c %s "$(fixture_blob tiny "$config")")
    [[ $(faultproxy_count P '/blobs/sha256:' GET) == 2 ]] || fail "blob GETs: $(faultproxy_log P)"
    [[ $(faultproxy_bytes P '/blobs/sha256:' GET) == $((LAYER_SIZE + config_size)) ]] ||
        fail "blob bytes $(faultproxy_bytes P '/blobs/sha256:' GET), want $((LAYER_SIZE + config_size))"
    [[ $(faultproxy_count P '/manifests/') -ge 1 ]] || fail "no manifest request: $(faultproxy_log P)"
    assert_secret_absent -f "$FP_P_LOG"
}
