#!/usr/bin/env bats
#
# Reliability: the pre-flight space check, a full disk mid-pull (exit 9, DEST
# unchanged, nothing left behind), and `pullhelper gc` removing what a kill -9
# left while never touching what a live pull owns.
#
# Every pullhelper here runs in a mount namespace this file creates (kept
# alive by a bind mount of its /proc/PID/ns/mnt, entered with nsenter), where
# /run/pullhelper is a private tmpfs and small tmpfs mounts stand in for a full
# disk: the uid and commit locks these tests leave and sweep are theirs alone
# (another pullhelper on this machine sweeps unheld uid locks at every
# allocation), and no mount leaks to the host. Cgroups go under a parent of
# this file's own for the same reason. Network: 127.0.0.1 only.

load helpers

setup_file() {
    [[ $(id -u) -eq 0 ]] || return 0
    start_registry
    push_fixture big
    # 3 MiB of incompressible data: does not fit a 2 MiB filesystem.
    push_fixture_args space-big fixtures/space-big -layers 1 -layer-size 3145728 -compressible 0 -seed 110
    # Two incompressible layers of 1 MiB: fit a 3 MiB filesystem once.
    push_fixture_args space-fit fixtures/space-fit -layers 2 -layer-size 1048576 -compressible 0 -seed 111
    # 8 MiB of compressible text, about 63 KiB compressed: its declared
    # sizes fit anywhere, its docker-archive (uncompressed layers) does not
    # fit 4 MiB.
    push_fixture_args space-bomb fixtures/space-bomb -layers 1 -layer-size 8388608 -compressible 1 -seed 112
    push_fixture tiny

    # The mount namespace: a private mount holding the namespace file.
    PH_NSDIR=$BATS_FILE_TMPDIR/ns
    mkdir -p "$PH_NSDIR"
    mount --bind "$PH_NSDIR" "$PH_NSDIR"
    mount --make-private "$PH_NSDIR"
    touch "$PH_NSDIR/mnt"
    unshare --mount="$PH_NSDIR/mnt" --propagation private true
    mkdir -p /run/pullhelper
    nsenter --mount="$PH_NSDIR/mnt" -- mount -t tmpfs -o size=1m,mode=0700 ph110-run /run/pullhelper
    # pullhelper, run inside that namespace (nsenter execs: the pid is
    # pullhelper's own).
    PH_REAL=$(cd "$(dirname "$PULLHELPER")" && pwd)/$(basename "$PULLHELPER")
    cat >"$BATS_FILE_TMPDIR/pullhelper-in-ns" <<EOF
#!/bin/sh
exec nsenter --mount="$PH_NSDIR/mnt" -- "$PH_REAL" "\$@"
EOF
    chmod +x "$BATS_FILE_TMPDIR/pullhelper-in-ns"
    PH_CGPARENT=/ph110-$$-$RANDOM
    export PH_NSDIR PH_REAL PH_CGPARENT
}

teardown_file() {
    _kill_background_pull
    stop_tarpit
    if [[ -n ${PH_NSDIR:-} ]]; then
        umount "$PH_NSDIR/mnt" 2>/dev/null || true
        umount "$PH_NSDIR" 2>/dev/null || true
    fi
    if [[ -n ${PH_CGPARENT:-} ]]; then
        local d
        for d in /sys/fs/cgroup/*"$PH_CGPARENT" /sys/fs/cgroup/*/*"$PH_CGPARENT"; do
            [[ -d $d ]] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
        done
    fi
    stop_registry
}

setup() {
    skip_if_not_root "mount namespaces, tmpfs mounts and cgroups need root"
    ph_test_setup
    PULLHELPER=$BATS_FILE_TMPDIR/pullhelper-in-ns
}

teardown() {
    _kill_background_pull
    stop_tarpit
    if [[ -n ${PH_NSDIR:-} && -n ${OUT:-} ]]; then
        ns_exec umount "$OUT/small" 2>/dev/null || true
    fi
}

