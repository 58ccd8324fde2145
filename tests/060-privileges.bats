#!/usr/bin/env bats
#
# Least privilege (issue 5): the network-facing child runs as an unprivileged
# uid with no capabilities, no_new_privs and a seccomp filter on every
# thread; only the parent reads root-only secrets and writes DEST.

load helpers

setup_file() {
    [[ $(id -u) == 0 ]] || skip "needs root: the privilege drop starts from root"
    start_registry
    push_fixture tiny
    push_fixture big
}

teardown_file() {
    stop_registry
}

setup() {
    [[ $(id -u) == 0 ]] || skip "needs root: the privilege drop starts from root"
    ph_test_setup
    BG_PIDS=()
}

teardown() {
    local p
    for p in "${BG_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
    for p in "${BG_PIDS[@]}"; do wait "$p" 2>/dev/null; done
    stop_tarpit
    [[ -z ${PAIR_DIR:-} ]] || rm -rf "$PAIR_DIR"
    return 0
}


# bg_pull N ARGS...: a pull of big through the tarpit in the background;
# events in $BATS_TEST_TMPDIR/events.N, stdout/stderr beside them.
bg_pull() {
    local n=$1
    shift
    : >"$BATS_TEST_TMPDIR/events.$n"
    "$PULLHELPER" pull --progress-fd 5 --authfile "$TARPIT_AUTHFILE" --cert-dir "$REGISTRY_CERT_DIR" \
        --stall-timeout 5m "$@" >"$BATS_TEST_TMPDIR/stdout.$n" 2>"$BATS_TEST_TMPDIR/stderr.$n" \
        5>"$BATS_TEST_TMPDIR/events.$n" 3>&- &
    BG_PIDS+=($!)
}

# child_of PID: the pull child of a pullhelper parent.
child_of() {
    local deadline=$((SECONDS + 20)) c
    while :; do
        c=$(pgrep -P "$1" || true)
        [[ -n $c ]] && { echo "$c"; return; }
        ((SECONDS < deadline)) || { fail "no child of $1"; return 1; }
        sleep 0.05
    done
}

