#!/usr/bin/env bats
#
# Network (issue 6): join a network namespace (--netns, [network] mode =
# "netns") and/or override only DNS for cluster names (--dns*, kubelet
# config, [network] mode = "cluster-dns").
#
# setup_file builds a small "cluster" from real parts:
#   - a network namespace phnet-PID with a veth pair to the host:
#     host side 10.213.N.1/24, namespace side 10.213.N.2/24 (N random per run);
#   - dnsmasq inside it on 10.213.N.2 only, serving
#     registry.testns.svc.cluster.local -> 10.213.N.2 and
#     loopback.testns.svc.cluster.local -> 127.0.0.1 (NXDOMAIN for the rest of
#     cluster.local and .test; no upstream servers, no route out);
#   - registry "cluster": docker-registry inside it on 10.213.N.2 (reachable
#     from the host by IP, its names resolve only through dnsmasq);
#   - registry "loopback": docker-registry inside it on the namespace's own
#     127.0.0.1 (reachable only from inside; the port is free on the host).
#
# No test may ever send a DNS query to the host's real nameserver. Every
# pullhelper in this file therefore runs in a "pseudo-host" mount namespace
# (a copy of the host's, held open by a sleeping process) in which
# /etc/resolv.conf is replaced by a file naming 127.0.0.1, where nothing
# listens: without the override, names fail fast and locally. pullhelper
# stays in the host's network, pid and cgroup namespaces; to pullhelper that
# mount namespace is "the host", and the tests check from outside that its
# /etc/resolv.conf and mount table (and the real host's) are untouched.

load helpers

PH_DNSMASQ=${PH_DNSMASQ:-/usr/sbin/dnsmasq}

setup_file() {
    [[ $(id -u) == 0 ]] || skip "needs root (network namespaces, veth, mounts)"
    local cmd
    for cmd in ip nsenter unshare; do
        command -v "$cmd" >/dev/null || skip "$cmd not installed"
    done
    [[ -x $PH_DNSMASQ ]] || skip "dnsmasq not installed ($PH_DNSMASQ; Debian package dnsmasq-base)"

    # Everything teardown_file must undo is exported as soon as it exists.
    NET_NS="phnet-$$"
    NET_VETH_HOST="phh$$"
    NET_VETH_NS="phn$$"
    export NET_NS NET_VETH_HOST NET_VETH_NS

    # A /24 of 10.213.0.0/16 the host does not use yet.
    local n attempt
    for attempt in $(seq 1 50); do
        n=$((RANDOM % 250 + 3))
        if [[ -z $(ip -4 route show "10.213.$n.0/24") && -z $(ip -4 -o addr show | grep -F " 10.213.$n.") ]]; then
            break
        fi
        n=""
    done
    [[ -n $n ]] || fail "no free 10.213.N.0/24 subnet"
    NET_N=$n
    NET_HOST_IP="10.213.$n.1"
    NET_IP="10.213.$n.2"
    export NET_N NET_HOST_IP NET_IP

    ip netns add "$NET_NS"
    ip link add "$NET_VETH_HOST" type veth peer name "$NET_VETH_NS" netns "$NET_NS"
    ip addr add "$NET_HOST_IP/24" dev "$NET_VETH_HOST"
    ip link set "$NET_VETH_HOST" up
    ip -n "$NET_NS" addr add "$NET_IP/24" dev "$NET_VETH_NS"
    ip -n "$NET_NS" link set "$NET_VETH_NS" up
    ip -n "$NET_NS" link set lo up

    start_cluster_dns
    start_pseudo_host

    # A process living in the namespace, for --netns pid:PID.
    (
        exec nsenter --net="/run/netns/$NET_NS" sleep 3600 </dev/null >/dev/null 2>&1 3>&-
    ) &
    NET_SLEEPER_PID=$!
    export NET_SLEEPER_PID

    # Registry "cluster": in the namespace, on its veth address; its
    # certificate carries the names the tests pull by.
    PH_REGISTRY_NETNS=$NET_NS PH_REGISTRY_LISTEN=$NET_IP \
        PH_REGISTRY_EXTRA_SANS="DNS:registry.testns.svc.cluster.local,DNS:registry.testns.svc,DNS:registry.hosts.test,IP:$NET_IP" \
        start_registry
    push_fixture tiny
    push_fixture big
    CLUSTER_PORT=$REGISTRY_PORT
    CLUSTER_FQDN="registry.testns.svc.cluster.local:$CLUSTER_PORT"
    CLUSTER_SHORT="registry.testns.svc:$CLUSTER_PORT"
    CLUSTER_HOSTS_NAME="registry.hosts.test:$CLUSTER_PORT"
    CLUSTER_AUTHFILE="$BATS_FILE_TMPDIR/cluster-auth.json"
    registry_auth_alias "$CLUSTER_AUTHFILE" "$CLUSTER_FQDN" "$CLUSTER_SHORT" "$CLUSTER_HOSTS_NAME" "$REGISTRY_HOST"
    CLUSTER_TINY_DIGEST=$(registry_digest fixtures/tiny:latest)
    export CLUSTER_PORT CLUSTER_FQDN CLUSTER_SHORT CLUSTER_HOSTS_NAME CLUSTER_AUTHFILE CLUSTER_TINY_DIGEST
    registry_save cluster
    registry_clear

    # Registry "loopback": in the namespace, on its own 127.0.0.1.
    PH_REGISTRY_NETNS=$NET_NS PH_REGISTRY_LISTEN=127.0.0.1 \
        PH_REGISTRY_EXTRA_SANS="DNS:loopback.testns.svc.cluster.local" \
        start_registry
    push_fixture tiny
    LOOP_HOST=$REGISTRY_HOST
    LOOP_FQDN="loopback.testns.svc.cluster.local:$REGISTRY_PORT"
    LOOP_AUTHFILE="$BATS_FILE_TMPDIR/loopback-auth.json"
    registry_auth_alias "$LOOP_AUTHFILE" "$LOOP_HOST" "$LOOP_FQDN"
    LOOP_TINY_DIGEST=$(registry_digest fixtures/tiny:latest)
    LOOP_CERT_DIR=$REGISTRY_CERT_DIR
    export LOOP_HOST LOOP_FQDN LOOP_AUTHFILE LOOP_TINY_DIGEST LOOP_CERT_DIR
    registry_save loopback
    registry_restore cluster

    # Kubelet configuration as on a node: the cluster DNS, its domain, and a
    # resolvConf whose (last) search line has cluster.local (must not repeat)
    # and another domain; its options are discarded.
    KUBELET_RESOLV="$BATS_FILE_TMPDIR/kubelet-resolv.conf"
    printf 'search old.test\nnameserver 127.0.0.1\nsearch cluster.local example.test\noptions ndots:2 timeout:1\n' >"$KUBELET_RESOLV"
    KUBELET_CONFIG="$BATS_FILE_TMPDIR/kubelet-config.yaml"
    cat >"$KUBELET_CONFIG" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
staticPodPath: /etc/kubernetes/manifests
authentication:
  anonymous:
    enabled: false
clusterDomain: cluster.local
clusterDNS:
  - $NET_IP
resolvConf: $KUBELET_RESOLV
EOF
    # What the pod's resolv.conf must be with that config and namespace testns.
    EXPECTED_RESOLV="$BATS_FILE_TMPDIR/expected-resolv.conf"
    printf 'search testns.svc.cluster.local svc.cluster.local cluster.local example.test\nnameserver %s\noptions ndots:5\n' \
        "$NET_IP" >"$EXPECTED_RESOLV"
    export KUBELET_RESOLV KUBELET_CONFIG EXPECTED_RESOLV
}

