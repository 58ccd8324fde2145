#!/usr/bin/env bats
#
# pullhelper cri (issue 25): its observability and socket access. crictl
# pulls through the service in front of the containerd 2.x of make deps
# (as tests/150-cri.bats), then the Prometheus endpoint of --metrics-listen
# (curl) and the per-pull log line are checked against each other; the
# --listen-group socket is used by a non-root member of the group (uid
# 65534 with setpriv) and refused to a non-member.

load helpers
load containerd-cases
load cri

CTRD_FLAVOR=2

setup_file() {
    fixture tiny
    start_registry
    push_fixture tiny
    TINY_DIGEST=$(registry_digest fixtures/tiny:latest)
    export TINY_DIGEST
}

setup() {
    cri_setup crim
    SOCK_DIR=""
}

teardown() {
    cri_stop
    [[ -z ${CTRD_DIR:-} ]] || ctrd_stop "$CTRD_DIR"
    [[ -z ${SOCK_DIR:-} ]] || rm -rf "$SOCK_DIR"
    cri_cgroups_rm "$CG_PARENT"
}

# crim_up SOCKDIR [FLAGS...]: containerd (ctrd_up) and pullhelper cri in
# front of it on SOCKDIR/cri.sock with metrics on 127.0.0.1:0, logging to
# $T/cri.log; waits (at most 30 s) for the "serving" line and sets
# METRICS (the address it bound).
crim_up() {
    local dir=$1
    shift
    CRI_SOCK_DIR=$dir cri_up --metrics-listen 127.0.0.1:0 "$@"
    METRICS=$(grep '"msg":"serving"' "$T/cri.log" | json_get .metrics_listen)
    [[ $METRICS == 127.0.0.1:* ]] || fail "the serving line names no metrics address: $(cat "$T/cri.log")"
}

# metric SAMPLE: the value of the sample "name{labels}" (labels sorted, as
# client_golang writes them) in a fresh scrape; empty when absent.
metric() {
    curl -sS --max-time 20 "http://$METRICS/metrics" >"$T/metrics.txt" || { fail "scraping $METRICS failed"; return; }
    awk -v s="$1" 'substr($0, 1, length(s) + 1) == s " " { print $2 }' "$T/metrics.txt"
}

@test "cri metrics: crictl pulls through the service are counted by result and gRPC code; bytes equal the log line's; the histogram counts every request; nothing in flight after; the log line has the pull's fields" {
    ctrd2_require
    crim_up "$T/ph"
    local img="$REGISTRY_HOST/fixtures/tiny:latest" id line bad
    id=$(config_digest fixtures/tiny:latest)
    printf '{"metadata":{"name":"web-1","namespace":"shop","uid":"0b7c6a52-1111-4c1e-9a53-1d2f3e4a5b6c","attempt":0}}\n' >"$T/pod.json"
    run pcrictl pull --creds "$(creds)" --pod-config "$T/pod.json" "$img"
    echo "$output"
    assert_success
    run pcrictl pull --creds "$(creds)" "$REGISTRY_HOST/fixtures/absent:latest"
    assert_failure
    run pcrictl pull --creds "$REGISTRY_USER:wrong-password" "$img"
    assert_failure

    # The log: one line per request, the success's fields.
    assert_equal "$(grep -c '"msg":"pull"' "$T/cri.log")" 3
    line=$(grep '"msg":"pull"' "$T/cri.log" | grep '"result":"ok"')
    echo "$line"
    assert_equal "$(json_get .image <<<"$line")" "$img"
    assert_equal "$(json_get .pod_namespace <<<"$line")" shop
    assert_equal "$(json_get .pod_name <<<"$line")" web-1
    assert_equal "$(json_get .pod_uid <<<"$line")" 0b7c6a52-1111-4c1e-9a53-1d2f3e4a5b6c
    assert_equal "$(json_get .digest <<<"$line")" "$TINY_DIGEST"
    assert_equal "$(json_get .image_id <<<"$line")" "$id"
    assert_equal "$(json_get .code <<<"$line")" OK
    [[ $(json_get .cgroup <<<"$line") == "$CG_PARENT"/pull-* ]] || fail "no per-pull cgroup: $line"
    local bytes wire k
    bytes=$(json_get .bytes <<<"$line")
    wire=$(json_get .wire_bytes <<<"$line")
    ((bytes > 0 && wire > 0)) || fail "bytes $bytes, wire_bytes $wire"
    for k in duration_ms pull_duration_ms usage.cpu_usage_ns usage.memory_peak_bytes usage.io_write_bytes; do
        [[ $(json_get ".$k" <<<"$line") =~ ^[0-9]+$ ]] || fail "$k is not a number: $line"
    done
    bad=$(grep '"msg":"pull"' "$T/cri.log" | grep '"result":"unauthorized"')
    assert_equal "$(json_get .code <<<"$bad")" Unauthenticated
    bad=$(grep '"msg":"pull"' "$T/cri.log" | grep '"result":"not_found"')
    assert_equal "$(json_get .code <<<"$bad")" NotFound
    assert_secret_absent -f "$T/cri.log" "$T/cri.out"

    # The metrics agree.
    assert_equal "$(metric 'pullhelper_cri_pull_requests_total{grpc_code="OK",result="ok"}')" 1
    assert_equal "$(metric 'pullhelper_cri_pull_requests_total{grpc_code="NotFound",result="not_found"}')" 1
    assert_equal "$(metric 'pullhelper_cri_pull_requests_total{grpc_code="Unauthenticated",result="unauthorized"}')" 1
    assert_equal "$(metric 'pullhelper_cri_pulls_total{result="ok"}')" 1
    assert_equal "$(metric pullhelper_cri_pull_bytes_total)" "$bytes"
    assert_equal "$(metric pullhelper_cri_pull_wire_bytes_total)" "$wire"
    assert_equal "$(metric pullhelper_cri_pull_request_duration_seconds_count)" 3
    assert_equal "$(metric 'pullhelper_cri_pull_request_duration_seconds_bucket{le="+Inf"}')" 3
    assert_equal "$(metric pullhelper_cri_pulls_in_flight)" 0
    assert_equal "$(metric pullhelper_cri_pulls_waiting)" 0
    assert_equal "$(metric pullhelper_cri_pull_requests_joined_total)" 0
    [[ -n $(metric process_open_fds) && -n $(metric go_goroutines) ]] || fail "no process or Go collector: $(head -c 2000 "$T/metrics.txt")"
    # No label holds an image or pod.
    ! grep -E 'fixtures|web-1|shop' "$T/metrics.txt" || fail "a request's value in the metrics"

    # The endpoint stops with the service.
    _ph_stop_pid "$CRI_PID" "pullhelper cri"
    wait "$CRI_PID" || true
    CRI_PID=""
    run curl -sS --max-time 10 "http://$METRICS/metrics"
    assert_failure
}

