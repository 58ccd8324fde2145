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
    CONFIG=$("$PH_PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["config"]["digest"])' "$m")
    export LAYERS SIZES CONFIG
    printf 'sizes: %s\n' "$SIZES" >&3
    printf '%-6s %-6s %-14s | %s\n' trial kill point "per layer: bytes kept at the kill (c cache, s staged, d in DEST) -> fetched on the rerun (= size - kept)" >&3
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
    (cd "$OUT/dest" && find . -type f | sort >"$OUT/old.files" && find . -type f -print0 | sort -z | xargs -0 sha256sum >"$OUT/old.sums")
    PARTIAL=$OUT/.pullhelper-partial-dest
    PBLOBS=$PARTIAL/blobs
}

teardown() {
    _kill_bg
    _stop_holder
    if [[ -n ${VT:-} && -d $VT ]]; then rm -rf "$VT"; fi
    stop_all_faultproxies
    if mountpoint -q "$OUT/mp" 2>/dev/null; then umount "$OUT/mp" || umount -l "$OUT/mp"; fi
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
    local f=$PBLOBS/sha256-${1#sha256:}.partial
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

# staged DIGEST: bytes of DIGEST that a pull finished in a staging area
# beside DEST (0 when none): containers/image renames a blob there only
# once its stream is complete.
staged() {
    local f n=0
    for f in "$OUT"/.pullhelper-staging-dest-*/work/image/blobs/sha256/"${1#sha256:}"; do
        [[ -f $f ]] && n=$(stat -c %s "$f")
    done
    echo "$n"
}

# in_dest DIGEST: 1 when DEST has the blob and its old state did not.
in_dest() {
    local rel=./blobs/sha256/${1#sha256:}
    [[ -f $OUT/dest/$rel ]] && ! grep -qxF "$rel" "$OUT/old.files" && echo 1 || echo 0
}

# dest_old_intact: every file of DEST's old state is unchanged (index.json
# too: the old image is what DEST names), and whatever else DEST holds is a
# blob whose bytes match its name (a commit moves blobs in before it
# replaces index.json).
dest_old_intact() {
    (cd "$OUT/dest" && sha256sum -c --quiet "$OUT/old.sums") || return 1
    local f
    while read -r f; do
        grep -qxF "$f" "$OUT/old.files" && continue
        [[ $f == ./blobs/sha256/* ]] || return 1
        [[ $(sha256sum <"$OUT/dest/$f" | cut -d' ' -f1) == "${f##*/}" ]] || return 1
    done < <(cd "$OUT/dest" && find . -type f | sort)
}

# _all_copied: every layer is whole in staging or, handed over by the copy
# (written once, into the cache; the parent moves it into staging), whole
# in the cache.
_all_copied() {
    local i
    for i in "${!LAYER[@]}"; do
        [[ $(staged "${LAYER[$i]}") == "${SIZE[$i]}" || $(kept "${LAYER[$i]}") == "${SIZE[$i]}" ]] || return 1
    done
}
_child_of() { pgrep -P "$1" -f '^pullhelper-child'; }
# _holds_file PID FILE: PID, once it runs pullhelper, has FILE open. (Before
# its exec, the forked shell still has the test's own descriptor of FILE,
# which the command's redirection closes: seen then, it is not the parent's.)
_holds_file() {
    [[ $(readlink "/proc/$1/exe" 2>/dev/null) == "$(readlink -f "$PULLHELPER")" ]] &&
        ls -l "/proc/$1/fd" 2>/dev/null | grep -qF -- "$2"
}
_said() { grep -qF -- "$1" "$OUT/bg.err"; }

# kill_trial NAME parent|child POINT [ARGS]: pull big into DEST (one layer
# at a time), kill -9 the parent or the child at POINT, then check DEST is
# its old state, and that a clean rerun fetches each layer's size less what
# was kept (a prefix in the cache: a Range request from its end; a whole
# blob, in the cache, in staging or already in DEST: no request at all).
# POINTs, each reached deterministically (the test waits for it, never for
# a time):
#   layer I AT  the proxy stalls layer I after AT bytes (the layers before
#               it complete); the kill once the cache holds exactly AT
#   copied      the test build holds the child after the copy (every layer
#               whole in staging or, handed over, in the cache; no result
#               sent; reexec/hostile_resume.go)
#   lock        the test holds DEST's commit lock: the parent has verified
#               the staged image and waits for the lock
#   commit N    the test build holds the commit after N blobs were renamed
#               into DEST, index.json not yet replaced (dest/hook_hostile.go)
kill_trial() {
    local name=$1 who=$2 point=$3 li=-1 at=0 n=0 lockfd=
    local -a bin=("$PULLHELPER") want=()
    local i
    case $point in
        layer)
            li=$4 at=$5
            faultproxy_rules P "[{\"match\": {\"method\": \"GET\", \"path\": \"/blobs/${LAYER[$li]}\"}, \"count\": 1, \"stall_after\": $at}]"
            for i in "${!LAYER[@]}"; do
                if ((i < li)); then want[i]=${SIZE[$i]}; elif ((i == li)); then want[i]=$at; else want[i]=0; fi
            done
            ;;
        copied)
            [[ -x $PULLHELPER_HOSTILE_BIN ]] || { fail "hostile build missing: $PULLHELPER_HOSTILE_BIN (make build-hostile)"; return; }
            bin=(env PULLHELPER_HOSTILE=after-copy:hold "$PULLHELPER_HOSTILE_BIN")
            want=("${SIZE[@]}")
            ;;
        lock)
            local lockfile
            lockfile=/run/pullhelper/locks/$(stat -c '%d-%i' "$OUT/dest").lock
            install -d -m 0700 /run/pullhelper/locks
            exec {lockfd}>>"$lockfile"
            flock -x "$lockfd"
            want=("${SIZE[@]}")
            ;;
        commit)
            n=$4
            [[ -x $PULLHELPER_HOSTILE_BIN ]] || { fail "hostile build missing: $PULLHELPER_HOSTILE_BIN (make build-hostile)"; return; }
            bin=(env PULLHELPER_HOSTILE_COMMIT="hold-after-blobs:$n" "$PULLHELPER_HOSTILE_BIN")
            want=("${SIZE[@]}")
            ;;
        *) fail "kill_trial: unknown point $point"; return ;;
    esac
    if [[ -n $lockfd ]]; then
        "${bin[@]}" pull "${PH_OPTS[@]}" --parallel-layers 1 "$IMAGE" "oci:$OUT/dest:big" >"$OUT/bg.out" 2>"$OUT/bg.err" {lockfd}>&- &
    else
        "${bin[@]}" pull "${PH_OPTS[@]}" --parallel-layers 1 "$IMAGE" "oci:$OUT/dest:big" >"$OUT/bg.out" 2>"$OUT/bg.err" &
    fi
    BG_PID=$!
    case $point in
        layer)
            wait_until 120 "the proxy to stall layer $li after $at bytes" _stalled || return
            wait_until 60 "the cache to hold $at bytes of layer $li (has $(kept "${LAYER[$li]}"))" _kept_is "${LAYER[$li]}" "$at" || return
            ;;
        copied)
            wait_until 120 "the child to be held after the copy" _said "pullhelper-child: hostile: holding" || return
            _all_copied || { fail "the child is held after the copy, but not every layer is whole in staging or the cache"; return; }
            ;;
        lock) wait_until 120 "the parent to wait for DEST's commit lock" _holds_file "$BG_PID" "$lockfile" || return ;;
        commit) wait_until 120 "the commit to be held after $n blobs" _said "holding the commit after $n blobs" || return ;;
    esac
    local child=
    if [[ $point == layer || $point == copied ]]; then
        child=$(_child_of "$BG_PID") || { fail "no pull child under $BG_PID"; return; }
    elif child=$(_child_of "$BG_PID"); then
        fail "a pull child ($child) is alive while the parent commits"
        return
    fi
    if [[ $who == parent ]]; then
        kill -KILL "$BG_PID"
    else
        kill -KILL "$child"
    fi
    wait_until 30 "the parent to exit" _gone "$BG_PID" || return
    local rc=0
    wait "$BG_PID" || rc=$?
    BG_PID=
    [[ -z $child ]] || wait_until 30 "the child to die" _gone "$child" || return
    [[ -z $lockfd ]] || exec {lockfd}>&-
    ((rc != 0)) || fail "the killed pull exited 0"
    [[ $who != parent || $rc == 137 ]] || fail "the parent was killed but exited $rc"
    if [[ $point == commit ]]; then
        dest_old_intact || fail "DEST's old state changed after kill -9 mid-commit"
    else
        [[ $(dest_sum) == "$OLD_SUM" ]] || fail "DEST changed after kill -9 of the $who"
    fi
    [[ -d $PARTIAL || $who == parent ]] || fail "no partial-blob cache after the child was killed"
    [[ ! -d $PARTIAL || $(stat -c '%u %a' "$PARTIAL") == "0 700" ]] || fail "the partial-blob cache is not root's 0700: $(stat -c '%u %a' "$PARTIAL")"
    [[ ! -d $PBLOBS || $(stat -c %u "$PBLOBS") == 0 || $who == parent ]] || fail "the parent did not take the cache back after the child died: owner $(stat -c %u "$PBLOBS")"

    # What the kill left, per layer: c = bytes in the cache, s = a whole
    # blob in the killed pull's staging (a killed parent leaves it; the
    # next pull moves it into the cache), d = already in DEST.
    local -a k=() src=()
    local c st dd
    for i in "${!LAYER[@]}"; do
        c=$(kept "${LAYER[$i]}") st=$(staged "${LAYER[$i]}") dd=$(in_dest "${LAYER[$i]}")
        if ((dd)); then k[i]=${SIZE[$i]} src[i]=d
        elif ((st > 0)); then k[i]=$st src[i]=s
        else k[i]=$c src[i]=c; fi
        [[ ${k[$i]} == "${want[$i]}" ]] || fail "layer $i: ${k[$i]} bytes kept (cache $c, staged $st, in DEST $dd), want ${want[$i]}; beside DEST: $(ls -la "$OUT"/.pullhelper-staging-dest-*/work/image/blobs/sha256 "$PBLOBS" 2>&1)"
    done
    if [[ $point == commit ]]; then
        local moved
        moved=$(cd "$OUT/dest" && find ./blobs/sha256 -type f | grep -cvxF -f "$OUT/old.files" || true)
        [[ $moved == "$n" ]] || fail "the commit was held after $n blobs but DEST has $moved new ones"
    fi

    # The config, written last by the copy, is kept too once it was
    # (whole, in the cache or the killed pull's staging).
    local cfgkept=0
    if (($(in_dest "$CONFIG") == 0)); then
        cfgkept=$(staged "$CONFIG")
        ((cfgkept > 0)) || cfgkept=$(kept "$CONFIG")
    fi
    faultproxy_rules P '[]'
    local from regfrom
    from=$(log_lines)
    regfrom=$(registry_log_barrier)
    run_pullhelper pull "${PH_OPTS[@]}" --progress-fd 3 "$IMAGE" "oci:$OUT/dest:big" 3>"$OUT/rerun.jsonl"
    assert_json_result
    assert_wire_and_kept "$regfrom" "$OUT/rerun.jsonl" "$(for i in "${!LAYER[@]}"; do [[ ${src[$i]} == d ]] && echo 0 || echo "${k[$i]}"; done)" "$cfgkept"
    [[ ! -e $PARTIAL ]] || fail "the partial-blob cache is left after the commit: $(ls -la "$PARTIAL")"
    assert_no_staging "$OUT"
    [[ $(json_get '.manifests[1].annotations."org.opencontainers.image.ref.name"' <"$OUT/dest/index.json") == big ]] || fail "DEST lacks old or big: $(cat "$OUT/dest/index.json")"
    (cd "$OUT/dest" && grep -v " ./index.json$" "$OUT/old.sums" | sha256sum -c --quiet) || fail "the rerun changed the old image's blobs in DEST"

    local row="" got ranges
    for i in "${!LAYER[@]}"; do
        got=$(rerun_bytes "$from" "${LAYER[$i]}")
        ranges=$(rerun_ranges "$from" "${LAYER[$i]}")
        row+=$(printf ' L%d %9s%s->%-9s' "$i" "${k[$i]}" "${src[$i]}" "$got")
        [[ $got == $((SIZE[i] - k[i])) ]] ||
            fail "layer $i: the rerun fetched $got bytes, want ${SIZE[$i]} - ${k[$i]} kept = $((SIZE[i] - k[i])) (ranges: $ranges)"
        if ((k[i] == SIZE[i])); then
            [[ -z $ranges ]] || fail "layer $i: all of it was kept but the rerun asked '$ranges'"
        elif ((k[i] > 0)); then
            [[ $ranges == "bytes=${k[$i]}-" ]] || fail "layer $i: the rerun asked with Range '$ranges', want 'bytes=${k[$i]}-'"
        else
            [[ $ranges == - ]] || fail "layer $i: nothing was kept but the rerun asked '$ranges'"
        fi
    done
    local where=$point
    [[ $point == layer ]] && where="L$li@$at"
    [[ $point == commit ]] && where="commit@$n"
    printf '%-6s %-6s %-14s |%s\n' "$name" "$who" "$where" "$row" >&3
}

