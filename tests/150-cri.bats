#!/usr/bin/env bats
#
# pullhelper cri (issue 25): the CRI image service in front of the
# containerd 2.x of make deps (tests/136-containerd2.bats' daemon, started
# below each test's directory), driven by crictl with --image-endpoint at
# pullhelper and --runtime-endpoint at containerd; the htpasswd registry of
# helpers.bash. crictl sends the credentials (--creds) in the request's
# AuthConfig; pullhelper cri is given no credential of its own.

load helpers
load containerd-cases
load cri

CTRD_FLAVOR=2

setup_file() {
    fixture tiny
    fixture multi
    start_registry
    push_fixture tiny
    push_fixture multi
    TINY_DIGEST=$(registry_digest fixtures/tiny:latest)
    export TINY_DIGEST
}

setup() {
    cri_setup cri
    BG_LISTENER=""
}

teardown() {
    reg_cont
    cri_stop
    [[ -z ${BG_LISTENER:-} ]] || { kill "$BG_LISTENER" 2>/dev/null; wait "$BG_LISTENER" 2>/dev/null; }
    [[ -z ${CTRD_DIR:-} ]] || ctrd_stop "$CTRD_DIR"
    cri_cgroups_rm "$CG_PARENT"
}

# pull_cgroups: the per-pull cgroups under this test's parent (pids
# hierarchy).
pull_cgroups() {
    ls -d /sys/fs/cgroup/pids/"${CG_PARENT#/}"/pull-* 2>/dev/null || true
}

# manifest_gets BEFORE REF: the registry's manifest GETs of REF (a tag or
# digest of fixtures/tiny, a regex) after access-log line BEFORE.
manifest_gets() {
    registry_log_barrier >/dev/null
    tail -n "+$(($1 + 1))" "$REGISTRY_LOG" | grep -E "\"GET /v2/fixtures/tiny/manifests/$2 " || true
}

@test "cri: the socket is root-only; a stale socket is replaced, a file refused; SIGTERM removes it and prints the result" {
    ctrd2_require
    ctrd_up
    local s="$T/ph/cri.sock"
    mkdir -p "$T/ph"
    : >"$s"
    run_pullhelper 2 cri --listen "unix://$s" --runtime-endpoint "unix://$SOCK"
    assert_json_error usage
    [[ $output == *"not a socket"* ]] || fail "want the reason: $output"
    rm "$s"
    run_pullhelper 2 cri --listen "unix://relative" --runtime-endpoint "unix://$SOCK"
    assert_json_error usage
    # A stale socket (nobody listens) is replaced.
    "$PH_PYTHON" -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' "$s"
    [[ -S $s ]]
    cri_up
    assert_equal "$(stat -c '%a %u %F' "$PH_SOCK")" "600 0 socket"
    # --runtime auto: containerd 2.x's CRI answers Version "containerd".
    assert_equal "$(grep '"msg":"serving"' "$T/cri.log" | json_get .runtime)" containerd
    assert_equal "$(grep '"msg":"serving"' "$T/cri.log" | json_get .runtime_from)" Version
    _ph_stop_pid "$CRI_PID" "pullhelper cri"
    wait "$CRI_PID" || true
    CRI_PID=""
    [[ ! -e $PH_SOCK ]] || fail "the socket is left after SIGTERM"
    assert_equal "$(json_get .pulls <"$T/cri.out")" 0
    assert_equal "$(json_get .listen <"$T/cri.out")" "unix://$PH_SOCK"
    assert_equal "$(json_get .runtime <"$T/cri.out")" containerd
}

