#!/usr/bin/env bats
#
# pullhelper cri under load and faults (issue 25): the containerd 2.x of
# make deps behind `pullhelper cri`, driven by crictl as in
# tests/150-cri.bats, with tests/faultproxy in front of the registry
# (resets, 503s) and a slow mirror (a second proxy trickling every blob),
# the node caps on (--node-bandwidth, --node-parallel-layers: pipeline's
# nodeShare, one budget split among the live pulls).
#
# The service runs in a mount namespace this file creates (as in
# tests/110-reliability.bats: kept alive by a bind mount of its ns file,
# entered with nsenter), where /run/pullhelper is a private tmpfs: the uid
# locks and node-share registrations checked here are this file's alone
# (other pullhelpers on the machine have their own), and any mount the
# service made would show in its own /proc/PID/mountinfo. Cgroups go under
# a parent of each test's own. Network: 127.0.0.1 only.

load helpers
load containerd-cases
load cri
load faultproxy

CTRD_FLAVOR=2

# The load: 5 images of 2 incompressible 1 MiB layers each (10 MiB in all).
LOAD_IMAGES=5
LOAD_REQUESTS=20
# The node cap, bytes/s (--node-bandwidth 1MiB/s): the 10 MiB take about
# 10 s at it. It binds: the four pulls running at once could fetch 8 MiB/s
# from the slow mirror alone (2 MiB/s a stream, one stream each under
# --node-parallel-layers 4), and more from the registry.
NODE_LAYERS=4
NODE_CAP=1048576

setup_file() {
    [[ $(id -u) -eq 0 ]] || return 0
    start_registry
    push_fixture tiny
    push_fixture tiny fixtures/crashme
    local i
    for ((i = 0; i < LOAD_IMAGES; i++)); do
        push_fixture_args "cri-load-$i" "fixtures/load$i" -layers 2 -layer-size 1048576 -compressible 0 -seed $((154 + i))
    done
    # Two images of one 8 MiB layer: the kill -9 lands in both.
    push_fixture_args cri-resume-0 fixtures/resume0 -layers 1 -layer-size 8388608 -compressible 0 -seed 160
    push_fixture_args cri-resume-1 fixtures/resume1 -layers 1 -layer-size 8388608 -compressible 0 -seed 161

    PH_NSDIR=$BATS_FILE_TMPDIR/ns
    mkdir -p "$PH_NSDIR"
    mount --bind "$PH_NSDIR" "$PH_NSDIR"
    mount --make-private "$PH_NSDIR"
    touch "$PH_NSDIR/mnt"
    unshare --mount="$PH_NSDIR/mnt" --propagation private true
    mkdir -p /run/pullhelper
    nsenter --mount="$PH_NSDIR/mnt" -- mount -t tmpfs -o size=16m,mode=0700 ph154-run /run/pullhelper
    export PH_NSDIR
}

teardown_file() {
    ctrd_stop_all
    stop_all_faultproxies
    if [[ -n ${PH_NSDIR:-} ]]; then
        umount "$PH_NSDIR/mnt" 2>/dev/null || true
        umount "$PH_NSDIR" 2>/dev/null || true
    fi
    stop_registry
}

setup() {
    skip_if_not_root "containerd, mount namespaces and cgroups need root"
    cri_setup cri-load
    REG_STOPPED=""
}

teardown() {
    reg_cont
    cri_stop
    stop_all_faultproxies
    [[ -z ${CTRD_DIR:-} ]] || ctrd_stop "$CTRD_DIR"
    cri_cgroups_rm "$CG_PARENT"
}

# ns_exec CMD...: CMD in the service's mount namespace.
ns_exec() {
    nsenter --mount="$PH_NSDIR/mnt" -- "$@"
}

# ph_up [FLAGS...]: pullhelper cri (PH_BIN, default $PULLHELPER) in the
# file's mount namespace, in front of the containerd of ctrd_up, on
# $T/ph/cri.sock, logging to $T/cri.log (appended: a restart keeps the
# earlier lines); waits (at most 30 s) until it serves.
ph_up() {
    CRI_MNTNS=$PH_NSDIR/mnt CRI_BIN=${PH_BIN:-$PULLHELPER} CRI_APPEND=1 \
        cri_serve "$SOCK" --containerd-snapshotter native --containerd-staging "$T/staging" "$@"
}

