#!/usr/bin/env bats
#
# pullhelper pull failures: every exit code of DESIGN.md produced by a real
# cause, each with exactly one JSON error line on stdout, DEST untouched and
# no staging directory left.
#
# Network: only 127.0.0.1 and a network namespace this file creates (for DNS
# failures and anything that could resolve a real name).

load helpers

setup_file() {
    start_registry
    push_fixture tiny
    push_fixture big
    # Fixtures with blobs of their own, corrupted in the registry's storage.
    push_fixture_args corrupt-layer fixtures/corrupt-layer -layers 1 -layer-size 4096 -compressible 0.5 -seed 101
    push_fixture_args corrupt-config fixtures/corrupt-config -layers 1 -layer-size 4096 -compressible 0.5 -seed 102
    corrupt_blob "$(registry_manifest fixtures/corrupt-layer:latest | json_get '.layers[0].digest')"
    corrupt_blob "$(registry_manifest fixtures/corrupt-config:latest | json_get '.config.digest')"

    # A network namespace with only a loopback and a resolv.conf naming
    # 127.0.0.1, where no DNS server listens: name resolution fails there
    # (and only there) without a packet leaving the host.
    PH_NETNS=""
    if [[ $(id -u) -eq 0 ]] && command -v ip >/dev/null; then
        local ns="ph020-$$-$RANDOM"
        if ip netns add "$ns" 2>"$BATS_FILE_TMPDIR/netns.err"; then
            PH_NETNS=$ns
            ip -n "$ns" link set lo up
            mkdir -p "/etc/netns/$ns"
            echo "nameserver 127.0.0.1" >"/etc/netns/$ns/resolv.conf"
        fi
    fi
    export PH_NETNS
}

teardown_file() {
    _kill_background_pull
    if mountpoint -q "$BATS_FILE_TMPDIR/ro" 2>/dev/null; then
        umount "$BATS_FILE_TMPDIR/ro"
    fi
    if [[ -n ${PH_NETNS:-} ]]; then
        ip netns del "$PH_NETNS" 2>/dev/null || true
        rm -rf "/etc/netns/$PH_NETNS"
    fi
    stop_registry
}

setup() {
    ph_test_setup
}

teardown() {
    _kill_background_pull
    stop_tarpit
    if mountpoint -q "$BATS_FILE_TMPDIR/ro" 2>/dev/null; then
        umount "$BATS_FILE_TMPDIR/ro"
    fi
}

# _kill_background_pull: kill a pullhelper that a test started in the
# background and that is still running (by its recorded pid only).
_kill_background_pull() {
    local f=$BATS_FILE_TMPDIR/bg.pid pid
    [[ -f $f ]] || return 0
    pid=$(<"$f")
    if _ph_pid_alive "$pid" && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q pullhelper; then
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
}

# skip_unless_netns: skip when setup_file could not create the namespace.
skip_unless_netns() {
    [[ -n ${PH_NETNS:-} ]] ||
        skip "no network namespace: needs root and iproute2 ($(cat "$BATS_FILE_TMPDIR/netns.err" 2>/dev/null))"
}