# ns_exec CMD...: run CMD in this file's mount namespace.
ns_exec() {
    nsenter --mount="$PH_NSDIR/mnt" -- "$@"
}

# small_fs SIZE: a tmpfs of SIZE at $OUT/small inside the namespace (root's,
# 0755, like a DEST's parent must be).
small_fs() {
    mkdir -p "$OUT/small"
    ns_exec mount -t tmpfs -o "size=$1,mode=0755" ph110-small "$OUT/small"
}

# _kill_background_pull: kill a background pullhelper of this file by its
# recorded pid only.
_kill_background_pull() {
    local f=$BATS_FILE_TMPDIR/bg.pid pid
    [[ -f $f ]] || return 0
    pid=$(<"$f")
    if _ph_pid_alive "$pid" && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q pullhelper; then
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
}

# start_background_pull PROGRESS_FILE ARGS...: pullhelper pull ARGS... in the
# background (in the namespace), progress on fd 3; sets BG_PID.
start_background_pull() {
    local progress=$1
    shift
    "$PULLHELPER" pull --progress-fd 3 "$@" 3>"$progress" >"$OUT/bg.out" 2>"$OUT/bg.err" &
    BG_PID=$!
    echo "$BG_PID" >"$BATS_FILE_TMPDIR/bg.pid"
}

# wait_background_pull SECONDS: wait (bounded) for it to exit; sets BG_RC.
wait_background_pull() {
    local deadline=$((SECONDS + ${1:-20}))
    while _ph_pid_alive "$BG_PID"; do
        if ((SECONDS >= deadline)); then
            kill -KILL "$BG_PID" 2>/dev/null || true
            fail "pullhelper (pid $BG_PID) did not exit within ${1:-20}s; stderr: $(cat "$OUT/bg.err")"
            return
        fi
        sleep 0.05
    done
    BG_RC=0
    wait "$BG_PID" || BG_RC=$?
    rm -f "$BATS_FILE_TMPDIR/bg.pid"
}

# start_stalled_pull DEST_PATH: pull big into oci:DEST_PATH through a tarpit
# that stops forwarding after 1 MB, and wait until a layer is being fetched
# (the pull is then stalled mid-layer for as long as the test wants).
start_stalled_pull() {
    start_tarpit 1000000
    start_background_pull "$OUT/progress.jsonl" --authfile "$TARPIT_AUTHFILE" \
        --cert-dir "$REGISTRY_CERT_DIR" --stall-timeout 5m --cgroup-parent "$PH_CGPARENT" \
        "$TARPIT_HOST/fixtures/big" "oci:$1"
    wait_for_file_match "$OUT/progress.jsonl" '"type":"layer_start"' 30
}

# pull_cgroups: the per-pull cgroup directories under this file's parent, in
# the first v1 hierarchy that has them (pids) or the unified one.
pull_cgroups() {
    local d
    for d in /sys/fs/cgroup/pids /sys/fs/cgroup/memory /sys/fs/cgroup/unified /sys/fs/cgroup; do
        if [[ -d $d$PH_CGPARENT ]]; then
            find "$d$PH_CGPARENT" -mindepth 1 -maxdepth 1 -type d -name 'pull-*'
            return
        fi
    done
}

# blob_gets FROM_LINE: blob GETs in the registry log after line FROM_LINE
# (up to a barrier of our own, so every earlier request is logged).
blob_gets() {
    local from=$1 to
    to=$(registry_log_barrier) || return
    sed -n "$((from + 1)),${to}p" "$REGISTRY_LOG" | grep -cE '"GET /v2/[^ ]*/blobs/sha256:' || true
}

# tree_sum DIR: one checksum of every file's path, mode and content (in the
# namespace, where the small filesystem is mounted).
tree_sum() {
    # The partial-blob cache beside DEST keeps what a failed pull received
    # (tests/120-resume.bats): not DEST's state.
    ns_exec sh -c 'cd "$1" && find . -mindepth 1 -path "./.pullhelper-partial-*" -prune -o -printf "%p %m %s\n" | sort && find . -path "./.pullhelper-partial-*" -prune -o -type f -exec sha256sum {} + | sort' sh "$1" | sha256sum
}

