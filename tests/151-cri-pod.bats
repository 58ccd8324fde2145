#!/usr/bin/env bats
#
# pullhelper cri, per pod (issue 25): the policy's [cri] table takes from
# each PullImage's sandbox_config the profile the pod chose by annotation
# (only one of cri.pod_profiles), and by that profile the pod's cgroup
# parent (cri.pull_cgroup = "pod", as CRI-O's separate_pull_cgroup = "pod")
# and the pod's DNS (cri.pod_dns). crictl runp makes a real pod sandbox in
# the containerd 2.x of make deps (host network, so no CNI; runc with the
# cgroupfs driver; the sandbox image a busybox "pause" served by the test
# registry and pinned as containerd's sandbox image), then crictl pull
# --pod-config pulls through pullhelper for that pod.

load helpers
load containerd-cases
load cri

CTRD_FLAVOR=2
PH_DNSMASQ=${PH_DNSMASQ:-/usr/sbin/dnsmasq}
BUSYBOX=${BUSYBOX:-/bin/busybox}

setup_file() {
    fixture tiny
    fixture multi
    # The registry's certificate also names registry.pods.test, a name
    # only the pod's DNS (dnsmasq below) knows.
    PH_REGISTRY_EXTRA_SANS="DNS:registry.pods.test" start_registry
    push_fixture tiny
    push_fixture multi
    # The sandbox ("pause") image: busybox-static sleeping; containerd
    # kills it with SIGKILL when the sandbox stops.
    if [[ -x $BUSYBOX ]]; then
        local sum
        sum=$(sha256sum "$BUSYBOX" | cut -c1-16)
        push_fixture_args "pause-$sum" fixtures/pause:1 -layers 0 -platforms "linux/$("$(_ph_go)" env GOARCH)" \
            -file "$BUSYBOX:/bin/busybox" -cmd '["/bin/busybox","sleep","100000"]'
    fi
    TINY_DIGEST=$(registry_digest fixtures/tiny:latest)
    export TINY_DIGEST
}

teardown_file() {
    ctrd_stop_all
    stop_registry
}

setup() {
    cri_setup cripod
    POD_ID=""
    DNS_NS=""
    DNSMASQ_PID=""
    POD_CG="/pullhelper-bats-pod-$$-${BATS_TEST_NUMBER}"
    # The policy: pods choose "inpod" (the pull in the pod's cgroup, 200Mi)
    # or "cluster" (the pod's DNS) by annotation; "hidden" exists but is
    # not theirs to choose.
    POLICY="$T/policy.toml"
    cat >"$POLICY" <<'EOF'
version = 1
[cri]
profile_annotation = "pullhelper.io/profile"
pod_profiles = ["inpod", "cluster"]
[profiles.inpod.cri]
pull_cgroup = "pod"
[profiles.inpod.cgroup]
memory_max = "200Mi"
[profiles.cluster.cri]
pod_dns = true
[profiles.hidden.cgroup]
memory_max = "300Mi"
EOF
}

teardown() {
    reg_cont
    if [[ -n ${POD_ID:-} ]]; then
        ctrd_crictl stopp "$POD_ID" >/dev/null 2>&1 || true
        ctrd_crictl rmp "$POD_ID" >/dev/null 2>&1 || true
    fi
    cri_stop
    [[ -z ${CTRD_DIR:-} ]] || ctrd_stop "$CTRD_DIR"
    _dns_down
    cri_cgroups_rm "$CG_PARENT" "$POD_CG"
}

