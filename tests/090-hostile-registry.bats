#!/usr/bin/env bats
#
# A hostile registry gets only documented exit codes and bounded resources
# (issue 10 items 13, 16, 18). The registry is tests/hostilereg, a fake that
# serves one image and misbehaves as its -mode says, over https with a CA it
# generates (trusted with --cert-dir). It listens on 127.0.0.1 (and
# 127.0.0.2 as "another host") only.

load helpers

setup_file() {
    HOSTILEREG="$BATS_FILE_TMPDIR/hostilereg"
    local out
    out=$(cd "$PH_ROOT" && CGO_ENABLED=0 GOFLAGS= "$(_ph_go)" build -o "$HOSTILEREG" ./tests/hostilereg 2>&1) ||
        fail "go build ./tests/hostilereg failed: $out"
    export HOSTILEREG
}

teardown() {
    stop_hostile
}

# start_hostile MODE: start hostilereg in MODE. Sets HOSTILE_DIR (its CA,
# log and port files), HOSTILE_HOST (127.0.0.1:PORT), HOSTILE_LOG,
# HOSTILE_SIDE (port of the second listener, if the mode has one) and
# HOSTILE_AUTHFILE (a dummy credential for HOSTILE_HOST).
start_hostile() {
    local mode=${1:?start_hostile: missing MODE}
    HOSTILE_DIR=$(mktemp -d "$BATS_TEST_TMPDIR/hostile.XXXXXX")
    HOSTILE_LOG="$HOSTILE_DIR/log"
    : >"$HOSTILE_LOG"
    "$HOSTILEREG" -mode "$mode" -port-file "$HOSTILE_DIR/port" -tls-dir "$HOSTILE_DIR" \
        -log "$HOSTILE_LOG" -lifetime 5m </dev/null >"$HOSTILE_DIR/out" 2>&1 3>&- &
    HOSTILE_PID=$!
    local deadline=$((SECONDS + 10))
    until [[ -s $HOSTILE_DIR/port ]]; do
        _ph_pid_alive "$HOSTILE_PID" || fail "hostilereg exited during startup: $(cat "$HOSTILE_DIR/out")"
        ((SECONDS < deadline)) || fail "hostilereg did not write its port within 10s"
        sleep 0.05
    done
    HOSTILE_HOST="127.0.0.1:$(<"$HOSTILE_DIR/port")"
    HOSTILE_SIDE=""
    [[ ! -s $HOSTILE_DIR/port.2 ]] || HOSTILE_SIDE=$(<"$HOSTILE_DIR/port.2")
    HOSTILE_AUTHFILE="$HOSTILE_DIR/auth.json"
    printf '{"auths":{"%s":{"auth":"%s"}}}\n' "$HOSTILE_HOST" "$(printf 'hostile:not-a-real-secret' | base64)" >"$HOSTILE_AUTHFILE"
    chmod 600 "$HOSTILE_AUTHFILE"
}

stop_hostile() {
    if [[ -n ${HOSTILE_PID:-} ]]; then
        kill "$HOSTILE_PID" 2>/dev/null || true
        wait "$HOSTILE_PID" 2>/dev/null || true
        unset HOSTILE_PID
    fi
}

# pull_hostile RC [ARGS...]: pull hostile/img:latest from the running
# hostilereg into oci:$OUT/dest, expecting exit code RC.
pull_hostile() {
    local rc=$1
    shift
    OUT="$BATS_TEST_TMPDIR/out"
    mkdir -p "$OUT"
    run_pullhelper "$rc" pull --authfile "$HOSTILE_AUTHFILE" --cert-dir "$HOSTILE_DIR" "$@" \
        "$HOSTILE_HOST/hostile/img:latest" "oci:$OUT/dest"
}

# assert_refused CODE TEXT: a JSON error with CODE whose message has TEXT;
# nothing committed and no staging left.
assert_refused() {
    assert_json_error "$1"
    [[ $ph_error_message == *"$2"* ]] || fail "message does not contain '$2': $ph_error_message"
    [[ ! -e $OUT/dest ]] || fail "DEST was created: $(ls -la "$OUT/dest")"
    assert_no_staging "$OUT"
}

@test "hostile registry harness: a well-behaved image pulls through the guarded copy over https" {
    start_hostile ok
    pull_hostile 0
    assert_json_result
    [[ $(json_get .layers <<<"$output") == 1 ]] || fail "layers: $output"
    [[ -f $OUT/dest/index.json ]] || fail "no index.json"
}