# assert_wire_and_kept REGFROM EVENTS KEPT CFGKEPT: the last run_pullhelper's
# result counts in endpoints[].bytes exactly the blob bytes the registry's
# own access log (distribution's combined log: status, then the body bytes
# it wrote) shows it sent after line REGFROM, and in kept_bytes the bytes
# the partial-blob cache served instead: KEPT, one number a layer, and
# CFGKEPT of the config (issue 24 item 12: a resumed blob's kept prefix
# was counted as sent). The progress events (file EVENTS) say the same:
# each blob's layer_done or config_done its kept_bytes, done the total.
assert_wire_and_kept() {
    local regfrom=$1 events=$2 kept="$3 $4" sent
    registry_log_barrier >/dev/null || return
    sent=$(tail -n "+$((regfrom + 1))" "$REGISTRY_LOG" | "$PH_PYTHON" -c '
import re, sys
n = 0
for line in sys.stdin:
    m = re.search(r"\"GET (\S+/blobs/sha256:[0-9a-f]{64}) HTTP/[^\"]*\" (\d{3}) (\d+)", line)
    if m:
        n += int(m.group(3))
print(n)')
    "$PH_PYTHON" - "$output" "$events" "$sent" "$LAYERS $CONFIG" "$kept" <<'PY' || fail "bytes sent and kept misreported (see above)"
import json, sys
res, events, sent = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
layers, kept = sys.argv[4].split(), [int(k) for k in sys.argv[5].split()]
bad = []
wire = sum(e["bytes"] for e in res.get("endpoints", []))
if wire != sent:
    bad.append("endpoints[].bytes sum to %d, the registry's access log shows %d blob bytes sent" % (wire, sent))
if res.get("kept_bytes", 0) != sum(kept):
    bad.append("kept_bytes is %s, want %d (%s)" % (res.get("kept_bytes"), sum(kept), kept))
evs = [json.loads(l) for l in open(events)]
last = {e["digest"]: e for e in evs if e["type"] in ("layer_done", "config_done")}
for d, k in zip(layers, kept):
    got = last.get(d, {}).get("kept_bytes", 0)
    if got != k:
        bad.append("the last layer_done/config_done of %s says kept_bytes %d, want %d" % (d, got, k))
done = [e for e in evs if e["type"] == "done"]
if len(done) != 1 or done[0].get("kept_bytes", 0) != sum(kept):
    bad.append("the done event says kept_bytes %s, want %d" % ([e.get("kept_bytes") for e in done], sum(kept)))
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
PY
}

# pct LAYER_INDEX PERCENT: that share of the layer's size, in bytes.
pct() { echo $((SIZE[$1] * $2 / 100)); }

@test "resume: kill -9 of the parent at 10% of layer 0; the rerun fetches only the missing bytes" {
    kill_trial k1 parent layer 0 "$(pct 0 10)"
}

@test "resume: kill -9 of the parent at 60% of layer 1; layer 0, complete in its staging, is not fetched again" {
    kill_trial k2 parent layer 1 "$(pct 1 60)"
}

@test "resume: kill -9 of the child at 60% of layer 2; the parent keeps layers 0 and 1 and takes the cache back" {
    kill_trial k3 child layer 2 "$(pct 2 60)"
}

@test "resume: kill -9 of the child at 10% of layer 3" {
    kill_trial k4 child layer 3 "$(pct 3 10)"
}

@test "resume: kill -9 of the parent at 95% of layer 3" {
    kill_trial k5 parent layer 3 "$(pct 3 95)"
}

@test "resume: kill -9 of the parent between layers (layer 0 complete, layer 1 answered, no byte of it yet)" {
    kill_trial k6 parent layer 1 0
}

@test "resume: kill -9 of the child at 1 byte of layer 0" {
    kill_trial k7 child layer 0 1
}

@test "resume: kill -9 of the child with every layer copied (held after the copy): the parent keeps them, no layer is fetched again" {
    kill_trial k8 child copied
}

@test "resume: kill -9 of the parent while it waits for DEST's commit lock (the staged image verified)" {
    kill_trial k9 parent lock
}

@test "resume: kill -9 of the parent during the commit (2 blobs renamed into DEST, index.json not yet): DEST names the old image, the rerun fetches nothing" {
    kill_trial k10 parent commit 2
}

# keep_partial LAYER_INDEX BYTES: a kill trial's first half by hand: the
# cache holds BYTES of the layer, as a pull would have left it.
plant() {
    mkdir -p "$PBLOBS"
    chmod 0700 "$PARTIAL" "$PBLOBS"
    head -c "$2" "$(fixture_blob big "${LAYER[$1]}")" >"$PBLOBS/sha256-${LAYER[$1]#sha256:}.partial"
}

@test "resume: a kept prefix with a flipped byte is never trusted: discarded, the blob fetched again, the pull succeeds" {
    local n
    n=$(pct 1 50)
    plant 1 "$n"
    printf '\xff' | dd of="$PBLOBS/sha256-${LAYER[1]#sha256:}.partial" bs=1 seek=1000 conv=notrunc status=none
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
    head -c 10 /dev/zero >>"$PBLOBS/sha256-${LAYER[0]#sha256:}.partial"
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
    touch -d '8 days ago' "$PBLOBS/sha256-${LAYER[1]#sha256:}.partial"
    local from
    from=$(log_lines)
    run_pullhelper pull "${PH_OPTS[@]}" "$IMAGE" "oci:$OUT/dest:big"
    assert_json_result
    [[ $stderr == *"removed a stale partial blob"* ]] || fail "no word of the stale partial blob: $stderr"
    [[ $(rerun_ranges "$from" "${LAYER[1]}") == - ]] || fail "the stale kept bytes were used"
}

@test "resume: stray entries in the cache (a symlink, a directory, a hard link) are removed, never followed" {
    plant 1 "$(pct 1 50)"
    ln -s /etc/shadow "$PBLOBS/sha256-${LAYER[0]#sha256:}.partial"
    mkdir "$PBLOBS/sub"
    echo x >"$OUT/outside"
    ln "$OUT/outside" "$PBLOBS/sha256-${LAYER[2]#sha256:}.partial"
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

# The containerd: DEST stages under image-<16 hex of sha256(REF)>
# (dest.containerdStageName); older pullhelpers used the shared name image,
# whose cache .pullhelper-partial-image nothing adopts now. gc containerd:REF
# finds REF's own cache in --containerd-staging and removes the old shared
# one with it; another user's in its place, or a link, is neither entered
# nor followed. (The pull's own sweep of it: ctrd_case_legacy_cache.)
@test "resume: pullhelper gc containerd:REF --containerd-staging removes REF's cache and the old shared .pullhelper-partial-image; another user's, or a link, is left" {
    local st=$OUT/staging ref=registry.example/app:1 mine old
    mkdir -m 700 "$st"
    mine=$st/.pullhelper-partial-image-$(printf %s "$ref" | sha256sum | cut -c1-16)
    old=$st/.pullhelper-partial-image
    local c
    for c in "$mine" "$old" "$st/.pullhelper-partial-image-00000000000000aa"; do
        mkdir -m 700 "$c" "$c/blobs"
    done
    echo kept >"$mine/blobs/sha256-aa.partial"
    echo kept >"$old/blobs/sha256-aa.partial"
    echo other >"$st/.pullhelper-partial-image-00000000000000aa/blobs/sha256-aa.partial"
    run_pullhelper gc --containerd-staging "$st" "containerd:$ref"
    assert_json_result
    assert_equal "$(json_get '.partial' <<<"$output")" "[\"$mine\",\"$old\"]"
    [[ ! -e $mine && ! -e $old ]] || fail "gc left $(ls -a "$st")"
    [[ $(cat "$st/.pullhelper-partial-image-00000000000000aa/blobs/sha256-aa.partial") == other ]] || fail "gc removed another image's cache"

    # Another user's in the old name: not entered, not removed, a warning.
    mkdir -m 700 "$old" "$old/blobs"
    echo theirs >"$old/blobs/f"
    chown -R 65534:65534 "$old"
    run_pullhelper gc --containerd-staging "$st" "containerd:$ref"
    assert_json_result
    assert_equal "$(json_get '.partial' <<<"$output")" "[]"
    [[ $stderr == *"$old is owned by uid 65534"* ]] || fail "no warning about another user's old cache: $stderr"
    [[ $(stat -c %u "$old/blobs") == 65534 && $(cat "$old/blobs/f") == theirs ]] || fail "gc entered another user's old cache"
    rm -rf "$old"

    # A link in its place to a root 0700 cache elsewhere: not followed.
    mkdir -m 700 "$OUT/elsewhere" "$OUT/elsewhere/blobs"
    echo kept >"$OUT/elsewhere/blobs/sha256-aa.partial"
    ln -s "$OUT/elsewhere" "$old"
    run_pullhelper gc --containerd-staging "$st" "containerd:$ref"
    assert_json_result
    assert_equal "$(json_get '.partial' <<<"$output")" "[]"
    [[ -L $old && $(cat "$OUT/elsewhere/blobs/sha256-aa.partial") == kept ]] || fail "gc followed the link $old"
}

@test "resume: each layer is written once: the copy leaves whole layers in the cache and the parent moves them into staging, where it verifies them (isolated and --no-isolation)" {
    local mode
    for mode in isolated --no-isolation; do
        rm -rf "$OUT/dest"
        local opts=("${PH_OPTS[@]}" --debug)
        [[ $mode == isolated ]] || opts+=("$mode")
        run_pullhelper pull "${opts[@]}" "$IMAGE" "oci:$OUT/dest:big"
        assert_json_result
        [[ $stderr == *'took whole blobs from the partial-blob cache into staging" blobs=4'* ]] ||
            fail "$mode: the 4 layers were not handed over: $stderr"
        [[ ! -e $PARTIAL ]] || fail "$mode: the cache is left after the commit"
        local l
        for l in "${LAYER[@]}"; do
            (cd "$OUT/dest/blobs/sha256" && sha256sum -c --quiet <<<"${l#sha256:}  ${l#sha256:}") ||
                fail "$mode: DEST's layer $l does not match its digest"
            [[ $(stat -c '%u %a %h' "$OUT/dest/blobs/sha256/${l#sha256:}") == "0 644 1" ]] ||
                fail "$mode: layer $l is $(stat -c '%u %a %h' "$OUT/dest/blobs/sha256/${l#sha256:}"), want root 0644 with one link"
        done
    done
}

@test "resume: a handed-over blob the child rewrites (O_WRONLY) or empties (O_RDONLY|O_TRUNC) after the parent hashed it ahead is caught: exit 8, DEST unchanged" {
    [[ -x $PULLHELPER_HOSTILE_BIN ]] || fail "hostile build missing: $PULLHELPER_HOSTILE_BIN (make build-hostile)"
    local action
    for action in rewrite-handed truncate-handed; do
        rm -rf "$PARTIAL" # what the first trial's failure kept
        PULLHELPER_HOSTILE=after-copy:$action PULLHELPER=$PULLHELPER_HOSTILE_BIN \
            run_pullhelper 8 pull "${PH_OPTS[@]}" "$IMAGE" "oci:$OUT/dest:big"
        assert_json_error verification
        [[ $stderr == *"hostile: changed 4 handed-over blobs"* ]] || fail "$action: the child did not change the 4 layers: $stderr"
        [[ $(dest_sum) == "$OLD_SUM" ]] || fail "$action: DEST changed"
    done
}

@test "resume: an oci: DEST that is a mount point stages inside it, apart from the cache: the blobs are written there, not handed over across mounts; the pull commits" {
    mkdir -p "$OUT/mp"
    mount -t tmpfs -o size=256m tmpfs "$OUT/mp" || fail "mounting a tmpfs on $OUT/mp"
    run_pullhelper pull "${PH_OPTS[@]}" --debug "$IMAGE" "oci:$OUT/mp:big"
    assert_json_result
    [[ $stderr != *"took whole blobs from the partial-blob cache"* ]] || fail "blobs were handed over across mounts: $stderr"
    local l
    for l in "${LAYER[@]}"; do
        (cd "$OUT/mp/blobs/sha256" && sha256sum -c --quiet <<<"${l#sha256:}  ${l#sha256:}") ||
            fail "the mount-point DEST's layer $l does not match its digest"
    done
}

# Attacks on the cache by other uids (issue 22). The victims' DESTs live in
# /var/tmp (a parent anyone may traverse, as the attacks need).

# holder UID GID create|open PATH...: start, as UID, a process that opens
# (creating with create, directories 0777) each PATH O_RDWR and holds the
# descriptors; sets HELD to the number it holds. Then holder_write makes it
# pwrite "EVIL" at offset 0 through each and exit; sets WROTE.
holder() {
    local uid=$1 gid=$2
    shift 2
    cat >"$VT/holder.py" <<'PY'
import os, sys
os.umask(0)
create = sys.argv[1] == "create"
held = []
for p in sys.argv[2:]:
    try:
        if create:
            os.makedirs(os.path.dirname(p), mode=0o777, exist_ok=True)
        held.append(os.open(p, os.O_RDWR | (os.O_CREAT if create else 0), 0o666))
    except OSError as e:
        print("holder: %s: %s" % (p, e.strerror), file=sys.stderr)
print("held %d" % len(held), flush=True)
sys.stdin.readline()
n = 0
for fd in held:
    try:
        os.pwrite(fd, b"EVIL", 0)
        n += 1
    except OSError as e:
        print("holder: pwrite: %s" % e.strerror, file=sys.stderr)
print("wrote %d" % n, flush=True)
PY
    chmod 644 "$VT/holder.py"
    # Two FIFOs, not a coproc (bash closes a coproc's descriptors when it
    # exits, racing the read of its last line).
    mkfifo -m 0666 "$VT/holder.in" "$VT/holder.out"
    setpriv --reuid "$uid" --regid "$gid" --clear-groups "$PH_PYTHON" "$VT/holder.py" "$@" \
        <"$VT/holder.in" >"$VT/holder.out" 2>"$VT/holder.err" &
    HOLDER_PID=$!
    exec {HOLDER_IN}>"$VT/holder.in" {HOLDER_OUT}<"$VT/holder.out"
    local line=
    read -r -t 120 line <&"$HOLDER_OUT" || { fail "the holder did not start: $(cat "$VT/holder.err")"; return; }
    HELD=${line#held }
}
holder_write() {
    local line=
    echo go >&"$HOLDER_IN"
    read -r -t 120 line <&"$HOLDER_OUT" || { fail "the holder did not write: $(cat "$VT/holder.err")"; return; }
    WROTE=${line#wrote }
    wait "$HOLDER_PID" 2>/dev/null || true
    HOLDER_PID=
    exec {HOLDER_IN}>&- {HOLDER_OUT}<&-
    HOLDER_IN= HOLDER_OUT=
}
_stop_holder() {
    if [[ -n ${HOLDER_PID:-} ]]; then
        kill -KILL "$HOLDER_PID" 2>/dev/null || true
        wait "$HOLDER_PID" 2>/dev/null || true
        HOLDER_PID=
    fi
    if [[ -n ${HOLDER_IN:-} ]]; then exec {HOLDER_IN}>&- {HOLDER_OUT}<&-; HOLDER_IN= HOLDER_OUT=; fi
}

# layers_intact DESTDIR: every layer of big in DESTDIR matches its digest.
layers_intact() {
    local l
    for l in "${LAYER[@]}"; do
        (cd "$1/blobs/sha256" && sha256sum -c --quiet <<<"${l#sha256:}  ${l#sha256:}") || return 1
    done
}

@test "resume: a cache another user plants beside DEST in a sticky parent, its file held open O_RDWR, is not adopted: the pull succeeds without resume and the user's later pwrite does not reach DEST (issue 22 finding 1)" {
    VT=$(mktemp -d /var/tmp/pullhelper-test-XXXXXX)
    chmod 755 "$VT"
    mkdir -m 1777 "$VT/shared"
    local cache=$VT/shared/.pullhelper-partial-dest l paths=()
    # Every layer's name, where an older and this layout keep it: the
    # digests are public in the manifest.
    for l in "${LAYER[@]}"; do
        paths+=("$cache/sha256-${l#sha256:}.partial" "$cache/blobs/sha256-${l#sha256:}.partial")
    done
    holder 65534 65534 create "${paths[@]}"
    [[ $HELD == $((2 * ${#LAYER[@]})) ]] || fail "the user holds $HELD of the planted files: $(cat "$VT/holder.err")"
    run_pullhelper pull "${PH_OPTS[@]}" "$IMAGE" "oci:$VT/shared/dest:big"
    assert_json_result
    holder_write
    [[ $WROTE == "$HELD" ]] || fail "the user could write $WROTE of $HELD held files: $(cat "$VT/holder.err")"
    layers_intact "$VT/shared/dest" || fail "a write through a descriptor the user opened before the pull reached DEST's committed layers"
    [[ $stderr == *"$cache is owned by uid 65534"*"resume is off for this pull"* ]] || fail "no word of the refused cache: $stderr"
    [[ $(stat -c %u "$cache" "$cache/blobs" | sort -u) == 65534 ]] || fail "the planted cache changed owner: $(stat -c '%n %u' "$cache" "$cache/blobs")"
    assert_no_staging "$VT/shared"
}

@test "resume: the cache a killed parent left to its dynamic uid is out of that uid's reach, and what it kept is committed only as fresh inodes (issue 22 finding 2)" {
    VT=$(mktemp -d /var/tmp/pullhelper-test-XXXXXX)
    chmod 755 "$VT"
    mkdir "$VT/d"
    PARTIAL=$VT/d/.pullhelper-partial-dest PBLOBS=$VT/d/.pullhelper-partial-dest/blobs
    local at
    at=$(pct 1 50)
    faultproxy_rules P "[{\"match\": {\"method\": \"GET\", \"path\": \"/blobs/${LAYER[1]}\"}, \"count\": 1, \"stall_after\": $at}]"
    "$PULLHELPER" pull "${PH_OPTS[@]}" --parallel-layers 1 "$IMAGE" "oci:$VT/d/dest:big" >"$OUT/bg.out" 2>"$OUT/bg.err" &
    BG_PID=$!
    wait_until 120 "the proxy to stall layer 1 after $at bytes" _stalled || return
    wait_until 60 "the cache to hold $at bytes of layer 1" _kept_or_old "${LAYER[1]}" "$at" || return
    local child
    child=$(_child_of "$BG_PID") || { fail "no pull child under $BG_PID"; return; }
    kill -KILL "$BG_PID"
    wait "$BG_PID" 2>/dev/null || true
    BG_PID=
    wait_until 30 "the child to die" _gone "$child" || return
    faultproxy_rules P '[]'
    # The dynamic uid the killed pull had: the next pull may get it again,
    # and its (compromised) child may open what that uid owns.
    local uid gid f=sha256-${LAYER[1]#sha256:}.partial
    uid=$(stat -c %u "$PBLOBS" 2>/dev/null || stat -c %u "$PARTIAL")
    gid=$(stat -c %g "$PBLOBS" 2>/dev/null || stat -c %g "$PARTIAL")
    [[ $uid != 0 ]] || fail "the killed pull's cache is root's already: nothing to attack"
    local outer
    outer=$(stat -c '%u %a' "$PARTIAL")
    holder "$uid" "$gid" open "$PARTIAL/$f" "$PBLOBS/$f"
    run_pullhelper pull "${PH_OPTS[@]}" "$IMAGE" "oci:$VT/d/dest:big"
    assert_json_result
    holder_write
    layers_intact "$VT/d/dest" || fail "a write through a descriptor uid $uid opened ($HELD held) reached DEST's committed layers"
    [[ $outer == "0 700" ]] || fail "the cache a killed pull left was $outer, want root 0700"
    [[ $HELD == 0 ]] || fail "uid $uid (the killed pull's) could open $HELD kept files"
    [[ ! -e $PARTIAL ]] || fail "the cache is left after the commit"
    assert_no_staging "$VT/d"
}
_kept_or_old() {
    local f=sha256-${1#sha256:}.partial n=0
    if [[ -f $PBLOBS/$f ]]; then n=$(stat -c %s "$PBLOBS/$f"); elif [[ -f $PARTIAL/$f ]]; then n=$(stat -c %s "$PARTIAL/$f"); fi
    [[ $n == "$2" ]]
}

@test "resume: a child that leaves 256 MiB under a name no blob of the image has, and its kept files longer than their blobs, then fails: the cache keeps only the image's blobs within their sizes (issue 22 finding 5)" {
    [[ -x $PULLHELPER_HOSTILE_BIN ]] || fail "hostile build missing: $PULLHELPER_HOSTILE_BIN (make build-hostile)"
    PULLHELPER_HOSTILE=after-copy:plant-unasked PULLHELPER=$PULLHELPER_HOSTILE_BIN \
        run_pullhelper 1 pull "${PH_OPTS[@]}" "$IMAGE" "oci:$OUT/dest:big"
    [[ $stderr == *"hostile: planted an unasked blob, grew 4 kept files"* ]] || fail "the child did not plant: $stderr"
    [[ $(dest_sum) == "$OLD_SUM" ]] || fail "DEST changed"
    local m sizes f n d
    m=$(fixture_blob big "$(fixture_digest big)")
    sizes=$("$PH_PYTHON" -c 'import json,sys; m=json.load(open(sys.argv[1])); print(" ".join("%s=%d" % (d["digest"], d["size"]) for d in [m["config"]] + m["layers"]))' "$m")
    local fake=sha256-$(printf 'e%.0s' {1..64}).partial
    [[ ! -e $PBLOBS/$fake && ! -e $PARTIAL/$fake ]] || fail "the unasked 256 MiB file is kept: $(ls -laR "$PARTIAL")"
    if [[ -d $PARTIAL ]]; then
        for f in "$PARTIAL"/*.partial "$PBLOBS"/*.partial; do
            [[ -e $f ]] || continue
            n=${f##*/} n=${n%.partial} d=sha256:${n#sha256-}
            [[ " $sizes" == *" $d="* ]] || fail "the cache keeps $f, which no blob of the image is"
            local want=" $sizes"
            want=${want#* "$d"=}
            want=${want%% *}
            (($(stat -c %s "$f") <= want)) || fail "the cache keeps $f, $(stat -c %s "$f") bytes, longer than its declared $want"
        done
    fi
}

@test "resume: pullhelper gc leaves a cache another user planted beside DEST alone (never entered, never removed), with a warning (issue 22 finding 3)" {
    VT=$(mktemp -d /var/tmp/pullhelper-test-XXXXXX)
    chmod 755 "$VT"
    mkdir -m 1777 "$VT/shared"
    local cache=$VT/shared/.pullhelper-partial-dest
    setpriv --reuid 65534 --regid 65534 --clear-groups sh -c 'mkdir -p "$1/sub/deeper" && echo mine >"$1/sub/deeper/f"' sh "$cache"
    run_pullhelper gc "oci:$VT/shared/dest"
    assert_json_result
    assert_equal "$(json_get '.partial' <<<"$output")" "[]"
    [[ $stderr == *"$cache is owned by uid 65534"* ]] || fail "no warning about the planted cache: $stderr"
    [[ $(cat "$cache/sub/deeper/f") == mine ]] || fail "gc entered the planted cache"
}

# Review 2 finding 2: a child announces (layer_start) a digest no blob of
# the image has, declaring 1 GiB, plants 256 MiB under it dated ten years
# ahead, and the pull fails verification with its genuine report.
@test "resume: pinned, a blob the child announced but the checked manifest does not name is not kept (review 2 finding 2)" {
    PULLHELPER_HOSTILE=after-copy:plant-announced,after-copy:drop-index PULLHELPER=$PULLHELPER_HOSTILE_BIN \
        run_pullhelper 8 pull "${PH_OPTS[@]}" "$FP_P_HOST/fixtures/big@$(fixture_digest big)" "oci:$OUT/dest:big"
    [[ $stderr == *"hostile: announced and planted an unasked blob"* ]] || fail "the child did not plant: $stderr"
    [[ $(dest_sum) == "$OLD_SUM" ]] || fail "DEST changed"
    local fake=$PBLOBS/sha256-$(printf 'e%.0s' {1..64}).partial
    [[ ! -e $fake ]] || fail "the announced 256 MiB file no manifest names is kept: $(stat -c '%U %s %y' "$fake")"
}

@test "resume: by tag, what the child announced is kept (at most the image's limit) but dated by the parent: a time in the future does not outlive the age limit (review 2 finding 2)" {
    PULLHELPER_HOSTILE=after-copy:plant-announced,after-copy:drop-index PULLHELPER=$PULLHELPER_HOSTILE_BIN \
        run_pullhelper 8 pull "${PH_OPTS[@]}" "$IMAGE" "oci:$OUT/dest:big"
    local now
    now=$(date +%s)
    [[ $stderr == *"hostile: announced and planted an unasked blob"* ]] || fail "the child did not plant: $stderr"
    local fake=$PBLOBS/sha256-$(printf 'e%.0s' {1..64}).partial
    [[ -f $fake ]] || fail "the announced file is not kept (the residual the README describes changed?)"
    assert_equal "$(stat -c '%u %a' "$fake")" "0 600"
    (($(stat -c %Y "$fake") <= now)) || fail "the kept file is dated $(stat -c %y "$fake"), in the future: it would never expire"
}