# pod_ctrd_up: ctrd_up, with fixtures/pause:1 of the test registry as the
# CRI's sandbox image (containerd 2.x: [plugins."io.containerd.cri.v1.images"
# .pinned_images] sandbox).
pod_ctrd_up() {
    ctrd2_require
    [[ -x $BUSYBOX ]] || skip "busybox-static not installed ($BUSYBOX; make deps installs it): no sandbox image"
    command -v runc >/dev/null || skip "runc not installed (make deps installs it): no pod sandbox"
    CTRD_DIR="$T/ctrd"
    mkdir -p "$CTRD_DIR"
    cred containerd "$CTRD_DIR/config.toml" --state-dir "$CTRD_DIR" --ca "$REGISTRY_CA" --version "$CTRD_CONFIG_VERSION"
    printf '[plugins."io.containerd.cri.v1.images".pinned_images]\n  sandbox = "%s/fixtures/pause:1"\n' \
        "$REGISTRY_HOST" >>"$CTRD_DIR/config.toml"
    # The sandbox's oom_score_adj is -998 (the CRI's defaultSandboxOOMAdj);
    # here root lacks CAP_SYS_RESOURCE, so runc's nsexec fails to lower it
    # ("failed to update /proc/self/oom_score_adj: Permission denied").
    # restrict_oom_score_adj keeps it at containerd's own, as for rootless.
    sed -i 's|^\[plugins."io.containerd.cri.v1.runtime"\]$|&\n  restrict_oom_score_adj = true|' "$CTRD_DIR/config.toml"
    grep -q '^  restrict_oom_score_adj = true$' "$CTRD_DIR/config.toml" || fail "pod_ctrd_up: no runtime table in $CTRD_DIR/config.toml"
    ctrd_start "$CTRD_DIR"
    SOCK="$CTRD_DIR/c.sock"
}

# cri_up [FLAGS...]: pullhelper cri with $POLICY in front of the test's
# containerd (pod_ctrd_up), as cri.bash's cri_up_on.
cri_up() {
    cri_up_on "$SOCK" --policy "$POLICY" "$@"
}

# pod_json FILE [ANNOTATION_VALUE [CGROUP_PARENT [DNS_JSON]]]: a pod
# sandbox config (host network) named web/shop, with the profile
# annotation when ANNOTATION_VALUE is not "-", linux.cgroup_parent when
# CGROUP_PARENT is not empty, and dns_config when DNS_JSON is given.
pod_json() {
    local file=$1 ann=${2:--} cg=${3:-} dns=${4:-}
    "$PH_PYTHON" - "$file" "$ann" "$cg" "$dns" <<'EOF'
import json, sys
f, ann, cg, dns = sys.argv[1:5]
pod = {"metadata": {"name": "web", "namespace": "shop", "uid": "uid-web-1", "attempt": 0},
       "linux": {"security_context": {"namespace_options": {"network": 2}}},
       "log_directory": ""}
if ann != "-":
    pod["annotations"] = {"pullhelper.io/profile": ann}
if cg:
    pod["linux"]["cgroup_parent"] = cg
if dns:
    pod["dns_config"] = json.loads(dns)
json.dump(pod, open(f, "w"))
EOF
}

# cg_pulls DIR: the pull cgroups under cgroup DIR (pids hierarchy).
cg_pulls() {
    ls -d /sys/fs/cgroup/pids/"${1#/}"/pull-* 2>/dev/null || true
}

# runp FILE: crictl runp FILE against containerd; sets POD_ID.
runp() {
    run ctrd_crictl runp "$1"
    if [[ $status != 0 ]]; then
        fail "crictl runp: $output; containerd log tail: $(tail -n 20 "$CTRD_DIR/containerd.log")"
        return
    fi
    POD_ID=${lines[-1]}
}