teardown_file() {
    local pid
    # Leftover background pulls (by recorded pid).
    if [[ -f $BATS_FILE_TMPDIR/bg.pid ]]; then
        pid=$(<"$BATS_FILE_TMPDIR/bg.pid")
        _pid_runs "$pid" pullhelper && kill -KILL "$pid" 2>/dev/null
    fi
    stop_tarpit
    _pid_runs "${NET_SLEEPER_PID:-}" "sleep 3600" && kill -KILL "$NET_SLEEPER_PID" 2>/dev/null
    _pid_runs "${PSEUDO_HOST_PID:-}" "sleep" && kill -KILL "$PSEUDO_HOST_PID" 2>/dev/null
    if [[ -f $BATS_FILE_TMPDIR/registry-loopback.env ]]; then
        registry_restore loopback
        stop_registry
    fi
    if [[ -f $BATS_FILE_TMPDIR/registry-cluster.env ]]; then
        registry_restore cluster
        stop_registry
    fi
    _pid_runs "${DNSMASQ_PID:-}" dnsmasq && kill -TERM "$DNSMASQ_PID" 2>/dev/null
    if [[ -n ${NET_NS:-} ]]; then
        # Anything else still in the namespace (ours alone) dies with it.
        for pid in $(ip netns pids "$NET_NS" 2>/dev/null); do
            kill -KILL "$pid" 2>/dev/null
        done
        ip netns del "$NET_NS" 2>/dev/null
        rm -rf "/etc/netns/$NET_NS"
    fi
    [[ -n ${NET_VETH_HOST:-} ]] && ip link del "$NET_VETH_HOST" 2>/dev/null
    return 0
}

setup() {
    [[ $(id -u) == 0 ]] || skip "needs root"
    registry_restore cluster
    OUT=$BATS_TEST_TMPDIR/out
    mkdir -p "$OUT"
    # Every pullhelper here runs in the pseudo-host mount namespace.
    PULLHELPER=$PSEUDO_HOST_WRAPPER
    CLUSTER_OPTS=(--authfile "$CLUSTER_AUTHFILE" --cert-dir "$REGISTRY_CERT_DIR" --retries 0)
    LOOP_OPTS=(--authfile "$LOOP_AUTHFILE" --cert-dir "$LOOP_CERT_DIR" --retries 0)
    BG_PID=""
}

teardown() {
    if [[ -n ${BG_PID:-} ]] && _pid_runs "$BG_PID" pullhelper; then
        kill -KILL "$BG_PID" 2>/dev/null
    fi
    rm -f "$BATS_FILE_TMPDIR/bg.pid"
    stop_tarpit
    return 0
}

###############################################################################
# The cluster

# _pid_runs PID TEXT: PID is alive and its command line contains TEXT.
_pid_runs() {
    local pid=$1 text=$2
    [[ $pid =~ ^[0-9]+$ ]] && _ph_pid_alive "$pid" || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$text"
}

