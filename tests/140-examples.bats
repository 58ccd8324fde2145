#!/usr/bin/env bats
#
# examples/: every policy file passes `pullhelper policy check`, and
# `explain` with it resolves what its header says (the files it names are
# created below a temporary root, and the example's paths are pointed there).
# The DaemonSet manifest is checked by the Go test in examples/.

load helpers

EXAMPLES=$PH_ROOT/examples

setup_file() {
    ROOT=$BATS_FILE_TMPDIR/root
    export ROOT
    mkdir -p "$ROOT"/etc/pullhelper/os-update "$ROOT"/run/pullhelper/pod "$ROOT"/var/lib/kubelet \
        "$ROOT"/etc/kubernetes "$ROOT"/usr/libexec/kubelet-image-credential-provider-plugins \
        "$ROOT"/etc/containerd/certs.d/registry.example "$ROOT"/etc/containers/certs.d \
        "$ROOT"/var/lib/containerd "$ROOT"/var/lib/containers "$ROOT"/var/run/netns
    # A made-up credential (never a real one): the same for every source.
    local auth
    auth=$(printf 'example-user:not-a-secret' | base64 -w0)
    printf '{"auths":{"image-registry.openshift-image-registry.svc:5000":{"auth":"%s"},"registry.example":{"auth":"%s"}}}\n' \
        "$auth" "$auth" >"$ROOT/etc/pullhelper/os-update/pull-secret.json"
    cp "$ROOT/etc/pullhelper/os-update/pull-secret.json" "$ROOT/run/pullhelper/pod/pull-secret.json"
    cp "$ROOT/etc/pullhelper/os-update/pull-secret.json" "$ROOT/var/lib/kubelet/config.json"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout /dev/null -subj /CN=service-ca -days 1 \
        -out "$ROOT/etc/pullhelper/os-update/service-ca.crt" 2>/dev/null
    printf 'nameserver 192.0.2.53\nsearch node.example\n' >"$ROOT/etc/resolv.conf"
    cat >"$ROOT/var/lib/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
clusterDNS: ["172.30.0.10"]
clusterDomain: cluster.local
resolvConf: $ROOT/etc/resolv.conf
EOF
    cat >"$ROOT/etc/kubernetes/credential-providers.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: example-provider
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  matchImages: ["registry.example"]
  defaultCacheDuration: 10m
EOF
    cat >"$ROOT/etc/containerd/config.toml" <<EOF
version = 2
[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "$ROOT/etc/containerd/certs.d"
EOF
    cat >"$ROOT/etc/containerd/certs.d/registry.example/hosts.toml" <<EOF
server = "https://registry.example"
[host."https://containerd-mirror.example:5000"]
  capabilities = ["pull", "resolve"]
EOF
    cat >"$ROOT/etc/containers/registries.conf" <<EOF
[[registry]]
prefix = "registry.example"
location = "registry.example"
[[registry.mirror]]
location = "crio-mirror.example:5000"
EOF
    echo '{"default":[{"type":"insecureAcceptAnything"}]}' >"$ROOT/etc/containers/policy.json"
    cat >"$ROOT/etc/containers/storage.conf" <<EOF
[storage]
driver = "vfs"
graphroot = "$ROOT/var/lib/containers/storage"
runroot = "$ROOT/run/containers/storage"
EOF
}

teardown() {
    if [[ -n ${NETNS_FILE:-} ]] && mountpoint -q "$NETNS_FILE"; then
        umount "$NETNS_FILE"
    fi
    local i
    for ((i = ${#MADE_CGROUPS[@]} - 1; i >= 0; i--)); do
        rmdir "${MADE_CGROUPS[i]}"
    done
}

MADE_CGROUPS=()

# make_cgroup PATH: the cgroup PATH exists in the pids hierarchy (v1) or
# the unified one (v2), as a pod's does on a node; what it made is removed
# by teardown.
make_cgroup() {
    local dir=/sys/fs/cgroup name
    [[ -d $dir/pids ]] && dir=$dir/pids
    local IFS=/
    for name in ${1#/}; do
        dir=$dir/$name
        if [[ ! -d $dir ]]; then
            mkdir "$dir"
            MADE_CGROUPS+=("$dir")
        fi
    done
}

# host_weighs_io: this kernel weighs a cgroup's IO (cgroup.io_weight can be
# set): v2's iocost, v1's CFQ, or BFQ registered (listed by a block queue).
host_weighs_io() {
    if [[ -e /sys/fs/cgroup/cgroup.controllers ]]; then
        [[ -e /sys/fs/cgroup/io.cost.qos ]] && return 0
    else
        [[ -e /sys/fs/cgroup/blkio/blkio.weight || -e /sys/fs/cgroup/blkio/blkio.bfq.weight ]] && return 0
    fi
    grep -qw bfq /sys/block/*/queue/scheduler 2>/dev/null
}

# rooted EXAMPLE: a copy of examples/EXAMPLE whose host paths (and the
# kubelet's "auto" root directory) are below $ROOT; prints its path.
rooted() {
    local out=$BATS_TEST_TMPDIR/$1
    sed -e "s#\"/etc/#\"$ROOT/etc/#g; s#\"/var/lib/#\"$ROOT/var/lib/#g; s#\"/run/pullhelper/#\"$ROOT/run/pullhelper/#g" \
        -e "s#\"/usr/libexec/#\"$ROOT/usr/libexec/#g; s#\"/var/run/netns/#\"$ROOT/var/run/netns/#g" \
        -e "s#kubelet_docker_config = \"auto\"#kubelet_docker_config = \"$ROOT/var/lib/kubelet\"#" \
        "$EXAMPLES/$1" >"$out"
    echo "$out"
}

@test "every examples/*.toml passes policy check, and the README lists it" {
    local n=0 f
    for f in "$EXAMPLES"/*.toml; do
        run_pullhelper policy check "$f"
        assert_equal "$(json_get .valid <<<"$output")" true
        # Each starts with a header comment saying what it is for.
        assert_equal "$(head -c 2 "$f")" "# "
        grep -qF "($(basename "$f"))" "$EXAMPLES/README.md" || fail "examples/README.md does not link $(basename "$f")"
        n=$((n + 1))
    done
    assert_equal "$n" 4
    run_pullhelper policy check "$EXAMPLES/os-update.toml"
    assert_equal "$(json_get .profiles <<<"$output")" '["idle"]'
}

@test "policy check rejects an example with a mistake (the check above can fail)" {
    local bad=$BATS_TEST_TMPDIR/bad.toml
    sed 's/^cpu_weight = 1$/cpu_wieght = 1/' "$EXAMPLES/os-update.toml" >"$bad"
    ! cmp -s "$bad" "$EXAMPLES/os-update.toml" || fail "the sed above changed nothing"
    run_pullhelper 2 policy check "$bad"
    assert_equal "$(json_get .error.code <<<"$output")" usage
    assert_output --partial "profiles.idle.cgroup.cpu_wieght: unknown key"
}

@test "os-update.toml --profile idle: pull secret, service CA, cluster DNS, low priority" {
    local img=image-registry.openshift-image-registry.svc:5000/openshift/os:4.20 pol
    pol=$(rooted os-update.toml)
    local dst="containers-storage:[vfs@$ROOT/var/lib/containers/storage+$ROOT/run/containers/storage]$img"
    local io=',"io_weight":1'
    if ! host_weighs_io; then
        # This kernel weighs no cgroup's IO: explain refuses the profile's
        # io_weight as pull would (exit 7), and explains it without.
        echo "# this host weighs no cgroup's IO: the profile's io_weight is checked refused, then dropped" >&3
        run_pullhelper 7 explain --policy "$pol" --profile idle "$img" "$dst"
        assert_json_error isolation
        [[ $ph_error_message == "cgroup.io_weight is set, but this kernel weighs no cgroup's IO"* ]] || fail "$ph_error_message"
        sed -i '/^io_weight = 1$/d' "$pol"
        io=
    fi
    run_pullhelper explain --policy "$pol" --profile idle "$img" "$dst"
    assert_equal "$(json_get .plan.credentials[0].source <<<"$output")" pull-secret
    assert_equal "$(json_get .plan.credentials[0].file <<<"$output")" "$ROOT/etc/pullhelper/os-update/pull-secret.json"
    assert_equal "$(json_get .plan.trust.ca_files <<<"$output")" "[\"$ROOT/etc/pullhelper/os-update/service-ca.crt\"]"
    assert_equal "$(json_get .plan.isolation.network.mode <<<"$output")" cluster-dns
    assert_equal "$(json_get .plan.isolation.network.dns.resolv_conf <<<"$output")" "$(printf '%s\n' \
        'search openshift-image-registry.svc.cluster.local svc.cluster.local cluster.local node.example' \
        'nameserver 172.30.0.10' 'options ndots:5')"
    assert_equal "$(json_get .plan.isolation.cgroup.limits <<<"$output")" \
        "{\"cpu_quota\":0.25,\"cpu_weight\":1,\"memory_max\":536870912,\"memory_high\":268435456,\"pids_max\":128$io}"
    assert_equal "$(json_get .plan.node_bandwidth <<<"$output")" 20971520
    assert_equal "$(json_get .plan.destination.transport <<<"$output")" containers-storage
    # Without the profile the pull is not low priority.
    run_pullhelper explain --policy "$(rooted os-update.toml)" "$img"
    assert_equal "$(json_get .plan.isolation.cgroup.limits.cpu_weight <<<"$output")" null
}

@test "pod-prefetch.toml: the pod's cgroup and network namespace, the pod's DNS" {
    skip_if_not_root "binding a network namespace to a file (unshare --net=FILE) needs root"
    NETNS_FILE=$ROOT/var/run/netns/cni-7c5a3c2e-0d4b-4a3e-9b1f-2f0c1d2e3f40
    touch "$NETNS_FILE"
    unshare --net="$NETNS_FILE" true
    local pod=/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7c5a3c2e_0d4b_4a3e_9b1f_2f0c1d2e3f40.slice
    # The pod's cgroup is checked as pull checks it: missing, exit 7.
    run_pullhelper 7 explain --policy "$(rooted pod-prefetch.toml)" registry.example/app:1.4 containerd:registry.example/app:1.4
    assert_json_error isolation
    assert_equal "$ph_error_message" "cgroup.path $pod does not exist"
    make_cgroup "$pod"
    make_cgroup /kubepods.slice/other.slice
    run_pullhelper explain --policy "$(rooted pod-prefetch.toml)" registry.example/app:1.4 containerd:registry.example/app:1.4
    assert_equal "$(json_get .plan.isolation.cgroup.path <<<"$output")" \
        /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7c5a3c2e_0d4b_4a3e_9b1f_2f0c1d2e3f40.slice
    assert_equal "$(json_get .plan.isolation.cgroup.limits <<<"$output")" '{}'
    assert_equal "$(json_get .plan.isolation.network.netns <<<"$output")" "$NETNS_FILE"
    assert_equal "$(json_get .plan.isolation.network.dns.search[0] <<<"$output")" default.svc.cluster.local
    assert_equal "$(json_get .plan.credentials[0].file <<<"$output")" "$ROOT/run/pullhelper/pod/pull-secret.json"
    # The flags an agent passes per pod win over the file.
    run_pullhelper explain --policy "$(rooted pod-prefetch.toml)" --cgroup /kubepods.slice/other.slice \
        --dns-namespace team-a registry.example/app:1.4
    assert_equal "$(json_get .plan.isolation.cgroup.path <<<"$output")" /kubepods.slice/other.slice
    assert_equal "$(json_get .plan.isolation.network.dns.search[0] <<<"$output")" team-a.svc.cluster.local
}

@test "kubelet-containerd.toml: the kubelet's credentials, containerd's hosts.toml mirror, into k8s.io" {
    run_pullhelper explain --policy "$(rooted kubelet-containerd.toml)" \
        registry.example/platform/agent:v1.2 containerd:registry.example/platform/agent:v1.2
    assert_equal "$(json_get .plan.endpoint_rules <<<"$output")" containerd
    assert_equal "$(json_get .plan.endpoints[0].host <<<"$output")" containerd-mirror.example:5000
    assert_equal "$(json_get .plan.endpoints[1].host <<<"$output")" registry.example
    assert_equal "$(json_get .plan.credentials[0].source <<<"$output")" kubelet-node-config
    assert_equal "$(json_get .plan.credentials[0].file <<<"$output")" "$ROOT/var/lib/kubelet/config.json"
    assert_equal "$(json_get .plan.credentials[1].source <<<"$output")" credential-provider
    assert_equal "$(json_get .plan.destination.transport <<<"$output")" containerd
    assert_equal "$(json_get .settings.dest.containerd_namespace <<<"$output")" k8s.io
    assert_equal "$(json_get .settings.dest.pin <<<"$output")" true
}

@test "kubelet-crio.toml: the kubelet's credentials, registries.conf mirror, CRI-O's store" {
    run_pullhelper explain --policy "$(rooted kubelet-crio.toml)" \
        registry.example/platform/agent:v1.2 containers-storage:registry.example/platform/agent:v1.2
    assert_equal "$(json_get .plan.endpoint_rules <<<"$output")" registries.conf
    assert_equal "$(json_get .plan.endpoints[0].host <<<"$output")" crio-mirror.example:5000
    assert_equal "$(json_get .plan.endpoints[0].source <<<"$output")" "registries.conf mirror"
    assert_equal "$(json_get .plan.endpoints[1].host <<<"$output")" registry.example
    assert_equal "$(json_get .plan.credentials[0].source <<<"$output")" kubelet-node-config
    assert_equal "$(json_get .plan.signature_policy.file <<<"$output")" "$ROOT/etc/containers/policy.json"
    assert_equal "$(json_get .plan.destination.store.storage_conf <<<"$output")" "$ROOT/etc/containers/storage.conf"
    assert_equal "$(json_get .plan.destination.store.graph_root <<<"$output")" "$ROOT/var/lib/containers/storage"
}

@test "pullhelper-cri.service: its ExecStart starts pullhelper cri (the node's paths below a temporary root), READY=1 to systemd once it listens, root-only socket, metrics served, SIGTERM stops it" {
    [[ $(id -u) == 0 ]] || skip "pullhelper cri runs as root"
    local cmd sock=$BATS_TEST_TMPDIR/run/cri.sock pid
    cmd=$(sed -n 's/^ExecStart=//p' "$EXAMPLES/pullhelper-cri.service")
    [[ $cmd == "/usr/local/bin/pullhelper cri "* ]] || fail "ExecStart: $cmd"
    cmd=${cmd#/usr/local/bin/pullhelper }
    cmd=${cmd//unix:\/\/\/run\/pullhelper\/cri.sock/unix://$sock}
    cmd=${cmd//unix:\/\/\/run\/containerd\/containerd.sock/unix://$BATS_TEST_TMPDIR/containerd.sock}
    cmd=${cmd//\/etc\/containerd\/config.toml/$ROOT/etc/containerd/config.toml}
    cmd=${cmd//--kubelet-docker-config auto/--kubelet-docker-config $ROOT/var/lib/kubelet}
    # The unit's fixed metrics port may be taken here: port 0, then the
    # address the serving line names.
    [[ $cmd == *"--metrics-listen 127.0.0.1:9471 "* ]] || fail "ExecStart has no --metrics-listen 127.0.0.1:9471: $cmd"
    cmd=${cmd//--metrics-listen 127.0.0.1:9471/--metrics-listen 127.0.0.1:0}
    # systemd's notification socket (Type=notify): one datagram, READY=1.
    local notify=$BATS_TEST_TMPDIR/notify.sock npid
    "$PH_PYTHON" -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.settimeout(60)
open(sys.argv[2], "wb").write(s.recv(4096))' "$notify" "$BATS_TEST_TMPDIR/notified" &
    npid=$!
    local deadline=$((SECONDS + 30))
    until [[ -S $notify ]]; do
        ((SECONDS < deadline)) || fail "no notify socket"
        sleep 0.05
    done
    # shellcheck disable=SC2086 # the unit's words, as systemd splits them
    NOTIFY_SOCKET=$notify "$PULLHELPER" $cmd </dev/null >"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/log" &
    pid=$!
    wait "$npid" || fail "no notification from pullhelper cri: $(cat "$BATS_TEST_TMPDIR/log")"
    assert_equal "$(cat "$BATS_TEST_TMPDIR/notified")" "READY=1"
    [[ -S $sock ]] || fail "READY=1 before the socket listens"
    deadline=$((SECONDS + 30))
    until grep -q '"msg":"serving"' "$BATS_TEST_TMPDIR/log"; do
        _ph_pid_alive "$pid" || fail "pullhelper cri exited: $(cat "$BATS_TEST_TMPDIR/log")"
        ((SECONDS < deadline)) || { kill -KILL "$pid"; fail "not serving after 30 s"; }
        sleep 0.05
    done
    assert_equal "$(stat -c '%a %u %F' "$sock")" "600 0 socket"
    local metrics
    metrics=$(grep '"msg":"serving"' "$BATS_TEST_TMPDIR/log" | json_get .metrics_listen)
    run curl -sS --max-time 20 "http://$metrics/metrics"
    assert_success
    assert_line "pullhelper_cri_pulls_in_flight 0"
    kill -TERM "$pid"
    wait "$pid" || fail "pullhelper cri exit $? after SIGTERM: $(cat "$BATS_TEST_TMPDIR/log")"
    [[ ! -e $sock ]] || fail "the socket is left"
    assert_equal "$(json_get .pulls <"$BATS_TEST_TMPDIR/out")" 0
}