# The kubelet sends its pull credentials to --listen: a user who can write
# its directory could move root's socket aside and listen in its place (a
# spy answering every call with an empty message got crictl's
# PullImage with --creds, password included). And --runtime-endpoint is
# connected to as dest.OpenRootSocket connects to containerd's socket for
# the pulls (issue 22 finding 11): never to a socket another user owns.
@test "cri: --listen in a directory another user can write (theirs, 0777, through their symlink) is exit 2, nothing there is created or removed; a --runtime-endpoint socket another user owns gets no forwarded call" {
    ctrd2_require
    mkdir -p "$T/user" "$T/open" "$T/root"
    chown 65534:65534 "$T/user"
    # The user's own stale socket at the path: not root's to remove.
    "$PH_PYTHON" -c 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$T/user/cri.sock"
    chown -h 65534:65534 "$T/user/cri.sock"
    chmod 0777 "$T/open"
    ln -s "$T/root" "$T/link"
    chown -h 65534:65534 "$T/link"
    local dir
    for dir in user open link; do
        run_pullhelper 2 cri --listen "unix://$T/$dir/cri.sock" --runtime-endpoint "unix://$T/root/rt.sock"
        assert_json_error usage
        [[ $output == *"--listen $T/$dir/cri.sock: "* ]] || fail "the message does not name the socket: $output"
        case $dir in
        user) [[ $output == *"$T/user is owned by uid 65534"* ]] || fail "the message does not name the owner: $output" ;;
        open) [[ $output == *"$T/open is writable by group or others"* ]] || fail "the message does not name the mode: $output" ;;
        link) [[ $output == *"$T/link is a symbolic link owned by uid 65534"* ]] || fail "the message does not name the link: $output" ;;
        esac
        if [[ $dir == user ]]; then
            assert_equal "$(stat -c '%U %F' "$T/user/cri.sock")" "nobody socket"
            assert_equal "$(ls -A "$T/user/")" "cri.sock"
        else
            [[ -z $(ls -A "$T/$dir/") ]] || fail "the refused service created $(ls -A "$T/$dir/")"
        fi
    done
    # A missing directory under root's is created (0755) and served in.
    # The runtime's socket is another user's, in a directory of root's.
    : >"$T/conns"
    "$PH_PYTHON" -c '
import socket, sys, os
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(8)
os.close(1)
while True:
    c, _ = s.accept()
    with open(sys.argv[2], "a") as f:
        f.write("conn\n")
    c.close()
' "$T/root/rt.sock" "$T/conns" >/dev/null &
    BG_LISTENER=$!
    wait_for_file_match /proc/net/unix "$T/root/rt.sock" 10 || return
    chown -h 65534:65534 "$T/root/rt.sock"
    PH_SOCK=$T/root/new/cri.sock
    # --runtime containerd: --runtime auto would ask this socket its
    # Version first, and refuse it (exit 2) before serving.
    "$PULLHELPER" cri --listen "unix://$PH_SOCK" --runtime-endpoint "unix://$T/root/rt.sock" --runtime containerd --log-format json \
        </dev/null >"$T/cri.out" 2>"$T/cri.log" &
    CRI_PID=$!
    wait_for_file_match "$T/cri.log" '"msg":"serving"' 30 || return
    assert_equal "$(stat -c '%a %u' "$T/root/new")" "755 0"
    run timeout --kill-after=5 60 "$CRICTL" --image-endpoint "unix://$PH_SOCK" --timeout 5s images
    echo "$output"
    kill "$BG_LISTENER"
    wait "$BG_LISTENER" 2>/dev/null || true
    BG_LISTENER=""
    assert_equal "$(grep -c conn "$T/conns" || true)" 0
    assert_failure
    [[ $output == *"$T/root/rt.sock is owned by uid 65534"* ]] || fail "crictl's error does not name the refused socket: $output"
}

@test "cri: crictl pull by tag with --creds imports into containerd, isolated; images, inspecti (forwarded) show the registry's digest; rmi (forwarded) removes it" {
    ctrd2_require
    cri_up
    local img="$REGISTRY_HOST/fixtures/tiny:latest" id
    id=$(config_digest fixtures/tiny:latest)
    run pcrictl pull --creds "$(creds)" "$img"
    echo "$output"
    assert_success
    # image_ref is the image ID, as containerd's CRI answers.
    assert_output --partial "Image is up to date for $id"
    assert_secret_absent -f "$T/cri.log" "$T/cri.out"

    # One log line for the pull: isolated in its own cgroup, the digest.
    local line
    line=$(pull_lines)
    assert_equal "$(json_get .code <<<"$line")" OK
    assert_equal "$(json_get .digest <<<"$line")" "$TINY_DIGEST"
    assert_equal "$(json_get .image_id <<<"$line")" "$id"
    assert_equal "$(json_get .isolated <<<"$line")" true
    assert_equal "$(json_get .username <<<"$line")" "$REGISTRY_USER"
    [[ $(json_get .cgroup <<<"$line") == "$CG_PARENT"/pull-* ]] ||
        fail "no per-pull cgroup under $CG_PARENT in the log line: $line"
    [[ $(json_get .uid <<<"$line") != 0 ]] || fail "the pull ran as root: $line"

    # Forwarded to containerd's CRI: the same store.
    run pcrictl inspecti -o json "$img"
    assert_success
    assert_equal "$(json_get .status.id <<<"$output")" "$id"
    assert_equal "$(json_get .status.repoDigests <<<"$output")" "[\"$REGISTRY_HOST/fixtures/tiny@$TINY_DIGEST\"]"
    run pcrictl images --digests
    assert_success
    grep -E "^$REGISTRY_HOST/fixtures/tiny +latest +${TINY_DIGEST:7:13}" <<<"$output" >/dev/null ||
        fail "crictl images --digests: $output"
    # Straight to containerd: the same answer.
    run ctrd_crictl inspecti -o json "$img"
    assert_success
    assert_equal "$(json_get .status.id <<<"$output")" "$id"

    run pcrictl rmi "$img"
    assert_success
    run ctrd_crictl inspecti -o json "$img"
    assert_failure
    [[ -z $(ctr_image_line "$img") ]] || fail "ctr still lists $img after crictl rmi"
}

