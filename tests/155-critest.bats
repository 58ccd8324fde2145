#!/usr/bin/env bats
#
# critest (sigs.k8s.io/cri-tools v1.37.0, make deps builds it from
# tests/critest/go.mod) runs its image specs against pullhelper cri in front
# of the containerd 2.x of make deps: --image-endpoint at pullhelper,
# --runtime-endpoint at containerd (issue 25's proof). The first test runs
# the image service's own specs (Image Manager, Image Consistency, RemoveImage
# idempotence); the
# second those that also run a pod and containers from the pulled images
# (Image Identifier Consistency, Image Volume), on a CNI bridge of its own.
#
# The images the specs name (pkg/validate/consts.go: gcr.io/k8s-staging-
# cri-tools/test-image-*, registry.k8s.io/pause:3.9, k8s.gcr.io/pause:3.9,
# and containerd's sandbox image registry.k8s.io/pause:3.10.2) are made here
# by tests/imagegen (busybox-static where a container runs them) and pushed
# to a local registry that allows anonymous pulls (critest sends no
# credentials), under the same paths. containerd's config_path (hosts.toml)
# gives gcr.io, registry.k8s.io and k8s.gcr.io that registry as their
# `server`; pullhelper cri reads the same config (--containerd-config), so
# no request leaves the machine and no image name is rewritten (critest's
# --registry-prefix would drop the tags: framework.PrepareImageName keeps
# only reference.Path).

load helpers
load containerd-cases
load cri

CTRD_FLAVOR=2
PH_CRITEST=${PH_CRITEST:-$PH_CACHE/bin/critest-v1.37.0}
CRITEST_REPO=k8s-staging-cri-tools

# The specs run, by their ginkgo text; the one skipped and why.
CRITEST_FOCUS='\[k8s.io\] (Image (Manager|Consistency)|Idempotence RemoveImage) '
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
    # The images a container is run from (Image Identifier Consistency) hold
    # busybox-static; the sandbox ("pause") image sleeps until killed.
    local -a run=()
    [[ -x $BUSYBOX ]] && run=(-file "$BUSYBOX:/bin/busybox" -symlink /bin/sh=busybox -symlink /bin/ls=busybox -symlink /bin/touch=busybox -symlink /bin/top=busybox -symlink /bin/sleep=busybox)
    critest_image tag-test 102 "$CRITEST_REPO/test-image-tag:test" "${run[@]}" -cmd '["/bin/busybox","true"]'
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
    # An image with /etc/passwd and /etc/group (Image Volume's subPath
    # "etc"), runnable.
    printf 'root:x:0:0:root:/root:/bin/sh\nwww-data:x:33:33:www-data:/var/www:/bin/sh\n' >"$BATS_FILE_TMPDIR/passwd"
    printf 'root:x:0:\nwww-data:x:33:\ntest-group:x:5000:\n' >"$BATS_FILE_TMPDIR/group"
    critest_image predefined-group 114 "$CRITEST_REPO/test-image-predefined-group:latest" "${run[@]}" \
        -file "$BATS_FILE_TMPDIR/passwd:/etc/passwd" -file "$BATS_FILE_TMPDIR/group:/etc/group" -cmd '["/bin/sh"]'
    critest_image pause 112 pause:3.9 "${run[@]}" -cmd '["/bin/busybox","sleep","2147483647"]'
    # containerd 2.4.2's sandbox image (DefaultSandboxImage), another image.
    critest_image sandbox 113 pause:3.10.2 "${run[@]}" -cmd '["/bin/busybox","sleep","2147483647"]'
}

teardown_file() {
    ctrd_stop_all
    stop_registry
}

setup() {
    cri_setup critest
    BRIDGE=""
    POD_DIRS=()
}