@test "cri pod: crictl runp makes a pod sandbox; crictl pull --pod-config choosing \"inpod\" runs the pull under the pod's cgroup parent with the profile's memory limit, removed afterwards; without the annotation, the service's own cgroup" {
    pod_ctrd_up
    cri_up
    pod_json "$T/pod.json" inpod "$POD_CG"
    runp "$T/pod.json" || return
    # The sandbox runs in the pod's cgroup parent (containerd: PARENT/ID).
    run ctrd_crictl inspectp -o json "$POD_ID"
    assert_success
    assert_equal "$(json_get .status.state <<<"$output")" SANDBOX_READY
    [[ -d /sys/fs/cgroup/pids/${POD_CG#/}/$POD_ID ]] || fail "no sandbox cgroup under $POD_CG: $(ls /sys/fs/cgroup/pids/"${POD_CG#/}" 2>&1)"

    # Hold the pull (the registry stopped) to see its cgroup and limit.
    reg_stop
    pcrictl pull --pod-config "$T/pod.json" --creds "$(creds)" "$REGISTRY_HOST/fixtures/tiny:latest" >"$T/pull1.out" 2>&1 &
    local pid=$! deadline=$((SECONDS + 30)) cg
    until [[ -n $(cg_pulls "$POD_CG") ]]; do
        ((SECONDS < deadline)) || { fail "no pull cgroup under $POD_CG: $(cat "$T/cri.log")"; return; }
        sleep 0.05
    done
    cg=$(cg_pulls "$POD_CG")
    assert_equal "$(cat "/sys/fs/cgroup/memory/${POD_CG#/}/$(basename "$cg")/memory.limit_in_bytes")" $((200 << 20))
    assert_equal "$(ls -d /sys/fs/cgroup/pids/"${CG_PARENT#/}"/pull-* 2>/dev/null)" ""
    reg_cont
    wait "$pid" || fail "pull: $(cat "$T/pull1.out")"
    grep -qF "$(config_digest fixtures/tiny:latest)" "$T/pull1.out" || fail "pull: $(cat "$T/pull1.out")"
    local line
    line=$(pull_lines)
    assert_equal "$(json_get .code <<<"$line")" OK
    [[ $(json_get .cgroup <<<"$line") == "$POD_CG/pull-"* ]] || fail "the pull's cgroup is not under the pod's: $line"
    grep '"msg":"pull started"' "$T/cri.log" | grep -qF "\"profile\":\"inpod\",\"cgroup_parent\":\"$POD_CG\"" ||
        fail "pull started: $(grep '"msg":"pull started"' "$T/cri.log")"
    # Gone afterwards; the pod's own cgroup (the sandbox's parent) stays.
    assert_equal "$(cg_pulls "$POD_CG")" ""
    [[ -d /sys/fs/cgroup/pids/${POD_CG#/}/$POD_ID ]] || fail "the sandbox's cgroup went"

    # The same pod without the annotation: the service's profile, the
    # pull's own cgroup under --cgroup-parent.
    pod_json "$T/pod-plain.json" - "$POD_CG"
    run pcrictl pull --pod-config "$T/pod-plain.json" --creds "$(creds)" "$REGISTRY_HOST/fixtures/multi:latest"
    assert_success
    line=$(pull_lines | tail -n 1)
    assert_equal "$(json_get .code <<<"$line")" OK
    [[ $(json_get .cgroup <<<"$line") == "$CG_PARENT/pull-"* ]] || fail "not the service's own cgroup: $line"
    assert_equal "$(cg_pulls "$POD_CG")" ""
    assert_equal "$(cg_pulls "$CG_PARENT")" ""
}

@test "cri pod: a profile pods may not choose, and bad cgroup parents, are refused InvalidArgument with one line; nothing is pulled or left; a pod cgroup missing from a hierarchy is not made there" {
    pod_ctrd_up
    cri_up
    local img="$REGISTRY_HOST/fixtures/tiny:latest" before
    mkdir "/sys/fs/cgroup/pids${POD_CG}"
    before=$(registry_log_barrier)
    pod_json "$T/pod.json" hidden "$POD_CG"
    run pcrictl pull --pod-config "$T/pod.json" --creds "$(creds)" "$img"
    assert_failure
    # (crictl prints the status message as a quoted string: \" for ")
    assert_output --partial 'code = InvalidArgument desc = pullhelper: usage: pod annotation pullhelper.io/profile: \"hidden\" is not a profile pods may choose (cri.pod_profiles: inpod, cluster)'
    local cg want
    for cg in "kubepods/pod1|want an absolute, clean cgroup path" "$POD_CG/../x|want an absolute, clean cgroup path" \
        "/|other than /" "$POD_CG/missing|no such cgroup" "kubepods-burstable-pod1.slice|want an absolute"; do
        want=${cg#*|}
        cg=${cg%%|*}
        pod_json "$T/pod.json" inpod "$cg"
        run pcrictl pull --pod-config "$T/pod.json" --creds "$(creds)" "$img"
        assert_failure
        assert_output --partial "code = InvalidArgument desc = pullhelper: usage: sandbox_config linux.cgroup_parent"
        assert_output --partial "$want"
    done
    # A pod DNS server that is a name (the profile uses the pod's DNS).
    pod_json "$T/pod.json" cluster "" '{"servers": ["dns.example"]}'
    run pcrictl pull --pod-config "$T/pod.json" --creds "$(creds)" "$img"
    assert_failure
    assert_output --partial 'code = InvalidArgument desc = pullhelper: usage: sandbox_config dns_config.servers entry 1: \"dns.example\" is not an IP address'
    # None started a pull, reached the registry or made a cgroup.
    assert_equal "$(grep -c '"msg":"pull started"' "$T/cri.log")" 0
    assert_equal "$(pull_lines | grep -c '"code":"InvalidArgument"')" 7
    registry_log_barrier >/dev/null
    assert_equal "$(tail -n "+$((before + 1))" "$REGISTRY_LOG" | grep -c '/v2/fixtures/')" 0
    [[ ! -e /sys/fs/cgroup/pids${POD_CG}/missing ]] || fail "a missing cgroup parent was created"
    assert_equal "$(cg_pulls "$POD_CG")" ""
    assert_equal "$(cg_pulls "$CG_PARENT")" ""

    # $POD_CG exists in the pids hierarchy only (a pod half gone): the
    # pull, started, does not make the pod's cgroup in the others.
    pod_json "$T/pod.json" inpod "$POD_CG"
    run pcrictl pull --pod-config "$T/pod.json" --creds "$(creds)" "$img"
    assert_failure
    assert_output --partial "code = Internal desc = pullhelper: isolation: cgroup parent $POD_CG does not exist (any more) in the"
    local h
    for h in /sys/fs/cgroup/*/; do
        [[ $h == /sys/fs/cgroup/pids/ || ! -e $h${POD_CG#/} ]] || fail "the pod's cgroup was made in $h"
    done
    assert_equal "$(cg_pulls "$POD_CG")" ""
}

# _dns_up: a network namespace with dnsmasq on its veth address $DNS_IP,
# answering registry.pods.test = 127.0.0.1 (the test registry) and
# nothing else; queries logged to $DNS_LOG.
_dns_up() {
    [[ -x $PH_DNSMASQ ]] || skip "dnsmasq not installed ($PH_DNSMASQ; Debian package dnsmasq-base)"
    local n attempt
    for attempt in $(seq 1 50); do
        n=$((RANDOM % 250 + 3))
        if [[ -z $(ip -4 route show "10.214.$n.0/24") && -z $(ip -4 -o addr show | grep -F " 10.214.$n.") ]]; then
            break
        fi
        n=""
    done
    [[ -n $n ]] || fail "no free 10.214.N.0/24 subnet"
    DNS_NS="phpod-$$-$BATS_TEST_NUMBER"
    DNS_VETH="php$$x$BATS_TEST_NUMBER"
    DNS_IP="10.214.$n.2"
    ip netns add "$DNS_NS"
    ip link add "$DNS_VETH" type veth peer name eth0 netns "$DNS_NS"
    ip addr add "10.214.$n.1/24" dev "$DNS_VETH"
    ip link set "$DNS_VETH" up
    ip -n "$DNS_NS" addr add "$DNS_IP/24" dev eth0
    ip -n "$DNS_NS" link set eth0 up
    ip -n "$DNS_NS" link set lo up
    DNS_LOG="$T/dnsmasq.log"
    (
        exec timeout --kill-after=5 600 nsenter --net="/run/netns/$DNS_NS" "$PH_DNSMASQ" --no-daemon --conf-file=/dev/null \
            --no-resolv --no-hosts --bind-interfaces --listen-address="$DNS_IP" \
            --host-record="registry.pods.test,127.0.0.1" --local=/test/ \
            --log-queries --log-facility=- </dev/null >>"$DNS_LOG" 2>&1 3>&-
    ) &
    DNSMASQ_PID=$!
    wait_for_file_match "$DNS_LOG" "started" 10
}

_dns_down() {
    [[ -z ${DNSMASQ_PID:-} ]] || kill -TERM "$DNSMASQ_PID" 2>/dev/null || true
    if [[ -n ${DNS_NS:-} ]]; then
        local pid
        for pid in $(ip netns pids "$DNS_NS" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
        ip netns del "$DNS_NS" 2>/dev/null || true
        ip link del "$DNS_VETH" 2>/dev/null || true
    fi
}

@test "cri pod: the pod's DNS resolves the registry only when the chosen profile says pod_dns" {
    pod_ctrd_up
    _dns_up
    # The service's own DNS is 127.0.0.1 (nothing answers there): no name
    # resolves without the pod's DNS, and no query leaves the machine.
    cri_up --dns-policy None --dns 127.0.0.1 --retries 0
    local img="registry.pods.test:$REGISTRY_PORT/fixtures/tiny:latest" dns
    dns="{\"servers\": [\"$DNS_IP\"], \"searches\": [\"shop.svc.cluster.local\"], \"options\": [\"ndots:1\"]}"
    # Without the profile: the policy's DNS, the pod's never asked.
    pod_json "$T/pod.json" - "" "$dns"
    run pcrictl pull --pod-config "$T/pod.json" --creds "$(creds)" "$img"
    assert_failure
    assert_output --partial "code = Unavailable"
    grep -q 'query\[' "$DNS_LOG" && fail "the pod's DNS was asked without pod_dns: $(cat "$DNS_LOG")"
    # With "cluster" (pod_dns): the pod's server answers the name.
    pod_json "$T/pod.json" cluster "" "$dns"
    run pcrictl pull --pod-config "$T/pod.json" --creds "$(creds)" "$img"
    echo "$output"
    assert_success
    assert_output --partial "$(config_digest fixtures/tiny:latest)"
    wait_for_file_match "$DNS_LOG" "query\[A\] registry\.pods\.test from 10\.214\." 10
    local line
    line=$(pull_lines | tail -n 1)
    assert_equal "$(json_get .code <<<"$line")" OK
    assert_equal "$(json_get .registry <<<"$line")" "registry.pods.test:$REGISTRY_PORT"
    grep '"msg":"pull started"' "$T/cri.log" | tail -n 1 | grep -qF "\"servers\":[\"$DNS_IP\"]" ||
        fail "pull started: $(grep '"msg":"pull started"' "$T/cri.log")"
}

@test "cri pod: policy check shows what cri takes from pods; explain shows a profile's [cri]; a profile widening pod_profiles is exit 2" {
    run_pullhelper policy check "$POLICY"
    assert_json_result
    assert_equal "$(json_get .cri.base.profile_annotation <<<"$output")" pullhelper.io/profile
    assert_equal "$(json_get .cri.base.pull_cgroup <<<"$output")" own
    assert_equal "$(json_get .cri.pod_profiles.inpod.pull_cgroup <<<"$output")" pod
    assert_equal "$(json_get .cri.pod_profiles.cluster.pod_dns <<<"$output")" true
    assert_equal "$(json_get .cri.pod_profiles.hidden <<<"$output")" null
    run_pullhelper explain --policy "$POLICY" --profile inpod "$REGISTRY_HOST/fixtures/tiny:latest" "oci:$T/dest"
    assert_equal "$(json_get .settings.cri.pull_cgroup <<<"$output")" pod
    assert_equal "$(json_get .settings.cri.pod_dns <<<"$output")" false
    printf 'version = 1\n[cri]\nprofile_annotation = "a.io/p"\npod_profiles = ["a"]\n[profiles.a.cri]\npod_profiles = ["a", "b"]\n[profiles.b.pull]\nretries = 1\n' >"$T/wide.toml"
    run_pullhelper 2 policy check "$T/wide.toml"
    assert_json_error usage
    [[ $stderr == *"wide.toml:6: profiles.a.cri.pod_profiles: a profile cannot set cri.pod_profiles (set it in the base [cri])"* ]] ||
        fail "stderr: $stderr"
}

# mk_pod_cgroup PATH: PATH in every cgroup hierarchy, as a runtime makes a
# pod's (teardown removes $POD_CG and below).
mk_pod_cgroup() {
    local h
    for h in /sys/fs/cgroup/*/; do
        [[ -e $h/cgroup.procs ]] || continue
        mkdir -p "$h${1#/}"
    done
}

@test "cri pod: the same image for two pods at once is two pulls, each in its own pod's cgroup; a second request of one pod joins that pod's pull" {
    # (the two pulls of one image into one DEST run one after the other)
    ctrd2_require
    ctrd_up
    cri_up
    local img="$REGISTRY_HOST/fixtures/tiny:latest" pa pb pa2
    mk_pod_cgroup "$POD_CG/a"
    mk_pod_cgroup "$POD_CG/b"
    pod_json "$T/pod-a.json" inpod "$POD_CG/a"
    pod_json "$T/pod-b.json" inpod "$POD_CG/b"
    reg_stop
    pcrictl pull --pod-config "$T/pod-a.json" --creds "$(creds)" "$img" >"$T/a.out" 2>&1 &
    pa=$!
    wait_for_file_match "$T/cri.log" '"msg":"pull started"' 30
    pcrictl pull --pod-config "$T/pod-a.json" --creds "$(creds)" "$img" >"$T/a2.out" 2>&1 &
    pa2=$!
    wait_for_file_match "$T/cri.log" '"msg":"pull joined"' 30
    pcrictl pull --pod-config "$T/pod-b.json" --creds "$(creds)" "$img" >"$T/b.out" 2>&1 &
    pb=$!
    # Pod b's pull is a pull of its own (it then waits for pod a's: one
    # image into one DEST at a time).
    local deadline=$((SECONDS + 30))
    until [[ -n $(cg_pulls "$POD_CG/a") && $(grep -c '"msg":"pull started"' "$T/cri.log") == 2 ]]; do
        ((SECONDS < deadline)) || { fail "pod a's pull cgroup and pod b's pull: $(cat "$T/cri.log")"; return; }
        sleep 0.05
    done
    reg_cont
    wait "$pa" || fail "pod a: $(cat "$T/a.out")"
    wait "$pa2" || fail "pod a again: $(cat "$T/a2.out")"
    wait "$pb" || fail "pod b: $(cat "$T/b.out")"
    assert_equal "$(grep -c '"msg":"pull started"' "$T/cri.log")" 2
    assert_equal "$(grep -c '"msg":"pull joined"' "$T/cri.log")" 1
    assert_equal "$(pull_lines | grep -c '"code":"OK"')" 3
    assert_equal "$(pull_lines | json_get .cgroup | grep -c "^$POD_CG/a/pull-")" 2
    assert_equal "$(pull_lines | json_get .cgroup | grep -c "^$POD_CG/b/pull-")" 1
    assert_equal "$(cg_pulls "$POD_CG/a")$(cg_pulls "$POD_CG/b")" ""
}
