#!/usr/bin/env bats
#
# Resume across restarts: the partial-blob cache beside DEST
# (.pullhelper-partial-NAME). kill -9 of the parent or of the child while a
# layer is mid-flight leaves DEST as it was and a prefix of the layer in the
# cache; the rerun asks the registry only for the rest (a Range request) and
# the proxy's byte counts prove it. The kill lands at a known byte: the fault
# proxy stalls the chosen layer after N bytes (stall_after), and the test
# waits until the cache holds exactly those N bytes. The kept bytes are never
# trusted: a corrupted or oversized kept file is discarded and the pull still
# succeeds. Network: 127.0.0.1 only.

load helpers
load faultproxy

setup_file() {
    [[ $(id -u) -eq 0 ]] || return 0
    build_faultproxy
    start_registry
    push_fixture big
    push_fixture tiny
    local m
    m=$(fixture_blob big "$(fixture_digest big)")
    LAYERS=$("$PH_PYTHON" -c 'import json,sys; print(" ".join(l["digest"] for l in json.load(open(sys.argv[1]))["layers"]))' "$m")
    SIZES=$("$PH_PYTHON" -c 'import json,sys; print(" ".join(str(l["size"]) for l in json.load(open(sys.argv[1]))["layers"]))' "$m")
    [[ $(wc -w <<<"$LAYERS") == 4 ]] || fail "the big fixture has layers '$LAYERS', want 4"
    export LAYERS SIZES
    printf '%-6s %-5s %-5s %9s %9s | %s\n' trial kill layer at_byte size "per layer: kept at kill -> fetched on rerun (= size - kept)" >&3
}

teardown_file() {
    stop_all_faultproxies
    stop_registry
}