# use_netns [SRC DST]...: make run_pullhelper run pullhelper inside
# $PH_NETNS. nsenter joins the namespace's network (only lo); unshare -m
# gives a private mount namespace in which /etc/netns/NS/resolv.conf is bound
# over /etc/resolv.conf (plus each extra SRC over DST). Unlike `ip netns
# exec`, which mounts a fresh /sys, this keeps the host's cgroup mounts
# visible, so that pullhelper's cgroup isolation still works.
use_netns() {
    skip_unless_netns
    skip_unless_cmd nsenter
    skip_unless_cmd unshare
    local w=$BATS_TEST_TMPDIR/pullhelper-in-netns
    {
        echo '#!/bin/sh'
        echo 'set -e'
        echo "mount --bind '/etc/netns/$PH_NETNS/resolv.conf' /etc/resolv.conf"
        while (($# >= 2)); do
            echo "mount --bind '$1' '$2'"
            shift 2
        done
        echo "exec '$PULLHELPER' \"\$@\""
    } >"$w.inner"
    printf '#!/bin/sh\nexec nsenter --net=/run/netns/%s unshare -m --propagation private %s "$@"\n' \
        "$PH_NETNS" "$w.inner" >"$w"
    chmod +x "$w" "$w.inner"
    PULLHELPER=$w
}

# assert_untouched DEST_PATH: DEST does not exist and no staging is left.
assert_untouched() {
    [[ ! -e $1 ]] || fail "DEST $1 exists after a failed pull"
    assert_no_staging "$(dirname "$1")"
}

# start_background_pull DEST_PATH PROGRESS_FILE ARGS...: start pullhelper
# pull ARGS... in the background with --progress-fd 3 to PROGRESS_FILE;
# stdout/stderr to $OUT/bg.out/bg.err; sets BG_PID.
start_background_pull() {
    local progress=$2
    shift 2
    "$PULLHELPER" pull --progress-fd 3 "$@" 3>"$progress" >"$OUT/bg.out" 2>"$OUT/bg.err" &
    BG_PID=$!
    echo "$BG_PID" >"$BATS_FILE_TMPDIR/bg.pid"
}

# wait_background_pull SECONDS: wait (bounded) for the background pull to
# exit; sets BG_RC. Fails (after killing it) when it does not exit in time.
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

###############################################################################
# 3 unauthorized

@test "exit 3: wrong password; the message names the auth file and user" {
    run_pullhelper 3 pull --authfile "$REGISTRY_BADAUTHFILE" --cert-dir "$REGISTRY_CERT_DIR" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_error unauthorized
    [[ $ph_error_message == *"$REGISTRY_BADAUTHFILE"* ]] || fail "message does not name the auth file"
    [[ $ph_error_message == *"$REGISTRY_USER"* ]] || fail "message does not name the user"
    assert_secret_absent "$output" "$stderr"
    assert_untouched "$OUT/dest"
}

@test "exit 3: anonymous access to the auth registry (empty auth file, and no auth file at all)" {
    echo '{"auths":{}}' >"$OUT/empty.json"
    run_pullhelper 3 pull --authfile "$OUT/empty.json" --cert-dir "$REGISTRY_CERT_DIR" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_error unauthorized
    [[ $ph_error_message == *anonymous* ]] || fail "message does not say the access was anonymous"
    assert_untouched "$OUT/dest"

    # No --authfile: the default locations, none of which has a credential
    # for this per-run registry.
    REGISTRY_AUTH_FILE="" run_pullhelper 3 pull --cert-dir "$REGISTRY_CERT_DIR" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_error unauthorized
    assert_untouched "$OUT/dest"
}

###############################################################################
# 4 tls

@test "exit 4: unknown CA without --cert-dir; the message lists the certs.d directories searched" {
    run_pullhelper 4 pull --authfile "$REGISTRY_AUTHFILE" --retries 0 \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_error tls
    local d
    for d in "$HOME/.config/containers/certs.d" /etc/containers/certs.d /etc/docker/certs.d; do
        [[ $ph_error_message == *"$d/$REGISTRY_HOST"* ]] || fail "message does not list $d/$REGISTRY_HOST"
    done
    assert_untouched "$OUT/dest"
}

@test "tls: --tls-verify=false pulls from the same registry without its CA" {
    run_pullhelper pull --authfile "$REGISTRY_AUTHFILE" --tls-verify=false \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$(registry_digest fixtures/tiny:latest)"
}

@test "tls: per-host certs.d root from the policy (trust.certs_d) is used without --cert-dir" {
    local root=$BATS_TEST_TMPDIR/certs.d
    mkdir -p "$root/$REGISTRY_HOST"
    cp "$REGISTRY_CA" "$root/$REGISTRY_HOST/ca.crt"
    printf 'version = 1\n\n[trust]\ncerts_d = ["%s"]\n' "$root" >"$OUT/policy.toml"

    run_pullhelper pull --policy "$OUT/policy.toml" --authfile "$REGISTRY_AUTHFILE" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$(registry_digest fixtures/tiny:latest)"

    # Without that root the same pull fails with tls: the policy made the difference.
    printf 'version = 1\n\n[trust]\ncerts_d = ["%s"]\n' "$BATS_TEST_TMPDIR/nothing" >"$OUT/policy2.toml"
    run_pullhelper 4 pull --policy "$OUT/policy2.toml" --authfile "$REGISTRY_AUTHFILE" --retries 0 \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest2"
    assert_json_error tls
    [[ $ph_error_message == *"$BATS_TEST_TMPDIR/nothing/$REGISTRY_HOST"* ]] ||
        fail "message does not list the policy's certs.d root"
}

###############################################################################
# 5 not_found

@test "exit 5: missing tag" {
    run_pullhelper 5 pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny:no-such-tag" "oci:$OUT/dest"
    assert_json_error not_found
    [[ $ph_error_message == *no-such-tag* ]] || fail "message does not name the tag"
    # The registry is the only endpoint: there is no next to try (issue
    # 24 item 16).
    [[ $stderr != *"trying the next"* ]] || fail "a fallback is announced with no endpoint left: $stderr"
    assert_untouched "$OUT/dest"
}

@test "exit 5: missing repository" {
    run_pullhelper 5 pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/no-such-repo:latest" "oci:$OUT/dest"
    assert_json_error not_found
    [[ $ph_error_message == *no-such-repo* ]] || fail "message does not name the repository"
    assert_untouched "$OUT/dest"
}

@test "exit 5: unknown digest" {
    local d=sha256:0000000000000000000000000000000000000000000000000000000000000001
    run_pullhelper 5 pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny@$d" "dir:$OUT/dest"
    assert_json_error not_found
    [[ $ph_error_message == *"$d"* ]] || fail "message does not name the digest"
    assert_untouched "$OUT/dest"
}

###############################################################################
# 6 network

@test "exit 6: nothing listening, --retries 0: one attempt, no retry" {
    local port
    port=$(_ph_free_port)
    run_pullhelper 6 pull "${PH_OPTS[@]}" --retries 0 "127.0.0.1:$port/x/y" "oci:$OUT/dest"
    assert_json_error network
    [[ $ph_error_message == *"127.0.0.1:$port"* ]] || fail "message does not name the address"
    [[ $stderr != *retrying* ]] || fail "retried although --retries 0"
    assert_untouched "$OUT/dest"
}

@test "exit 6: nothing listening, --retries 2 --retry-delay 100ms: retries twice, then fails" {
    local port start
    port=$(_ph_free_port)
    start=$(date +%s%N)
    run_pullhelper 6 pull "${PH_OPTS[@]}" --retries 2 --retry-delay 100ms "127.0.0.1:$port/x/y" "oci:$OUT/dest"
    local ms=$((($(date +%s%N) - start) / 1000000))
    assert_json_error network
    # Two retry warnings on stderr (attempts 1 and 2 of 3), none more.
    assert_equal "$(grep -c 'retrying' <<<"$stderr")" 2
    # Back-off 100ms then 200ms, each spread by ±20 % (registry.jitter): the
    # waits the warnings name are within that (the 1s default would be
    # 0.8-1.2 s and 1.6-2.4 s), and the pull took at least their sum.
    local waits
    waits=$(grep -o ' in=[0-9.]*[µm]*s' <<<"$stderr" | sed 's/^ in=//' |
        awk '/µs$/ { sub(/µs$/, ""); print int($0 / 1000); next } /ms$/ { sub(/ms$/, ""); print int($0); next } { sub(/s$/, ""); print int($0 * 1000) }')
    [[ $(wc -l <<<"$waits") == 2 ]] || fail "want two waits (in=) in the retry warnings, got: $waits"
    local w1 w2
    { read -r w1; read -r w2; } <<<"$waits"
    ((w1 >= 79 && w1 <= 120)) || fail "first back-off ${w1}ms, want 100ms ±20 %"
    ((w2 >= 159 && w2 <= 240)) || fail "second back-off ${w2}ms, want 200ms ±20 %"
    ((ms >= w1 + w2)) || fail "finished in ${ms}ms, before its back-offs (${w1} + ${w2} ms) were over"
    assert_untouched "$OUT/dest"
}

@test "exit 6: DNS failure (inside a network namespace with no DNS server)" {
    use_netns
    run_pullhelper 6 pull --retries 0 registry.invalid/x/y "oci:$OUT/dest"
    assert_json_error network
    [[ $ph_error_message == *registry.invalid* ]] || fail "message does not name the host"
    [[ $ph_error_message =~ lookup|resolv|DNS|dns ]] || fail "message does not say name resolution failed"
    assert_untouched "$OUT/dest"
}

@test "exit 6: stall — the tarpit stops forwarding, --stall-timeout 2s ends the attempt" {
    start_tarpit 1000000
    local start
    start=$SECONDS
    run_pullhelper 6 pull --authfile "$TARPIT_AUTHFILE" --cert-dir "$REGISTRY_CERT_DIR" \
        --stall-timeout 2s --retries 0 "$TARPIT_HOST/fixtures/big" "oci:$OUT/dest"
    assert_json_error network
    [[ $ph_error_message == *stall* ]] || fail "message does not mention the stall"
    ((SECONDS - start < 30)) || fail "took $((SECONDS - start))s for a 2s stall timeout"
    grep -q stalled "$TARPIT_LOG" || fail "the tarpit never stalled a connection: $(cat "$TARPIT_LOG")"
    assert_untouched "$OUT/dest"
}

@test "exit 6: --timeout 2s through the tarpit bounds the whole pull, retries included" {
    start_tarpit 1000000
    local start
    start=$(date +%s%N)
    run_pullhelper 6 pull --authfile "$TARPIT_AUTHFILE" --cert-dir "$REGISTRY_CERT_DIR" \
        --timeout 2s --stall-timeout 60s --retries 3 "$TARPIT_HOST/fixtures/big" "oci:$OUT/dest"
    local ms=$((($(date +%s%N) - start) / 1000000))
    assert_json_error network
    [[ $ph_error_message =~ timed\ out|timeout ]] || fail "message does not mention the timeout"
    ((ms >= 1900)) || fail "gave up after ${ms}ms, before the 2s timeout"
    ((ms < 10000)) || fail "took ${ms}ms for --timeout 2s"
    assert_untouched "$OUT/dest"
}

###############################################################################
# 8 verification

@test "exit 8: corrupt layer blob (digest mismatch); DEST absent, no staging" {
    run_pullhelper 8 pull "${PH_OPTS[@]}" --retries 0 "$REGISTRY_HOST/fixtures/corrupt-layer" "oci:$OUT/dest"
    assert_json_error verification
    [[ $ph_error_message =~ [Dd]igest ]] || fail "message does not mention the digest"
    assert_untouched "$OUT/dest"
}

@test "exit 8: corrupt config blob (digest mismatch); DEST absent, no staging" {
    run_pullhelper 8 pull "${PH_OPTS[@]}" --retries 0 "$REGISTRY_HOST/fixtures/corrupt-config" "oci:$OUT/dest"
    assert_json_error verification
    assert_untouched "$OUT/dest"
}

@test "exit 8: signature policy rejects the image" {
    echo '{"default":[{"type":"reject"}]}' >"$OUT/reject.json"
    run_pullhelper 8 pull "${PH_OPTS[@]}" --signature-policy "$OUT/reject.json" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_error verification
    [[ $ph_error_message == *reject* ]] || fail "message does not say the policy rejected it"
    assert_untouched "$OUT/dest"
}

# containers/image judges a pull of docker://NAME:TAG by NAME:TAG (the
# policy's scope), not by the digest the tag resolved to: a scope rejecting
# the tag rejects the pull by tag, and not a pull of the same image by digest
# (which the default accepts). pullhelper judged by the digest, so a
# tag's reject was passed over.
@test "exit 8: a signature policy scope rejecting the tag as requested rejects the pull by that tag; the same image by digest is the default's" {
    local digest
    digest=$(registry_digest fixtures/tiny:latest)
    printf '{"default":[{"type":"insecureAcceptAnything"}],"transports":{"docker":{"%s/fixtures/tiny:latest":[{"type":"reject"}]}}}\n' "$REGISTRY_HOST" >"$OUT/tag.json"
    run_pullhelper 8 pull "${PH_OPTS[@]}" --signature-policy "$OUT/tag.json" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_error verification
    [[ $ph_error_message == *reject* ]] || fail "message does not say the policy rejected it"
    assert_untouched "$OUT/dest"
    run_pullhelper pull "${PH_OPTS[@]}" --signature-policy "$OUT/tag.json" \
        "$REGISTRY_HOST/fixtures/tiny@$digest" "oci:$OUT/dest"
    assert_json_result
}

###############################################################################
# 9 destination

@test "exit 9: DEST on a read-only tmpfs" {
    skip_if_not_root "mounting a tmpfs"
    local ro=$BATS_FILE_TMPDIR/ro
    mkdir -p "$ro"
    mount -t tmpfs -o ro,size=1m tmpfs "$ro"
    run_pullhelper 9 pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$ro/dest"
    assert_json_error destination
    [[ $ph_error_message == *"$ro"* ]] || fail "message does not name the directory"
    assert_equal "$(ls -A "$ro")" ""
    umount "$ro"
}

@test "exit 9: DEST's parent directory does not exist" {
    run_pullhelper 9 pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/missing/dest"
    assert_json_error destination
    [[ ! -e $OUT/missing ]] || fail "the missing parent was created"
}

@test "exit 9: oci: DEST is a regular file, which stays unchanged" {
    echo "not a layout" >"$OUT/file"
    run_pullhelper 9 pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/file"
    assert_json_error destination
    assert_equal "$(cat "$OUT/file")" "not a layout"
    assert_no_staging "$OUT"
}

# dir: and oci: refuse a DEST that is not theirs (checkExisting,
# openExisting); the archives refuse an existing file that is not their
# kind's tar, read within bounds, before any download (issue 24 item 10).
@test "exit 9: oci-archive: and docker-archive: refuse an existing file that is not their archive (text, a tar of something else, the other kind's archive); it stays unchanged" {
    tar -cf "$OUT/other.tar" -C "$BATS_TEST_DIRNAME" helpers.bash
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci-archive:$OUT/theirs-oci.tar"
    assert_json_result
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "docker-archive:$OUT/theirs-docker.tar"
    assert_json_result
    local tr f sum before
    before=$(registry_log_barrier)
    for tr in oci-archive docker-archive; do
        echo "notes, not an archive" >"$OUT/text"
        cp "$OUT/other.tar" "$OUT/plain.tar"
        for f in text plain.tar theirs-oci.tar theirs-docker.tar; do
            [[ $f == "theirs-${tr%-archive}.tar" ]] && continue
            sum=$(sha256sum <"$OUT/$f")
            run_pullhelper 9 pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "$tr:$OUT/$f"
            assert_json_error destination
            [[ $ph_error_message == *"$OUT/$f exists and is not"*"refusing to replace it"* ]] ||
                fail "$tr over $f: the message does not say why: $ph_error_message"
            assert_equal "$(sha256sum <"$OUT/$f")" "$sum"
            assert_no_staging "$OUT"
        done
    done
    # Refused before any request for the image.
    registry_log_barrier >/dev/null
    run grep -c fixtures/tiny < <(tail -n "+$((before + 1))" "$REGISTRY_LOG")
    assert_output 0
    # Their own archive, and an empty file, are replaced.
    : >"$OUT/empty"
    for f in theirs-oci.tar empty; do
        run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci-archive:$OUT/$f"
        assert_json_result
    done
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "docker-archive:$OUT/theirs-docker.tar"
    assert_json_result
}

###############################################################################
# 2 usage

@test "exit 2: malformed reference" {
    local ref
    for ref in 'UPPER/Case:tag' "$REGISTRY_HOST/fixtures/tiny:bad:tag" "$REGISTRY_HOST/fixtures/tiny@sha256:abc" ''; do
        run_pullhelper 2 pull "${PH_OPTS[@]}" "$ref" "oci:$OUT/dest"
        assert_json_error usage
    done
    assert_untouched "$OUT/dest"
}

@test "exit 2: unknown destination transport, and a transport without a path" {
    run_pullhelper 2 pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "bogus:$OUT/dest"
    assert_json_error usage
    [[ $ph_error_message == *bogus* ]] || fail "message does not name the transport"
    # It offers every DEST form, containerd:REF included (issue 24 item 16).
    local form
    for form in 'oci:PATH[:TAG]' 'dir:PATH' 'oci-archive:PATH[:TAG]' 'docker-archive:PATH[:REF]' \
        'containers-storage:[DRIVER@GRAPHROOT+RUNROOT]REF' 'containerd:REF'; do
        [[ $ph_error_message == *"$form"* ]] || fail "the message does not offer $form: $ph_error_message"
    done
    run_pullhelper 2 pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "$OUT/dest"
    assert_json_error usage
    run_pullhelper 2 pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:"
    assert_json_error usage
    assert_untouched "$OUT/dest"
}

@test "exit 2: unknown flag and bad flag values" {
    run_pullhelper 2 pull --frobnicate "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_error usage
    [[ $ph_error_message == *--frobnicate* ]] || fail "message does not name the flag"
    run_pullhelper 2 pull --retries many "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_error usage
    run_pullhelper 2 pull --retries -1 "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_error usage
    run_pullhelper 2 pull --timeout soon "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_error usage
    run_pullhelper 2 frobnicate
    assert_json_error usage
    assert_untouched "$OUT/dest"
}

# IMAGE and DEST the wrong way round: IMAGE has a DEST form (target.Kinds)
# where parseImage (reference.ParseNormalizedNamed, also under
# normalizeContainerd's rules) would say only "invalid reference format"
# (issue 24 item 16).
@test "exit 2: IMAGE and DEST swapped — the message names the argument and says IMAGE comes first" {
    local img=$REGISTRY_HOST/fixtures/tiny d
    : >"$OUT/containerd.toml"
    for d in "oci:$OUT/dest" "oci-archive:$OUT/dest.tar" "dir:$OUT/dest" "containerd:$img"; do
        run_pullhelper 2 pull "${PH_OPTS[@]}" "$d" "$img"
        assert_json_error usage
        [[ $ph_error_message == *"IMAGE \"$d\" is a destination"*"DEST \"$img\" is an image reference"*"IMAGE comes first, then DEST"* ]] ||
            fail "swapped $d: the message does not say which argument is wrong: $ph_error_message"
        [[ $ph_error_message != *"invalid reference format"* ]] || fail "still only the parser's words: $ph_error_message"
    done
    run_pullhelper 2 pull "${PH_OPTS[@]}" --containerd-config "$OUT/containerd.toml" "oci:$OUT/dest" "$img"
    assert_json_error usage
    [[ $ph_error_message == *"IMAGE comes first, then DEST"* ]] || fail "containerd rules: $ph_error_message"
    run_pullhelper 2 explain "oci:$OUT/dest"
    assert_json_error usage
    [[ $ph_error_message == *"IMAGE \"oci:$OUT/dest\" is a destination"* ]] || fail "explain: $ph_error_message"
    # A short name that merely looks like one (docker.io/library/oci:v1)
    # before a real DEST is an image, not a swap.
    # (An empty registries.conf: refused as an unresolvable short name.)
    : >"$OUT/registries.conf"
    run_pullhelper 2 pull "${PH_OPTS[@]}" --registries-conf "$OUT/registries.conf" oci:v1 "oci:$OUT/dest"
    assert_json_error usage
    [[ $ph_error_message == *"short name"* && $ph_error_message != *"IMAGE comes first"* ]] || fail "oci:v1 taken for a DEST: $ph_error_message"
    assert_untouched "$OUT/dest"
}

@test "exit 2: wrong number of arguments" {
    run_pullhelper 2 pull
    assert_json_error usage
    run_pullhelper 2 pull "$REGISTRY_HOST/fixtures/tiny"
    assert_json_error usage
    run_pullhelper 2 pull "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest" "oci:$OUT/dest2"
    assert_json_error usage
    assert_untouched "$OUT/dest"
}

@test "exit 2: short name that registries.conf does not resolve (empty --registries-conf)" {
    # In the namespace: should the name be resolved after all, nothing leaves the host.
    use_netns
    : >"$OUT/registries.conf"
    run_pullhelper 2 pull --registries-conf "$OUT/registries.conf" --retries 0 \
        phtest-no-such-alias "oci:$OUT/dest"
    assert_json_error usage
    [[ $ph_error_message == *"short name"* ]] || fail "message does not say it is a short name"
    assert_untouched "$OUT/dest"
}

@test "exit 2: short name busybox with an empty registries.conf and no drop-in aliases" {
    : >"$OUT/registries.conf"
    mkdir -p "$OUT/empty.d"
    # The system's registries.conf.d (whose shortnames.conf aliases busybox)
    # is hidden under an empty directory in the private mount namespace.
    if [[ -d /etc/containers/registries.conf.d ]]; then
        use_netns "$OUT/empty.d" /etc/containers/registries.conf.d
    else
        use_netns
    fi
    run_pullhelper 2 pull --registries-conf "$OUT/registries.conf" --retries 0 busybox "oci:$OUT/dest"
    assert_json_error usage
    [[ $ph_error_message == *"short name"* ]] || fail "message does not say it is a short name"
    assert_untouched "$OUT/dest"
}

@test "exit 2: bad --progress-fd (not open; not a number)" {
    run_pullhelper 2 pull "${PH_OPTS[@]}" --progress-fd 77 "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_error usage
    [[ $ph_error_message == *progress-fd* ]] || fail "message does not name --progress-fd"
    run_pullhelper 2 pull "${PH_OPTS[@]}" --progress-fd abc "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_error usage
    assert_untouched "$OUT/dest"
}

@test "exit 2: --memory-max 12apples is rejected before any network and names --memory-max" {
    local before
    before=$(registry_log_barrier)
    run_pullhelper 2 pull "${PH_OPTS[@]}" --memory-max 12apples "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_error usage
    [[ $ph_error_message == *--memory-max* ]] || fail "message does not name --memory-max"
    [[ $ph_error_message == *12apples* ]] || fail "message does not quote the value"
    run_pullhelper 2 pull "${PH_OPTS[@]}" --pids-max -5 "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_error usage
    [[ $ph_error_message == *--pids-max* ]] || fail "message does not name --pids-max"
    assert_equal "$(wc -l <"$REGISTRY_LOG")" "$before"
    assert_untouched "$OUT/dest"
}

# isolation_flag_applied FLAG VALUE JSON_PATH WANT: a valid isolation
# setting takes effect: exit 0 and the result's JSON_PATH is WANT ('*':
# anything but null). Never silently ignored, and no longer "not supported
# yet" (every one of these is implemented; an exit 2 is a regression).
isolation_flag_applied() {
    local flag=$1 value=$2 path=$3 want=$4 got
    rm -rf "$OUT/dest"
    run_pullhelper 0 pull "${PH_OPTS[@]}" "$flag" "$value" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_result
    got=$(json_get "$path" <<<"$output")
    if [[ $want == '*' ]]; then
        [[ $got != null ]] || fail "$flag $value accepted but $path is null: the setting was ignored"
    else
        [[ $got == "$want" ]] || fail "$flag $value accepted but $path is '$got', want '$want'"
    fi
}

@test "isolation flags take effect, never ignored" {
    isolation_flag_applied --memory-max 256Mi .isolation.limits.memory_max 268435456
    isolation_flag_applied --pids-max 100 .isolation.limits.pids_max 100
    isolation_flag_applied --cpu-quota 0.5 .isolation.limits.cpu_quota 0.5
    isolation_flag_applied --user 1000 .isolation.uid 1000
    isolation_flag_applied --user 4294967294 .isolation.uid 4294967294
    isolation_flag_applied --dns 127.0.0.1 .isolation.dns '*'
    isolation_flag_applied --netns "/proc/$$/ns/net" .isolation.netns '*'
}

###############################################################################
# 129 / 130 / 143 interrupted

# interrupt_test SIGNAL EXPECTED_RC: pull big through a stalling tarpit,
# wait for the first layer_start event, send SIGNAL, check the outcome.
interrupt_test() {
    local sig=$1 want_rc=$2
    start_tarpit 1000000
    local progress=$OUT/progress.jsonl
    start_background_pull "$OUT/dest" "$progress" --authfile "$TARPIT_AUTHFILE" \
        --cert-dir "$REGISTRY_CERT_DIR" --stall-timeout 5m "$TARPIT_HOST/fixtures/big" "oci:$OUT/dest"
    wait_for_file_match "$progress" '"type":"layer_start"' 30
    # A staging directory exists while the pull runs...
    [[ -n $(find "$OUT" -maxdepth 1 -name '.pullhelper-staging-*') ]] ||
        fail "no staging directory while the pull runs"
    kill "-$sig" "$BG_PID"
    wait_background_pull 20
    assert_equal "$BG_RC" "$want_rc"
    run cat "$OUT/bg.out"
    assert_json_error interrupted
    # ...and none after it, and DEST was never created.
    assert_untouched "$OUT/dest"
    assert_equal "$(tail -n 1 "$progress" | json_get .type)" error
    assert_equal "$(tail -n 1 "$progress" | json_get .code)" interrupted
    # The error event says what stdout says (it said "context canceled").
    assert_equal "$(tail -n 1 "$progress" | json_get .message)" "$(json_get .error.message <"$OUT/bg.out")"
}

@test "exit 143: SIGTERM during a pull cleans up; DEST absent, no staging" {
    interrupt_test TERM 143
}

@test "exit 130: SIGINT during a pull cleans up; DEST absent, no staging" {
    interrupt_test INT 130
}

# SIGHUP: the caller's session or supervisor went away. It killed the
# parent by default (exit 129, no JSON) and left the staging, the cgroup and
# the uid lock as a SIGKILL does.
@test "exit 129: SIGHUP during a pull cleans up as SIGTERM does; DEST absent, no staging" {
    interrupt_test HUP 129
}

@test "exit 7: pull run by a non-root user says, once, to run it as root, before reading or creating anything (issue 24 item 11)" {
    [[ $(id -u) == 0 ]] || skip "needs root to become another user"
    local home="$BATS_TEST_TMPDIR/home" before
    mkdir -p "$home" && chown 65534:65534 "$home" "$OUT"
    before=$(registry_log_barrier)
    for extra in "" --no-isolation; do
        run --separate-stderr env -i PATH="$PATH" HOME="$home" setpriv --reuid 65534 --regid 65534 --clear-groups \
            "$PULLHELPER" pull $extra --authfile "$REGISTRY_AUTHFILE" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
        echo "[$extra] rc=$status stdout=$output stderr=$stderr"
        assert_equal "$status" 7
        assert_equal "$(json_get .error.code <<<"$output")" isolation
        [[ $(json_get .error.message <<<"$output") == *"must run as root (this is uid 65534)"*"run it as root"* ]] ||
            fail "the error does not say to run as root: $output"
        # Said once: on stdout's error, and once on stderr.
        assert_equal "$(grep -c "must run as root" <<<"$stderr")" 1
        [[ ! -e $OUT/dest ]] || fail "DEST was created"
        [[ -z $(ls -A "$OUT") ]] || fail "left in DEST's parent: $(ls -A "$OUT")"
    done
    assert_equal "$(wc -l <"$REGISTRY_LOG")" "$before"
}

@test "--quiet: a pull writes only its result (stdout), nothing on stderr, the child's lines and warnings included; a failure only its JSON error (issue 24 item 14)" {
    run_pullhelper pull --quiet "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_result
    assert_equal "$stderr" ""
    # Without it the same pull logs (the check above can fail).
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest2"
    [[ $stderr == *pullhelper-child:*pulling* && $stderr == *msg=pulled* ]] || fail "a pull without --quiet logged nothing: $stderr"
    run_pullhelper 5 pull -q "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/no-such-repo" "oci:$OUT/dest3"
    assert_json_error not_found
    assert_equal "$stderr" ""
    run_pullhelper explain -q "${PH_OPTS[@]}" --dns 10.0.0.1 --dns 10.0.0.2 --dns 10.0.0.3 --dns 10.0.0.4 "$REGISTRY_HOST/fixtures/tiny"
    assert_equal "$stderr" ""
    run_pullhelper explain "${PH_OPTS[@]}" --dns 10.0.0.1 --dns 10.0.0.2 --dns 10.0.0.3 --dns 10.0.0.4 "$REGISTRY_HOST/fixtures/tiny"
    [[ $stderr == *warning* ]] || fail "explain without --quiet warned of nothing: $stderr"
}
