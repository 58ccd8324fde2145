#!/usr/bin/env bats
#
# The pull runs in a re-executed child inside a per-pull cgroup with limits
# (issue 3). Real cgroups on this host (cgroup v1 controllers); every test uses
# its own cgroup parent so that nothing else on the machine interferes.

load helpers

setup_file() {
    [[ $(id -u) == 0 ]] || skip "needs root to create cgroups"
    start_registry
    push_fixture tiny
    push_fixture big
}

teardown_file() {
    stop_registry
}

setup() {
    [[ $(id -u) == 0 ]] || skip "needs root to create cgroups"
    CG_PARENT="/pullhelper-bats-$$-${BATS_TEST_NUMBER}"
    ph_test_setup
    BG_PID=""
}

teardown() {
    [[ -n ${BG_PID:-} ]] && kill -KILL "$BG_PID" 2>/dev/null
    if [[ -n ${TRACE_FS:-} ]]; then
        [[ -z ${TRACE_INST:-} ]] || rmdir "$TRACE_INST" 2>/dev/null
        umount "$TRACE_FS" 2>/dev/null
    fi
    stop_tarpit
    # Nothing a test left may survive it: kill and remove its cgroups.
    local d
    for d in /sys/fs/cgroup/*/"${CG_PARENT#/}"; do
        [[ -d $d ]] || continue
        for p in $(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
        find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
    for d in /sys/fs/cgroup/*/bats-pod-$$; do
        [[ -d $d ]] && rmdir "$d" 2>/dev/null
    done
    return 0
}


# pull_cgroups: the per-pull cgroup directories under this test's parent, in
# the pids hierarchy.
pull_cgroups() {
    ls -d /sys/fs/cgroup/pids/"${CG_PARENT#/}"/pull-* 2>/dev/null || true
}

# start_stalled_pull [FLAGS...]: pull big through a tarpit that stops after
# 2 MB, in the background, with progress events in $EVENTS; waits until a
# layer has started downloading. Sets BG_PID, CHILD_PID, CG_DIR (pids
# hierarchy).
start_stalled_pull() {
    start_tarpit 2000000
    EVENTS="$BATS_TEST_TMPDIR/events.jsonl"
    : >"$EVENTS"
    # shellcheck disable=SC2046
    "$PULLHELPER" pull --progress-fd 5 --authfile "$TARPIT_AUTHFILE" --cert-dir "$REGISTRY_CERT_DIR" \
        --cgroup-parent "$CG_PARENT" --stall-timeout 5m "$@" \
        "$TARPIT_HOST/fixtures/big" "oci:$OUT/dest:new" \
        >"$BATS_TEST_TMPDIR/stdout" 2>"$BATS_TEST_TMPDIR/stderr" 5>"$EVENTS" 3>&- &
    BG_PID=$!
    wait_for_file_match "$EVENTS" '"type":"layer_start"' 60
    CG_DIR=$(pull_cgroups)
    [[ -n $CG_DIR && $(wc -l <<<"$CG_DIR") == 1 ]] || fail "want one pull cgroup under $CG_PARENT, got: $CG_DIR"
    CHILD_PID=$(head -1 "$CG_DIR/cgroup.procs")
    [[ -n $CHILD_PID ]] || fail "no process in $CG_DIR"
}

# wait_gone PID SECONDS: PID has exited (or is a zombie awaiting reaping).
wait_gone() {
    local pid=$1 deadline=$((SECONDS + ${2:-10}))
    while [[ -d /proc/$pid ]] && [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]]; do
        ((SECONDS < deadline)) || fail "process $pid still alive after ${2:-10}s"
        sleep 0.05
    done
}