@test "cri: in front of Debian's containerd 1.6: crictl pull by tag, inspecti and rmi forwarded" {
    CTRD_FLAVOR=1.6
    ctrd_require
    cri_up
    # --runtime auto: containerd 1.6's CRI answers Version "containerd".
    assert_equal "$(grep '"msg":"serving"' "$T/cri.log" | json_get .runtime)" containerd
    assert_equal "$(grep '"msg":"serving"' "$T/cri.log" | json_get .runtime_from)" Version
    local img="$REGISTRY_HOST/fixtures/tiny:latest" id
    id=$(config_digest fixtures/tiny:latest)
    run pcrictl pull --creds "$(creds)" "$img"
    echo "$output"
    assert_success
    assert_output --partial "Image is up to date for $id"
    wait_cri "$img" || return
    run pcrictl inspecti -o json "$img"
    assert_success
    assert_equal "$(json_get .status.id <<<"$output")" "$id"
    assert_equal "$(json_get .status.repoDigests <<<"$output")" "[\"$REGISTRY_HOST/fixtures/tiny@$TINY_DIGEST\"]"
    run pcrictl rmi "$img"
    assert_success
    run ctrd_crictl inspecti -o json "$img"
    assert_failure
}

@test "cri: crictl pull by digest with --creds; the answer is the image ID" {
    ctrd2_require
    cri_up
    local img="$REGISTRY_HOST/fixtures/tiny@$TINY_DIGEST" id
    id=$(config_digest fixtures/tiny:latest)
    run pcrictl pull --creds "$(creds)" "$img"
    echo "$output"
    assert_success
    assert_output --partial "Image is up to date for $id"
    run pcrictl inspecti -o json "$img"
    assert_success
    assert_equal "$(json_get .status.id <<<"$output")" "$id"
}

# A Docker manifest list (Docker schema 2 instances): containerd's CRI
# stores each manifest as served, and so does the import (the staging's OCI
# conversion is not what the list names). The old import failed the pull
# (Internal: "content digest sha256:<instance>: not found").
@test "cri: crictl pull of a Docker manifest list imports it: the list the image's digest, the answer the image ID" {
    ctrd2_require
    cri_up
    push_docker_fixtures
    local img="$REGISTRY_HOST/fixtures/multiv2:latest" id list
    id=$(config_digest fixtures/multiv2:latest)
    list=$(registry_digest fixtures/multiv2:latest)
    run pcrictl pull --creds "$(creds)" "$img"
    echo "$output"
    assert_success
    assert_output --partial "Image is up to date for $id"
    run pcrictl inspecti -o json "$img"
    assert_success
    assert_equal "$(json_get .status.id <<<"$output")" "$id"
    assert_equal "$(json_get .status.repoDigests <<<"$output")" "[\"$REGISTRY_HOST/fixtures/multiv2@$list\"]"
}

@test "cri: crictl pull with --auth (AuthConfig.auth, base64) and --pod-config: the pod is in the log line" {
    ctrd2_require
    cri_up
    local img="$REGISTRY_HOST/fixtures/tiny:latest" id line
    id=$(config_digest fixtures/tiny:latest)
    printf '{"metadata":{"name":"web-1","namespace":"shop","uid":"u-1","attempt":0}}\n' >"$T/pod.json"
    # CRICTL_AUTH is crictl's --auth.
    CRICTL_AUTH=$(creds | base64 -w0) run pcrictl pull --pod-config "$T/pod.json" "$img"
    echo "$output"
    assert_success
    assert_output --partial "Image is up to date for $id"
    line=$(pull_lines)
    assert_equal "$(json_get .pod_namespace <<<"$line")" shop
    assert_equal "$(json_get .pod_name <<<"$line")" web-1
    assert_equal "$(json_get .username <<<"$line")" "$REGISTRY_USER"
    assert_secret_absent -f "$T/cri.log" "$T/cri.out"
}