# count_lines REGEX: lines of the service's log matching REGEX.
count_lines() {
    grep -cE -- "$1" "$T/cri.log" || true
}

# wait_lines REGEX N [SECS]: until at least N log lines match REGEX.
wait_lines() {
    local deadline=$((SECONDS + ${3:-60}))
    until (($(count_lines "$1") >= $2)); do
        ((SECONDS < deadline)) || { fail "fewer than $2 log lines match '$1' after ${3:-60} s: $(cat "$T/cri.log")"; return 1; }
        sleep 0.1
    done
}

# pull_cgroup_dirs: every cgroup below this test's parent, in every
# hierarchy (v1 controllers and the unified one).
pull_cgroup_dirs() {
    local d
    for d in /sys/fs/cgroup/"${CG_PARENT#/}" /sys/fs/cgroup/*/"${CG_PARENT#/}"; do
        [[ -d $d ]] && find "$d" -mindepth 1 -type d
    done
    return 0
}

# cgroup_procs: the processes in this test's pull cgroups.
cgroup_procs() {
    local d
    for d in $(pull_cgroup_dirs); do
        cat "$d/cgroup.procs" 2>/dev/null
    done
    return 0
}

# uid_locks: the uid lock files under the namespace's state root.
uid_locks() {
    ns_exec find /run/pullhelper/uids -name '*.lock' 2>/dev/null || true
}

# node_shares: the node-share registrations under the state root.
node_shares() {
    ns_exec find /run/pullhelper/bandwidth -mindepth 1 2>/dev/null || true
}

# mounts PID: the mount points of PID's namespace, sorted.
mounts() {
    awk '{print $5}' "/proc/$1/mountinfo" | sort
}

# fds PID: its open descriptors.
fds() {
    find "/proc/$1/fd" -mindepth 1 -maxdepth 1 | wc -l
}

# staging_left: staging and partial-blob caches under --containerd-staging.
staging_left() {
    find "$T/staging" -mindepth 1 -maxdepth 1 \( -name '.pullhelper-staging-*' -o -name '.pullhelper-partial-*' \) 2>/dev/null || true
}

# in_flight "DIGEST...": the most requests for those blobs both proxies
# had in flight at once, each from its time (arrival) to its end (log line).
in_flight() {
    "$PH_PYTHON" - "$FP_MIR_LOG" "$FP_REG_LOG" $1 <<'PY'
import json, sys
from datetime import datetime, timezone
def ts(s):
    main, _, frac = s.rstrip("Z").partition(".")
    return datetime.fromisoformat(main).replace(tzinfo=timezone.utc).timestamp() + float("0." + (frac or "0"))
digests, ev = set(sys.argv[3:]), []
for log in sys.argv[1:3]:
    for line in open(log):
        e = json.loads(line)
        if "/blobs/" in e["path"] and e["path"].rsplit("/", 1)[-1] in digests:
            ev += [(ts(e["time"]), 1), (ts(e["end"]), -1)]
n = most = 0
for _, d in sorted(ev):  # at one instant an end comes before a start
    n += d
    most = max(most, n)
print(most)
PY
}

# assert_nothing_left FDS MOUNTS: no pull cgroup, staging, partial cache,
# uid lock or node-share registration; the service's mounts are MOUNTS and
# its descriptors back to FDS (both polled, at most 30 s: a pull's last
# connection to containerd may still be closing when its answer came).
assert_nothing_left() {
    local want_fds=$1 want_mounts=$2 deadline=$((SECONDS + 30))
    until [[ -z $(pull_cgroup_dirs) && -z $(staging_left) && -z $(uid_locks) && -z $(node_shares) ]] &&
        (($(fds "$CRI_PID") <= want_fds)) && [[ $(mounts "$CRI_PID") == "$want_mounts" ]]; do
        if ((SECONDS >= deadline)); then
            [[ -z $(pull_cgroup_dirs) ]] || fail "pull cgroups left under $CG_PARENT: $(pull_cgroup_dirs)"
            [[ -z $(staging_left) ]] || fail "staging left in $T/staging: $(staging_left)"
            [[ -z $(uid_locks) ]] || fail "uid locks left: $(uid_locks)"
            [[ -z $(node_shares) ]] || fail "node-share registrations left: $(node_shares)"
            (($(fds "$CRI_PID") <= want_fds)) || fail "the service holds $(fds "$CRI_PID") descriptors, $want_fds after the first pull: $(ls -l "/proc/$CRI_PID/fd")"
            [[ $(mounts "$CRI_PID") == "$want_mounts" ]] || fail "the service's mounts changed: $(diff <(echo "$want_mounts") <(mounts "$CRI_PID"))"
            return 1
        fi
        sleep 0.2
    done
}

@test "cri load: 20 concurrent crictl pulls of 5 images (and one of a missing image) through resets, 503s and a slow mirror under node caps: all land (the missing one NotFound), one pull per image, the node bandwidth and layer budgets hold, nothing is left" {
    ctrd2_require
    ctrd_up
    start_faultproxy REG "$REGISTRY_URL"
    start_faultproxy MIR "$REGISTRY_URL"
    # The mirror is slow (every blob trickled at 2 MiB/s) and faulty
    # (resets mid-blob, 503s); the registry behind it resets blobs too.
    faultproxy_rules MIR '[
        {"match": {"path": "/blobs/"}, "count": 3, "reset_after": 65536},
        {"match": {"path": "/blobs/"}, "count": 2, "status": 503, "body": "mirror busy"},
        {"match": {"path": "/manifests/"}, "count": 2, "status": 503, "body": "mirror busy"},
        {"match": {"path": "/blobs/"}, "trickle": 2097152}]'
    faultproxy_rules REG '[{"match": {"path": "/blobs/"}, "count": 2, "reset_after": 32768}]'
    # The registry's credential comes with each request (crictl --creds);
    # the mirror's is the node's (--authfile keyed by the mirror's host);
    # each proxy has its own CA.
    mkdir -p "$T/node/certs"
    cp "$FP_REG_CA" "$T/node/certs/reg.crt"
    cp "$FP_MIR_CA" "$T/node/certs/mir.crt"
    cp "$FP_MIR_AUTHFILE" "$T/node/auth.json"
    printf '[[registry]]\nlocation = "%s"\n[[registry.mirror]]\nlocation = "%s"\n' "$FP_REG_HOST" "$FP_MIR_HOST" >"$T/node/registries.conf"
    chmod 700 "$T/node" "$T/node/certs"
    chmod 600 "$T/node/auth.json" "$T/node/registries.conf" "$T/node/certs"/*
    ph_up --cert-dir "$T/node/certs" --authfile "$T/node/auth.json" --registries-conf "$T/node/registries.conf" \
        --retry-delay 100ms --node-bandwidth 1MiB/s --node-parallel-layers "$NODE_LAYERS" --max-parallel 4 --debug

    # The baseline: after a first pull, the service's descriptors and
    # mounts.
    run pcrictl pull --creds "$(creds)" "$FP_REG_HOST/fixtures/tiny:latest"
    assert_success
    local base_fds base_mounts
    assert_nothing_left 100000 "$(mounts "$CRI_PID")"
    base_fds=$(fds "$CRI_PID")
    base_mounts=$(mounts "$CRI_PID")

    # The registry held (SIGSTOP) until all 20 requests, and one for an
    # image the registry does not have, have reached the service: 6 pulls
    # start or wait for a --max-parallel slot, 15 requests join one of them.
    local i pids=() img
    reg_stop
    for ((i = 0; i < LOAD_REQUESTS; i++)); do
        img="$FP_REG_HOST/fixtures/load$((i % LOAD_IMAGES)):latest"
        { rc=0; pcrictl pull --creds "$(creds)" "$img" >"$T/pull$i.out" 2>&1 || rc=$?; echo "$rc" >"$T/pull$i.rc"; } &
        pids+=($!)
    done
    { rc=0; pcrictl pull --creds "$(creds)" "$FP_REG_HOST/fixtures/absent:latest" >"$T/absent.out" 2>&1 || rc=$?; echo "$rc" >"$T/absent.rc"; } &
    pids+=($!)
    wait_lines '"msg":"pull joined"' $((LOAD_REQUESTS - LOAD_IMAGES)) || return
    wait_lines '"msg":"pull waiting"' 2 || return
    # --max-parallel 4: four of the six run (and the first pull), two
    # wait; none can end while the registry is held.
    wait_lines '"msg":"pull started"' $((1 + 4)) || return
    assert_equal "$(count_lines '"msg":"pull started"')" $((1 + 4))
    # Each of the four has counted the four (nodeShare's debug line): the
    # budgets are split four ways before the first byte.
    wait_lines '"msg":"node share","pulls":4,' 4 || return
    local t0 t1
    t0=$(date +%s%N)
    reg_cont
    wait "${pids[@]}"
    t1=$(date +%s%N)

    # Every request: OK with its image's ID; the absent image NotFound
    # with the registry's reason.
    local id
    for ((i = 0; i < LOAD_REQUESTS; i++)); do
        id=$(config_digest "fixtures/load$((i % LOAD_IMAGES)):latest")
        [[ $(cat "$T/pull$i.rc") == 0 ]] && grep -qF "$id" "$T/pull$i.out" ||
            fail "request $i (load$((i % LOAD_IMAGES))): exit $(cat "$T/pull$i.rc"): $(cat "$T/pull$i.out")"
    done
    [[ $(cat "$T/absent.rc") != 0 ]] && grep -q 'code = NotFound.*pullhelper: not_found:' "$T/absent.out" ||
        fail "the absent image: exit $(cat "$T/absent.rc"): $(cat "$T/absent.out")"
    assert_equal "$(pull_lines | grep -c '"code":"OK"')" $((1 + LOAD_REQUESTS))
    assert_equal "$(pull_lines | grep -c '"code":"NotFound"')" 1
    assert_equal "$(pull_lines | grep -c '"shared":true')" $((LOAD_REQUESTS - LOAD_IMAGES))
    # One pull per image, the first and the absent one included: 7 started.
    assert_equal "$(count_lines '"msg":"pull started"')" $((1 + LOAD_IMAGES + 1))
    # The faults happened, and the mirror served blobs.
    (($(faultproxy_count MIR '/blobs/') > 0)) || fail "the mirror was never asked for a blob"
    local fault_lines
    fault_lines=$(cat "$FP_MIR_LOG" "$FP_REG_LOG" | grep -cE '"action":"(reset_after|status)"' || true)
    ((fault_lines >= 5)) || fail "only $fault_lines faults were injected: $(cat "$FP_MIR_LOG" "$FP_REG_LOG")"

    # The node cap: every blob byte either proxy sent (the first pull's
    # few KiB included; the rest all during the pulls' window, the
    # registry being held before it), against 1 MiB/s over that window,
    # +15 %. Allowed on top, what the budget's mechanics let through: the
    # four running pulls registered their shares before the window opened,
    # the two waiting ones register later and the others learn of each
    # within 0.5 s (nodeShareTick): at most a second of the whole cap;
    # each token bucket may start with a quarter second's burst of its
    # share (six pulls: at most 1.5 s of the cap); and the bytes of the
    # injected resets the client never read (3 x 64 KiB + 2 x 32 KiB). An upper
    # bound: a busy machine only makes the pulls slower. The lower side
    # (how much of the cap was used) depends on the machine's load, so it
    # is printed, not asserted.
    local bytes ms allowed
    bytes=$(($(faultproxy_bytes MIR '/blobs/') + $(faultproxy_bytes REG '/blobs/')))
    ms=$(((t1 - t0) / 1000000))
    ((bytes >= LOAD_IMAGES * 2 * 1048576)) || fail "only $bytes blob bytes were sent for $LOAD_IMAGES images of 2 MiB"
    allowed=$((NODE_CAP * ms / 1000 * 115 / 100 + NODE_CAP * 5 / 2 + 3 * 65536 + 2 * 32768))
    ((bytes <= allowed)) ||
        fail "$bytes blob bytes in ${ms} ms: over the node cap ($NODE_CAP B/s +15 %, at most $allowed)"
    echo "# node cap 1MiB/s, $LOAD_REQUESTS requests of $LOAD_IMAGES images: $bytes blob bytes in ${ms} ms = $((bytes * 1000 / ms / 1024)) KiB/s, $((bytes * 1000 * 100 / ms / NODE_CAP)) % of the cap (at most $((allowed * 1000 / ms / 1024)) KiB/s allowed)" >&3

    # The layer budget: layer downloads in flight at once, both proxies
    # together, each request from its arrival to its log line (which lies
    # within the client's request, so this undercounts, never overcounts:
    # an upper bound holds on a busy machine). The budget is 4, split
    # evenly (at least one a pull); a pull keeps the downloads it started
    # under a larger share, which it had only once two of the first four
    # were done, and then at most one image pull (the waiting fifth) can
    # join: at most 2 + 2 + 1. Without the budget each of the four runs
    # both its layers at once: 8.
    local layers="" most
    for ((i = 0; i < LOAD_IMAGES; i++)); do
        layers+=" $(_blobs_of "$(registry_manifest "fixtures/load$i:latest")" | tail -n +2 | tr '\n' ' ')"
    done
    most=$(in_flight "$layers")
    ((most >= 1 && most <= NODE_LAYERS + 1)) ||
        fail "$most layer downloads at once under --node-parallel-layers $NODE_LAYERS (at most $((NODE_LAYERS + 1)))"
    echo "# node-parallel-layers $NODE_LAYERS: at most $most layer downloads at once" >&3

    # Nothing left: no cgroup, staging, partial cache, uid lock or share;
    # the service's mounts and descriptors as after the first pull.
    assert_nothing_left "$base_fds" "$base_mounts"
    assert_secret_absent -f "$T/cri.log" "$T/cri.out"
}

@test "cri load: a crashed pull fails only its request (Internal); the pull running beside it lands; nothing is left" {
    ctrd2_require
    ctrd_up
    PH_BIN=$PULLHELPER_HOSTILE_BIN
    [[ -x $PH_BIN ]] || fail "no hostile build at $PH_BIN (make build-hostile)"
    # The hostile build's child crashes (a panic) when its image is
    # fixtures/crashme, and pulls as usual otherwise.
    PULLHELPER_HOSTILE=after-drop:crash-image PULLHELPER_HOSTILE_ARG=fixtures/crashme \
        ph_up --cert-dir "$REGISTRY_CERT_DIR"
    local base_mounts pid
    base_mounts=$(mounts "$CRI_PID")
    reg_stop
    pcrictl pull --creds "$(creds)" "$REGISTRY_HOST/fixtures/tiny:latest" >"$T/tiny.out" 2>&1 &
    pid=$!
    wait_lines '"msg":"pull started"' 1 || return
    local deadline=$((SECONDS + 30))
    until [[ -n $(cgroup_procs) ]]; do
        ((SECONDS < deadline)) || { fail "the tiny pull has no process in a cgroup under $CG_PARENT"; return; }
        sleep 0.05
    done
    # While it runs (held by the stopped registry), the crash.
    run pcrictl pull --creds "$(creds)" "$REGISTRY_HOST/fixtures/crashme:latest"
    echo "$output"
    assert_failure
    assert_output --partial "code = Internal"
    assert_output --partial "pullhelper: internal: the pull child exited without a result"
    [[ $(pull_lines | grep fixtures/crashme) == *'"code":"Internal"'* ]] || fail "crash line: $(pull_lines)"
    _ph_pid_alive "$CRI_PID" || fail "the service died with the crashed pull: $(cat "$T/cri.log")"
    reg_cont
    wait "$pid" || fail "the pull beside the crash failed: $(cat "$T/tiny.out")"
    grep -qF "$(config_digest fixtures/tiny:latest)" "$T/tiny.out" || fail "tiny: $(cat "$T/tiny.out")"
    # The service still serves a next pull of the crashing image's
    # neighbour, and nothing is left.
    run pcrictl pull --creds "$(creds)" "$REGISTRY_HOST/fixtures/load0:latest"
    assert_success
    assert_nothing_left 100000 "$base_mounts"
}

# layer_of REPO: the digest of the one layer of REPO:latest.
layer_of() {
    _blobs_of "$(registry_manifest "$1:latest")" | sed -n 2p
}

# wait_kept LAYER BYTES: until the partial-blob cache below
# --containerd-staging holds at least BYTES of LAYER (at most 60 s); prints
# the file.
wait_kept() {
    local f deadline=$((SECONDS + 60))
    until f=$(find "$T/staging" -path '*/.pullhelper-partial-*/blobs/sha256-'"${1#sha256:}"'.partial' 2>/dev/null | head -n1) &&
        [[ -n $f ]] && (($(stat -c %s "$f") >= $2)); do
        ((SECONDS < deadline)) || { fail "the partial-blob cache never held $2 bytes of $1: $(find "$T/staging" -ls)"; return 1; }
        sleep 0.1
    done
    echo "$f"
}