@test "every thread of the child: uid/gid not 0, all capability sets empty, NoNewPrivs 1, Seccomp 2; no secret in cmdline or environ" {
    start_tarpit 2000000
    bg_pull 1 "$TARPIT_HOST/fixtures/big" "oci:$OUT/dest"
    wait_for_file_match "$BATS_TEST_TMPDIR/events.1" '"type":"layer_start"' 60
    local child threads=0 f
    child=$(child_of "${BG_PIDS[0]}") || return
    [[ $(tr '\0' ' ' <"/proc/$child/cmdline") == "pullhelper-child " ]] || fail "$child is not the pull child"
    for f in /proc/"$child"/task/*/status; do
        threads=$((threads + 1))
        run awk '/^(Uid|Gid):/ {print $2, $3, $4, $5}' "$f"
        for id in $output; do [[ $id != 0 ]] || fail "$f: a uid/gid is 0: $output"; done
        for k in CapInh CapPrm CapEff CapBnd CapAmb; do
            assert_equal "$(awk -v k="$k:" '$1 == k {print $2}' "$f")" 0000000000000000
        done
        assert_equal "$(awk '$1 == "NoNewPrivs:" {print $2}' "$f")" 1
        assert_equal "$(awk '$1 == "Seccomp:" {print $2}' "$f")" 2
        assert_equal "$(awk '$1 == "Groups:" {print $2}' "$f")" ""
    done
    ((threads >= 2)) || fail "only $threads thread(s) checked"
    echo "# checked $threads threads of the child" >&3
    assert_secret_absent -f "/proc/$child/cmdline" "/proc/$child/environ"
    # The parent keeps its privileges and never runs as the pull uid.
    assert_equal "$(awk '$1 == "Uid:" {print $2}' "/proc/${BG_PIDS[0]}/status")" 0
}

@test "the child runs the child-only binary make build put beside pullhelper; pullhelper itself when that one is not this build or not root's alone" {
    local real
    real=$(readlink -f "$PULLHELPER")
    [[ -x $real-child ]] || fail "no $real-child beside $real: make build writes both"
    # Copies of the pair in a directory of root's alone (wherever the
    # checkout is: below /tmp, which anyone can write, the pair is not
    # trusted; teardown removes it). A running child's program is the
    # pair's child binary.
    PAIR_DIR=$(mktemp -d /run/pullhelper-bats-child.XXXXXX)
    local dir=$PAIR_DIR
    cp "$real" "$dir/pullhelper"
    cp "$real-child" "$dir/pullhelper-child"
    start_tarpit 2000000
    PULLHELPER=$dir/pullhelper bg_pull 1 "$TARPIT_HOST/fixtures/big" "oci:$OUT/dest"
    wait_for_file_match "$BATS_TEST_TMPDIR/events.1" '"type":"layer_start"' 60
    local child
    child=$(child_of "${BG_PIDS[0]}") || return
    assert_equal "$(readlink "/proc/$child/exe")" "$dir/pullhelper-child"
    # Named for ps and top (the kernel would name it after /proc/self/fd/N).
    assert_equal "$(cat "/proc/$child/comm")" pullhelper-chil
    [[ $(tr '\0' ' ' <"/proc/$child/cmdline") == "pullhelper-child " ]] || fail "$child is not the pull child"
    # SIGTERM: the parent stops its child, removes the cgroup and staging.
    kill -TERM "${BG_PIDS[0]}"
    local rc=0
    wait "${BG_PIDS[0]}" 2>/dev/null || rc=$?
    BG_PIDS=()
    ((rc == 143)) || fail "the stalled pull ended with $rc on SIGTERM, want 143"
    # When its exec fails, or it is made group-writable, or another build's
    # (the hostile one's), or gone, it is not run, and the pull runs as
    # before with pullhelper re-executed.
    local how want w
    for how in pair busy group-writable another-build missing; do
        case $how in
            pair) want="program=$dir/pullhelper-child" ;;
            busy)
                # Open for writing: its exec fails (ETXTBSY) after every
                # check passed; the fork is retried with pullhelper.
                exec {w}>>"$dir/pullhelper-child"
                want="program=/proc/self/exe why=\"executing $dir/pullhelper-child: fork/exec /proc/self/fd/" ;;
            group-writable)
                exec {w}>&-
                chmod g+w "$dir/pullhelper-child"
                want="program=/proc/self/exe why=\"$dir/pullhelper-child is writable by group or others (mode 775)\"" ;;
            another-build)
                rm "$dir/pullhelper-child"
                cp "$(readlink -f "$PULLHELPER_HOSTILE_BIN")-child" "$dir/pullhelper-child"
                want="program=/proc/self/exe why=\"$dir/pullhelper-child is another build" ;;
            missing)
                rm "$dir/pullhelper-child"
                want="program=/proc/self/exe why=\"$dir/pullhelper-child: no such file or directory\"" ;;
        esac
        run --separate-stderr "$dir/pullhelper" pull --debug "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/$how"
        [[ $status == 0 ]] || fail "$how: exit $status: $stderr"
        grep -F 'msg="started the pull child"' <<<"$stderr" | grep -qF -- "$want" ||
            fail "$how: want a line with $want: $(grep -F 'pull child' <<<"$stderr")"
        [[ -f $OUT/$how/index.json ]] || fail "$how: nothing pulled"
        if [[ $how == busy ]]; then
            grep -F 'msg="started the pull child"' <<<"$stderr" | grep -qF "text file busy" ||
                fail "busy: the reason is not the exec's: $(grep -F 'pull child' <<<"$stderr")"
        fi
    done
}

@test "a root-only (0600) auth file and CA still work, because only the parent reads them" {
    local secret="$BATS_TEST_TMPDIR/secret"
    mkdir -m 0700 "$secret" "$secret/certs"
    cp "$REGISTRY_AUTHFILE" "$secret/auth.json"
    cp "$REGISTRY_CERT_DIR/ca.crt" "$secret/certs/ca.crt"
    chmod 0600 "$secret/auth.json" "$secret/certs/ca.crt"
    run_pullhelper pull --authfile "$secret/auth.json" --cert-dir "$secret/certs" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_result
    local uid
    uid=$(json_get .isolation.uid <<<"$output")
    ((uid >= 61184 && uid <= 65519)) || fail "isolation.uid = $uid, want a dynamic uid"
    assert_equal "$(json_get .isolation.seccomp <<<"$output")" true
    # The committed image belongs to DEST's owner (root here), not the pull uid.
    run find "$OUT/dest" ! -user root
    assert_output ""
    run find "$OUT/dest" -type f ! -perm 0644
    assert_output ""
}

@test "two concurrent pulls get different uids" {
    start_tarpit 2000000
    bg_pull 1 "$TARPIT_HOST/fixtures/big" "oci:$OUT/a"
    bg_pull 2 "$TARPIT_HOST/fixtures/big" "oci:$OUT/b"
    wait_for_file_match "$BATS_TEST_TMPDIR/events.1" '"type":"layer_start"' 60
    wait_for_file_match "$BATS_TEST_TMPDIR/events.2" '"type":"layer_start"' 60
    local c1 c2 u1 u2
    c1=$(child_of "${BG_PIDS[0]}") || return
    c2=$(child_of "${BG_PIDS[1]}") || return
    u1=$(awk '$1 == "Uid:" {print $2}' "/proc/$c1/status")
    u2=$(awk '$1 == "Uid:" {print $2}' "/proc/$c2/status")
    [[ $u1 != 0 && $u2 != 0 && $u1 != "$u2" ]] || fail "uids $u1 and $u2"
}

@test "eight concurrent pulls into one oci: layout with different tags all land" {
    local i pids=()
    for i in 1 2 3 4 5 6 7 8; do
        "$PULLHELPER" pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/shared:t$i" \
            >"$BATS_TEST_TMPDIR/r$i" 2>&1 3>&- &
        pids+=($!)
    done
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}" || fail "pull $((i + 1)) failed: $(cat "$BATS_TEST_TMPDIR/r$((i + 1))")"
    done
    run "$PH_PYTHON" -c '
import json, sys
idx = json.load(open(sys.argv[1]))
print(" ".join(sorted(m["annotations"]["org.opencontainers.image.ref.name"] for m in idx["manifests"])))' "$OUT/shared/index.json"
    assert_output "t1 t2 t3 t4 t5 t6 t7 t8"
    for i in 1 2 3 4 5 6 7 8; do
        run skopeo inspect --raw "oci:$OUT/shared:t$i"
        assert_success
    done
    assert_no_staging "$OUT"
}

# plant_and_finish WHAT: pull big through a slow proxy; once a layer is
# downloading, plant WHAT in the staging area (as an attacker owning the
# child would); the pull must then be refused with exit 8 and DEST unchanged.
plant_and_finish() {
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest:old"
    local before
    before=$(cd "$OUT/dest" && find . -type f -exec sha256sum {} + | sort)
    start_tarpit -1 --rate 8000000
    bg_pull 1 "$TARPIT_HOST/fixtures/big" "oci:$OUT/dest:new"
    wait_for_file_match "$BATS_TEST_TMPDIR/events.1" '"type":"layer_start"' 60
    local stage
    stage=$(find "$OUT" -maxdepth 1 -name '.pullhelper-staging-*' | head -1)
    [[ -n $stage ]] || fail "no staging directory"
    # The staging root is root's (0700); work/ is what the child writes.
    mkdir -p "$stage/work/image/blobs/sha256"
    chown -R "$(stat -c %u:%g "$stage/work")" "$stage/work/image/blobs"
    case $1 in
    symlink) ln -s /etc/shadow "$stage/work/image/blobs/sha256/$(printf 'a%.0s' {1..64})" ;;
    device) mknod "$stage/work/image/blobs/sha256/$(printf 'b%.0s' {1..64})" c 1 3 ;;
    esac
    local rc=0
    wait "${BG_PIDS[0]}" || rc=$?
    BG_PIDS=()
    assert_equal "$rc" 8
    run json_get .error.code <"$BATS_TEST_TMPDIR/stdout.1"
    assert_output verification
    run json_get .error.message <"$BATS_TEST_TMPDIR/stdout.1"
    assert_output --partial "refusing the staged image"
    assert_equal "$(cd "$OUT/dest" && find . -type f -exec sha256sum {} + | sort)" "$before"
    assert_no_staging "$OUT"
}

@test "a symlink planted in staging is refused; DEST unchanged" {
    plant_and_finish symlink
}

@test "a device node planted in staging is refused; DEST unchanged" {
    plant_and_finish device
}

@test "--user takes a named user; root is refused" {
    run_pullhelper pull "${PH_OPTS[@]}" --user nobody "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_equal "$(json_get .isolation.uid <<<"$output")" "$(id -u nobody)"
    assert_equal "$(json_get .isolation.user <<<"$output")" "user nobody"
    local u
    for u in root 0; do
        run_pullhelper 2 pull "${PH_OPTS[@]}" --user "$u" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest2"
        assert_json_error usage
        [[ $ph_error_message == --user:* ]] || fail "message does not name --user: $ph_error_message"
    done
    # A user whose primary group is root's (RHEL's halt, sync, operator), or
    # whose uid is 0 under another name: exit 2 at the plan, by explain too,
    # with no request sent. The user database is a copy, bound over
    # /etc/passwd in a mount namespace of this test's own.
    local passwd="$BATS_TEST_TMPDIR/passwd" before
    cp /etc/passwd "$passwd"
    printf 'halt-test:x:7:0:halt:/sbin:/sbin/halt\ntoor-test:x:0:4242::/root:/bin/sh\n' >>"$passwd"
    for u in "halt-test|is uid 7 gid 0: the pull never runs as root" "toor-test|is uid 0 gid 4242: the pull never runs as root"; do
        before=$(registry_log_barrier)
        for cmd in pull explain; do
            run --separate-stderr unshare -m sh -c 'mount --bind "$1" /etc/passwd && shift && exec "$@"' sh "$passwd" \
                "$PULLHELPER" "$cmd" "${PH_OPTS[@]}" --user "${u%%|*}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest3"
            echo "$cmd ${u%%|*}: rc=$status $output"
            assert_equal "$status" 2
            [[ $(json_get .error.message <<<"$output") == "--user \"${u%%|*}\" ${u#*|}"* ]] || fail "$cmd: $output"
        done
        assert_equal "$(wc -l <"$REGISTRY_LOG")" "$before"
        assert_no_staging "$OUT"
    done
}

@test "the child inherits no fd of the caller (--progress-fd, a root-only log on fd 7) and cannot forge start, done or error events" {
    [[ -x $PULLHELPER_HOSTILE_BIN ]] || fail "hostile build missing: $PULLHELPER_HOSTILE_BIN (make build-hostile)"
    local log=$BATS_TEST_TMPDIR/agent.log events=$BATS_TEST_TMPDIR/events.jsonl rc=0
    echo "root-only agent log" >"$log"
    chmod 0600 "$log"
    : >"$events"
    # shellcheck disable=SC2046
    PULLHELPER_HOSTILE=after-drop:inherited-fds,after-copy:forge-events timeout --kill-after=10 120 \
        "$PULLHELPER_HOSTILE_BIN" pull --progress-fd 5 "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest" \
        >"$BATS_TEST_TMPDIR/stdout" 2>"$BATS_TEST_TMPDIR/stderr" 5>"$events" 7>>"$log" || rc=$?
    cat "$BATS_TEST_TMPDIR/stderr"
    assert_equal "$rc" 0
    grep -q "hostile: no inherited fd" "$BATS_TEST_TMPDIR/stderr" || fail "the child saw inherited fds: $(grep hostile "$BATS_TEST_TMPDIR/stderr")"
    assert_equal "$(cat "$log")" "root-only agent log"
    # Exactly the parent's start and done; nothing forged.
    cat "$events"
    assert_equal "$(grep -c '"type":"start"' "$events")" 1
    assert_equal "$(grep -c '"type":"done"' "$events")" 1
    assert_equal "$(grep -c '"type":"error"' "$events")" 0
    ! grep -q forged "$events" || fail "a forged event reached the progress fd"
    assert_equal "$(grep '"type":"done"' "$events" | json_get .digest)" "$(json_get .digest <"$BATS_TEST_TMPDIR/stdout")"
    grep -q "dropped an event of the pull child" "$BATS_TEST_TMPDIR/stderr" || fail "the forged events were not reported"
}

# The hostile build (bin/pullhelper-hostile, tag pullhelper_hostile) plays a
# child that runs attacker code after the drop; the registry is unreachable
# on purpose, the actions run before any network I/O.
hostile_bin() {
    [[ -x $PULLHELPER_HOSTILE_BIN ]] || fail "hostile build not found: $PULLHELPER_HOSTILE_BIN (make build-hostile)"
}

@test "a compromised child cannot unshare(CLONE_NEWUSER|CLONE_NEWNS) through the 32-bit entry (int 0x80)" {
    hostile_bin || return
    PULLHELPER=$PULLHELPER_HOSTILE_BIN PULLHELPER_HOSTILE=before-drop:i386control,after-drop:unshare32 \
        run_pullhelper '?' pull --retries 0 127.0.0.1:1/hostile/unshare32:latest "oci:$OUT/dest"
    echo "$stderr"
    # The control ran before the filter, in the same child: a kernel that
    # runs no i386 system call at all leaves nothing to prove.
    if [[ $stderr =~ "i386control: no i386 entry: "([^$'\n']*) ]]; then
        skip "this kernel runs no i386 system call (${BASH_REMATCH[1]})"
    fi
    [[ $stderr == *"i386control: the i386 entry works"* ]] || fail "the control before the filter did not run"
    ((status != 0)) || fail "the pull succeeded"
    assert_json_error internal
    [[ $stderr == *"hostile: running unshare32 at after-drop"* ]] || fail "the hostile action did not run"
    [[ $stderr != *"unshare32 succeeded"* ]] || fail "the 32-bit unshare succeeded: the filter does not check the architecture"
    [[ $stderr == *"unshare32 refused (killed by bad system call)"* ]] ||
        fail "want the probe killed by SIGSYS (the filter kills every non-native ABI)"
    [[ $stderr == *"exit status 42"* ]] || fail "the child did not end with the action's status 42"
    [[ ! -e $OUT/dest ]] || fail "DEST was created"
}

@test "a compromised child gets EPERM for every system call outside the allowlist (execve, sysinfo, AF_UNIX, ptrace, keyctl, io_uring...)" {
    hostile_bin || return
    PULLHELPER=$PULLHELPER_HOSTILE_BIN PULLHELPER_HOSTILE=after-drop:unlisted \
        run_pullhelper '?' pull --retries 0 127.0.0.1:1/hostile/unlisted:latest "oci:$OUT/dest"
    echo "$stderr"
    ((status != 0)) || fail "the pull succeeded"
    assert_json_error internal
    [[ $stderr == *"hostile: running unlisted at after-drop"* ]] || fail "the hostile action did not run"
    [[ $stderr != *"unlisted not refused"* ]] || fail "a call outside the allowlist was not refused with EPERM"
    [[ $stderr == *"unlisted: every call refused with EPERM"* ]] || fail "want every call refused with EPERM (not SIGSYS)"
    [[ $stderr == *"exit status 42"* ]] || fail "the child did not end with the action's status 42"
    [[ ! -e $OUT/dest ]] || fail "DEST was created"
}

@test "on a terminal the child draws its progress bars under the default-deny filter, and the pull succeeds" {
    skip_unless_cmd script "util-linux script gives the pull a terminal"
    local out=$BATS_TEST_TMPDIR/typescript cmd
    # The child gets the caller's terminal as stderr and sizes its bars
    # with ioctls on it (TIOCGWINSZ), which the filter must allow.
    printf -v cmd '%q ' timeout 120 "$PULLHELPER" pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/big" "oci:$OUT/dest"
    COLUMNS=100 script -qec "$cmd; echo PULL-RC=\$?" "$out" </dev/null >/dev/null 2>&1 || true
    grep -q "PULL-RC=0" "$out" || fail "the pull on a terminal failed: $(tail -c 2000 "$out")"
    ! grep -qa "operation not permitted" "$out" || fail "something was refused: $(grep -a 'operation not permitted' "$out")"
    [[ -f $OUT/dest/index.json ]] || fail "no oci: layout written"
}

@test "the release binary has no hostile hooks: PULLHELPER_HOSTILE does nothing" {
    PULLHELPER_HOSTILE=after-drop:exit42 run_pullhelper 6 pull --retries 0 127.0.0.1:1/probe/none:latest "oci:$OUT/dest"
    assert_json_error network
    [[ $stderr != *"hostile:"* ]] || fail "the release child ran a hostile action: $stderr"
    # The same environment does reach the hostile build's child, so the
    # check above is not vacuous.
    hostile_bin || return
    PULLHELPER=$PULLHELPER_HOSTILE_BIN PULLHELPER_HOSTILE=after-drop:exit42 \
        run_pullhelper 1 pull --retries 0 127.0.0.1:1/probe/none:latest "oci:$OUT/dest"
    [[ $stderr == *"hostile: running exit42 at after-drop"* && $stderr == *"exit status 42"* ]] ||
        fail "the hostile build did not run exit42: $stderr"
}

@test "a compromised child cannot type into the caller's terminal (TIOCSTI through /dev/tty or its stderr)" {
    hostile_bin || return
    skip_unless_cmd script "util-linux script gives the pull a controlling terminal"
    local out=$BATS_TEST_TMPDIR/typescript
    # script runs the pull on a new pty that is its controlling terminal,
    # like an admin's shell; stderr is that terminal, as it would be.
    PULLHELPER_HOSTILE=after-drop:tiocsti timeout 120 script -qec \
        "$PULLHELPER_HOSTILE_BIN pull --retries 0 127.0.0.1:1/hostile/tiocsti:latest oci:$OUT/dest; echo PULL-DONE" "$out" </dev/null >/dev/null 2>&1 || true
    cat "$out"
    grep -q "hostile: tiocsti /dev/tty: no such device or address; stderr: operation not permitted" "$out" ||
        fail "want /dev/tty unavailable (no controlling terminal) and TIOCSTI refused: $(grep -a 'hostile: tiocsti' "$out")"
    grep -q PULL-DONE "$out" || fail "the pull did not finish"
}