@test "cri: a pod whose runtime handler names its own snapshotter in the containerd config (runtime_platforms) has its image imported for that snapshotter, as containerd's CRI does; a pod without one gets the CRI's" {
    ctrd2_require
    mkdir -p "$T/ph-hosts"
    printf 'version = 3\n[plugins."io.containerd.cri.v1.images".registry]\n  config_path = "%s"\n[plugins."io.containerd.cri.v1.images".runtime_platforms.alt]\n  snapshotter = "phtest-none"\n' \
        "$T/ph-hosts" >"$T/ph-ctrd.toml"
    cri_up --containerd-config "$T/ph-ctrd.toml"
    local img="$REGISTRY_HOST/fixtures/tiny:latest"
    printf '{"metadata":{"name":"p","namespace":"ns","uid":"u-alt"},"annotations":{"io.containerd.cri.runtime-handler":"alt"}}\n' >"$T/pod-alt.json"
    printf '{"metadata":{"name":"p","namespace":"ns","uid":"u-default"}}\n' >"$T/pod.json"
    # The handler's snapshotter is asked for (this containerd has none of
    # that name: the import fails naming it).
    run pcrictl pull --creds "$(creds)" --pod-config "$T/pod-alt.json" "$img"
    echo "$output"
    assert_failure
    assert_output --partial phtest-none
    grep '"msg":"pull started"' "$T/cri.log" | grep -qF '"snapshotter":"phtest-none"' ||
        fail "the pull's pod settings do not name the handler's snapshotter: $(grep '"msg":"pull started"' "$T/cri.log")"
    run pcrictl pull --creds "$(creds)" --pod-config "$T/pod.json" "$img"
    echo "$output"
    assert_success
    run ctr_k8s images check --snapshotter native "name==$img"
    assert_success
    [[ $output == *"$img"*complete* ]] || fail "not unpacked for native: $output"
}

@test "cri: a request whose deadline passes fails DeadlineExceeded and stops its pull: no cgroup, no staging" {
    ctrd2_require
    cri_up
    reg_stop
    # The registry does not answer: crictl's own deadline (--pull-timeout)
    # passes first.
    run pcrictl pull --pull-timeout 3s --creds "$(creds)" "$REGISTRY_HOST/fixtures/tiny:latest"
    echo "$output"
    assert_failure
    assert_output --partial "DeadlineExceeded"
    wait_for_file_match "$T/cri.log" '"msg":"pull done"' 60
    reg_cont
    # The server's deadline (grpc-timeout) and the client's RST_STREAM race:
    # the service sees the one that comes first.
    [[ $(json_get .code <<<"$(pull_lines)") =~ ^(DeadlineExceeded|Canceled)$ ]] || fail "pull line: $(pull_lines)"
    assert_no_staging "$T/staging"
    assert_equal "$(pull_cgroups)" ""
}

@test "cri: a wrong password fails Unauthenticated with the registry's reason, also when the node has the right one; no secret in the error or the log" {
    ctrd2_require
    cri_up
    run pcrictl pull --creds "$REGISTRY_USER:wrong-password-x" "$REGISTRY_HOST/fixtures/tiny:latest"
    echo "$output"
    assert_failure
    assert_output --partial "code = Unauthenticated"
    assert_output --partial "pullhelper: unauthorized:"
    [[ $output != *wrong-password-x* ]] || fail "the password is in the error"
    grep -q wrong-password-x "$T/cri.log" && fail "the password is in the log"
    assert_equal "$(json_get .code <<<"$(pull_lines)")" Unauthenticated
    # Without credentials: the registry refuses too (the node has none).
    run pcrictl pull "$REGISTRY_HOST/fixtures/tiny:latest"
    assert_failure
    assert_output --partial "code = Unauthenticated"
    # The node has the right one (--authfile): a request without
    # credentials gets it, a request with a wrong one still fails, as
    # containerd's CRI reads its own credentials only for a request
    # without auth; it never falls back to the node's.
    kill -TERM "$CRI_PID"
    wait "$CRI_PID" || true
    cri_up_on "$SOCK" --authfile "$REGISTRY_AUTHFILE"
    run pcrictl pull --creds "$REGISTRY_USER:wrong-password-x" "$REGISTRY_HOST/fixtures/tiny:latest"
    assert_failure
    assert_output --partial "code = Unauthenticated"
    ! grep -q "trying the next" "$T/cri.log" || fail "a refused request credential fell back to the node's: $(grep "trying the next" "$T/cri.log")"
    run pcrictl pull "$REGISTRY_HOST/fixtures/tiny:latest"
    assert_success
}