# children_of PID: pids of PID's child processes, one a line.
children_of() {
    local f rest _state ppid
    for f in /proc/[0-9]*/stat; do
        { rest=$(<"$f"); } 2>/dev/null || continue
        rest=${rest##*) }
        read -r _state ppid _ <<<"$rest"
        [[ $ppid == "$1" ]] && { f=${f#/proc/}; echo "${f%/stat}"; }
    done
    return 0
}

# dns_query NAME [SERVER]: ask SERVER (default the cluster DNS) for NAME's A
# records over UDP from the host; prints "rcode N" then one address a line.
dns_query() {
    "$PH_PYTHON" - "$1" "${2:-$NET_IP}" <<'EOF'
import random, socket, struct, sys
name, server = sys.argv[1], sys.argv[2]
qid = random.randint(0, 0xFFFF)
q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0"
q += struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
s.sendto(q, (server, 53))
data = s.recv(4096)
assert struct.unpack(">H", data[:2])[0] == qid, "wrong id"
print("rcode", data[3] & 0xF)
an = struct.unpack(">H", data[6:8])[0]
i = 12
while data[i]:
    i += data[i] + 1
i += 5
def skip_name(i):
    while True:
        if data[i] & 0xC0 == 0xC0:
            return i + 2
        if data[i] == 0:
            return i + 1
        i += data[i] + 1
for _ in range(an):
    i = skip_name(i)
    typ, _cls, _ttl, rdlen = struct.unpack(">HHIH", data[i:i + 10])
    i += 10
    if typ == 1:
        print(socket.inet_ntoa(data[i:i + 4]))
    i += rdlen
EOF
}

# start_cluster_dns: dnsmasq in $NET_NS on $NET_IP only; its log (every
# query, with the client address) is $DNSMASQ_LOG. In --no-daemon mode it
# writes no pid file: $DNSMASQ_PID is the `timeout` wrapping it.
start_cluster_dns() {
    DNSMASQ_LOG="$BATS_FILE_TMPDIR/dnsmasq.log"
    : >"$DNSMASQ_LOG"
    (
        exec timeout --kill-after=5 "$PH_REGISTRY_LIFETIME" \
            nsenter --net="/run/netns/$NET_NS" "$PH_DNSMASQ" --no-daemon --conf-file=/dev/null \
            --no-resolv --no-hosts --bind-interfaces --listen-address="$NET_IP" \
            --host-record="registry.testns.svc.cluster.local,$NET_IP" \
            --host-record="loopback.testns.svc.cluster.local,127.0.0.1" \
            --local=/cluster.local/ --local=/test/ \
            --log-queries --log-facility=- \
            </dev/null >>"$DNSMASQ_LOG" 2>&1 3>&-
    ) &
    DNSMASQ_PID=$!
    export DNSMASQ_LOG DNSMASQ_PID
    local deadline=$((SECONDS + 10)) got
    until got=$(dns_query registry.testns.svc.cluster.local 2>/dev/null) && [[ $got == *"$NET_IP"* ]]; do
        _pid_runs "$DNSMASQ_PID" dnsmasq || fail "dnsmasq exited: $(cat "$DNSMASQ_LOG")"
        ((SECONDS < deadline)) || fail "dnsmasq does not answer on $NET_IP within 10s: $got; log: $(cat "$DNSMASQ_LOG")"
        sleep 0.1
    done
}

# dns_log_barrier: make a query of our own with a unique name and wait until
# dnsmasq logged it, so that the log holds every query answered before; print
# the log's line count.
dns_log_barrier() {
    local name
    name="barrier-$(openssl rand -hex 6).cluster.local"
    dns_query "$name" >/dev/null || {
        fail "dns_log_barrier: query failed"
        return
    }
    wait_for_file_match "$DNSMASQ_LOG" "query\[A\] $name from" 10 || return
    wc -l <"$DNSMASQ_LOG"
}

# dns_queries_since LINE: dnsmasq's query lines after line LINE.
dns_queries_since() {
    tail -n "+$(($1 + 1))" "$DNSMASQ_LOG" | grep -F 'query[' || true
}

# assert_dns_query_since LINE NAME FROM: dnsmasq got a query for NAME from
# address FROM after line LINE (polls: the log is written asynchronously).
assert_dns_query_since() {
    local from=$1 name=$2 client=$3 deadline=$((SECONDS + 10))
    local re="query\[(A|AAAA)\] ${name//./\\.} from ${client//./\\.}\$"
    until tail -n "+$((from + 1))" "$DNSMASQ_LOG" | grep -qE -- "$re"; do
        if ((SECONDS >= deadline)); then
            fail "dnsmasq got no query for $name from $client; queries since: $(dns_queries_since "$from")"
            return
        fi
        sleep 0.05
    done
}

# start_pseudo_host: a mount namespace copied from the host in which
# /etc/resolv.conf is a bind mount of $PSEUDO_HOST_RESOLV (nameserver
# 127.0.0.1, where nothing listens; search neutral.test), held by a sleeping
# process ($PSEUDO_HOST_PID). It is a slave of the host's mounts (nothing
# propagates out to the host) and shared below itself (a mount that
# pullhelper's child failed to keep private would show up in its table).
# $PSEUDO_HOST_WRAPPER runs pullhelper there, after checking inside that
# /etc/resolv.conf really is that file (so a vanished holder can never mean
# the real resolver).
start_pseudo_host() {
    PSEUDO_HOST_RESOLV="$BATS_FILE_TMPDIR/pseudo-host-resolv.conf"
    printf 'search neutral.test\nnameserver 127.0.0.1\n' >"$PSEUDO_HOST_RESOLV"
    (
        exec unshare -m --propagation slave sh -c \
            'mount --make-rshared / && mount --bind "$1" /etc/resolv.conf && exec sleep 3600' \
            sh "$PSEUDO_HOST_RESOLV" </dev/null >"$BATS_FILE_TMPDIR/pseudo-host.err" 2>&1 3>&-
    ) &
    PSEUDO_HOST_PID=$!
    export PSEUDO_HOST_RESOLV PSEUDO_HOST_PID
    local deadline=$((SECONDS + 10))
    until grep -q ' /etc/resolv.conf ' "/proc/$PSEUDO_HOST_PID/mountinfo" 2>/dev/null &&
        _pid_runs "$PSEUDO_HOST_PID" "sleep 3600"; do
        _ph_pid_alive "$PSEUDO_HOST_PID" || fail "pseudo-host holder exited: $(cat "$BATS_FILE_TMPDIR/pseudo-host.err")"
        ((SECONDS < deadline)) || fail "pseudo-host mount namespace not ready within 10s"
        sleep 0.05
    done
    local id
    id=$(stat -L -c %d:%i "$PSEUDO_HOST_RESOLV")
    PH_REAL_PULLHELPER=$(realpath -m "$PULLHELPER")
    PSEUDO_HOST_WRAPPER="$BATS_FILE_TMPDIR/pullhelper-pseudo-host"
    cat >"$PSEUDO_HOST_WRAPPER" <<EOF
#!/bin/sh
# pullhelper in the pseudo-host mount namespace (070-network.bats)
exec nsenter --mount=/proc/$PSEUDO_HOST_PID/ns/mnt /bin/sh -c '
if [ "\$(stat -L -c %d:%i /etc/resolv.conf)" != "$id" ]; then
    echo "pseudo-host mount namespace is gone; not running pullhelper with the real resolver" >&2
    exit 125
fi
exec "\$0" "\$@"' "$PH_REAL_PULLHELPER" "\$@"
EOF
    chmod +x "$PSEUDO_HOST_WRAPPER"
    export PSEUDO_HOST_WRAPPER PH_REAL_PULLHELPER
}

# mounts FILE: the mount table FILE (a mountinfo) without the nsfs mounts
# under /run/netns/ (`ip netns add` of anything on the host propagates there).
mounts() {
    awk '$5 !~ /^\/run\/netns\// && $5 != "/run/netns"' "$1" | sort
}

# snapshot_host NAME: record the real host's and the pseudo-host's
# /etc/resolv.conf (sha256) and mount tables as $BATS_TEST_TMPDIR/NAME.*.
snapshot_host() {
    local p=$BATS_TEST_TMPDIR/$1
    sha256sum </etc/resolv.conf >"$p.host-resolv"
    sha256sum <"/proc/$PSEUDO_HOST_PID/root/etc/resolv.conf" >"$p.pseudo-resolv"
    mounts /proc/self/mountinfo >"$p.host-mounts"
    mounts "/proc/$PSEUDO_HOST_PID/mountinfo" >"$p.pseudo-mounts"
}

# assert_host_unchanged BEFORE NOW: both resolv.conf files are byte-identical
# and neither mount table has a line it did not have before.
assert_host_unchanged() {
    local a=$BATS_TEST_TMPDIR/$1 b=$BATS_TEST_TMPDIR/$2 f new
    snapshot_host "$2"
    for f in host-resolv pseudo-resolv; do
        cmp -s "$a.$f" "$b.$f" || fail "/etc/resolv.conf changed ($f): $(cat "$a.$f") -> $(cat "$b.$f")"
    done
    for f in host-mounts pseudo-mounts; do
        new=$(comm -13 "$a.$f" "$b.$f")
        [[ -z $new ]] || fail "new mounts in the $f table: $new"
    done
}

# resolv_from_output FILE: write .plan.isolation.network.dns.resolv_conf of the JSON
# on $output to FILE, byte for byte.
resolv_from_output() {
    "$PH_PYTHON" -c '
import json, sys
v = json.loads(sys.argv[1])
for k in ("plan", "isolation", "network", "dns", "resolv_conf"):
    v = v.get(k) if isinstance(v, dict) else None
if not isinstance(v, str):
    sys.exit("no string at .plan.isolation.network.dns.resolv_conf")
open(sys.argv[2], "w").write(v)
' "$output" "$1" || fail "explain printed no .plan.isolation.network.dns.resolv_conf: $output"
}

# assert_same_bytes EXPECTED ACTUAL: the two files are identical.
assert_same_bytes() {
    cmp -s "$1" "$2" || fail "resolv.conf differs.
--- expected ($1)
$(cat -A "$1")
--- actual ($2)
$(cat -A "$2")"
}

# explain_resolv ARGS...: pullhelper explain ARGS (must succeed); the
# resolv.conf it prints is $BATS_TEST_TMPDIR/explain.resolv.
explain_resolv() {
    run_pullhelper explain "$@"
    EXPLAIN_RESOLV=$BATS_TEST_TMPDIR/explain.resolv
    resolv_from_output "$EXPLAIN_RESOLV"
}

# assert_warned REGEX: the last pullhelper run warned, on stderr or in
# .plan.isolation.network.dns.warnings, with a text matching REGEX (grep -E -i).
assert_warned() {
    local warnings
    warnings=$(json_get .plan.isolation.network.dns.warnings <<<"$output" 2>/dev/null || true)
    grep -qEi -- "$1" <<<"$stderr
$warnings" || fail "no warning matching /$1/ (stderr: $stderr; warnings: $warnings)"
}

# assert_pulled DIGEST DEST_PATH: the result is the image DIGEST and DEST
# holds it.
assert_pulled() {
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$1"
    [[ -f $2/index.json ]] || fail "DEST $2 has no index.json"
    assert_equal "$(json_get '.manifests[0].digest' <"$2/index.json")" "$1"
    assert_no_staging "$(dirname "$2")"
}

# assert_untouched DEST_PATH: DEST does not exist and no staging is left.
assert_untouched() {
    [[ ! -e $1 ]] || fail "DEST $1 exists after a failed pull"
    assert_no_staging "$(dirname "$1")"
}

# registry_requests_from SINCE CLIENT REPO: access-log lines of the current
# registry after line SINCE for manifests of REPO from address CLIENT.
registry_requests_from() {
    tail -n "+$(($1 + 1))" "$REGISTRY_LOG" | grep -E "^${2//./\\.} .*\"(GET|HEAD) /v2/$3/manifests/" || true
}

# port_refused_on_host HOST:PORT: a TCP connect from the host is refused.
port_refused_on_host() {
    "$PH_PYTHON" -c '
import socket, sys
h, p = sys.argv[1].rsplit(":", 1)
try:
    socket.create_connection((h, int(p)), timeout=2).close()
except ConnectionRefusedError:
    sys.exit(0)
sys.exit("connected")' "$1"
}

###############################################################################
# The harness

@test "cluster: dnsmasq serves the registry names; ns registry reachable by IP, loopback one only inside" {
    run dns_query registry.testns.svc.cluster.local
    assert_success
    assert_output "rcode 0
$NET_IP"
    run dns_query loopback.testns.svc.cluster.local
    assert_output "rcode 0
127.0.0.1"
    # Other cluster.local names and .test do not exist; nothing is forwarded.
    run dns_query nothing.testns.svc.cluster.local
    assert_output "rcode 3"
    run dns_query registry.testns.svc.cluster.local.example.test
    assert_output "rcode 3"
    # The cluster registry answers from the host over the veth, by IP.
    run curl -s -o /dev/null -w '%{http_code}' --max-time 5 --cacert "$REGISTRY_CA" "https://$NET_IP:$CLUSTER_PORT/v2/"
    assert_output 401
    # The loopback registry answers inside the namespace, not on the host.
    registry_restore loopback
    run registry_curl -o /dev/null -w '%{http_code}' /v2/
    assert_output 200
    run port_refused_on_host "$LOOP_HOST"
    assert_success
    # The pseudo-host sees the neutral resolv.conf; the host its own.
    run "$PSEUDO_HOST_WRAPPER" version
    assert_success
    run nsenter --mount="/proc/$PSEUDO_HOST_PID/ns/mnt" cat /etc/resolv.conf
    assert_output "search neutral.test
nameserver 127.0.0.1"
    run cmp -s /etc/resolv.conf "$PSEUDO_HOST_RESOLV"
    assert_failure
}

###############################################################################
# cluster-dns from the host network

@test "cluster-dns: pull registry.testns.svc.cluster.local:PORT from the host network; host resolv.conf and mounts untouched" {
    snapshot_host before
    local dns_before reg_before
    dns_before=$(dns_log_barrier)
    reg_before=$(registry_log_barrier)
    run_pullhelper pull "${CLUSTER_OPTS[@]}" --dns "$NET_IP" --dns-namespace testns \
        --kubelet-config "$KUBELET_CONFIG" "$CLUSTER_FQDN/fixtures/tiny" "oci:$OUT/dest"
    assert_pulled "$CLUSTER_TINY_DIGEST" "$OUT/dest"
    assert_equal "$(json_get .credential.key <<<"$output")" "$CLUSTER_FQDN"
    [[ $(json_get .isolation.dns <<<"$output") == *"\"$NET_IP\""* ]] ||
        fail ".isolation.dns does not list $NET_IP: $(json_get .isolation.dns <<<"$output")"
    assert_secret_absent "$output" "$stderr"
    # The name was resolved by the cluster DNS, asked from the host's side of
    # the veth (the child stayed in the host's network namespace)...
    assert_dns_query_since "$dns_before" registry.testns.svc.cluster.local "$NET_HOST_IP"
    # ...and the registry was reached from there too.
    [[ -n $(registry_requests_from "$reg_before" "$NET_HOST_IP" fixtures/tiny) ]] ||
        fail "no manifest request from $NET_HOST_IP in the registry log"
    # Neither the host's resolv.conf nor its mount table changed.
    assert_host_unchanged before after
}

@test "cluster-dns: without the override the same pull fails with exit 6 (network), and asks the cluster DNS nothing" {
    local dns_before
    dns_before=$(dns_log_barrier)
    run_pullhelper 6 pull "${CLUSTER_OPTS[@]}" "$CLUSTER_FQDN/fixtures/tiny" "oci:$OUT/dest"
    assert_json_error network
    [[ $ph_error_message == *registry.testns.svc.cluster.local* ]] || fail "message does not name the host"
    [[ $ph_error_message =~ lookup|resolv|DNS|dns|no\ such\ host ]] || fail "message does not say name resolution failed"
    assert_untouched "$OUT/dest"
    local after
    after=$(dns_log_barrier)
    [[ -z $(sed -n "$((dns_before + 1)),${after}p" "$DNSMASQ_LOG" | grep -F 'query[' | grep -v ' barrier-') ]] ||
        fail "dnsmasq got queries: $(dns_queries_since "$dns_before")"
}

@test "cluster-dns: a short name (registry.testns.svc:PORT) resolves through the search list" {
    local dns_before
    dns_before=$(dns_log_barrier)
    run_pullhelper pull "${CLUSTER_OPTS[@]}" --dns "$NET_IP" --dns-namespace testns \
        --kubelet-config "$KUBELET_CONFIG" "$CLUSTER_SHORT/fixtures/tiny" "oci:$OUT/dest"
    assert_pulled "$CLUSTER_TINY_DIGEST" "$OUT/dest"
    assert_equal "$(json_get .credential.key <<<"$output")" "$CLUSTER_SHORT"
    # registry.testns.svc + svc.cluster.local (the second search domain).
    assert_dns_query_since "$dns_before" registry.testns.svc.cluster.local "$NET_HOST_IP"
}

@test "cluster-dns: during a pull the child's /etc/resolv.conf is exactly explain's; the host's is not touched" {
    local -a dns=(--dns "$NET_IP" --dns-namespace testns --kubelet-config "$KUBELET_CONFIG")
    start_tarpit 2000000
    explain_resolv --authfile "$TARPIT_AUTHFILE" --cert-dir "$REGISTRY_CERT_DIR" "${dns[@]}" "$TARPIT_HOST/fixtures/big"
    assert_same_bytes "$EXPECTED_RESOLV" "$EXPLAIN_RESOLV"
    snapshot_host before
    local events=$BATS_TEST_TMPDIR/events.jsonl
    : >"$events"
    "$PULLHELPER" pull --progress-fd 5 --authfile "$TARPIT_AUTHFILE" --cert-dir "$REGISTRY_CERT_DIR" \
        --stall-timeout 5m "${dns[@]}" "$TARPIT_HOST/fixtures/big" "oci:$OUT/dest" \
        >"$OUT/bg.out" 2>"$OUT/bg.err" 5>"$events" 3>&- &
    BG_PID=$!
    echo "$BG_PID" >"$BATS_FILE_TMPDIR/bg.pid"
    wait_for_file_match "$events" '"type":"layer_start"' 60
    local child
    child=$(children_of "$BG_PID")
    [[ $child =~ ^[0-9]+$ ]] || fail "want one pull child of $BG_PID, got: '$child'"
    # What the child really sees, byte for byte.
    cat "/proc/$child/root/etc/resolv.conf" >"$BATS_TEST_TMPDIR/child.resolv"
    assert_same_bytes "$EXPLAIN_RESOLV" "$BATS_TEST_TMPDIR/child.resolv"
    # Bind-mounted read-only (the top-most mount on /etc/resolv.conf).
    local opts
    opts=$(awk '$5 == "/etc/resolv.conf" { o = $6 } END { print o }' "/proc/$child/mountinfo")
    [[ ,$opts, == *,ro,* ]] || fail "the child's /etc/resolv.conf is mounted '$opts', not read-only"
    # It is on the host's network, in a mount namespace of its own.
    assert_equal "$(readlink "/proc/$child/ns/net")" "$(readlink /proc/self/ns/net)"
    [[ $(readlink "/proc/$child/ns/mnt") != "$(readlink "/proc/$PSEUDO_HOST_PID/ns/mnt")" ]] ||
        fail "the child shares pullhelper's mount namespace"
    # While it runs, nothing changed outside it.
    assert_host_unchanged before during
    kill -TERM "$BG_PID"
    local deadline=$((SECONDS + 20)) rc=0
    while _ph_pid_alive "$BG_PID"; do
        ((SECONDS < deadline)) || fail "pullhelper did not exit within 20s of SIGTERM"
        sleep 0.05
    done
    wait "$BG_PID" || rc=$?
    assert_equal "$rc" 143
    assert_untouched "$OUT/dest"
    assert_host_unchanged before after
}

@test "cluster-dns: [network.dns] hosts entries go into the child's /etc/hosts; no DNS query for them" {
    local policy=$BATS_TEST_TMPDIR/policy.toml
    cat >"$policy" <<EOF
version = 1

[network]
mode = "cluster-dns"

[network.dns]
nameservers = ["$NET_IP"]
hosts = ["$NET_IP registry.hosts.test"]
EOF
    run_pullhelper policy check "$policy"
    run_pullhelper explain --policy "$policy" "$CLUSTER_HOSTS_NAME/fixtures/tiny"
    local hosts
    hosts=$(json_get .plan.isolation.network.dns.hosts <<<"$output")
    grep -qE "^${NET_IP//./\\.}[[:space:]]+registry\.hosts\.test\$" <<<"$hosts" ||
        fail ".plan.isolation.network.dns.hosts has no line for registry.hosts.test: $hosts"
    local dns_before after
    dns_before=$(dns_log_barrier)
    run_pullhelper pull --policy "$policy" "${CLUSTER_OPTS[@]}" "$CLUSTER_HOSTS_NAME/fixtures/tiny" "oci:$OUT/dest"
    assert_pulled "$CLUSTER_TINY_DIGEST" "$OUT/dest"
    after=$(dns_log_barrier)
    [[ -z $(sed -n "$((dns_before + 1)),${after}p" "$DNSMASQ_LOG" | grep -F 'registry.hosts.test') ]] ||
        fail "registry.hosts.test was looked up in DNS: $(dns_queries_since "$dns_before")"
}

###############################################################################
# netns

@test "netns: a registry on the namespace's own loopback is pulled with --netns NAME, not without" {
    registry_restore loopback
    # Nothing answers on the host's 127.0.0.1:PORT.
    run port_refused_on_host "$LOOP_HOST"
    assert_success
    run_pullhelper 6 pull "${LOOP_OPTS[@]}" "$LOOP_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_error network
    assert_untouched "$OUT/dest"

    local before
    before=$(registry_log_barrier)
    run_pullhelper pull "${LOOP_OPTS[@]}" --netns "$NET_NS" "$LOOP_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_pulled "$LOOP_TINY_DIGEST" "$OUT/dest"
    assert_equal "$(json_get .isolation.netns <<<"$output")" "/run/netns/$NET_NS"
    [[ -n $(registry_requests_from "$before" 127.0.0.1 fixtures/tiny) ]] ||
        fail "the loopback registry logged no manifest request"
}

@test "netns: --netns /run/netns/NAME and --netns pid:PID" {
    registry_restore loopback
    run_pullhelper pull "${LOOP_OPTS[@]}" --netns "/run/netns/$NET_NS" "$LOOP_HOST/fixtures/tiny" "oci:$OUT/bypath"
    assert_pulled "$LOOP_TINY_DIGEST" "$OUT/bypath"
    assert_equal "$(json_get .isolation.netns <<<"$output")" "/run/netns/$NET_NS"

    _pid_runs "$NET_SLEEPER_PID" "sleep 3600" || fail "the process in the namespace is gone"
    assert_equal "$(stat -L -c %i "/proc/$NET_SLEEPER_PID/ns/net")" "$(stat -L -c %i "/run/netns/$NET_NS")"
    run_pullhelper pull "${LOOP_OPTS[@]}" --netns "pid:$NET_SLEEPER_PID" "$LOOP_HOST/fixtures/tiny" "oci:$OUT/bypid"
    assert_pulled "$LOOP_TINY_DIGEST" "$OUT/bypid"
    assert_equal "$(json_get .isolation.netns <<<"$output")" "/proc/$NET_SLEEPER_PID/ns/net"
}

@test "netns: the policy form ([network] mode = \"netns\", netns = NAME); explain shows it" {
    registry_restore loopback
    local policy=$BATS_TEST_TMPDIR/policy.toml
    cat >"$policy" <<EOF
version = 1

[network]
mode = "netns"
netns = "$NET_NS"
EOF
    run_pullhelper policy check "$policy"
    run_pullhelper explain --policy "$policy" "$LOOP_HOST/fixtures/tiny"
    assert_equal "$(json_get .plan.isolation.network.mode <<<"$output")" netns
    [[ $(json_get .plan.isolation.network.netns <<<"$output") == *"$NET_NS" ]] ||
        fail ".plan.isolation.network.netns is $(json_get .plan.isolation.network.netns <<<"$output")"
    run_pullhelper pull --policy "$policy" "${LOOP_OPTS[@]}" "$LOOP_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_pulled "$LOOP_TINY_DIGEST" "$OUT/dest"
    assert_equal "$(json_get .isolation.netns <<<"$output")" "/run/netns/$NET_NS"
}

###############################################################################
# netns + cluster-dns

@test "netns + cluster-dns: the cluster registry's name, resolved and reached from inside the namespace" {
    local dns_before reg_before
    dns_before=$(dns_log_barrier)
    reg_before=$(registry_log_barrier)
    run_pullhelper pull "${CLUSTER_OPTS[@]}" --netns "$NET_NS" --dns "$NET_IP" --dns-namespace testns \
        --kubelet-config "$KUBELET_CONFIG" "$CLUSTER_FQDN/fixtures/tiny" "oci:$OUT/dest"
    assert_pulled "$CLUSTER_TINY_DIGEST" "$OUT/dest"
    assert_equal "$(json_get .isolation.netns <<<"$output")" "/run/netns/$NET_NS"
    [[ $(json_get .isolation.dns <<<"$output") == *"\"$NET_IP\""* ]] ||
        fail ".isolation.dns does not list $NET_IP"
    # Query and requests came from the namespace's address, not the host's.
    assert_dns_query_since "$dns_before" registry.testns.svc.cluster.local "$NET_IP"
    [[ -n $(registry_requests_from "$reg_before" "$NET_IP" fixtures/tiny) ]] ||
        fail "no manifest request from $NET_IP in the registry log"
    [[ -z $(registry_requests_from "$reg_before" "$NET_HOST_IP" fixtures/tiny) ]] ||
        fail "manifest requests came from the host side $NET_HOST_IP"
}

@test "netns + cluster-dns: a name that resolves to 127.0.0.1 reaches the namespace's loopback registry" {
    registry_restore loopback
    local dns_before
    dns_before=$(dns_log_barrier)
    # Needs both: the name only resolves through the cluster DNS, the address
    # only answers inside the namespace.
    run_pullhelper pull "${LOOP_OPTS[@]}" --netns "$NET_NS" --dns "$NET_IP" --dns-namespace testns \
        --kubelet-config "$KUBELET_CONFIG" "$LOOP_FQDN/fixtures/tiny" "oci:$OUT/dest"
    assert_pulled "$LOOP_TINY_DIGEST" "$OUT/dest"
    assert_equal "$(json_get .credential.key <<<"$output")" "$LOOP_FQDN"
    assert_dns_query_since "$dns_before" loopback.testns.svc.cluster.local "$NET_IP"
}

###############################################################################
# resolv.conf content (explain: no network)

@test "kubelet config discovery: explain prints exactly the ClusterFirst resolv.conf (order, de-duplication, ndots:5)" {
    explain_resolv --kubelet-config "$KUBELET_CONFIG" --dns-namespace testns "$CLUSTER_FQDN/fixtures/tiny"
    assert_same_bytes "$EXPECTED_RESOLV" "$EXPLAIN_RESOLV"
    assert_equal "$(json_get .plan.isolation.network.mode <<<"$output")" cluster-dns
    assert_equal "$(json_get .plan.isolation.network.dns.nameservers <<<"$output")" "[\"$NET_IP\"]"
    assert_equal "$(json_get .plan.isolation.network.dns.search <<<"$output")" \
        '["testns.svc.cluster.local","svc.cluster.local","cluster.local","example.test"]'
    assert_equal "$(json_get .plan.isolation.network.dns.options <<<"$output")" '["ndots:5"]'

    # Flags win over the kubelet config; --dns-search comes after the host's
    # search domains (appendDNSConfig), --dns-option after ndots:5.
    explain_resolv --kubelet-config "$KUBELET_CONFIG" --dns-namespace testns --dns "10.213.$NET_N.9" \
        --dns-search extra.test --dns-option timeout:2 "$CLUSTER_FQDN/fixtures/tiny"
    printf 'search testns.svc.cluster.local svc.cluster.local cluster.local example.test extra.test\nnameserver 10.213.%s.9\noptions ndots:5 timeout:2\n' \
        "$NET_N" >"$BATS_TEST_TMPDIR/want"
    assert_same_bytes "$BATS_TEST_TMPDIR/want" "$EXPLAIN_RESOLV"

    # An extra ndots:N replaces ndots:5 (the pod dnsConfig merge).
    explain_resolv --kubelet-config "$KUBELET_CONFIG" --dns-namespace testns --dns-option ndots:2 \
        --dns-option attempts:3 "$CLUSTER_FQDN/fixtures/tiny"
    printf 'search testns.svc.cluster.local svc.cluster.local cluster.local example.test\nnameserver %s\noptions ndots:2 attempts:3\n' \
        "$NET_IP" >"$BATS_TEST_TMPDIR/want"
    assert_same_bytes "$BATS_TEST_TMPDIR/want" "$EXPLAIN_RESOLV"

    # Without a namespace there is no kubelet triple.
    explain_resolv --kubelet-config "$KUBELET_CONFIG" "$CLUSTER_FQDN/fixtures/tiny"
    printf 'search cluster.local example.test\nnameserver %s\noptions ndots:5\n' "$NET_IP" >"$BATS_TEST_TMPDIR/want"
    assert_same_bytes "$BATS_TEST_TMPDIR/want" "$EXPLAIN_RESOLV"

    # resolvConf defaults to /etc/resolv.conf (here the pseudo-host's,
    # "search neutral.test").
    grep -v '^resolvConf:' "$KUBELET_CONFIG" >"$BATS_TEST_TMPDIR/kubelet-default.yaml"
    explain_resolv --kubelet-config "$BATS_TEST_TMPDIR/kubelet-default.yaml" --dns-namespace testns "$CLUSTER_FQDN/fixtures/tiny"
    printf 'search testns.svc.cluster.local svc.cluster.local cluster.local neutral.test\nnameserver %s\noptions ndots:5\n' \
        "$NET_IP" >"$BATS_TEST_TMPDIR/want"
    assert_same_bytes "$BATS_TEST_TMPDIR/want" "$EXPLAIN_RESOLV"

    # No hosts entries: .plan.isolation.network.dns.hosts is the empty string.
    assert_equal "$(json_get .plan.isolation.network.dns.hosts <<<"$output")" ""
}

@test "policy form: [network] mode = \"cluster-dns\" with [network.dns] keys gives the same resolv.conf as the flags" {
    local policy=$BATS_TEST_TMPDIR/policy.toml
    cat >"$policy" <<EOF
version = 1

[network]
mode = "cluster-dns"

[network.dns]
nameservers = ["$NET_IP"]
namespace = "testns"
cluster_domain = "cluster.local"
search = ["extra.test"]
options = ["timeout:2"]
EOF
    run_pullhelper policy check "$policy"
    explain_resolv --policy "$policy" "$CLUSTER_FQDN/fixtures/tiny"
    cp "$EXPLAIN_RESOLV" "$BATS_TEST_TMPDIR/from-policy"
    printf 'search testns.svc.cluster.local svc.cluster.local cluster.local neutral.test extra.test\nnameserver %s\noptions ndots:5 timeout:2\n' \
        "$NET_IP" >"$BATS_TEST_TMPDIR/want"
    assert_same_bytes "$BATS_TEST_TMPDIR/want" "$BATS_TEST_TMPDIR/from-policy"
    assert_equal "$(json_get .plan.isolation.network.mode <<<"$output")" cluster-dns

    # The same with flags (the cluster domain from a kubelet config that has
    # nothing else; resolvConf defaults to /etc/resolv.conf).
    printf 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nclusterDomain: cluster.local\n' \
        >"$BATS_TEST_TMPDIR/kubelet-domain.yaml"
    explain_resolv --dns "$NET_IP" --dns-namespace testns --dns-search extra.test --dns-option timeout:2 \
        --kubelet-config "$BATS_TEST_TMPDIR/kubelet-domain.yaml" "$CLUSTER_FQDN/fixtures/tiny"
    assert_same_bytes "$BATS_TEST_TMPDIR/from-policy" "$EXPLAIN_RESOLV"

    # kubelet_config and namespace in the policy = test 'kubelet config discovery'.
    cat >"$policy" <<EOF
version = 1

[network]
mode = "cluster-dns"

[network.dns]
kubelet_config = "$KUBELET_CONFIG"
namespace = "testns"
EOF
    run_pullhelper policy check "$policy"
    explain_resolv --policy "$policy" "$CLUSTER_FQDN/fixtures/tiny"
    assert_same_bytes "$EXPECTED_RESOLV" "$EXPLAIN_RESOLV"

    # And a pull with that policy resolves the cluster name.
    run_pullhelper pull --policy "$policy" "${CLUSTER_OPTS[@]}" "$CLUSTER_FQDN/fixtures/tiny" "oci:$OUT/dest"
    assert_pulled "$CLUSTER_TINY_DIGEST" "$OUT/dest"
}

###############################################################################
# Limits (the kubelet's: 3 nameservers, 32 search domains, 2048 characters)

@test "limits: 4 nameservers -> the first 3 and a warning naming the dropped one (explain and pull)" {
    local a="10.213.$NET_N.2" b="10.213.$NET_N.3" c="10.213.$NET_N.4" d="10.213.$NET_N.5"
    explain_resolv --dns "$a" --dns "$b" --dns "$c" --dns "$d" "$CLUSTER_FQDN/fixtures/tiny"
    assert_equal "$(json_get .plan.isolation.network.dns.nameservers <<<"$output")" "[\"$a\",\"$b\",\"$c\"]"
    printf 'search neutral.test\nnameserver %s\nnameserver %s\nnameserver %s\noptions ndots:5\n' "$a" "$b" "$c" \
        >"$BATS_TEST_TMPDIR/want"
    assert_same_bytes "$BATS_TEST_TMPDIR/want" "$EXPLAIN_RESOLV"
    assert_warned "${d//./\\.}"

    # A pull (by IP: no lookup) warns on stderr.
    run_pullhelper pull "${CLUSTER_OPTS[@]}" --dns "$a" --dns "$b" --dns "$c" --dns "$d" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_pulled "$CLUSTER_TINY_DIGEST" "$OUT/dest"
    grep -qF -- "$d" <<<"$stderr" || fail "the pull's stderr does not name the dropped nameserver $d: $stderr"
    assert_equal "$(json_get .isolation.dns <<<"$output" | grep -cF -- "$d" || true)" 0
}

@test "limits: 40 search domains -> the first 32 in order, and a warning" {
    local -a args=() want=()
    local i
    for i in $(seq 1 40); do
        args+=(--dns-search "d$i.example")
        ((i <= 32)) && want+=("d$i.example")
    done
    # A kubelet config whose resolvConf has no search line: only the flags count.
    printf 'nameserver 127.0.0.1\n' >"$BATS_TEST_TMPDIR/nosearch.conf"
    printf 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nresolvConf: %s\n' \
        "$BATS_TEST_TMPDIR/nosearch.conf" >"$BATS_TEST_TMPDIR/kubelet.yaml"
    explain_resolv --kubelet-config "$BATS_TEST_TMPDIR/kubelet.yaml" --dns "$NET_IP" "${args[@]}" "$CLUSTER_FQDN/fixtures/tiny"
    printf 'search %s\nnameserver %s\noptions ndots:5\n' "${want[*]}" "$NET_IP" >"$BATS_TEST_TMPDIR/want"
    assert_same_bytes "$BATS_TEST_TMPDIR/want" "$EXPLAIN_RESOLV"
    assert_equal "$(json_get .plan.isolation.network.dns.search <<<"$output" | json_get '[31]')" d32.example
    assert_equal "$(json_get .plan.isolation.network.dns.search <<<"$output" | json_get '[32]')" null
    assert_warned 'search'
}

@test "limits: a search list over 2048 characters is cut at the last whole domain that fits, with a warning" {
    # 21 domains of 100 characters: 2120 with separators; 20 fit (2019,
    # 2026 with "search ").
    local -a args=() want=()
    local i d
    for i in $(seq 1 21); do
        d=$(printf 'd%02d%s.%s.test' "$i" "$(printf 'a%.0s' $(seq 1 58))" "$(printf 'b%.0s' $(seq 1 33))")
        [[ ${#d} == 100 ]] || fail "domain length ${#d}"
        args+=(--dns-search "$d")
        ((i <= 20)) && want+=("$d")
    done
    printf 'nameserver 127.0.0.1\n' >"$BATS_TEST_TMPDIR/nosearch.conf"
    printf 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nresolvConf: %s\n' \
        "$BATS_TEST_TMPDIR/nosearch.conf" >"$BATS_TEST_TMPDIR/kubelet.yaml"
    explain_resolv --kubelet-config "$BATS_TEST_TMPDIR/kubelet.yaml" --dns "$NET_IP" "${args[@]}" "$CLUSTER_FQDN/fixtures/tiny"
    printf 'search %s\nnameserver %s\noptions ndots:5\n' "${want[*]}" "$NET_IP" >"$BATS_TEST_TMPDIR/want"
    assert_same_bytes "$BATS_TEST_TMPDIR/want" "$EXPLAIN_RESOLV"
    assert_warned 'search|2048|characters'
}

###############################################################################
# Errors

@test "bad --netns: a regular file, a directory, a mount namespace, a missing path or name -> exit 7 saying what it is" {
    local before
    before=$(registry_log_barrier)
    : >"$OUT/plainfile"
    mkdir -p "$OUT/somedir"
    local -a cases=(
        "$OUT/plainfile|is a regular file"
        "$OUT/somedir|is a directory"
        "/proc/self/ns/mnt|is a mount namespace"
        "$OUT/missing|does not exist"
        "phnet-missing-$$|does not exist"
    )
    local c path what
    for c in "${cases[@]}"; do
        path=${c%%|*}
        what=${c#*|}
        run_pullhelper 7 pull "${CLUSTER_OPTS[@]}" --netns "$path" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
        assert_json_error isolation
        [[ $ph_error_message == *"$path"* ]] || fail "--netns $path: message does not name the path: $ph_error_message"
        [[ $ph_error_message == *"$what"* ]] || fail "--netns $path: message does not say '$what': $ph_error_message"
        assert_untouched "$OUT/dest"
    done
    assert_equal "$(wc -l <"$REGISTRY_LOG")" "$before"
}

@test "bad --netns: a FIFO and a character device -> exit 7 promptly, saying what they are" {
    mkfifo "$OUT/fifo"
    # (A blocking open of a FIFO would wait for a writer forever.)
    PH_TIMEOUT=15 run_pullhelper 7 pull "${CLUSTER_OPTS[@]}" --netns "$OUT/fifo" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_error isolation
    [[ $ph_error_message == *"$OUT/fifo"* ]] || fail "message does not name the path"
    [[ $ph_error_message =~ FIFO|fifo|named\ pipe ]] || fail "message does not say it is a FIFO: $ph_error_message"
    PH_TIMEOUT=15 run_pullhelper 7 pull "${CLUSTER_OPTS[@]}" --netns /dev/null "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_error isolation
    [[ $ph_error_message == */dev/null* ]] || fail "message does not name the path"
    [[ $ph_error_message == *"character device"* ]] || fail "message does not say it is a character device: $ph_error_message"
    assert_untouched "$OUT/dest"
}

@test "bad --dns: a malformed nameserver -> exit 2 naming --dns, before any network" {
    local before
    before=$(registry_log_barrier)
    run_pullhelper 2 pull "${CLUSTER_OPTS[@]}" --dns 10.0.0.300 "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_error usage
    [[ $ph_error_message == *--dns* ]] || fail "message does not name --dns"
    [[ $ph_error_message == *10.0.0.300* ]] || fail "message does not quote the value"
    assert_untouched "$OUT/dest"
    run_pullhelper 2 explain --dns 10.0.0.300 "$REGISTRY_HOST/fixtures/tiny"
    assert_json_error usage
    assert_equal "$(wc -l <"$REGISTRY_LOG")" "$before"
}

@test "dns policy: Default is the host's resolv.conf plus the extras; None is only what is given; resolvConf \"\" is 127.0.0.1 and search ." {
    local host=$BATS_TEST_TMPDIR/host-resolv.conf kc=$BATS_TEST_TMPDIR/kc.yaml
    printf '# a comment\nnameserver 192.0.2.53\nsearch old.test\noptions rotate\nsearch host.test other.test.\nnameserver 192.0.2.54\n' >"$host"
    printf 'clusterDNS: [%s]\nclusterDomain: cluster.local\nresolvConf: %s\n' "$NET_IP" "$host" >"$kc"
    explain_resolv --kubelet-config "$kc" --dns-policy Default --dns-search extra.test --dns-option ndots:1 "$CLUSTER_FQDN/fixtures/tiny"
    printf 'search host.test other.test extra.test\nnameserver 192.0.2.53\nnameserver 192.0.2.54\noptions rotate ndots:1\n' >"$BATS_TEST_TMPDIR/want"
    assert_same_bytes "$BATS_TEST_TMPDIR/want" "$EXPLAIN_RESOLV"
    assert_equal "$(json_get .plan.isolation.network.dns.policy <<<"$output")" Default

    explain_resolv --kubelet-config "$kc" --dns-policy None --dns 10.213.$NET_N.9 --dns-search only.test "$CLUSTER_FQDN/fixtures/tiny"
    printf 'search only.test\nnameserver 10.213.%s.9\n' "$NET_N" >"$BATS_TEST_TMPDIR/want"
    assert_same_bytes "$BATS_TEST_TMPDIR/want" "$EXPLAIN_RESOLV"

    printf 'clusterDNS: [%s]\nresolvConf: ""\n' "$NET_IP" >"$kc"
    explain_resolv --kubelet-config "$kc" --dns-policy Default "$CLUSTER_FQDN/fixtures/tiny"
    printf 'search .\nnameserver 127.0.0.1\n' >"$BATS_TEST_TMPDIR/want"
    assert_same_bytes "$BATS_TEST_TMPDIR/want" "$EXPLAIN_RESOLV"

    run_pullhelper 2 explain --dns-policy None --kubelet-config "$kc" "$CLUSTER_FQDN/fixtures/tiny"
    assert_json_error usage
    run_pullhelper 2 explain --dns-policy ClusterLast --dns "$NET_IP" "$CLUSTER_FQDN/fixtures/tiny"
    assert_json_error usage
    [[ $ph_error_message == *"--dns-policy"* ]] || fail "the error does not name the flag: $ph_error_message"
}

@test "dns policy: no clusterDNS in the kubelet config falls back to Default with a warning; a bad host file is an error naming it by the kubelet config's resolvConf" {
    local host=$BATS_TEST_TMPDIR/host-resolv.conf kc=$BATS_TEST_TMPDIR/kc.yaml
    printf 'nameserver 192.0.2.53\nsearch host.test\n' >"$host"
    printf 'clusterDomain: cluster.local\nresolvConf: %s\n' "$host" >"$kc"
    explain_resolv --kubelet-config "$kc" --dns-namespace testns "$CLUSTER_FQDN/fixtures/tiny"
    printf 'search host.test\nnameserver 192.0.2.53\n' >"$BATS_TEST_TMPDIR/want"
    assert_same_bytes "$BATS_TEST_TMPDIR/want" "$EXPLAIN_RESOLV"
    assert_warned 'no cluster DNS server.*Default'
    assert_equal "$(json_get .plan.isolation.network.dns.policy <<<"$output")" Default

    printf 'nameserver\nsearch host.test\n' >"$host"
    printf 'clusterDNS: [%s]\nresolvConf: %s\n' "$NET_IP" "$host" >"$kc"
    run_pullhelper 2 explain --kubelet-config "$kc" "$CLUSTER_FQDN/fixtures/tiny"
    assert_json_error usage
    # The host file is named by the kubelet config and its key, not by the
    # path written there (a value of the caller's file: issue 22 finding 10).
    [[ $ph_error_message == *"the kubelet config $kc's resolvConf) line 1"*"without an address"* ]] || fail "the error does not name the file and line: $ph_error_message"
    [[ $ph_error_message != *"$host"* ]] || fail "the error repeats the path the kubelet config holds: $ph_error_message"
    printf 'clusterDNS: [%s]\nresolvConf: %s/missing\n' "$NET_IP" "$BATS_TEST_TMPDIR" >"$kc"
    run_pullhelper 2 explain --kubelet-config "$kc" "$CLUSTER_FQDN/fixtures/tiny"
    assert_json_error usage
    [[ $ph_error_message == *"the kubelet config $kc's resolvConf"*"no such file"* ]] || fail "the error does not name the missing file: $ph_error_message"
}

@test "dns: a search domain over 253 characters is dropped with a warning (glibc aborts on it); 253 is kept" {
    local host=$BATS_TEST_TMPDIR/host-resolv.conf kc=$BATS_TEST_TMPDIR/kc.yaml
    local keep drop
    keep=$(printf 'k%.0s' {1..249}).com drop=$(printf 'd%.0s' {1..250}).com
    printf 'nameserver 192.0.2.53\nsearch %s %s\n' "$keep" "$drop" >"$host"
    printf 'clusterDNS: [%s]\nclusterDomain: cluster.local\nresolvConf: %s\n' "$NET_IP" "$host" >"$kc"
    explain_resolv --kubelet-config "$kc" --dns-namespace testns "$CLUSTER_FQDN/fixtures/tiny"
    grep -q "^search testns.svc.cluster.local svc.cluster.local cluster.local $keep\$" "$EXPLAIN_RESOLV" ||
        fail "the 253-character domain is not kept alone: $(cat "$EXPLAIN_RESOLV")"
    assert_warned 'dropped a search domain of 254 characters'
}