# layer_gets FROM LAYER: the proxy's requests for LAYER after log line
# FROM, each RANGE:STATUS:BYTES.
layer_gets() {
    tail -n "+$(($1 + 1))" "$FP_REG_LOG" | "$PH_PYTHON" -c '
import json, sys
rs = [json.loads(l) for l in sys.stdin]
rs = [e for e in rs if e["path"].endswith("/blobs/" + sys.argv[1])]
print(" ".join("%s:%s:%d" % (e["range"] or "-", e["status"], e["bytes"]) for e in rs))' "$2"
}

@test "cri load: kill -9 of the service while two images are mid-blob, restart on the same socket, pull again: neither image's kept bytes are fetched again; the killed pulls' cgroups, uid locks and staging are reclaimed" {
    ctrd2_require
    ctrd_up
    start_faultproxy REG "$REGISTRY_URL"
    local at=3145728 i repo layer=() size=() f=() kept=() pid=()
    # Each layer stalls after 3 MiB (its first request only).
    for i in 0 1; do
        repo=fixtures/resume$i
        layer[i]=$(layer_of "$repo")
        size[i]=$(registry_curl -sI "/v2/$repo/blobs/${layer[i]}" | awk 'tolower($1) == "content-length:" {print $2+0}')
        ((size[i] > 2 * at)) || fail "layer ${layer[i]}: size '${size[i]}'"
    done
    faultproxy_rules REG "[{\"match\": {\"path\": \"/blobs/${layer[0]}\"}, \"count\": 1, \"stall_after\": $at},
        {\"match\": {\"path\": \"/blobs/${layer[1]}\"}, \"count\": 1, \"stall_after\": $at}]"
    ph_up --cert-dir "$FP_REG_CERT_DIR"
    local base_mounts
    base_mounts=$(mounts "$CRI_PID")
    for i in 0 1; do
        pcrictl pull --creds "$(creds)" "$FP_REG_HOST/fixtures/resume$i:latest" >"$T/pull$i.out" 2>&1 &
        pid[i]=$!
    done
    # Both images' 3 MiB are in their partial-blob caches (below
    # --containerd-staging), each its own.
    for i in 0 1; do
        f[i]=$(wait_kept "${layer[i]}" "$at") || return
    done
    [[ $(dirname "${f[0]}") != "$(dirname "${f[1]}")" ]] || fail "one cache for two images: ${f[*]}"
    [[ -n $(cgroup_procs) ]] || fail "no pull process in a cgroup under $CG_PARENT"
    kill -KILL "$CRI_PID"
    wait "$CRI_PID" 2>/dev/null || true
    # The children die with their parent (parent-death signal).
    local deadline=$((SECONDS + 30))
    until [[ -z $(cgroup_procs) ]]; do
        ((SECONDS < deadline)) || { fail "the pulls' processes outlived the service: $(cgroup_procs)"; return; }
        sleep 0.1
    done
    for i in 0 1; do
        wait "${pid[i]}" && fail "crictl pull $i succeeded after kill -9 of the service: $(cat "$T/pull$i.out")"
        kept[i]=$(stat -c %s "${f[i]}")
        ((kept[i] >= at && kept[i] < size[i])) || fail "image $i: kept ${kept[i]} bytes of ${size[i]}"
    done
    [[ -S $PH_SOCK ]] || fail "no stale socket left by the kill (nothing to replace)"
    echo "# after kill -9: cgroups $(pull_cgroup_dirs | wc -l), staging $(staging_left | wc -l), uid locks $(uid_locks | wc -l), kept ${kept[*]} bytes" >&3

    # Restart on the same socket (the stale one is replaced), pull both
    # again.
    local from
    from=$(wc -l <"$FP_REG_LOG")
    ph_up --cert-dir "$FP_REG_CERT_DIR"
    for i in 1 0; do
        run pcrictl pull --creds "$(creds)" "$FP_REG_HOST/fixtures/resume$i:latest"
        echo "$output"
        assert_success
        assert_output --partial "$(config_digest "fixtures/resume$i:latest")"
        # The layer was asked for from the kept offset on, and only the
        # rest was sent.
        assert_equal "$(layer_gets "$from" "${layer[i]}")" "bytes=${kept[i]}-:206:$((size[i] - kept[i]))"
        [[ $(pull_lines | tail -n1) == *"\"kept_bytes\":${kept[i]}"* ]] ||
            fail "the pull line does not say kept_bytes ${kept[i]}: $(pull_lines | tail -n1)"
    done
    # The killed pulls' cgroups, uid locks, staging and caches: reclaimed.
    assert_nothing_left 100000 "$base_mounts"
}