@test "cri: a missing image fails NotFound" {
    ctrd2_require
    cri_up
    run pcrictl pull --creds "$(creds)" "$REGISTRY_HOST/fixtures/nothing-here:latest"
    echo "$output"
    assert_failure
    assert_output --partial "code = NotFound"
    assert_output --partial "pullhelper: not_found:"
}

@test "cri: two concurrent pulls of one image make one pull (one manifest GET answered), both get the image ID" {
    ctrd2_require
    cri_up
    local img="$REGISTRY_HOST/fixtures/tiny:latest" id before pid1 pid2
    id=$(config_digest fixtures/tiny:latest)
    before=$(registry_log_barrier)
    # The registry stopped: the first pull is held until the second has
    # joined it.
    reg_stop
    pcrictl pull --creds "$(creds)" "$img" >"$T/pull1.out" 2>&1 &
    pid1=$!
    wait_for_file_match "$T/cri.log" '"msg":"pull started"' 30
    pcrictl pull --creds "$(creds)" "$img" >"$T/pull2.out" 2>&1 &
    pid2=$!
    wait_for_file_match "$T/cri.log" '"msg":"pull joined"' 30
    reg_cont
    wait "$pid1" || fail "first pull: $(cat "$T/pull1.out")"
    wait "$pid2" || fail "second pull: $(cat "$T/pull2.out")"
    grep -qF "$id" "$T/pull1.out" || fail "first pull: $(cat "$T/pull1.out")"
    grep -qF "$id" "$T/pull2.out" || fail "second pull: $(cat "$T/pull2.out")"
    assert_equal "$(grep -c '"msg":"pull started"' "$T/cri.log")" 1
    # One pull: one manifest answered (by tag: the pull resolves the tag
    # and copies that manifest; a second pull would fetch it again).
    assert_equal "$(manifest_gets "$before" "[^ ]*" | grep -c '" 200 ')" 1
    assert_equal "$(pull_lines | grep -c '"shared":true')" 1
}

@test "cri: two different images pulled at once in one service both land, each in its own cgroup" {
    ctrd2_require
    cri_up
    local pid1 pid2 tiny="$REGISTRY_HOST/fixtures/tiny:latest" multi="$REGISTRY_HOST/fixtures/multi:latest"
    reg_stop
    pcrictl pull --creds "$(creds)" "$tiny" >"$T/pull1.out" 2>&1 &
    pid1=$!
    pcrictl pull --creds "$(creds)" "$multi" >"$T/pull2.out" 2>&1 &
    pid2=$!
    local deadline=$((SECONDS + 30))
    until [[ $(grep -c '"msg":"pull started"' "$T/cri.log") == 2 ]]; do
        ((SECONDS < deadline)) || { fail "two pulls did not start: $(cat "$T/cri.log")"; return; }
        sleep 0.05
    done
    reg_cont
    wait "$pid1" || fail "tiny: $(cat "$T/pull1.out")"
    wait "$pid2" || fail "multi: $(cat "$T/pull2.out")"
    grep -qF "$(config_digest fixtures/tiny:latest)" "$T/pull1.out" || fail "tiny: $(cat "$T/pull1.out")"
    grep -qF "$(config_digest fixtures/multi:latest)" "$T/pull2.out" || fail "multi: $(cat "$T/pull2.out")"
    assert_equal "$(pull_lines | grep -c '"code":"OK"')" 2
    assert_equal "$(pull_lines | json_get .cgroup | sort -u | wc -l)" 2
    run pcrictl inspecti -o json "$multi"
    assert_success
    assert_equal "$(json_get .status.repoDigests <<<"$output")" "[\"$REGISTRY_HOST/fixtures/multi@$(registry_digest fixtures/multi:latest)\"]"
}