@test "cri metrics: --metrics-listen on a taken port or a bad address is exit 2 naming the flag; nothing is left" {
    local s="$T/ph/cri.sock"
    # The registry holds its port. --runtime containerd: no Version is
    # asked of the (absent) runtime first.
    run_pullhelper 2 cri --listen "unix://$s" --runtime-endpoint "unix://$T/none.sock" --runtime containerd --metrics-listen "$REGISTRY_HOST"
    assert_json_error usage
    [[ $output == *"--metrics-listen $REGISTRY_HOST"* ]] || fail "want the flag named: $output"
    [[ ! -e $s ]] || fail "a socket was left"
    local v
    for v in 9471 example.com:9471 localhost:9471 127.0.0.1:99999 unix:///run/m.sock; do
        run_pullhelper 2 cri --listen "unix://$s" --runtime-endpoint "unix://$T/none.sock" --metrics-listen "$v"
        assert_json_error usage
        [[ $output == *"--metrics-listen"* ]] || fail "$v: want the flag named: $output"
    done
    run_pullhelper 2 cri --listen "unix://$s" --runtime-endpoint "unix://$T/none.sock" --listen-group no-such-group-pullhelper
    assert_json_error usage
    [[ $output == *"--listen-group"* ]] || fail "want the flag named: $output"
    [[ ! -e $s ]] || fail "a socket was left"
}

# With --runtime auto the runtime is asked its Version (cri.Detect), which
# waits up to 15 s for an absent one; cri.Preflight checks first what needs
# no runtime, so a bad flag is reported at once, and nothing is made.
@test "cri: with --runtime auto and no runtime, a taken --metrics-listen port or an unusable --listen directory is exit 2 naming the flag, not the runtime's Version" {
    local s="$T/ph/cri.sock"
    # The registry holds its port.
    run_pullhelper 2 cri --listen "unix://$s" --runtime-endpoint "unix://$T/none.sock" --metrics-listen "$REGISTRY_HOST"
    assert_json_error usage
    [[ $output == *"--metrics-listen $REGISTRY_HOST"* ]] || fail "want the flag named: $output"
    [[ $output != *Version* && $output != *"--runtime "* ]] || fail "the runtime was asked first: $output"
    [[ ! -e $T/ph ]] || fail "the --listen directory was made: $(ls -la "$T/ph")"

    # A --listen directory another user can write.
    mkdir -m 755 "$T/user"
    chown 65534:65534 "$T/user"
    run_pullhelper 2 cri --listen "unix://$T/user/cri.sock" --runtime-endpoint "unix://$T/none.sock" --metrics-listen 127.0.0.1:0
    assert_json_error usage
    [[ $output == *"--listen $T/user/cri.sock"* ]] || fail "want the flag named: $output"
    [[ $output != *Version* ]] || fail "the runtime was asked first: $output"
    [[ ! -e $T/user/cri.sock ]] || fail "a socket was left"

    # Something at --listen that is not a socket.
    mkdir -m 700 "$T/ph"
    : >"$s"
    run_pullhelper 2 cri --listen "unix://$s" --runtime-endpoint "unix://$T/none.sock"
    assert_json_error usage
    [[ $output == *"--listen $s: exists and is not a socket"* ]] || fail "want the flag named: $output"
    [[ $output != *Version* ]] || fail "the runtime was asked first: $output"
    [[ -f $s && ! -s $s ]] || fail "the file at --listen was touched"
}