teardown() {
    cri_stop
    [[ -z ${CTRD_DIR:-} ]] || ctrd_stop "$CTRD_DIR"
    [[ -z ${BRIDGE:-} ]] || ! ip link show "$BRIDGE" >/dev/null 2>&1 || ip link del "$BRIDGE"
    local d
    # The directories the pods made that were not there before (the pods'
    # parent cgroups, containerd's /k8s.io on cgroupfs; libcni's result
    # cache), once empty: rmdir removes nothing else.
    for d in "${POD_DIRS[@]}"; do rmdir "$d" 2>/dev/null || true; done
    cri_cgroups_rm "$CG_PARENT"
}

# critest_up: containerd 2.x below $T/ctrd (no registry credential: the
# registry is anonymous) whose config_path sends gcr.io, registry.k8s.io and
# k8s.gcr.io to the local registry, and pullhelper cri in front of it
# reading the same config (--containerd-config: hosts.toml, the CRI's
# snapshotter), on $PH_SOCK, logging to $T/cri.log.
critest_up() {
    CTRD_DIR="$T/ctrd"
    mkdir -p "$CTRD_DIR"
    local h
    if [[ ${CTRD_FLAVOR:-2} == 1.6 ]]; then
        # Debian's 1.6, a version-2 config: the hosts as registry.mirrors
        # (1.6's legacy mode; config_path may not sit beside them).
        ctrd_require
        CTRD_BIN=""
        cred containerd "$CTRD_DIR/config.toml" --state-dir "$CTRD_DIR" --ca "$REGISTRY_CA" --version 2 --no-auth
        for h in gcr.io registry.k8s.io k8s.gcr.io; do
            printf '[plugins."io.containerd.grpc.v1.cri".registry.mirrors."%s"]\n  endpoint = ["https://%s"]\n' \
                "$h" "$REGISTRY_HOST" >>"$CTRD_DIR/config.toml"
        done
    else
        ctrd2_require
        cred containerd "$CTRD_DIR/config.toml" --state-dir "$CTRD_DIR" --ca "$REGISTRY_CA" --version 3 --no-auth
        # A pod sandbox gets oom_score_adj -998, which root here may not set
        # (runc: "failed to update /proc/self/oom_score_adj: Permission
        # denied"); restrict_oom_score_adj keeps it at containerd's own, as
        # for containerd inside a container.
        sed -i 's/^\[plugins."io.containerd.cri.v1.runtime"\]$/&\n  restrict_oom_score_adj = true/' "$CTRD_DIR/config.toml"
        grep -q '^  restrict_oom_score_adj = true$' "$CTRD_DIR/config.toml" || fail "no CRI runtime table in $CTRD_DIR/config.toml"
        for h in gcr.io registry.k8s.io k8s.gcr.io; do
            mkdir -p "$CTRD_DIR/certs.d/$h"
            printf 'server = "https://%s"\nca = "%s"\n' "$REGISTRY_HOST" "$REGISTRY_CA" >"$CTRD_DIR/certs.d/$h/hosts.toml"
        done
    fi
    ctrd_start "$CTRD_DIR" || return
    SOCK="$CTRD_DIR/c.sock"
    cri_start "$SOCK" --containerd-config "$CTRD_DIR/config.toml" --containerd-staging "$T/staging"
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

# run_critest FOCUS [SKIP]: critest with its runtime endpoint at containerd
# and its image endpoint at pullhelper cri, the specs FOCUS selects (less
# SKIP's), a JSON report in $T/report.json; prints critest's summary and
# fails with the logs' tails unless critest passes.
run_critest() {
    local -a args=(--ginkgo.focus "$1")
    [[ -z ${2:-} ]] || args+=(--ginkgo.skip "$2")
    printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 60\n' "$SOCK" "$PH_SOCK" >"$T/crictl.yaml"
    local rc=0
    (cd "$T" && timeout --kill-after=10 600 "$PH_CRITEST" --config "$T/crictl.yaml" \
        --runtime-endpoint "unix://$SOCK" --image-endpoint "unix://$PH_SOCK" "${args[@]}" \
        --ginkgo.no-color --ginkgo.v --ginkgo.json-report "$T/report.json") >"$T/critest.out" 2>&1 || rc=$?
    grep -E '^(Ran |SUCCESS|FAIL)' "$T/critest.out" | sed 's/^/# critest: /' >&3 || true
    ((rc == 0)) || fail "critest exit $rc: $(tail -n 80 "$T/critest.out")
pullhelper cri log: $(tail -n 20 "$T/cri.log")
containerd log: $(tail -n 30 "$CTRD_DIR/containerd.log")"
}

# assert_spec STATE TEXT: critest's report has the spec whose leaf text is
# TEXT in STATE (passed, skipped).
assert_spec() {
    local got
    got=$(awk -F'\t' -v t="$2" 'index($2, t) {print $1}' <<<"$STATES")
    [[ $got == "$1" ]] || fail "spec '$2': '$got', want $1
$STATES"
}

# assert_pulls N: the service logged N pulls, each OK and isolated (its
# own cgroup, a dynamic uid), and containerd's CRI pulled nothing itself.
assert_pulls() {
    local lines
    lines=$(grep '"msg":"pull"' "$T/cri.log" | grep '"code":"OK"' || true)
    assert_equal "$(grep -c . <<<"$lines")" "$1"
    assert_equal "$(grep -c '"isolated":true' <<<"$lines")" "$1"
    assert_equal "$(grep -c 'msg="PullImage ' "$CTRD_DIR/containerd.log")" 0
}

# image_specs_case: the image service's own specs (CRITEST_FOCUS) against
# pullhelper cri in front of the containerd CTRD_FLAVOR names: 13 passed,
# the digest spec skipped, every pull pullhelper's; the hosts' requests at
# the local registry; nothing left in the store.
image_specs_case() {
    [[ -x $PH_CRITEST ]] || skip "no critest in $PH_CRITEST (make deps builds it)"
    critest_up
    echo "# critest --ginkgo.skip: '$CRITEST_SKIP': $CRITEST_SKIP_WHY" >&3
    run_critest "$CRITEST_FOCUS" "$CRITEST_SKIP" || return
    grep -qE '^SUCCESS! -- 13 Passed \| 0 Failed \| 0 Pending \| [0-9]+ Skipped' "$T/critest.out" ||
        fail "critest summary: $(grep -E '^(Ran |SUCCESS|FAIL)' "$T/critest.out")"

    # Per spec: the thirteen passed, the digest spec skipped, nothing failed.
    STATES=$(spec_states "$T/report.json")
    assert_equal "$(grep -c $'^passed\t' <<<"$STATES")" 13
    assert_equal "$(grep -cvE $'^(passed|skipped)\t' <<<"$STATES")" 0
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
        assert_spec passed "$spec [Conformance]"
    done
    # RemoveImage of an image that does not exist, twice: no error
    # (forwarded; api.proto: "This call is idempotent").
    assert_spec passed "RemoveImage should not return an error if not found"
    assert_spec skipped "$CRITEST_SKIP"

    # Every PullImage was pullhelper's own: the specs' 21 PullPublicImage
    # calls. The timeout spec's request (a 1 ms deadline) either never
    # reaches the service or ends there Canceled or DeadlineExceeded
    # (whichever of the client's RST_STREAM and the server's grpc-timeout
    # comes first), never committed.
    assert_pulls 21
    local other
    other=$(grep '"msg":"pull"' "$T/cri.log" | grep -v '"code":"OK"' || true)
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

@test "critest v1.37.0: the Image Manager, Image Consistency and RemoveImage idempotence specs pass against pullhelper cri in front of containerd 2.x, every pull through pullhelper" {
    image_specs_case
}

@test "critest v1.37.0: the same image specs pass against pullhelper cri in front of Debian's containerd 1.6 (registry.mirrors)" {
    CTRD_FLAVOR=1.6
    image_specs_case
}

# cni_bridge: the CNI network of containerd's pods: the bridge plugin on a
# bridge of this test's own ($BRIDGE, no address on it, no gateway, no
# masquerade: nothing routes to or from the pods) with host-local addresses
# kept below $T; Debian's plugins (containernetworking-plugins, make deps)
# linked into the config's bin_dirs.
cni_bridge() {
    local p
    mkdir -p "$CTRD_DIR/cni/bin" "$CTRD_DIR/cni/conf"
    for p in bridge host-local loopback; do
        [[ -x /usr/lib/cni/$p ]] || skip "no /usr/lib/cni/$p (Debian containernetworking-plugins; make deps)"
        ln -sf "/usr/lib/cni/$p" "$CTRD_DIR/cni/bin/$p"
    done
    BRIDGE="phc$(printf '%x' "$$")$BATS_TEST_NUMBER"
    cat >"$CTRD_DIR/cni/conf/10-critest.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "critest-$$",
 "plugins": [{"type": "bridge", "bridge": "$BRIDGE", "isGateway": false, "ipMasq": false,
              "ipam": {"type": "host-local", "dataDir": "$T/cni-ipam", "ranges": [[{"subnet": "10.254.$(($$ % 250)).0/24"}]]}}]}
EOF
}

@test "critest v1.37.0: the Image Identifier Consistency and Image Volume specs (pods and containers from the pulled images) pass against pullhelper cri in front of containerd 2.x" {
    [[ -x $PH_CRITEST ]] || skip "no critest in $PH_CRITEST (make deps builds it)"
    [[ -x $BUSYBOX ]] || skip "$BUSYBOX missing (Debian busybox-static; make deps): the containers run it"
    command -v runc >/dev/null || skip "runc not installed (make deps)"
    CTRD_DIR="$T/ctrd"
    local d
    for d in /sys/fs/cgroup/*/; do
        [[ -e ${d}k8s.io ]] || POD_DIRS+=("${d}k8s.io")
    done
    for d in /var/lib/cni/results /var/lib/cni; do
        [[ -e $d ]] || POD_DIRS+=("$d")
    done
    cni_bridge
    critest_up
    # The sandbox image, pulled as the kubelet would: through the image
    # service (containerd's own pull never runs).
    run timeout 120 "$CRICTL" --image-endpoint "unix://$PH_SOCK" --timeout 60s pull registry.k8s.io/pause:3.10.2
    assert_success
    run_critest '\[k8s.io\] Image (Identifier Consistency|Volume) ' || return
    grep -qE '^SUCCESS! -- 6 Passed \| 0 Failed \| 0 Pending \| [0-9]+ Skipped' "$T/critest.out" ||
        fail "critest summary: $(grep -E '^(Ran |SUCCESS|FAIL)' "$T/critest.out")"
    STATES=$(spec_states "$T/report.json")
    local spec
    for spec in "should return the same image identifier across all APIs [Conformance]" \
        "should return the same image identifier when pulled from different registries [Conformance]" \
        "should correctly mount image and enforce read-only" \
        "should reject Image Volume with Readonly set to false" \
        "should succeed when using a valid subPath" \
        "should fail when subPath does not exist in the image"; do
        assert_spec passed "$spec"
    done
    # critest skips this one itself: containerd 2.4.2's ContainerStatus
    # has no image_ref in an image volume's mount (the runtime's answer).
    assert_spec skipped "should return image digest in ContainerStatus mounts"
    grep -q 'Image Volume digest reporting (ImageSpec.image_ref tag 20) is not yet supported by the runtime' "$T/critest.out" ||
        fail "the digest-in-mounts spec skipped for another reason: $(grep -A2 SKIPPED "$T/critest.out")"
    echo "# critest skipped 'should return image digest in ContainerStatus mounts': containerd 2.4.2's ContainerStatus mounts carry no image_ref" >&3
    # The sandbox image, then the specs' PullPublicImage calls (one each,
    # two for the two registries).
    assert_pulls 9
    # critest removed its pods and images.
    run ctrd_crictl pods -q
    assert_success
    assert_equal "$output" ""
}