setup() {
    skip_if_not_root "cgroups, mount namespaces and the pull uid need root"
    ph_test_setup
    start_faultproxy P "$REGISTRY_URL" --log-header Range
    PH_OPTS=(--authfile "$FP_P_AUTHFILE" --cert-dir "$FP_P_CERT_DIR")
    IMAGE=$FP_P_HOST/fixtures/big:latest
    read -r -a LAYER <<<"$LAYERS"
    read -r -a SIZE <<<"$SIZES"
    ((${#LAYER[@]} == 4 && ${#SIZE[@]} == 4)) || fail "no layers of big: '$LAYERS' '$SIZES'"
    # The old state of DEST: tiny, committed.
    run_pullhelper pull "${PH_OPTS[@]}" "$FP_P_HOST/fixtures/tiny:latest" "oci:$OUT/dest:old"
    OLD_SUM=$(dest_sum)
    PARTIAL=$OUT/.pullhelper-partial-dest
}

teardown() {
    _kill_bg
    stop_all_faultproxies
}

# dest_sum: one checksum over every file of DEST (names and bytes).
dest_sum() {
    (cd "$OUT/dest" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)
}

_kill_bg() {
    [[ -n ${BG_PID:-} ]] || return 0
    if _ph_pid_alive "$BG_PID" && tr '\0' ' ' <"/proc/$BG_PID/cmdline" 2>/dev/null | grep -q pullhelper; then
        kill -KILL "$BG_PID" 2>/dev/null || true
    fi
    wait "$BG_PID" 2>/dev/null || true
    BG_PID=
}

# kept DIGEST: bytes of DIGEST in the partial-blob cache (0 when none).
kept() {
    local f=$PARTIAL/sha256-${1#sha256:}.partial
    if [[ -f $f ]]; then stat -c %s "$f"; else echo 0; fi
}

# wait_until SECONDS WHAT CMD...: poll CMD until it succeeds, bounded.
wait_until() {
    local deadline=$((SECONDS + $1)) what=$2
    shift 2
    until "$@"; do
        if ((SECONDS >= deadline)); then
            fail "waited ${deadline}s for $what; stderr of the pull: $(cat "$OUT/bg.err" 2>/dev/null)"
            return 1
        fi
        sleep 0.05
    done
}

_kept_is() { [[ $(kept "$1") == "$2" ]]; }
_stalled() { grep -q "\"action\":\"stall_after\"" "$FP_P_LOG"; }
_gone() { ! _ph_pid_alive "$1"; }

# log_lines: lines in the proxy's log so far.
log_lines() { wc -l <"$FP_P_LOG"; }

# rerun_bytes FROM DIGEST: body bytes the proxy sent for DIGEST after log
# line FROM; rerun_ranges FROM DIGEST: their Range headers.
rerun_bytes() {
    tail -n +"$(($1 + 1))" "$FP_P_LOG" | "$PH_PYTHON" -c '
import json, sys
d = sys.argv[1]
print(sum(e["bytes"] for e in map(json.loads, sys.stdin) if e["method"] == "GET" and e["path"].endswith("/blobs/" + d)))' "$2"
}
rerun_ranges() {
    tail -n +"$(($1 + 1))" "$FP_P_LOG" | "$PH_PYTHON" -c '
import json, sys
d = sys.argv[1]
print(" ".join((e.get("values") or {}).get("Range", "-") for e in map(json.loads, sys.stdin) if e["method"] == "GET" and e["path"].endswith("/blobs/" + d)))' "$2"
}

# kill_trial NAME parent|child LAYER_INDEX AT_BYTE: pull big into DEST (one
# layer at a time) with layer LAYER_INDEX stalling after AT_BYTE bytes; once
# the cache holds exactly those bytes, kill -9 the parent or the child. Then
# DEST must be the old state, and a clean rerun must fetch each layer's
# size less what was kept, resuming with a Range request.
kill_trial() {
    local name=$1 who=$2 li=$3 at=$4
    local d=${LAYER[$li]}
    faultproxy_rules P "[{\"match\": {\"method\": \"GET\", \"path\": \"/blobs/$d\"}, \"count\": 1, \"stall_after\": $at}]"
    "$PULLHELPER" pull "${PH_OPTS[@]}" --parallel-layers 1 "$IMAGE" "oci:$OUT/dest:big" >"$OUT/bg.out" 2>"$OUT/bg.err" &
    BG_PID=$!
    wait_until 120 "the proxy to stall layer $li after $at bytes" _stalled || return
    wait_until 60 "the cache to hold $at bytes of layer $li (has $(kept "$d"))" _kept_is "$d" "$at" || return
    local child
    child=$(pgrep -P "$BG_PID" -f '^pullhelper-child') || { fail "no pull child under $BG_PID"; return; }
    if [[ $who == parent ]]; then
        kill -KILL "$BG_PID"
    else
        kill -KILL "$child"
    fi
    wait_until 30 "the parent to exit" _gone "$BG_PID" || return
    local rc=0
    wait "$BG_PID" || rc=$?
    BG_PID=
    wait_until 30 "the child to die" _gone "$child" || return
    ((rc != 0)) || fail "the killed pull exited 0"
    [[ $who != parent || $rc == 137 ]] || fail "the parent was killed but exited $rc"
    [[ $(dest_sum) == "$OLD_SUM" ]] || fail "DEST changed after kill -9 of the $who"
    [[ -d $PARTIAL ]] || fail "no partial-blob cache after the kill"
    [[ $(stat -c %u "$PARTIAL") == 0 || $who == parent ]] || fail "the parent did not take the cache back after the child died: owner $(stat -c %u "$PARTIAL")"

    local -a k=()
    local i
    for i in "${!LAYER[@]}"; do k[i]=$(kept "${LAYER[$i]}"); done
    [[ ${k[$li]} == "$at" ]] || fail "layer $li: ${k[$li]} bytes kept, want $at"

    faultproxy_rules P '[]'
    local from
    from=$(log_lines)
    run_pullhelper pull "${PH_OPTS[@]}" "$IMAGE" "oci:$OUT/dest:big"
    assert_json_result
    [[ ! -e $PARTIAL ]] || fail "the partial-blob cache is left after the commit: $(ls -la "$PARTIAL")"
    assert_no_staging "$OUT"
    [[ $(json_get '.manifests[1].annotations."org.opencontainers.image.ref.name"' <"$OUT/dest/index.json") == big ]] || fail "DEST lacks old or big: $(cat "$OUT/dest/index.json")"

    local row="" got ranges
    for i in "${!LAYER[@]}"; do
        got=$(rerun_bytes "$from" "${LAYER[$i]}")
        ranges=$(rerun_ranges "$from" "${LAYER[$i]}")
        row+=$(printf ' L%d %s->%s' "$i" "${k[$i]}" "$got")
        [[ $got == $((SIZE[i] - k[i])) ]] ||
            fail "layer $i: the rerun fetched $got bytes, want ${SIZE[$i]} - ${k[$i]} kept = $((SIZE[i] - k[i])) (ranges: $ranges)"
        if ((k[i] > 0)); then
            [[ $ranges == "bytes=${k[$i]}-" ]] || fail "layer $i: the rerun asked with Range '$ranges', want 'bytes=${k[$i]}-'"
        else
            [[ $ranges == - ]] || fail "layer $i: nothing was kept but the rerun asked '$ranges'"
        fi
    done
    printf '%-6s %-5s L%-4s %9s %9s |%s\n' "$name" "$who" "$li" "$at" "${SIZE[$li]}" "$row" >&3
}

# pct LAYER_INDEX PERCENT: that share of the layer's size, in bytes.
pct() { echo $((SIZE[$1] * $2 / 100)); }

@test "resume: kill -9 of the parent at 10% of layer 0; the rerun fetches only the missing bytes" {
    kill_trial k1 parent 0 "$(pct 0 10)"
}

@test "resume: kill -9 of the parent at 60% of layer 1" {
    kill_trial k2 parent 1 "$(pct 1 60)"
}

@test "resume: kill -9 of the child at 60% of layer 2; the parent takes the cache back" {
    kill_trial k3 child 2 "$(pct 2 60)"
}

@test "resume: kill -9 of the child at 10% of layer 3" {
    kill_trial k4 child 3 "$(pct 3 10)"
}

@test "resume: kill -9 of the parent at 95% of layer 3" {
    kill_trial k5 parent 3 "$(pct 3 95)"
}

@test "resume: kill -9 of the parent between layers (layer 1 answered, no byte of it yet)" {
    kill_trial k6 parent 1 0
}

@test "resume: kill -9 of the child at 1 byte of layer 0" {
    kill_trial k7 child 0 1
}

# keep_partial LAYER_INDEX BYTES: a kill trial's first half by hand: the
# cache holds BYTES of the layer, as a pull would have left it.
plant() {
    mkdir -p "$PARTIAL"
    chmod 0700 "$PARTIAL"
    head -c "$2" "$(fixture_blob big "${LAYER[$1]}")" >"$PARTIAL/sha256-${LAYER[$1]#sha256:}.partial"
}

@test "resume: a kept prefix with a flipped byte is never trusted: discarded, the blob fetched again, the pull succeeds" {
    local n
    n=$(pct 1 50)
    plant 1 "$n"
    printf '\xff' | dd of="$PARTIAL/sha256-${LAYER[1]#sha256:}.partial" bs=1 seek=1000 conv=notrunc status=none
    local from
    from=$(log_lines)
    run_pullhelper pull "${PH_OPTS[@]}" "$IMAGE" "oci:$OUT/dest:big"
    assert_json_result
    [[ $stderr == *"does not match its digest"* ]] || fail "no word of the discarded prefix: $stderr"
    [[ ! -e $PARTIAL ]] || fail "the cache is left after the commit"
    local ranges
    ranges=$(rerun_ranges "$from" "${LAYER[1]}")
    [[ $ranges == "bytes=$n- -"* ]] || fail "layer 1 was asked '$ranges'; want a resume at $n, then the whole blob"
    (cd "$OUT/dest/blobs/sha256" && sha256sum -c --quiet <<<"${LAYER[1]#sha256:}  ${LAYER[1]#sha256:}") ||
        fail "DEST's layer 1 does not match its digest"
}

@test "resume: a kept file longer than the blob is discarded; one holding the whole blob is served without a request" {
    plant 0 $((SIZE[0] + 10))
    head -c 10 /dev/zero >>"$PARTIAL/sha256-${LAYER[0]#sha256:}.partial"
    plant 2 "${SIZE[2]}"
    local from
    from=$(log_lines)
    run_pullhelper pull "${PH_OPTS[@]}" "$IMAGE" "oci:$OUT/dest:big"
    assert_json_result
    [[ $(rerun_bytes "$from" "${LAYER[0]}") == "${SIZE[0]}" ]] || fail "layer 0 not fetched in full after the oversized kept file"
    [[ $(rerun_ranges "$from" "${LAYER[2]}") == "" ]] || fail "layer 2 was requested though the cache held all of it"
    [[ ! -e $PARTIAL ]] || fail "the cache is left after the commit"
}

@test "resume: a kept file older than the age limit is removed at the start of a pull and not used" {
    plant 1 "$(pct 1 50)"
    touch -d '8 days ago' "$PARTIAL/sha256-${LAYER[1]#sha256:}.partial"
    local from
    from=$(log_lines)
    run_pullhelper pull "${PH_OPTS[@]}" "$IMAGE" "oci:$OUT/dest:big"
    assert_json_result
    [[ $stderr == *"removed a stale partial blob"* ]] || fail "no word of the stale partial blob: $stderr"
    [[ $(rerun_ranges "$from" "${LAYER[1]}") == - ]] || fail "the stale kept bytes were used"
}

@test "resume: stray entries in the cache (a symlink, a directory, a hard link) are removed, never followed" {
    plant 1 "$(pct 1 50)"
    ln -s /etc/shadow "$PARTIAL/sha256-${LAYER[0]#sha256:}.partial"
    mkdir "$PARTIAL/sub"
    echo x >"$OUT/outside"
    ln "$OUT/outside" "$PARTIAL/sha256-${LAYER[2]#sha256:}.partial"
    local shadow
    shadow=$(stat -c '%u %a' /etc/shadow)
    run_pullhelper pull "${PH_OPTS[@]}" "$IMAGE" "oci:$OUT/dest:big"
    assert_json_result
    [[ $(stat -c '%u %a' /etc/shadow) == "$shadow" ]] || fail "/etc/shadow changed"
    [[ $(stat -c '%u %h' "$OUT/outside") == "0 1" ]] || fail "the hard-linked file outside was touched: $(stat -c '%u %h' "$OUT/outside")"
}

@test "resume: pullhelper gc DEST removes the cache a kill left and reports it as partial" {
    plant 1 "$(pct 1 50)"
    run_pullhelper gc "oci:$OUT/dest"
    assert_json_result
    assert_equal "$(json_get '.partial' <<<"$output")" "[\"$PARTIAL\"]"
    [[ ! -e $PARTIAL ]] || fail "gc left $PARTIAL"
    run_pullhelper gc "oci:$OUT/dest"
    assert_equal "$(json_get '.partial' <<<"$output")" "[]"
}