@test "cri: --max-parallel 1: a second image waits for the first pull's slot, then both land" {
    ctrd2_require
    cri_up --max-parallel 1
    local pid1 pid2
    reg_stop
    pcrictl pull --creds "$(creds)" "$REGISTRY_HOST/fixtures/tiny:latest" >"$T/pull1.out" 2>&1 &
    pid1=$!
    wait_for_file_match "$T/cri.log" '"msg":"pull started"' 30
    pcrictl pull --creds "$(creds)" "$REGISTRY_HOST/fixtures/multi:latest" >"$T/pull2.out" 2>&1 &
    pid2=$!
    wait_for_file_match "$T/cri.log" '"msg":"pull waiting"' 30
    assert_equal "$(grep -c '"msg":"pull started"' "$T/cri.log")" 1
    reg_cont
    wait "$pid1" || fail "tiny: $(cat "$T/pull1.out")"
    wait "$pid2" || fail "multi: $(cat "$T/pull2.out")"
    assert_equal "$(grep -c '"msg":"pull started"' "$T/cri.log")" 2
    assert_equal "$(pull_lines | grep -c '"code":"OK"')" 2
}

@test "cri: a cancelled request stops its pull: no cgroup, no staging left" {
    ctrd2_require
    cri_up
    local img="$REGISTRY_HOST/fixtures/tiny:latest" pid
    reg_stop
    "$CRICTL" --config "$T/ph-crictl.yaml" pull --creds "$(creds)" "$img" >"$T/pull1.out" 2>&1 &
    pid=$!
    wait_for_file_match "$T/cri.log" '"msg":"pull started"' 30
    local deadline=$((SECONDS + 30))
    until [[ -n $(pull_cgroups) ]]; do
        ((SECONDS < deadline)) || { fail "no pull cgroup under $CG_PARENT: $(cat "$T/cri.log")"; return; }
        sleep 0.05
    done
    # crictl dies: its connection closes, which cancels the request.
    kill -TERM "$pid"
    wait "$pid" && fail "crictl pull succeeded after SIGTERM"
    wait_for_file_match "$T/cri.log" '"msg":"pull".*"code":"Canceled"' 60
    # The pull itself has ended (its cgroup killed, its staging removed).
    wait_for_file_match "$T/cri.log" '"msg":"pull done"' 60
    reg_cont
    assert_no_staging "$T/staging"
    assert_equal "$(pull_cgroups)" ""
}

@test "cri: calls pullhelper does not serve (ImageFsInfo, RuntimeService/Version) are forwarded to containerd as they came" {
    ctrd2_require
    cri_up
    # crictl imagefsinfo: ImageService/ImageFsInfo, answered by containerd.
    run pcrictl imagefsinfo -o json
    assert_success
    [[ $(json_get '.status.imageFilesystems[0].fsId.mountpoint' <<<"$output") == "$CTRD_DIR"* ]] ||
        fail "imagefsinfo is not containerd's: $output"
    # Another service entirely: the runtime endpoint pointed at pullhelper.
    run timeout 60 "$CRICTL" --runtime-endpoint "unix://$PH_SOCK" --image-endpoint "unix://$PH_SOCK" --timeout 30s version
    assert_success
    assert_output --partial "RuntimeName:  containerd"
    run ctrd_crictl version
    assert_success
    local want=$output
    run timeout 60 "$CRICTL" --runtime-endpoint "unix://$PH_SOCK" --image-endpoint "unix://$PH_SOCK" --timeout 30s version
    assert_equal "$(grep Runtime <<<"$output")" "$(grep Runtime <<<"$want")"
}

@test "cri: SIGTERM of the service mid-pull stops the pull and cleans up: no cgroup, no staging, no socket; the caller gets an error" {
    ctrd2_require
    cri_up
    local pid
    reg_stop
    "$CRICTL" --config "$T/ph-crictl.yaml" pull --creds "$(creds)" "$REGISTRY_HOST/fixtures/tiny:latest" >"$T/pull1.out" 2>&1 &
    pid=$!
    local deadline=$((SECONDS + 30))
    until [[ -n $(pull_cgroups) ]]; do
        ((SECONDS < deadline)) || { fail "no pull cgroup under $CG_PARENT: $(cat "$T/cri.log")"; return; }
        sleep 0.05
    done
    kill -TERM "$CRI_PID"
    wait "$CRI_PID" || fail "pullhelper cri exit $? after SIGTERM: $(cat "$T/cri.log")"
    CRI_PID=""
    reg_cont
    wait "$pid" && fail "crictl pull succeeded: $(cat "$T/pull1.out")"
    grep -q '"msg":"pull done"' "$T/cri.log" || fail "the pull did not end before the service: $(cat "$T/cri.log")"
    assert_no_staging "$T/staging"
    assert_equal "$(pull_cgroups)" ""
    [[ ! -e $PH_SOCK ]] || fail "the socket is left"
    assert_equal "$(json_get .pulls <"$T/cri.out")" 1
}