@test "the child runs in the pull cgroup in every controller, and only the child talks to the registry" {
    start_stalled_pull --cpu-quota 1 --memory-max 256Mi --pids-max 100
    [[ $CHILD_PID != "$BG_PID" ]] || fail "the parent itself is in the pull cgroup"
    [[ $(tr '\0' ' ' <"/proc/$CHILD_PID/cmdline") == "pullhelper-child " ]] ||
        fail "process in the cgroup is not the child: $(tr '\0' ' ' <"/proc/$CHILD_PID/cmdline")"
    local rel=${CG_DIR#/sys/fs/cgroup/pids}
    for ctl in cpu cpuacct memory pids blkio; do
        run grep -E "^[0-9]+:([a-z,]*,)?${ctl}(,[a-z,]*)?:" "/proc/$CHILD_PID/cgroup"
        assert_success
        [[ ${output##*:} == "$rel" ]] || fail "$ctl: child in ${output##*:}, want $rel"
    done
    # The parent stays outside.
    ! grep -q ":$rel\$" "/proc/$BG_PID/cgroup" || fail "the parent is in the pull cgroup"
    # Every connection to the registry (through the tarpit) belongs to the child.
    local port=${TARPIT_HOST##*:} owners
    owners=$(ss -Htnp "dst 127.0.0.1:$port" | grep -o 'pid=[0-9]*' | sort -u)
    [[ -n $owners ]] || fail "no connection to the tarpit found"
    [[ $owners == "pid=$CHILD_PID" ]] || fail "connections owned by $owners, want only the child $CHILD_PID"
    kill -TERM "$BG_PID"
    wait "$BG_PID" || true
}

# The kernel's cgroup_attach_task event fires for each task moved into a
# cgroup (a write to tasks or cgroup.procs), in every hierarchy; a process
# forked by a thread inside a v1 cgroup, or cloned with CLONE_INTO_CGROUP
# into the unified one, is never moved. The trace is an instance of its
# own (instances/NAME: its own buffer and event switches), so nothing else
# on the machine is disturbed.
@test "the child is born in its cgroup in every hierarchy, the hybrid unified one included: the kernel traces no move of it, only the forking thread's" {
    TRACE_FS=$BATS_TEST_TMPDIR/tracefs
    mkdir -p "$TRACE_FS"
    mount -t tracefs nodev "$TRACE_FS" || fail "cannot mount tracefs on $TRACE_FS"
    TRACE_INST=$TRACE_FS/instances/pullhelper-bats-$$
    mkdir "$TRACE_INST" || fail "cannot make the trace instance $TRACE_INST"
    echo 1 >"$TRACE_INST/events/cgroup/cgroup_attach_task/enable"
    run_pullhelper pull "${PH_OPTS[@]}" --cgroup-parent "$CG_PARENT" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    echo 0 >"$TRACE_INST/events/cgroup/cgroup_attach_task/enable"
    assert_json_result
    local child trace
    child=$(json_get .isolation.child_pid <<<"$output")
    [[ $child =~ ^[0-9]+$ ]] || fail "isolation.child_pid: $child"
    trace=$(grep 'cgroup_attach_task:' "$TRACE_INST/trace" || true)
    echo "$trace"
    # The forking thread's moves into the pull cgroup are traced: the
    # trace sees moves of this pull (else its silence about the child
    # would prove nothing).
    grep -q "dst_path=$CG_PARENT/pull-[^ ]* pid=" <<<"$trace" ||
        fail "no move into the pull cgroup under $CG_PARENT was traced"
    ! grep -q " pid=$child " <<<"$trace" || fail "the child $child was moved into a cgroup after it was born"
}

@test "no registry request before the limits apply: pids_max=1 is refused as a usage error before any child or cgroup exists" {
    local before
    before=$(registry_request_count)
    run_pullhelper 2 pull "${PH_OPTS[@]}" --cgroup-parent "$CG_PARENT" --pids-max 1 \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_error usage
    assert_equal "$(registry_request_count)" "$before"
    [[ $ph_error_message == *"pids_max=1 (--pids-max) is too low: the pull child needs at least "*" on this host"* ]] ||
        fail "message: $ph_error_message"
    [[ ! -e $OUT/dest ]] || fail "DEST was created"
    assert_no_staging "$OUT"
    [[ ! -d /sys/fs/cgroup/pids$CG_PARENT ]] || fail "a cgroup was created"
    # explain refuses it too, with the same code and message.
    local msg=$ph_error_message
    run_pullhelper 2 explain "${PH_OPTS[@]}" --cgroup-parent "$CG_PARENT" --pids-max 1 "$REGISTRY_HOST/fixtures/tiny"
    assert_json_error usage
    assert_equal "$ph_error_message" "$msg"
}

@test "pids_max is a ceiling with the same outcome every time: below the minimum always exit 2, at the minimum the pull always succeeds within it" {
    local min=$((16 + 2 * $(nproc))) i
    for i in 1 2 3 4 5 6 7 8 9 10; do
        run_pullhelper 2 pull "${PH_OPTS[@]}" --cgroup-parent "$CG_PARENT" --pids-max $((min - 1)) \
            "$REGISTRY_HOST/fixtures/big" "oci:$OUT/low$i"
        assert_json_error usage
        [[ $ph_error_message == *"needs at least $min on this host"* ]] || fail "run $i: $ph_error_message"
    done
    for i in 1 2 3 4 5 6 7 8 9 10; do
        run_pullhelper pull "${PH_OPTS[@]}" --cgroup-parent "$CG_PARENT" --pids-max "$min" \
            "$REGISTRY_HOST/fixtures/big" "oci:$OUT/min$i"
        local peak
        peak=$(json_get .usage.pids_peak <<<"$output")
        ((peak > 0 && peak <= min)) || fail "run $i: pids_peak $peak outside (0, $min]"
        assert_equal "$(json_get .usage.pids_max_hits <<<"$output")" 0
    done
}

@test "limit files hold the configured values (v1 names)" {
    local dev
    dev=$(stat -c '%Hd:%Ld' "$OUT")
    if [[ -e /sys/dev/block/$dev/partition ]]; then
        dev=$(cat "$(readlink -f "/sys/dev/block/$dev")/../dev")
    fi
    [[ $dev != 0:* ]] || skip "the test directory is on a filesystem without a block device ($dev)"
    cat >"$BATS_TEST_TMPDIR/policy.toml" <<EOF
version = 1
[cgroup]
cpu_weight = 200
memory_high = "200Mi"
memory_swap_max = "16Mi"
io_read_iops = ["$OUT=500"]
EOF
    start_stalled_pull --policy "$BATS_TEST_TMPDIR/policy.toml" --cpu-quota 0.5 --memory-max 256Mi \
        --pids-max 64 --io-read-bps "$OUT=10MB/s" --io-write-bps "$OUT=20Mi/s"
    local rel=${CG_DIR#/sys/fs/cgroup/pids}
    local c=/sys/fs/cgroup
    assert_equal "$(cat $c/cpu$rel/cpu.cfs_quota_us)" 50000
    assert_equal "$(cat $c/cpu$rel/cpu.cfs_period_us)" 100000
    assert_equal "$(cat $c/cpu$rel/cpu.shares)" $((2 + (199 * 262142) / 9999))
    assert_equal "$(cat $c/memory$rel/memory.limit_in_bytes)" $((256 << 20))
    assert_equal "$(cat $c/memory$rel/memory.soft_limit_in_bytes)" $((200 << 20))
    if [[ -e $c/memory$rel/memory.memsw.limit_in_bytes ]]; then
        assert_equal "$(cat $c/memory$rel/memory.memsw.limit_in_bytes)" $(((256 + 16) << 20))
    fi
    assert_equal "$(cat $c/pids$rel/pids.max)" 64
    assert_equal "$(cat $c/blkio$rel/blkio.throttle.read_bps_device)" "$dev 10000000"
    assert_equal "$(cat $c/blkio$rel/blkio.throttle.write_bps_device)" "$dev $((20 << 20))"
    assert_equal "$(cat $c/blkio$rel/blkio.throttle.read_iops_device)" "$dev 500"
    kill -TERM "$BG_PID"
    wait "$BG_PID" || true
}

@test "cpu_quota = 0.1 makes the ~100 MB pull measurably slower than unlimited" {
    local t0 t1 t2 free limited
    t0=$(date +%s%N)
    run_pullhelper pull "${PH_OPTS[@]}" --cgroup-parent "$CG_PARENT" "$REGISTRY_HOST/fixtures/big" "oci:$OUT/a"
    t1=$(date +%s%N)
    run_pullhelper pull "${PH_OPTS[@]}" --cgroup-parent "$CG_PARENT" --cpu-quota 0.1 "$REGISTRY_HOST/fixtures/big" "oci:$OUT/b"
    t2=$(date +%s%N)
    free=$(((t1 - t0) / 1000000))
    limited=$(((t2 - t1) / 1000000))
    echo "# unlimited ${free} ms, cpu_quota=0.1 ${limited} ms" >&3
    # A generous ratio, not a time: 10% of a core must at least halve the speed.
    ((limited >= 2 * free)) || fail "cpu_quota=0.1 took ${limited} ms vs ${free} ms unlimited"
    assert_equal "$(json_get .isolation.limits.cpu_quota <<<"$output")" 0.1
}

@test "memory_max = 64Mi: the ~100 MB image still pulls and the peak stays within the limit" {
    run_pullhelper pull "${PH_OPTS[@]}" --cgroup-parent "$CG_PARENT" --memory-max 64Mi \
        "$REGISTRY_HOST/fixtures/big" "oci:$OUT/dest"
    assert_json_result
    local peak
    peak=$(json_get .usage.memory_peak_bytes <<<"$output")
    ((peak > 0 && peak <= 64 << 20)) || fail "memory peak $peak outside (0, 64Mi]"
    assert_equal "$(json_get .usage.oom_kills <<<"$output")" 0
    assert_equal "$(json_get .digest <<<"$output")" "$(registry_digest fixtures/big)"
}

@test "usage numbers are present and non-zero for a real pull" {
    run_pullhelper pull "${PH_OPTS[@]}" --cgroup-parent "$CG_PARENT" "$REGISTRY_HOST/fixtures/big" "oci:$OUT/dest"
    local k v
    for k in cpu_usage_ns memory_peak_bytes pids_peak io_write_bytes; do
        v=$(json_get ".usage.$k" <<<"$output")
        [[ $v =~ ^[0-9]+$ ]] && ((v > 0)) || fail "usage.$k = $v"
    done
    # The pull wrote (and fsynced) at least the compressed image.
    v=$(json_get .usage.io_write_bytes <<<"$output")
    ((v >= $(json_get .bytes <<<"$output") / 2)) || fail "io_write_bytes $v for $(json_get .bytes <<<"$output") bytes pulled"
    [[ $(json_get .isolation.cgroup <<<"$output") == "$CG_PARENT"/pull-* ]] || fail "isolation.cgroup: $output"
    [[ -z $(pull_cgroups) ]] || fail "cgroup left: $(pull_cgroups)"
    [[ ! -d /sys/fs/cgroup/pids$CG_PARENT ]] || fail "the parent cgroup the pull created is left"
}

@test "SIGTERM mid-pull: nothing left in the cgroup, cgroup gone, DEST as before, exit 143" {
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest:old"
    local before
    before=$(cd "$OUT/dest" && find . -type f -exec sha256sum {} + | sort)
    start_stalled_pull
    local cg=$CG_DIR child=$CHILD_PID
    kill -TERM "$BG_PID"
    local rc=0
    wait "$BG_PID" || rc=$?
    BG_PID=""
    assert_equal "$rc" 143
    run json_get .error.code <"$BATS_TEST_TMPDIR/stdout"
    assert_output interrupted
    wait_gone "$child" 5
    [[ ! -d $cg ]] || fail "cgroup $cg still exists"
    [[ ! -d /sys/fs/cgroup/memory${cg#/sys/fs/cgroup/pids} ]] || fail "memory cgroup left"
    assert_equal "$(cd "$OUT/dest" && find . -type f -exec sha256sum {} + | sort)" "$before"
    assert_no_staging "$OUT"
}

@test "SIGKILL to the parent: the child dies (Pdeathsig) and the next run reclaims the leftovers" {
    start_stalled_pull
    local cg=$CG_DIR child=$CHILD_PID
    kill -KILL "$BG_PID"
    wait "$BG_PID" || true
    BG_PID=""
    wait_gone "$child" 10
    # Leftovers: the cgroup and the staging directory.
    [[ -d $cg ]] || fail "expected the killed parent to leave $cg"
    [[ -n $(find "$OUT" -maxdepth 1 -name '.pullhelper-staging-*') ]] || fail "expected a staging leftover"
    run_pullhelper pull "${PH_OPTS[@]}" --cgroup-parent "$CG_PARENT" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/other"
    assert_json_result
    [[ $stderr == *"reclaimed a stale pull cgroup"*"${cg##*/}"* ]] || fail "no reclaim logged: $stderr"
    [[ $stderr == *"reclaimed a stale staging directory"* ]] || fail "staging reclaim not logged: $stderr"
    [[ ! -d $cg ]] || fail "stale cgroup $cg not reclaimed"
    assert_no_staging "$OUT"
    [[ ! -e $OUT/dest ]] || fail "the killed pull committed DEST"
}

@test "--cgroup joins an existing cgroup as it is and leaves it in place" {
    local ctl
    for ctl in cpu cpuacct memory pids blkio freezer; do
        mkdir -p "/sys/fs/cgroup/$ctl/bats-pod-$$"
    done
    # On v1 the kubelet's pod cgroups exist in the cpuset hierarchy too,
    # with CPUs and memory nodes: the pull's sub-cgroup there needs its
    # own (a new cpuset cgroup has none and takes no process).
    local cs=/sys/fs/cgroup/cpuset
    mkdir -p "$cs/bats-pod-$$"
    # Without them the cgroup can hold no process: refused at the plan.
    run_pullhelper 7 explain "${PH_OPTS[@]}" --cgroup "/bats-pod-$$" "$REGISTRY_HOST/fixtures/tiny"
    assert_json_error isolation
    [[ $ph_error_message == "cgroup.path: the joined cgroup $cs/bats-pod-$$ has an empty cpuset.cpus: no process can run in it"* ]] ||
        fail "$ph_error_message"
    cat "$cs/cpuset.cpus" >"$cs/bats-pod-$$/cpuset.cpus"
    cat "$cs/cpuset.mems" >"$cs/bats-pod-$$/cpuset.mems"
    [[ $(cat "$cs/cgroup.clone_children") == 0 ]] || fail "cpuset's clone_children is set on this host: the case needs it unset"
    run_pullhelper pull "${PH_OPTS[@]}" --cgroup "/bats-pod-$$" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_equal "$(json_get .isolation.cgroup <<<"$output")" "/bats-pod-$$"
    assert_equal "$(json_get .isolation.cgroup_joined <<<"$output")" true
    [[ -d /sys/fs/cgroup/pids/bats-pod-$$ ]] || fail "the joined cgroup was removed"
    local peak
    peak=$(cat "/sys/fs/cgroup/memory/bats-pod-$$/memory.max_usage_in_bytes")
    ((peak > 0)) || fail "the pull was not charged to the joined cgroup"
    # Joining as is: limits are refused.
    run_pullhelper 2 pull "${PH_OPTS[@]}" --cgroup "/bats-pod-$$" --memory-max 64Mi "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest2"
    assert_json_error usage
    [[ $ph_error_message == *"joins an existing cgroup as it is"* ]] || fail "$ph_error_message"
    # A cgroup that does not exist is an isolation error, at the plan: no
    # request, no staging, and explain says the same.
    local before
    before=$(registry_request_count)
    run_pullhelper 7 pull "${PH_OPTS[@]}" --cgroup "/bats-nonexistent-$$" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest3"
    assert_json_error isolation
    assert_equal "$ph_error_message" "cgroup.path /bats-nonexistent-$$ does not exist"
    assert_equal "$(registry_request_count)" "$before"
    assert_no_staging "$OUT"
    [[ ! -d /sys/fs/cgroup/pids/bats-nonexistent-$$ ]] || fail "a joined cgroup was created"
    run_pullhelper 7 explain "${PH_OPTS[@]}" --cgroup "/bats-nonexistent-$$" "$REGISTRY_HOST/fixtures/tiny"
    assert_equal "$ph_error_message" "cgroup.path /bats-nonexistent-$$ does not exist"
}

@test "a nested or long --cgroup-parent the pull made is removed whole; an existing ancestor stays" {
    local long
    long=$(printf 'l%.0s' {1..200})
    run_pullhelper pull "${PH_OPTS[@]}" --cgroup-parent "$CG_PARENT/a/b" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/nested"
    assert_equal "$(json_get .isolation.cgroup <<<"$output")" "$CG_PARENT/a/b/$(basename "$(json_get .isolation.cgroup <<<"$output")")"
    run_pullhelper pull "${PH_OPTS[@]}" --cgroup-parent "$CG_PARENT/$long" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/long"
    local d
    for d in /sys/fs/cgroup/*/"${CG_PARENT#/}"; do
        [[ ! -e $d ]] || fail "$d made for the pulls is left: $(find "$d")"
    done
    # An ancestor that existed is the administrator's.
    mkdir "/sys/fs/cgroup/pids$CG_PARENT"
    run_pullhelper pull "${PH_OPTS[@]}" --cgroup-parent "$CG_PARENT/a/b" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/nested2"
    [[ -d /sys/fs/cgroup/pids$CG_PARENT ]] || fail "the existing ancestor was removed"
    # ... in the hierarchy it was in; the pull made it in the others, and
    # removed it there.
    for d in /sys/fs/cgroup/*/"${CG_PARENT#/}"; do
        [[ $d == /sys/fs/cgroup/pids/* || ! -e $d ]] || fail "$d made for the pull is left"
    done
}

@test "cgroup.driver systemd without systemd is refused at the plan, by explain too (exit 7)" {
    [[ ! -d /run/systemd/system ]] || skip "systemd is PID 1 here: the driver works (tests/vm/systemd proves it)"
    printf 'version = 1\n[cgroup]\ndriver = "systemd"\n' >"$OUT/sd.toml"
    run_pullhelper 7 explain "${PH_OPTS[@]}" --policy "$OUT/sd.toml" "$REGISTRY_HOST/fixtures/tiny"
    assert_json_error isolation
    [[ $ph_error_message == 'cgroup.driver is "systemd" but systemd is not running as PID 1'* ]] || fail "$ph_error_message"
    local before
    before=$(registry_request_count)
    run_pullhelper 7 pull "${PH_OPTS[@]}" --policy "$OUT/sd.toml" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_error isolation
    assert_equal "$(registry_request_count)" "$before"
    assert_no_staging "$OUT"
    [[ ! -e $OUT/dest ]] || fail "DEST was created"
}

@test "--no-isolation pulls in-process and creates no cgroup" {
    run_pullhelper pull "${PH_OPTS[@]}" --cgroup-parent "$CG_PARENT" --no-isolation "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_equal "$(json_get .isolation.enabled <<<"$output")" false
    assert_equal "$(json_get .usage <<<"$output")" null
    [[ ! -d /sys/fs/cgroup/pids$CG_PARENT ]] || fail "--no-isolation created a cgroup"
}

@test "explain shows the cgroup plan and touches nothing" {
    local before
    before=$(registry_request_count)
    run_pullhelper explain "${PH_OPTS[@]}" --cgroup-parent "$CG_PARENT" --memory-max 64Mi --io-write-bps "$OUT=5MB/s" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_equal "$(json_get .plan.isolation.cgroup.parent <<<"$output")" "$CG_PARENT"
    assert_equal "$(json_get .plan.isolation.cgroup.limits.memory_max <<<"$output")" $((64 << 20))
    assert_equal "$(json_get '.plan.isolation.cgroup.limits.io[0].write_bps' <<<"$output")" 5000000
    assert_equal "$(registry_request_count)" "$before"
    [[ ! -d /sys/fs/cgroup/pids$CG_PARENT ]] || fail "explain created a cgroup"
}

# --- issue 10: the whole pull dies with it (items 4, 7, 10, 11, 19) ---------

# hostile_pull [EXPECTED_RC] ACTIONS ARGS...: run_pullhelper with the
# compromised-child build, its child running ACTIONS ($PULLHELPER_HOSTILE).
hostile_pull() {
    local rc=0
    [[ $1 == [0-9]* ]] && { rc=$1; shift; }
    local actions=$1
    shift
    [[ -x $PULLHELPER_HOSTILE_BIN ]] || fail "hostile build missing: $PULLHELPER_HOSTILE_BIN (make build-hostile)"
    PULLHELPER=$PULLHELPER_HOSTILE_BIN PULLHELPER_HOSTILE=$actions run_pullhelper "$rc" "$@"
}

# assert_uid_gone UID: no live process runs as UID (a zombie is dead; it
# waits for a reaper outside the pull).
assert_uid_gone() {
    local left
    left=$(ps -u "$1" -o pid=,stat=,args= | awk '$2 !~ /^Z/' || true)
    [[ -z $left ]] || fail "processes of the pull uid $1 outlived the pull: $left"
}

# assert_blobs_intact DIR: every blob of the oci: layout at DIR hashes to its name.
assert_blobs_intact() {
    local f
    for f in "$1"/blobs/sha256/*; do
        [[ $(sha256sum <"$f" | cut -d' ' -f1) == "${f##*/}" ]] || fail "blob $f does not match its digest"
    done
}

@test "--cgroup: a grandchild left by the child dies with the pull, in the pull's own sub-cgroup, which is removed; the joined cgroup stays" {
    local ctl
    for ctl in cpu cpuacct memory pids blkio freezer; do
        mkdir -p "/sys/fs/cgroup/$ctl/bats-pod-$$"
    done
    hostile_pull after-copy:grandchild pull "${PH_OPTS[@]}" --cgroup "/bats-pod-$$" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    [[ $stderr == *"hostile: grandchild pid"* ]] || fail "the hostile action did not run: $stderr"
    assert_uid_gone "$(json_get .isolation.uid <<<"$output")"
    assert_equal "$(json_get .isolation.cgroup <<<"$output")" "/bats-pod-$$"
    for ctl in cpu cpuacct memory pids blkio freezer; do
        [[ -d /sys/fs/cgroup/$ctl/bats-pod-$$ ]] || fail "the joined cgroup was removed ($ctl)"
        [[ -z $(ls -d /sys/fs/cgroup/$ctl/bats-pod-$$/pull-* 2>/dev/null) ]] || fail "a pull sub-cgroup is left ($ctl)"
        [[ -z $(cat "/sys/fs/cgroup/$ctl/bats-pod-$$/cgroup.procs") ]] || fail "processes left in the joined cgroup ($ctl)"
    done
    assert_blobs_intact "$OUT/dest"
    assert_equal "$(json_get .digest <<<"$output")" "$(registry_digest fixtures/tiny)"
}

@test "a grandchild holding the child's pipes neither hangs the pull nor outlives it" {
    # No --timeout: before the fix the parent waited for EOF from the
    # grandchild's copies of the pipes forever.
    hostile_pull after-copy:grandchild pull "${PH_OPTS[@]}" --cgroup-parent "$CG_PARENT" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    [[ $stderr == *"hostile: grandchild pid"* ]] || fail "the hostile action did not run: $stderr"
    assert_json_result
    assert_uid_gone "$(json_get .isolation.uid <<<"$output")"
    [[ -z $(pull_cgroups) ]] || fail "cgroup left: $(pull_cgroups)"
    assert_blobs_intact "$OUT/dest"
}

@test "a 2 MiB line on the child's stderr is truncated, and the pull still succeeds" {
    hostile_pull after-drop:long-stderr pull "${PH_OPTS[@]}" --cgroup-parent "$CG_PARENT" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_result
    [[ $stderr == *"hostile: long line follows"*"[line truncated: over 64 KiB]"* ]] || fail "no truncated line: ${stderr:0:300}"
    ((${#stderr} < 256 * 1024)) || fail "the relayed stderr is ${#stderr} bytes"
}

@test "an oversized message from the child is an isolation error (exit 7); nothing is committed" {
    hostile_pull 7 after-copy:huge-line pull "${PH_OPTS[@]}" --cgroup-parent "$CG_PARENT" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_error isolation
    [[ $ph_error_message == *"oversized message"* ]] || fail "message: $ph_error_message"
    [[ ! -e $OUT/dest ]] || fail "DEST was created"
    [[ -z $(pull_cgroups) ]] || fail "cgroup left: $(pull_cgroups)"
    assert_no_staging "$OUT"
}

@test "after concurrent pulls, a killed one and the next pull's reclaim, no lock file, pull cgroup or cgroup parent is left" {
    local uids=() i pids=()
    for i in 1 2 3 4; do
        "$PULLHELPER" pull "${PH_OPTS[@]}" --cgroup-parent "$CG_PARENT" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/c$i" \
            >"$BATS_TEST_TMPDIR/c$i.out" 2>"$BATS_TEST_TMPDIR/c$i.err" &
        pids+=($!)
    done
    for i in 1 2 3 4; do
        wait "${pids[i - 1]}" || fail "concurrent pull $i failed: $(cat "$BATS_TEST_TMPDIR/c$i.out" "$BATS_TEST_TMPDIR/c$i.err")"
        uids+=("$(json_get .isolation.uid <"$BATS_TEST_TMPDIR/c$i.out")")
    done
    start_stalled_pull
    local child=$CHILD_PID
    uids+=("$(stat -c %u "/proc/$child")")
    kill -KILL "$BG_PID"
    wait "$BG_PID" || true
    BG_PID=""
    wait_gone "$child" 10
    run_pullhelper pull "${PH_OPTS[@]}" --cgroup-parent "$CG_PARENT" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/next"
    [[ $stderr == *"reclaimed a stale pull cgroup"* ]] || fail "no reclaim logged: $stderr"
    uids+=("$(json_get .isolation.uid <<<"$output")")
    local d u f
    for d in /sys/fs/cgroup/*/; do
        [[ ! -e $d${CG_PARENT#/} ]] || fail "cgroup parent left: $d${CG_PARENT#/} ($(ls "$d${CG_PARENT#/}"))"
    done
    # Other pulls on this machine may hold a uid by now: a lock file that
    # exists must be held (flock -n fails), never a leftover.
    for u in "${uids[@]}"; do
        f=/run/pullhelper/uids/$u.lock
        [[ ! -e $f ]] || ! flock -n "$f" true || fail "lock file $f left for uid $u (uids: ${uids[*]})"
    done
}

@test "a cgroup parents lock another process holds: --timeout (exit 6) and SIGTERM (exit 143) still end the pull, nothing is made, and the next pull goes on" {
    # The state root's parents directory exists once a pull has run.
    run_pullhelper pull "${PH_OPTS[@]}" --cgroup-parent "$CG_PARENT" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/first"
    local lock=/run/pullhelper/parents/.lock held=$BATS_TEST_TMPDIR/held
    [[ -f $lock ]] || fail "no $lock after a pull"
    # A stopped or hung pullhelper holding it: one process, until killed.
    "$PH_PYTHON" -c 'import fcntl, sys, time
f = open(sys.argv[1], "a")
fcntl.flock(f, fcntl.LOCK_EX)
open(sys.argv[2], "w").write("held\n")
time.sleep(300)' "$lock" "$held" 3>&- &
    BG_PID=$!
    wait_for_file_match "$held" held 30
    # --timeout: the old build waited in flock(2) for the holder (300 s).
    run timeout 120 "$PULLHELPER" pull "${PH_OPTS[@]}" --cgroup-parent "$CG_PARENT" --timeout 2s \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/t"
    assert_equal "$status" 6
    [[ $output == *'"message":"creating the pull cgroup: pull timed out after 2s (--timeout)"'* ]] || fail "got: $output"
    # SIGTERM once the pull has started (its start event), with no --timeout.
    local ev=$BATS_TEST_TMPDIR/events.jsonl pid rc=0
    : >"$ev"
    timeout 120 "$PULLHELPER" pull "${PH_OPTS[@]}" --cgroup-parent "$CG_PARENT" --progress-fd 5 \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/s" >"$BATS_TEST_TMPDIR/s.out" 2>"$BATS_TEST_TMPDIR/s.err" 5>"$ev" 3>&- &
    pid=$!
    wait_for_file_match "$ev" '"type":"start"' 30
    kill -TERM "$pid"
    wait "$pid" || rc=$?
    assert_equal "$rc" 143
    run json_get .error.code <"$BATS_TEST_TMPDIR/s.out"
    assert_output interrupted
    [[ ! -e $OUT/t && ! -e $OUT/s ]] || fail "a DEST was made: $(ls "$OUT")"
    [[ -z $(pull_cgroups) ]] || fail "pull cgroups made without the lock: $(pull_cgroups)"
    assert_no_staging "$OUT"
    # The holder goes; the next pull takes the lock and succeeds.
    kill -KILL "$BG_PID"
    wait "$BG_PID" 2>/dev/null || true
    BG_PID=""
    run_pullhelper pull "${PH_OPTS[@]}" --cgroup-parent "$CG_PARENT" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/next"
    [[ -z $(pull_cgroups) ]] || fail "pull cgroup left: $(pull_cgroups)"
}