@test "exit 8: a layer declared as 1024 bytes and streamed without end is cut off at its declared size" {
    start_hostile endless-layer
    pull_hostile 8
    assert_refused verification "is larger than its declared size 1024"
    # The server logs how much it managed to send once its write fails
    # (the client hung up): socket buffers, not a disk's worth (the server
    # would send 1 GiB).
    local sent="" deadline=$((SECONDS + 30))
    until sent=$(awk '/^sent /{print $3}' "$HOSTILE_LOG") && [[ -n $sent ]]; do
        ((SECONDS < deadline)) || break
        sleep 0.1
    done
    [[ -n $sent ]] || fail "the layer was never requested: $(cat "$HOSTILE_LOG")"
    ((sent < 16 * 1024 * 1024)) || fail "the registry sent $sent bytes for a 1024-byte layer"
}

@test "exit 8: an image declaring more than the maximum image size (default 64 GiB) is refused before any blob is fetched" {
    start_hostile huge-declared
    pull_hostile 8
    assert_refused verification "maximum image size"
    if grep -q '/blobs/' "$HOSTILE_LOG"; then
        fail "a blob was fetched: $(cat "$HOSTILE_LOG")"
    fi
}

@test "exit 8: a manifest over 4 MiB" {
    start_hostile big-manifest
    pull_hostile 8
    assert_refused verification "more than the maximum of 4194304"
}

@test "exit 8: an index whose entry is another index" {
    start_hostile nested-index
    pull_hostile 8
    assert_refused verification "nested indexes are not supported"
}

@test "exit 8: a descriptor with an invalid digest" {
    start_hostile bad-digest
    pull_hostile 8
    assert_refused verification 'invalid digest "sha256:not-a-digest"'
}

@test "exit 8: an image whose descriptors use sha384" {
    start_hostile sha384
    pull_hostile 8
    assert_refused verification "only sha256 is supported"
}

@test "exit 3: a 401 whose body is the bare code UNAUTHORIZED, or the error JSON without a message" {
    start_hostile unauthorized-bare
    pull_hostile 3
    assert_refused unauthorized "refused"
    stop_hostile
    start_hostile unauthorized-json
    pull_hostile 3
    assert_refused unauthorized "refused"
}

@test "exit 5: a 404 whose body is the bare code MANIFEST_UNKNOWN, or NAME_UNKNOWN without a message" {
    start_hostile manifest-unknown-bare
    pull_hostile 5
    assert_refused not_found "not found on $HOSTILE_HOST"
    stop_hostile
    start_hostile name-unknown-json
    pull_hostile 5
    assert_refused not_found "not found on $HOSTILE_HOST"
}

@test "exit 6: a stalled manifest is named with its host, not 'no data received'" {
    start_hostile slow-manifest
    pull_hostile 6 --stall-timeout 2s --retries 0
    assert_refused network "while fetching the manifest from $HOSTILE_HOST"
}

@test "exit 6: a stalled config is named by digest" {
    start_hostile slow-config
    pull_hostile 6 --stall-timeout 2s --retries 0
    assert_refused network "while fetching the config sha256:"
}

@test "exit 4: basic credentials never go to a plain-http token realm on another host of an https registry" {
    start_hostile http-realm
    [[ -n $HOSTILE_SIDE ]] || fail "hostilereg wrote no realm port"
    pull_hostile 4
    assert_refused tls "plain-http token realm http://127.0.0.2:$HOSTILE_SIDE/token"
    if grep -q '^side ' "$HOSTILE_LOG"; then
        fail "the realm was contacted: $(cat "$HOSTILE_LOG")"
    fi
}

@test "exit 4: a redirect to the registry's IP on another port is not followed with the Authorization header" {
    start_hostile redirect-port
    [[ -n $HOSTILE_SIDE ]] || fail "hostilereg wrote no second port"
    pull_hostile 4
    assert_refused tls "refusing a request to https://127.0.0.1:$HOSTILE_SIDE"
    grep -q '^req GET /v2/hostile/img/manifests/latest auth=yes' "$HOSTILE_LOG" ||
        fail "the registry never saw the credential (the redirect was not exercised): $(cat "$HOSTILE_LOG")"
    if grep -q '^side ' "$HOSTILE_LOG"; then
        fail "the other port was contacted: $(cat "$HOSTILE_LOG")"
    fi
}

@test "exit 3: a blob redirect target's Bearer challenge gets no credential of the registry (review finding)" {
    start_hostile cdn-challenge
    [[ -n $HOSTILE_SIDE ]] || fail "hostilereg wrote no CDN port"
    pull_hostile 3
    assert_refused unauthorized "401"
    grep -q '^side GET /cdn/' "$HOSTILE_LOG" ||
        fail "the CDN was never asked (the redirect was not exercised): $(cat "$HOSTILE_LOG")"
    if grep -q '^side .* /token' "$HOSTILE_LOG"; then
        fail "the realm the CDN named was contacted: $(cat "$HOSTILE_LOG")"
    fi
}
