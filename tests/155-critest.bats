#!/usr/bin/env bats
#
# critest (sigs.k8s.io/cri-tools v1.37.0, make deps builds it from
# tests/critest/go.mod) runs its image specs against pullhelper cri in front
# of the containerd 2.x of make deps: --image-endpoint at pullhelper,
# --runtime-endpoint at containerd (issue 25's proof).
#
# The images the specs name (pkg/validate/consts.go: gcr.io/k8s-staging-
# cri-tools/test-image-*, registry.k8s.io/pause:3.9, k8s.gcr.io/pause:3.9)
# are made here by tests/imagegen and pushed to a local registry that allows
# anonymous pulls (critest sends no credentials), under the same paths.
# containerd's config_path (hosts.toml) gives gcr.io, registry.k8s.io and
# k8s.gcr.io that registry as their `server`; pullhelper cri reads the same
# config (--containerd-config), so no request leaves the machine and no
# image name is rewritten (critest's --registry-prefix would drop the tags:
# framework.PrepareImageName keeps only reference.Path).

load helpers
load containerd-cases

CTRD_FLAVOR=2
PH_CRITEST=${PH_CRITEST:-$PH_CACHE/bin/critest-v1.37.0}
CRITEST_REPO=k8s-staging-cri-tools

# The specs run, by their ginkgo text; the one skipped and why.
CRITEST_FOCUS='\[k8s.io\] Image (Manager|Consistency) '
CRITEST_SKIP='public image with digest should be pulled and removed'
CRITEST_SKIP_WHY="its image is named by the digest of the real gcr.io/$CRITEST_REPO/test-image-digest (sha256:9700f9a2...), which no locally made image can have"

setup_file() {
    start_registry --no-auth
    local plat n
    plat="linux/$("$(_ph_go)" env GOARCH)"
    # critest_image NAME SEED REF [IMAGEGEN_ARGS...]: a small image of its
    # own (SEED) pushed as REF (below CRITEST_REPO unless it is pause).
    critest_image() {
        local name=$1 seed=$2 ref=$3
        shift 3
        push_fixture_args "critest-$name" "$ref" -layers 1 -layer-size 1024 -seed "$seed" -platforms "$plat" "$@"
    }
    critest_image latest 101 "$CRITEST_REPO/test-image-latest:latest"
    critest_image tag-test 102 "$CRITEST_REPO/test-image-tag:test"
    critest_image tag-all 103 "$CRITEST_REPO/test-image-tag:all"
    for n in 1 2 3; do
        # Three different images.
        critest_image "image-$n" "$((103 + n))" "$CRITEST_REPO/test-image-$n:latest"
        # One image under three tags.
        critest_image tags 107 "$CRITEST_REPO/test-image-tags:$n"
    done
    # The User each spec expects (consts.go: imageUserUID 1002,
    # imageUserUsername www-data, imageUserUIDGroup 1003, www-data).
    critest_image user-uid 108 "$CRITEST_REPO/test-image-user-uid:latest" -user 1002
    critest_image user-username 109 "$CRITEST_REPO/test-image-user-username:latest" -user www-data
    critest_image user-uid-group 110 "$CRITEST_REPO/test-image-user-uid-group:latest" -user 1003:1003
    critest_image user-username-group 111 "$CRITEST_REPO/test-image-user-username-group:latest" -user www-data:www-data
    # registry.k8s.io/pause:3.9 and k8s.gcr.io/pause:3.9 are one image:
    # both hosts' server is this registry.
    critest_image pause 112 pause:3.9
}

teardown_file() {
    ctrd_stop_all
    stop_registry
}

setup() {
    ph_test_setup
    T=$BATS_TEST_TMPDIR
    CTRD_DIR=""
    CRI_PID=""
    CG_PARENT="/pullhelper-bats-critest-$$-${BATS_TEST_NUMBER}"
}

teardown() {
    [[ -z ${CRI_PID:-} ]] || _ph_stop_pid "$CRI_PID" "pullhelper cri"
    [[ -z ${CTRD_DIR:-} ]] || ctrd_stop "$CTRD_DIR"
    local d p
    for d in /sys/fs/cgroup/*/"${CG_PARENT#/}"; do
        [[ -d $d ]] || continue
        for p in $(cat "$d"/*/cgroup.procs 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
        rmdir "$d"/pull-* "$d" 2>/dev/null || true
    done
    return 0
}

# critest_up: containerd 2.x below $T/ctrd (no registry credential: the
# registry is anonymous) whose config_path sends gcr.io, registry.k8s.io and
# k8s.gcr.io to the local registry, and pullhelper cri in front of it
# reading the same config (--containerd-config: hosts.toml, the CRI's
# snapshotter), on $PH_SOCK, logging to $T/cri.log.
critest_up() {
    ctrd2_require
    CTRD_DIR="$T/ctrd"
    mkdir -p "$CTRD_DIR"
    cred containerd "$CTRD_DIR/config.toml" --state-dir "$CTRD_DIR" --ca "$REGISTRY_CA" --version 3 --no-auth
    local h
    for h in gcr.io registry.k8s.io k8s.gcr.io; do
        mkdir -p "$CTRD_DIR/certs.d/$h"
        printf 'server = "https://%s"\nca = "%s"\n' "$REGISTRY_HOST" "$REGISTRY_CA" >"$CTRD_DIR/certs.d/$h/hosts.toml"
    done
    ctrd_start "$CTRD_DIR" || return
    SOCK="$CTRD_DIR/c.sock"
    PH_SOCK="$T/ph/cri.sock"
    "$PULLHELPER" cri --listen "unix://$PH_SOCK" --runtime-endpoint "unix://$SOCK" \
        --containerd-config "$CTRD_DIR/config.toml" --cgroup-parent "$CG_PARENT" --containerd-staging "$T/staging" \
        --log-format json </dev/null >"$T/cri.out" 2>"$T/cri.log" &
    CRI_PID=$!
    local deadline=$((SECONDS + 30))
    until [[ -S $PH_SOCK ]] && grep -q '"msg":"serving"' "$T/cri.log"; do
        if ! _ph_pid_alive "$CRI_PID"; then
            fail "pullhelper cri exited: $(cat "$T/cri.log")"
            return
        fi
        ((SECONDS < deadline)) || { fail "pullhelper cri did not listen within 30 s: $(cat "$T/cri.log")"; return; }
        sleep 0.05
    done
}