###############################################################################
# The pre-flight space check

@test "space: an image bigger than DEST's filesystem is refused before any blob is fetched (exit 9, both numbers)" {
    small_fs 2m
    local before
    before=$(registry_log_barrier)
    run_pullhelper 9 pull "${PH_OPTS[@]}" --cgroup-parent "$PH_CGPARENT" \
        "$REGISTRY_HOST/fixtures/space-big" "oci:$OUT/small/dest"
    assert_json_error destination
    [[ $ph_error_message =~ needs\ ([0-9]+)\ bytes.*DEST\'s\ filesystem\ has\ ([0-9]+)\ free ]] ||
        fail "message does not name both numbers: $ph_error_message"
    local need=${BASH_REMATCH[1]} free=${BASH_REMATCH[2]}
    ((need > 3145728 && free < 2097152 && free > 0)) || fail "need $need / free $free are not the image's and the tmpfs's"
    assert_equal "$(blob_gets "$before")" 0
    # It did ask for the manifest (the check is not simply sending nothing).
    sed -n "$((before + 1)),\$p" "$REGISTRY_LOG" | grep -qE '"GET /v2/fixtures/space-big/manifests/' ||
        fail "no manifest request logged: the log check sees nothing"
    run ns_exec ls -A "$OUT/small"
    assert_output ""
}

@test "space: a re-pull that needs no new blob passes on a nearly full disk (blobs DEST has are not counted)" {
    small_fs 3m
    run_pullhelper pull "${PH_OPTS[@]}" --cgroup-parent "$PH_CGPARENT" \
        "$REGISTRY_HOST/fixtures/space-fit" "oci:$OUT/small/dest:one"
    # The disk now has less free than the image's size...
    local free
    free=$(ns_exec stat -f -c '%a*%S' "$OUT/small")
    free=$((free))
    ((free < 2 * 1048576)) || fail "the tmpfs still has $free bytes free: the test proves nothing"
    # ...and the same image under another tag needs nothing new.
    run_pullhelper pull "${PH_OPTS[@]}" --cgroup-parent "$PH_CGPARENT" \
        "$REGISTRY_HOST/fixtures/space-fit" "oci:$OUT/small/dest:two"
    assert_json_result
    run ns_exec cat "$OUT/small/dest/index.json"
    assert_output --partial '"org.opencontainers.image.ref.name":"two"'
    assert_output --partial '"org.opencontainers.image.ref.name":"one"'
    # A different image of the same size still does not fit.
    run_pullhelper 9 pull "${PH_OPTS[@]}" --cgroup-parent "$PH_CGPARENT" \
        "$REGISTRY_HOST/fixtures/space-big" "oci:$OUT/small/dest:three"
    assert_json_error destination
    assert_no_staging "$OUT/small"
}

###############################################################################
# A full disk mid-pull

@test "space: a docker-archive that outgrows DEST's filesystem mid-pull is exit 9; the old DEST is unchanged, no staging left" {
    small_fs 4m
    # An existing DEST: a small image's archive.
    run_pullhelper pull "${PH_OPTS[@]}" --cgroup-parent "$PH_CGPARENT" \
        "$REGISTRY_HOST/fixtures/tiny" "docker-archive:$OUT/small/img.tar"
    local sum
    sum=$(tree_sum "$OUT/small")
    local before
    before=$(registry_log_barrier)
    # The declared sizes (~63 KiB) pass the pre-flight; the uncompressed
    # 8 MiB layer does not fit 4 MiB.
    run_pullhelper 9 pull "${PH_OPTS[@]}" --cgroup-parent "$PH_CGPARENT" \
        "$REGISTRY_HOST/fixtures/space-bomb" "docker-archive:$OUT/small/img.tar"
    assert_json_error destination
    [[ $ph_error_message == *"no space left on device"* ]] || fail "message does not say the disk is full: $ph_error_message"
    (($(blob_gets "$before") > 0)) || fail "no blob was fetched: the pre-flight refused it, not the full disk"
    assert_equal "$(tree_sum "$OUT/small")" "$sum"
    run ns_exec find "$OUT/small" -maxdepth 1 -name '.pullhelper-staging-*'
    assert_output ""
}

###############################################################################
# --no-isolation: the copy's secrets stay in memory

@test "--no-isolation SIGKILLed mid-pull: no file under TMPDIR, /tmp, /var/tmp or /run holds the password or the client key; nothing left" {
    # A client key pair beside the registry's CA: the copy loads it (the
    # registry asks for none) and writes it with the auth file into its
    # configuration directory, which was $TMPDIR/pullhelper-config-* on disk.
    local certs=$OUT/certs tmpdir=$OUT/tmpdir pat=$OUT/secrets
    mkdir -p "$certs" "$tmpdir"
    cp "$REGISTRY_CERT_DIR"/*.crt "$certs/"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$certs/client.key" -out "$certs/client.cert" \
        -days 1 -subj /CN=ph110-client 2>/dev/null || fail "openssl could not make a client pair"
    start_tarpit 1000000
    (
        umask 077
        tr -d '\n' <"$REGISTRY_DIR/password" >"$pat"
        printf '\n%s\n' "$(_ph_auth_field)" >>"$pat"
        sed -n 2p "$certs/client.key" >>"$pat" # a line of the private key's base64
    )
    [[ $(grep -c . "$pat") == 3 ]] || fail "the secrets to look for are not all known"
    touch "$OUT/marker"
    TMPDIR=$tmpdir start_background_pull "$OUT/progress.jsonl" --no-isolation --authfile "$TARPIT_AUTHFILE" \
        --cert-dir "$certs" --stall-timeout 5m "$TARPIT_HOST/fixtures/big" "oci:$OUT/dest"
    wait_for_file_match "$OUT/progress.jsonl" '"type":"layer_start"' 30
    kill -KILL "$BG_PID"
    wait_background_pull 20
    assert_equal "$BG_RC" 137

    # Every regular file written since the pull started, as the pull saw
    # the tree (its mount namespace), but the test's own copies of the
    # secrets.
    local hits
    hits=$(ns_exec find "$tmpdir" /tmp /var/tmp /run \( -path "$REGISTRY_DIR" -o -path "$TARPIT_DIR" -o -path "$certs" \
        -o -path "$pat" -o -path /run/user \) -prune -o -type f -newer "$OUT/marker" -size -4M -print0 |
        xargs -0 -r grep -lF -f "$pat" -- 2>/dev/null || true)
    [[ -z $hits ]] || fail "files holding the password, its auth field or the client key after the kill: $hits"
    run ns_exec find "$tmpdir" /tmp /var/tmp -maxdepth 1 -name 'pullhelper-config-*'
    assert_output ""
    # The killed pull's staging beside DEST is gc's, as ever.
    run_pullhelper gc "oci:$OUT/dest"
    assert_no_staging "$OUT"
}

@test "--no-isolation: containers/image's blob-info cache stays in the copy's private configuration; nothing is created under /var/lib" {
    skip_unless_cmd unshare "needed for a mount namespace of the test's own"
    # /var/lib, in a mount namespace of its own inside this file's, is an
    # empty tmpfs: whatever the pull creates there is seen, and nothing
    # reaches the host's. (containers/image's default cache for root is
    # /var/lib/containers/cache, which it creates.)
    run --separate-stderr nsenter --mount="$PH_NSDIR/mnt" -- unshare -m --propagation private sh -c \
        'mount -t tmpfs ph110-varlib /var/lib || exit 90; "$@" >/dev/null || exit 91; find /var/lib -mindepth 1' \
        sh "$PH_REAL" pull --no-isolation "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    echo "$stderr"
    assert_success
    assert_output ""
    [[ -f $OUT/dest/index.json ]] || fail "the pull wrote no index.json"
}

###############################################################################
# pullhelper gc

@test "gc: removes the staging, uid lock and cgroup a kill -9 left mid-pull, reports each, then finds nothing" {
    start_stalled_pull "$OUT/dest"
    local staging lock cg
    staging=$(find "$OUT" -maxdepth 1 -name '.pullhelper-staging-*')
    [[ -n $staging ]] || fail "no staging directory while the pull runs"
    lock=$(ns_exec find /run/pullhelper/uids -name '*.lock')
    [[ -n $lock ]] || fail "no uid lock while the pull runs"
    cg=$(pull_cgroups)
    [[ -n $cg ]] || fail "no pull cgroup under $PH_CGPARENT while the pull runs"

    kill -KILL "$BG_PID"
    wait_background_pull 20
    assert_equal "$BG_RC" 137
    # The child dies with its parent (parent-death signal): wait, bounded,
    # until the cgroup is empty, so that what is left is truly stale.
    local deadline=$((SECONDS + 20))
    while [[ -s $cg/cgroup.procs ]]; do
        ((SECONDS < deadline)) || fail "the pull's cgroup still has processes: $(cat "$cg/cgroup.procs")"
        sleep 0.05
    done
    [[ -d $staging ]] || fail "kill -9 left no staging: nothing to collect"
    ns_exec test -e "$lock" || fail "kill -9 left no uid lock: nothing to collect"
    [[ -d $cg ]] || fail "kill -9 left no cgroup: nothing to collect"

    run_pullhelper gc --cgroup-parent "$PH_CGPARENT" "oci:$OUT/dest"
    assert_json_result
    assert_equal "$(json_get '.staging' <<<"$output")" "[\"$staging\"]"
    assert_equal "$(json_get '.uid_locks' <<<"$output")" "[\"$lock\"]"
    assert_equal "$(json_get '.cgroups' <<<"$output")" "[\"$PH_CGPARENT/$(basename "$cg")\"]"
    # The pull lock of the killed pull (one per DEST and image) is swept
    # with the commit locks; no commit lock (the kill was not in a commit).
    [[ $(json_get '.commit_locks' <<<"$output") =~ ^\[\"/run/pullhelper/locks/pull-[0-9a-f]{32}\.lock\"\]$ ]] ||
        fail "commit_locks: want the killed pull's pull lock alone: $output"
    [[ ! -e $staging ]] || fail "gc left $staging"
    ! ns_exec test -e "$lock" || fail "gc left $lock"
    [[ ! -e $cg ]] || fail "gc left $cg"
    assert_no_staging "$OUT"

    run_pullhelper gc --cgroup-parent "$PH_CGPARENT" "$OUT/dest"
    assert_output '{"staging":[],"uid_locks":[],"commit_locks":[],"cgroups":[],"partial":[]}'
}

@test "the next pull reclaims the uid lock a kill -9 left, even one that allocates no dynamic uid: removed at its start, reported and logged" {
    start_stalled_pull "$OUT/dest"
    local lock cg
    lock=$(ns_exec find /run/pullhelper/uids -name '*.lock')
    [[ -n $lock ]] || fail "no uid lock while the pull runs"
    cg=$(pull_cgroups)
    kill -KILL "$BG_PID"
    wait_background_pull 20
    assert_equal "$BG_RC" 137
    local deadline=$((SECONDS + 20))
    while [[ -s $cg/cgroup.procs ]]; do
        ((SECONDS < deadline)) || fail "the pull's cgroup still has processes: $(cat "$cg/cgroup.procs")"
        sleep 0.05
    done
    ns_exec test -e "$lock" || fail "kill -9 left no uid lock: nothing to reclaim"

    # --user 65534: this pull takes no dynamic uid (whose allocation sweeps
    # too); the sweep at every pull's start removes the lock all the same.
    run_pullhelper pull "${PH_OPTS[@]}" --user 65534 --cgroup-parent "$PH_CGPARENT" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/other"
    assert_json_result
    ! ns_exec test -e "$lock" || fail "the next pull left the stale uid lock $lock"
    [[ $(json_get '.isolation.reclaimed' <<<"$output") == *"\"$lock\""* ]] ||
        fail "isolation.reclaimed does not name $lock: $(json_get '.isolation.reclaimed' <<<"$output")"
    [[ $stderr == *"reclaimed a stale uid lock"*"$lock"* ]] || fail "the reclaim is not logged: $stderr"
    # The killed pull's staging beside its own DEST: gc's.
    run_pullhelper gc --cgroup-parent "$PH_CGPARENT" "oci:$OUT/dest"
    assert_no_staging "$OUT"
}

@test "gc: a live pull's staging, uid lock and cgroup survive; an unheld commit lock goes, a held one stays" {
    start_stalled_pull "$OUT/dest"
    local staging lock cg
    staging=$(find "$OUT" -maxdepth 1 -name '.pullhelper-staging-*')
    lock=$(ns_exec find /run/pullhelper/uids -name '*.lock')
    cg=$(pull_cgroups)
    [[ -n $staging && -n $lock && -n $cg ]] || fail "the live pull has no staging ($staging), lock ($lock) or cgroup ($cg)"
    # Commit lock files as lockInode names them: one nobody holds (what a
    # pullhelper killed while committing leaves), one held.
    ns_exec mkdir -p /run/pullhelper/locks
    ns_exec touch /run/pullhelper/locks/1-1.lock
    mkfifo "$OUT/hold"
    ns_exec flock /run/pullhelper/locks/2-2.lock cat "$OUT/hold" &
    local holder=$!
    exec {hold_fd}>"$OUT/hold"
    local deadline=$((SECONDS + 10))
    while ns_exec flock -n /run/pullhelper/locks/2-2.lock true; do
        ((SECONDS < deadline)) || fail "the holder never took its flock"
        sleep 0.05
    done

    run_pullhelper gc --cgroup-parent "$PH_CGPARENT" "oci:$OUT/dest"
    exec {hold_fd}>&-
    wait "$holder" || true
    assert_output '{"staging":[],"uid_locks":[],"commit_locks":["/run/pullhelper/locks/1-1.lock"],"cgroups":[],"partial":[]}'
    [[ -d $staging ]] || fail "gc removed the live pull's staging"
    ns_exec test -e "$lock" || fail "gc removed the live pull's uid lock"
    [[ -d $cg ]] || fail "gc removed the live pull's cgroup"
    ns_exec test -e /run/pullhelper/locks/2-2.lock || fail "gc removed a held commit lock"
    _ph_pid_alive "$BG_PID" || fail "the pull died during gc"

    # The pull is intact: interrupted now, it cleans up as ever.
    kill -TERM "$BG_PID"
    wait_background_pull 20
    assert_equal "$BG_RC" 143
    assert_no_staging "$OUT"
    ns_exec rm -f /run/pullhelper/locks/2-2.lock
}

# dead_staging DIR: a staging directory whose recorded owner (pid
# 999999999, start time 1) no longer exists: what gc removes once it may.
dead_staging() {
    mkdir -p "$1"
    echo "999999999-1" >"$1/owner"
}

@test "state root: a lock, uid or bandwidth directory another user owns is refused by pulls and gc; nothing in it is touched, nothing pulled or removed" {
    local d code kind
    for d in locks:9:destination uids:7:isolation bandwidth:9:destination; do
        IFS=: read -r d code kind <<<"$d"
        ns_exec mkdir -p "/run/pullhelper/$d"
        ns_exec touch "/run/pullhelper/$d/61999.lock"
        ns_exec chown 65534:65534 "/run/pullhelper/$d" "/run/pullhelper/$d/61999.lock"
        run_pullhelper "$code" pull "${PH_OPTS[@]}" --cgroup-parent "$PH_CGPARENT" --node-bandwidth 100MiB/s \
            "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest-$d"
        assert_json_error "$kind"
        [[ $ph_error_message == *"/run/pullhelper/$d is owned by uid 65534"* ]] ||
            fail "$d: the message does not name the directory and its owner: $ph_error_message"
        ns_exec test -e "/run/pullhelper/$d/61999.lock" || fail "$d: the other user's file was removed"
        [[ ! -e $OUT/dest-$d ]] || fail "$d: DEST was created"
        assert_no_staging "$OUT"
        if [[ $d != bandwidth ]]; then
            # gc refuses the directory too, before it removes anything.
            # (A dead owner's staging: what gc removes once it may.)
            dead_staging "$OUT/gcdest/.pullhelper-staging-x-1"
            run_pullhelper 9 gc "oci:$OUT/gcdest/img"
            assert_json_error destination
            [[ $ph_error_message == *"/run/pullhelper/$d is owned by uid 65534"* ]] || fail "gc, $d: $ph_error_message"
            ns_exec test -e "/run/pullhelper/$d/61999.lock" || fail "gc removed the other user's file in $d"
            [[ -d $OUT/gcdest/.pullhelper-staging-x-1 ]] || fail "gc removed a staging directory before refusing $d"
        fi
        ns_exec chown 0:0 "/run/pullhelper/$d"
        ns_exec rm -f "/run/pullhelper/$d/61999.lock"
    done
    run_pullhelper gc "oci:$OUT/gcdest/img"
    assert_equal "$(json_get '.staging' <<<"$output")" "[\"$OUT/gcdest/.pullhelper-staging-x-1\"]"
    # The same directories, root's again: the pull goes through.
    run_pullhelper pull "${PH_OPTS[@]}" --cgroup-parent "$PH_CGPARENT" --node-bandwidth 100MiB/s \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_result
}

@test "gc: --help explains it; a bad DEST is exit 2 and a DEST under a directory others can write is exit 9, nothing removed" {
    run_pullhelper gc --help
    assert_output ""
    [[ $stderr == *"there is no registry of"* && $stderr == *uid_locks* && $stderr == *cgroups* ]] ||
        fail "--help does not explain gc: $stderr"
    run_pullhelper 2 gc "oci:"
    assert_json_error usage
    mkdir -p "$OUT/open"
    chmod 0777 "$OUT/open"
    # A stale staging directory beside a sound DEST must survive the failed run.
    dead_staging "$OUT/sound/.pullhelper-staging-x-1"
    run_pullhelper 9 gc "$OUT/sound/dest" "oci:$OUT/open/dest"
    assert_json_error destination
    [[ $ph_error_message == *"$OUT/open"* ]] || fail "the message does not name the directory: $ph_error_message"
    [[ -d $OUT/sound/.pullhelper-staging-x-1 ]] || fail "gc removed something before failing"
    run_pullhelper gc "$OUT/sound/dest"
    assert_equal "$(json_get '.staging' <<<"$output")" "[\"$OUT/sound/.pullhelper-staging-x-1\"]"
    # A DEST whose parent does not exist has nothing to sweep (it crashed
    # gc after the cgroup sweep, with nothing on stdout); a transport that
    # is no DEST's is exit 2 before anything is removed, not a path.
    dead_staging "$OUT/sound/.pullhelper-staging-y-1"
    run_pullhelper 2 gc "$OUT/sound/dest" "ocii:$OUT/sound/dest"
    assert_json_error usage
    [[ $ph_error_message == *'unknown transport "ocii"'* ]] || fail "the message does not name the transport: $ph_error_message"
    [[ -d $OUT/sound/.pullhelper-staging-y-1 ]] || fail "gc removed something before failing"
    run_pullhelper gc "oci:$OUT/missing/dest" "$OUT/sound/dest"
    assert_equal "$(json_get '.staging' <<<"$output")" "[\"$OUT/sound/.pullhelper-staging-y-1\"]"
}