@test "cri: --listen-group users: the socket is root:users 0660; uid 65534 in group users lists images through it but gets no runtime service call (pods, ps: Unimplemented), without the group it is refused" {
    ctrd2_require
    local gid
    gid=$(getent group users | cut -d: -f3) || skip "no group users in /etc/group"
    # A directory uid 65534 can reach (the test's own is root's 0700).
    SOCK_DIR=$(mktemp -d /tmp/ph-crigroup.XXXXXX)
    chmod 0755 "$SOCK_DIR"
    crim_up "$SOCK_DIR/ph" --listen-group users
    assert_equal "$(stat -c '%a %U %g %F' "$PH_SOCK")" "660 root $gid socket"
    run pcrictl pull --creds "$(creds)" "$REGISTRY_HOST/fixtures/tiny:latest"
    assert_success
    printf 'image-endpoint: unix://%s\ntimeout: 30\n' "$PH_SOCK" >"$SOCK_DIR/crictl.yaml"
    chmod 0644 "$SOCK_DIR/crictl.yaml"
    run env -i PATH="$PATH" HOME=/nonexistent setpriv --reuid 65534 --regid 65534 --groups "$gid" -- \
        timeout --kill-after=5 60 "$CRICTL" --config "$SOCK_DIR/crictl.yaml" images
    echo "$output"
    assert_success
    assert_output --partial "$REGISTRY_HOST/fixtures/tiny"
    # The member gets the image service, not the runtime's: pods,
    # containers and runp through this socket never reach containerd
    # (whose own socket is root's).
    printf 'image-endpoint: unix://%s\nruntime-endpoint: unix://%s\ntimeout: 30\n' "$PH_SOCK" "$PH_SOCK" >"$SOCK_DIR/crictl-rt.yaml"
    chmod 0644 "$SOCK_DIR/crictl-rt.yaml"
    local sub
    for sub in pods ps; do
        run env -i PATH="$PATH" HOME=/nonexistent setpriv --reuid 65534 --regid 65534 --groups "$gid" -- \
            timeout --kill-after=5 60 "$CRICTL" --config "$SOCK_DIR/crictl-rt.yaml" "$sub"
        echo "$output"
        assert_failure
        assert_output --partial "Unimplemented"
        assert_output --partial "runtime's own socket"
    done
    run env -i PATH="$PATH" HOME=/nonexistent setpriv --reuid 65534 --regid 65534 --clear-groups -- \
        timeout --kill-after=5 60 "$CRICTL" --config "$SOCK_DIR/crictl.yaml" images
    echo "$output"
    assert_failure
    assert_output --partial "permission denied"
}

# Each PullImage builds its plan from the service's settings; what every
# such plan would refuse, whatever the image, is refused at start.
@test "cri: settings every pull would refuse (an unknown --user, --pids-max below the minimum, a signature policy that does not parse) are refused at start with pull's exit code, nothing left; a --cgroup the kubelet has not made yet is a warning" {
    local s="$T/ph/cri.sock" want
    echo '{"default": [' >"$T/bad-sig.json"
    for want in "2|usage|--user nosuchuser-pullhelper|--user \"nosuchuser-pullhelper\": no such user on this host" \
        "2|usage|--pids-max 5|cgroup.pids_max=5 (--pids-max) is too low" \
        "2|usage|--signature-policy $T/bad-sig.json|signature policy $T/bad-sig.json: "; do
        IFS='|' read -r exit code flags msg <<<"$want"
        # shellcheck disable=SC2086
        run_pullhelper "$exit" cri --listen "unix://$s" --runtime-endpoint "unix://$T/none.sock" --runtime containerd $flags
        assert_json_error "$code"
        [[ $ph_error_message == "$msg"* ]] || fail "$flags: $ph_error_message"
        [[ ! -e $s ]] || fail "$flags: a socket was left"
    done
    # The service starts before the kubelet makes the cgroups it joins.
    cri_up --cgroup "/bats-nosuch-$$"
    grep '"level":"WARN"' "$T/cri.log" | grep -qF "cgroup.path /bats-nosuch-$$ does not exist; each pull until it does fails (exit 7)" ||
        fail "no warning: $(cat "$T/cri.log")"
}