# spec_states: "STATE<TAB>TEXT" of every spec in critest's JSON report.
spec_states() {
    "$PH_PYTHON" -c '
import json, sys
for suite in json.load(open(sys.argv[1])):
    for s in suite.get("SpecReports") or []:
        if s.get("LeafNodeType") != "It":
            continue
        print("%s\t%s %s" % (s["State"], " ".join(s.get("ContainerHierarchyTexts") or []), s["LeafNodeText"]))
' "$1"
}

@test "critest v1.37.0: the Image Manager and Image Consistency specs pass against pullhelper cri in front of containerd 2.x, every pull through pullhelper" {
    [[ -x $PH_CRITEST ]] || skip "no critest in $PH_CRITEST (make deps builds it)"
    critest_up
    printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 60\n' "$SOCK" "$PH_SOCK" >"$T/crictl.yaml"
    echo "# critest skips: $CRITEST_SKIP: $CRITEST_SKIP_WHY" >&3
    local rc=0
    (cd "$T" && timeout --kill-after=10 600 "$PH_CRITEST" --config "$T/crictl.yaml" \
        --runtime-endpoint "unix://$SOCK" --image-endpoint "unix://$PH_SOCK" \
        --ginkgo.focus "$CRITEST_FOCUS" --ginkgo.skip "$CRITEST_SKIP" \
        --ginkgo.no-color --ginkgo.v --ginkgo.json-report "$T/report.json") >"$T/critest.out" 2>&1 || rc=$?
    # critest's own verdict: the summary line and its exit status.
    grep -E '^(Ran |SUCCESS|FAIL)' "$T/critest.out" >&3 || true
    ((rc == 0)) || fail "critest exit $rc: $(tail -n 80 "$T/critest.out")
pullhelper cri log: $(tail -n 20 "$T/cri.log")"
    grep -qE '^SUCCESS! -- 12 Passed \| 0 Failed \| 0 Pending \| [0-9]+ Skipped' "$T/critest.out" ||
        fail "critest summary: $(grep -E '^(Ran |SUCCESS|FAIL)' "$T/critest.out")"

    # Per spec: the twelve passed, the digest spec skipped, nothing failed.
    local states
    states=$(spec_states "$T/report.json")
    assert_equal "$(grep -c $'^passed\t' <<<"$states")" 12
    assert_equal "$(grep -cvE $'^(passed|skipped)\t' <<<"$states")" 0
    local spec
    for spec in "public image with tag should be pulled and removed" \
        "public image should timeout if requested" \
        "public image without tag should be pulled and removed" \
        "image status should support all kinds of references" \
        "image status get image fields should not have Uid|Username empty" \
        "listImage should get exactly 3 image in the result list" \
        "listImage should get exactly 3 repoTags in the result image" \
        "removing image by one tag should remove all tags" \
        "removing image from one registry should remove all tags from other registries" \
        "should not list or get image status immediately after removal" \
        "should list and get image status immediately after pulling" \
        "should not fail on simultaneous RemoveImage calls"; do
        grep -F "$spec [Conformance]" <<<"$states" | grep -q $'^passed\t' || fail "not passed: $spec
$(grep -F "$spec" <<<"$states")"
    done
    grep -F "$CRITEST_SKIP" <<<"$states" | grep -q $'^skipped\t' || fail "the digest spec did not run skipped: $states"

    # Every PullImage was pullhelper's own, isolated: 21 pulls, one log line
    # each (the specs' PullPublicImage calls). The timeout spec's request
    # (a 1 ms deadline) either never reaches the service or ends there
    # Canceled or DeadlineExceeded (whichever of the client's RST_STREAM
    # and the server's grpc-timeout comes first), never committed.
    local lines
    lines=$(grep '"msg":"pull"' "$T/cri.log" || true)
    assert_equal "$(grep -c '"code":"OK"' <<<"$lines")" 21
    assert_equal "$(grep '"code":"OK"' <<<"$lines" | grep -c '"isolated":true')" 21
    local other
    other=$(grep -v '"code":"OK"' <<<"$lines" || true)
    if [[ -n $other ]]; then
        assert_equal "$(grep -c . <<<"$other")" 1
        [[ $other =~ \"image\":\"gcr.io/$CRITEST_REPO/test-image-tag:test\".*\"code\":\"(Canceled|DeadlineExceeded)\" ]] ||
            fail "a pull other than the timeout spec's failed: $other"
    fi
    # The three hosts' requests reached the local registry (containerd's
    # ?ns=HOST on a request to a server other than the image's host).
    registry_log_barrier >/dev/null
    local h
    for h in gcr.io registry.k8s.io k8s.gcr.io; do
        grep -q "manifests/[^ ]*?ns=$h" "$REGISTRY_LOG" || fail "no manifest request for $h at the local registry"
    done
    # What critest pulled, it removed (through the forwarded RemoveImage).
    run ctrd_crictl images -q
    assert_success
    assert_equal "$output" ""
}
