#!/usr/bin/env bats
#
# Registry mirrors (issue 12) with real servers on loopback: "img" is the
# image's registry (the upstream); "mirror" is a second docker-registry
# configured as a pull-through cache of it (distribution's proxy.remoteurl,
# its own CA and htpasswd user; the upstream, TLS with its own CA, checks no
# credential: distribution 2.8's proxy can only log in to a token-auth one).
# The cache is followed through containerd hosts.toml (with `?ns=`) and
# through a registries.conf mirror; a mirror that is down, one that answers
# 500 and one without the `resolve` capability fall back as containerd does.
# The README's fleet configurations (Spegel, Dragonfly) are checked with
# `explain`, which is run in an empty network namespace (it makes no network
# contact; there it could not).

load helpers
load faultproxy

setup_file() {
    # The upstream checks no credential: distribution 2.8's proxy cannot
    # log in to an htpasswd registry (see PH_REGISTRY_PROXY_URL).
    start_registry --no-auth
    push_fixture tiny
    registry_save img
    local up_url=$REGISTRY_URL up_ca=$REGISTRY_CA
    registry_clear
    PH_REGISTRY_PROXY_URL=$up_url PH_REGISTRY_PROXY_CA=$up_ca start_registry
    registry_save mirror

    # Warm the cache with skopeo (not pullhelper): the blobs the default
    # platform needs, stored by the cache (it stores asynchronously: wait,
    # bounded, for each blob's repository link).
    local before_up
    before_up=$(log_barrier img)
    # shellcheck disable=SC2046
    registry_skopeo copy --quiet $(registry_skopeo_opts src) \
        "docker://$REGISTRY_HOST/fixtures/tiny:latest" "dir:$BATS_FILE_TMPDIR/warm" ||
        fail "warming the cache failed: $(registry_log_tail 20)"
    local f hex n=0
    for f in "$BATS_FILE_TMPDIR"/warm/*; do
        hex=${f##*/}
        [[ $hex =~ ^[0-9a-f]{64}$ ]] || continue
        wait_for_file_match "$REGISTRY_DATA/docker/registry/v2/repositories/fixtures/tiny/_layers/sha256/$hex/link" "sha256:$hex" 30
        n=$((n + 1))
    done
    ((n > 0)) || fail "the warm-up copied no blob"
    # It is a real cache: the upstream served it those blobs.
    new_requests img "$before_up" | grep -q '"GET /v2/fixtures/tiny/blobs/sha256:' ||
        fail "the cache fetched no blob from the upstream"
    registry_restore img
}

teardown_file() {
    ctrd_stop_all
    registry_restore mirror
    stop_registry
    registry_restore img
    stop_registry
}

setup() {
    registry_restore mirror
    MIRROR_HOST=$REGISTRY_HOST MIRROR_URL=$REGISTRY_URL MIRROR_DIR=$REGISTRY_DIR MIRROR_USER=$REGISTRY_USER MIRROR_CA=$REGISTRY_CA
    registry_restore img
    ph_test_setup
    T=$BATS_TEST_TMPDIR
    UP_HOST=$REGISTRY_HOST
    UP_NS=${UP_HOST//:/%3A}
    TINY_DIGEST=$(registry_digest fixtures/tiny:latest)
}

teardown() {
    stop_all_faultproxies
    [[ -z ${BH_PID:-} ]] || _ph_stop_pid "$BH_PID" blackhole
    [[ -z ${CTRD_DIR:-} ]] || ctrd_stop "$CTRD_DIR"
    if [[ -n ${FAKE_PID:-} ]] && kill -0 "$FAKE_PID" 2>/dev/null; then
        _ph_stop_pid "$FAKE_PID" fake-mirror
    fi
}

cred() {
    "$PH_PYTHON" "$PH_TESTS_DIR/cred-files.py" "$@" || fail "cred-files.py $* failed"
}

# log_barrier SLOT: registry_log_barrier on that registry (its log's line
# count, every earlier request in it).
log_barrier() {
    registry_restore "$1"
    registry_log_barrier
}

# new_requests SLOT BEFORE: the access-log lines of SLOT's requests for
# fixtures/ after line BEFORE (a barrier first, so all finished ones are in).
new_requests() {
    registry_restore "$1"
    registry_log_barrier >/dev/null
    tail -n "+$(($2 + 1))" "$REGISTRY_LOG" | grep -E '"(GET|HEAD) /v2/fixtures/' || true
}

# assert_dest_complete LAYOUT: the pull's digest is the registry's and every
# blob of the OCI layout is there and hashes right (skopeo reads it all).
assert_dest_complete() {
    assert_equal "$(json_get .digest <<<"$output")" "$TINY_DIGEST"
    ph_skopeo copy --quiet "oci:$1" "dir:$T/check-${1##*/}" || fail "skopeo could not read $1 completely"
}

# ctrd_config FILE...: $T/config.toml (0600): the CRI credential tables of
# each cred-files.py containerd FILE (the first's version line kept), then
# config_path = $T/hosts.
ctrd_config() {
    local f first=1
    {
        for f in "$@"; do
            if ((first)); then cat "$f"; else echo; grep -v '^version' "$f"; fi
            first=0
        done
        echo
        echo '[plugins."io.containerd.grpc.v1.cri".registry]'
        echo "  config_path = \"$T/hosts\""
    } >"$T/config.toml"
    chmod 600 "$T/config.toml"
}

# hosts_conf HOST_URL CAPABILITIES [CA]: $T/config.toml (0600) whose
# config_path gives the upstream a hosts.toml: [host."HOST_URL"] with the
# capabilities (a TOML array body) and CA, then server = the upstream (its
# CA); the CRI configs give each host its own credential.
hosts_conf() {
    mkdir -p "$T/hosts/$UP_HOST"
    {
        echo "server = \"https://$UP_HOST\""
        echo "ca = \"$REGISTRY_CA\""
        echo
        echo "[host.\"$1\"]"
        echo "  capabilities = [$2]"
        [[ -z ${3:-} ]] || echo "  ca = \"$3\""
    } >"$T/hosts/$UP_HOST/hosts.toml"
    cred containerd "$T/mirror.toml" --key "$MIRROR_HOST" --user "$MIRROR_USER" --password-file "$MIRROR_DIR/password"
    cred containerd "$T/up.toml"
    ctrd_config "$T/mirror.toml" "$T/up.toml"
}

# start_fake_mirror: a plain-http server on loopback answering 500 to every
# request, logging each request line to $T/fake.log; sets FAKE_HOST.
start_fake_mirror() {
    : >"$T/fake.log"
    timeout 300 "$PH_PYTHON" -c '
import http.server, sys
log = open(sys.argv[1], "a", buffering=1)
class H(http.server.BaseHTTPRequestHandler):
    def answer(self):
        log.write("req %s %s\n" % (self.command, self.path))
        body = b"{\"errors\":[{\"code\":\"UNKNOWN\",\"message\":\"broken mirror\"}]}"
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
    do_GET = do_HEAD = answer
    def log_message(self, *a):
        log.write("msg " + (a[0] % a[1:]) + "\n")
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
with open(sys.argv[2] + ".tmp", "w") as f:
    f.write(str(s.server_address[1]))
import os
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
s.serve_forever()
' "$T/fake.log" "$T/fake.port" </dev/null 2>>"$T/fake.log" 3>&- &
    FAKE_PID=$!
    local deadline=$((SECONDS + 10))
    until [[ -s $T/fake.port ]]; do
        ((SECONDS < deadline)) || fail "the fake mirror did not start: $(cat "$T/fake.log")"
        sleep 0.05
    done
    FAKE_HOST=127.0.0.1:$(<"$T/fake.port")
}

# nonet_pullhelper ARGS...: run_pullhelper in a new, empty network
# namespace (explain must make no network contact).
nonet_pullhelper() {
    command -v unshare >/dev/null || skip "unshare not installed (util-linux)"
    printf '#!/bin/sh\nexec unshare --net "%s" "$@"\n' "$PULLHELPER" >"$T/ph-nonet"
    chmod 755 "$T/ph-nonet"
    PULLHELPER=$T/ph-nonet run_pullhelper "$@"
}

###############################################################################
# A pull-through cache

@test "cache via hosts.toml: explain lists the cache (pull, resolve; its CA and credential), then the server" {
    hosts_conf "https://$MIRROR_HOST" '"pull", "resolve"' "$MIRROR_CA"
    run_pullhelper explain --containerd-config "$T/config.toml" "$UP_HOST/fixtures/tiny"
    assert_equal "$(json_get .plan.endpoint_rules <<<"$output")" containerd
    assert_equal "$(json_get '.plan.endpoints[0].host' <<<"$output")" "$MIRROR_HOST"
    assert_equal "$(json_get '.plan.endpoints[0].capabilities' <<<"$output")" '["pull","resolve"]'
    assert_equal "$(json_get '.plan.endpoints[0].credentials[0].username' <<<"$output")" "$MIRROR_USER"
    assert_equal "$(json_get '.plan.endpoints[0].trust.ca_files' <<<"$output")" "[\"$MIRROR_CA\"]"
    assert_equal "$(json_get '.plan.endpoints[1].host' <<<"$output")" "$UP_HOST"
    assert_equal "$(json_get '.plan.endpoints[1].credentials[0].username' <<<"$output")" "$REGISTRY_USER"
    assert_equal "$(json_get '.plan.endpoints[2]' <<<"$output")" null
}

@test "cache via hosts.toml: the cache serves the pull (every request with ?ns=<registry>); the upstream serves no blob" {
    hosts_conf "https://$MIRROR_HOST" '"pull", "resolve"' "$MIRROR_CA"
    local before_m before_u
    before_m=$(log_barrier mirror)
    before_u=$(log_barrier img)
    run_pullhelper pull --containerd-config "$T/config.toml" "$UP_HOST/fixtures/tiny" "oci:$OUT/tiny"
    assert_json_result
    assert_dest_complete "$OUT/tiny"
    assert_secret_absent "$output" "$stderr"
    local m u
    m=$(new_requests mirror "$before_m")
    u=$(new_requests img "$before_u")
    grep -q "\"GET /v2/fixtures/tiny/manifests/[^ ]*?ns=$UP_NS " <<<"$m" ||
        fail "no manifest GET with ns=$UP_HOST at the cache: $m"
    grep -q "\"GET /v2/fixtures/tiny/blobs/sha256:[0-9a-f]*?ns=$UP_NS " <<<"$m" ||
        fail "no blob GET with ns=$UP_HOST at the cache: $m"
    ! grep -v "ns=$UP_NS " <<<"$m" | grep -q . || fail "a request to the cache without ns=: $m"
    ! grep -q '"GET /v2/fixtures/tiny/blobs/' <<<"$u" || fail "the upstream served blobs the cache had: $u"
}

# mirror_conf: registries.conf (under /tmp, 0600) whose mirror for the
# upstream is the cache; each host's credential in one auth file, each
# host's CA in its certs.d directory; $T/policy.toml naming them.
mirror_conf() {
    cat >"$T/registries.conf" <<EOF
[[registry]]
prefix = "$UP_HOST"
location = "$UP_HOST"
[[registry.mirror]]
location = "$MIRROR_HOST"
EOF
    cred authjson "$T/up-auth.json"
    cred authjson "$T/mirror-auth.json" --key "$MIRROR_HOST" --user "$MIRROR_USER" --password-file "$MIRROR_DIR/password"
    mirror_policy "$T" "$UP_HOST" "$REGISTRY_CA" "$T/up-auth.json" "$MIRROR_HOST" "$MIRROR_CA" "$T/mirror-auth.json"
}

@test "cache via registries.conf: the cache serves the manifest and every blob; the upstream serves no blob" {
    mirror_conf
    local before_m before_u
    before_m=$(log_barrier mirror)
    before_u=$(log_barrier img)
    run_pullhelper pull --policy "$T/policy.toml" "$UP_HOST/fixtures/tiny" "oci:$OUT/tiny"
    assert_json_result
    assert_dest_complete "$OUT/tiny"
    assert_secret_absent "$output" "$stderr"
    local m u
    m=$(new_requests mirror "$before_m")
    u=$(new_requests img "$before_u")
    grep -q '"GET /v2/fixtures/tiny/manifests/' <<<"$m" || fail "no manifest GET at the cache: $m"
    grep -q '"GET /v2/fixtures/tiny/blobs/sha256:' <<<"$m" || fail "no blob GET at the cache: $m"
    ! grep -q '"GET /v2/fixtures/tiny/blobs/' <<<"$u" || fail "the upstream served blobs the cache had: $u"
}

###############################################################################
# Fallback

@test "fallback: a mirror that is down (closed port) — the registry serves the pull" {
    local port
    port=$(_ph_free_port) || fail "no free port"
    hosts_conf "https://127.0.0.1:$port" '"pull", "resolve"'
    local before_u
    before_u=$(log_barrier img)
    run_pullhelper pull --containerd-config "$T/config.toml" "$UP_HOST/fixtures/tiny" "oci:$OUT/tiny"
    assert_json_result
    assert_dest_complete "$OUT/tiny"
    local u
    u=$(new_requests img "$before_u")
    grep -q '"GET /v2/fixtures/tiny/manifests/' <<<"$u" || fail "the registry served no manifest: $u"
    grep -q '"GET /v2/fixtures/tiny/blobs/sha256:' <<<"$u" || fail "the registry served no blob: $u"
}

@test "fallback: a mirror that answers 500 is asked, then the registry serves the pull" {
    start_fake_mirror
    hosts_conf "http://$FAKE_HOST" '"pull", "resolve"'
    local before_u
    before_u=$(log_barrier img)
    run_pullhelper pull --containerd-config "$T/config.toml" "$UP_HOST/fixtures/tiny" "oci:$OUT/tiny"
    assert_json_result
    assert_dest_complete "$OUT/tiny"
    grep -q '^req GET /v2/' "$T/fake.log" || fail "the 500 mirror was never asked: $(cat "$T/fake.log")"
    # "trying the next" is said of the mirror, never of the registry, the
    # last endpoint (issue 24 item 16).
    grep -q "trying the next.*host=$FAKE_HOST" <<<"$stderr" || fail "the fallback from the mirror is not logged: $stderr"
    ! grep "trying the next" <<<"$stderr" | grep -qv "host=$FAKE_HOST" || fail "a fallback is announced after the last endpoint: $stderr"
    local u
    u=$(new_requests img "$before_u")
    grep -q '"GET /v2/fixtures/tiny/manifests/' <<<"$u" || fail "the registry served no manifest: $u"
    grep -q '"GET /v2/fixtures/tiny/blobs/sha256:' <<<"$u" || fail "the registry served no blob: $u"
}

# pull_with_mirror_capabilities CAPABILITIES: pulls tiny by tag with the
# mirror given CAPABILITIES before the upstream (hosts_conf); sets M and U,
# the requests the mirror and the upstream saw.
pull_with_mirror_capabilities() {
    hosts_conf "https://$MIRROR_HOST" "$1" "$MIRROR_CA"
    local before_m before_u
    before_m=$(log_barrier mirror)
    before_u=$(log_barrier img)
    run_pullhelper pull --containerd-config "$T/config.toml" "$UP_HOST/fixtures/tiny:latest" "oci:$OUT/tiny"
    assert_json_result
    assert_dest_complete "$OUT/tiny"
    M=$(new_requests mirror "$before_m")
    U=$(new_requests img "$before_u")
}

@test "capabilities: a mirror without resolve is never asked for the tag (the registry resolves it); every blob comes from the mirror" {
    pull_with_mirror_capabilities '"pull"'
    local m=$M u=$U
    ! grep -q '/manifests/latest' <<<"$m" || fail "the mirror without resolve was asked for the tag: $m"
    grep -qE '"(GET|HEAD) /v2/fixtures/tiny/manifests/latest ' <<<"$u" || fail "the registry did not resolve the tag: $u"
    # Every blob then comes from the mirror (with ?ns=), none from the
    # registry. (containerd resolves with a HEAD and fetches the manifest
    # again by digest, from the mirror; pullhelper keeps the manifest the
    # registry sent for the tag, verified by its digest, and asks no one
    # for it again.)
    ! grep -q "/manifests/" <<<"$m" || fail "the mirror was asked for a manifest pullhelper already had: $m"
    grep -q "\"GET /v2/fixtures/tiny/blobs/sha256:[0-9a-f]*?ns=$UP_NS " <<<"$m" || fail "the mirror served no blob: $m"
    ! grep -q '"GET /v2/fixtures/tiny/blobs/' <<<"$u" || fail "the registry served blobs: $u"
}

@test "capabilities: a mirror with resolve but not pull is never asked at all (containerd's Resolve and Fetch ask hosts with pull only); the registry serves the pull" {
    pull_with_mirror_capabilities '"resolve"'
    local m=$M u=$U
    [[ -z $m ]] || fail "the mirror without pull was asked: $m"
    grep -qE '"(GET|HEAD) /v2/fixtures/tiny/manifests/latest ' <<<"$u" || fail "the registry did not resolve the tag: $u"
    grep -q '"GET /v2/fixtures/tiny/blobs/' <<<"$u" || fail "the registry served no blob: $u"
    run_pullhelper explain --containerd-config "$T/config.toml" "$UP_HOST/fixtures/tiny:latest" "oci:$OUT/tiny2"
    [[ $output != *"$MIRROR_HOST"* ]] || fail "the plan lists the mirror without pull: $output"
}

###############################################################################
# The README's fleet configurations, checked by explain (no network)

@test "README Spegel: hosts.toml as Spegel writes it — the node-local mirror (pull, resolve), then registry-1.docker.io" {
    mkdir -p "$T/certs.d/docker.io"
    cat >"$T/certs.d/docker.io/hosts.toml" <<'EOF'
server = 'https://registry-1.docker.io'

[host.'http://127.0.0.1:30020']
capabilities = ['pull', 'resolve']
EOF
    printf 'version = 2\n[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "%s"\n' "$T/certs.d" >"$T/config.toml"
    nonet_pullhelper explain --containerd-config "$T/config.toml" docker.io/library/nginx:1.27
    assert_equal "$(json_get .plan.endpoint_rules <<<"$output")" containerd
    assert_equal "$(json_get '.plan.endpoints[0].host' <<<"$output")" 127.0.0.1:30020
    assert_equal "$(json_get '.plan.endpoints[0].scheme' <<<"$output")" http
    assert_equal "$(json_get '.plan.endpoints[0].mirror' <<<"$output")" true
    assert_equal "$(json_get '.plan.endpoints[0].capabilities' <<<"$output")" '["pull","resolve"]'
    assert_equal "$(json_get '.plan.endpoints[1].host' <<<"$output")" registry-1.docker.io
    assert_equal "$(json_get '.plan.endpoints[1].scheme' <<<"$output")" https
    assert_equal "$(json_get '.plan.endpoints[1].source' <<<"$output")" "containerd hosts.toml server"
    assert_equal "$(json_get '.plan.endpoints[2]' <<<"$output")" null
}

@test "README Dragonfly: registries.conf mirror on loopback 127.0.0.1:65001 (insecure), then docker.io" {
    cat >"$T/registries.conf" <<'EOF'
[[registry]]
prefix = "docker.io"
location = "docker.io"

[[registry.mirror]]
location = "127.0.0.1:65001"
insecure = true
EOF
    chmod 600 "$T/registries.conf"
    nonet_pullhelper explain --registries-conf "$T/registries.conf" docker.io/library/nginx:1.27
    assert_equal "$(json_get .plan.endpoint_rules <<<"$output")" registries.conf
    assert_equal "$(json_get '.plan.endpoints[0].host' <<<"$output")" 127.0.0.1:65001
    assert_equal "$(json_get '.plan.endpoints[0].mirror' <<<"$output")" true
    assert_equal "$(json_get '.plan.endpoints[1].host' <<<"$output")" docker.io
    assert_equal "$(json_get '.plan.endpoints[2]' <<<"$output")" null
}

@test "README Dragonfly: hosts.toml with its X-Dragonfly-Registry header — explain names the header, never its value" {
    mkdir -p "$T/certs.d/docker.io"
    cat >"$T/certs.d/docker.io/hosts.toml" <<'EOF'
server = "https://registry-1.docker.io"

[host."http://127.0.0.1:65001"]
  capabilities = ["pull", "resolve"]
  [host."http://127.0.0.1:65001".header]
    X-Dragonfly-Registry = ["https://registry-1.docker.io"]
EOF
    printf 'version = 2\n[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "%s"\n' "$T/certs.d" >"$T/config.toml"
    nonet_pullhelper explain --containerd-config "$T/config.toml" docker.io/library/nginx:1.27
    assert_equal "$(json_get .plan.endpoint_rules <<<"$output")" containerd
    assert_equal "$(json_get '.plan.endpoints[0].host' <<<"$output")" 127.0.0.1:65001
    assert_equal "$(json_get '.plan.endpoints[0].scheme' <<<"$output")" http
    assert_equal "$(json_get '.plan.endpoints[0].headers' <<<"$output")" '["X-Dragonfly-Registry"]'
    assert_equal "$(json_get '.plan.endpoints[1].host' <<<"$output")" registry-1.docker.io
    assert_equal "$(json_get '.plan.endpoints[2]' <<<"$output")" null
    [[ $output != *'"X-Dragonfly-Registry":'* && $output != *'["https://registry-1.docker.io"]'* ]] ||
        fail "explain printed the header's value: $output"
}

###############################################################################
# crictl through Debian's containerd 1.6 with the same hosts directory takes
# the same endpoints (the two registries' access logs, by User-Agent)

# ctrd_require, ctrd_start, ctrd_stop, ctrd_crictl: helpers.bash.

# ctrd_hosts_start: a containerd below $T/ctrd whose CRI registry is the
# hosts_conf configuration ($T/hosts, each host's auth), then started.
ctrd_hosts_start() {
    CTRD_DIR="$T/ctrd"
    mkdir -p "$CTRD_DIR"
    # The daemon settings, without their legacy mirrors table (containerd
    # refuses it next to config_path) and without an auth table.
    cred containerd "$T/daemon.toml" --state-dir "$CTRD_DIR" --no-auth
    {
        grep -v -e '\.registry\.mirrors\.' -e '^  endpoint = ' "$T/daemon.toml"
        echo
        grep -v '^version' "$T/config.toml"
    } >"$CTRD_DIR/config.toml"
    chmod 600 "$CTRD_DIR/config.toml"
    ctrd_start "$CTRD_DIR"
}

# kinds_by UA_PREFIX LINES: "blob manifest ", "blob ", "manifest " or "":
# the kinds of fixtures/tiny requests in the access-log LINES sent with a
# User-Agent starting with UA_PREFIX.
kinds_by() {
    grep -E "\"$1[^\"]*\"\$" <<<"$2" | grep -oE '/v2/fixtures/tiny/(manifests|blobs)/' |
        sed -e 's|.*/manifests/|manifest|' -e 's|.*/blobs/|blob|' | sort -u | tr '\n' ' '
}

@test "crictl agrees (mirror up): containerd 1.6 and pullhelper both take the manifest and blobs from the cache, nothing from the registry" {
    ctrd_require
    hosts_conf "https://$MIRROR_HOST" '"pull", "resolve"' "$MIRROR_CA"
    ctrd_hosts_start
    local before_m before_u m u
    before_m=$(log_barrier mirror)
    before_u=$(log_barrier img)
    run ctrd_crictl pull "$UP_HOST/fixtures/tiny:latest"
    assert_success
    run_pullhelper pull --containerd-config "$T/config.toml" "$UP_HOST/fixtures/tiny:latest" "oci:$OUT/tiny"
    assert_json_result
    assert_dest_complete "$OUT/tiny"
    m=$(new_requests mirror "$before_m")
    u=$(new_requests img "$before_u")
    assert_equal "$(kinds_by containerd/ "$m")" "blob manifest "
    assert_equal "$(kinds_by pullhelper/ "$m")" "blob manifest "
    assert_equal "$(kinds_by containerd/ "$u")" ""
    assert_equal "$(kinds_by pullhelper/ "$u")" ""
    # Both name the registry with ?ns= at the cache.
    grep -E '"containerd/[^"]*"$' <<<"$m" | grep -q "?ns=$UP_NS " || fail "containerd sent no ns=: $m"
    grep -E '"pullhelper/[^"]*"$' <<<"$m" | grep -q "?ns=$UP_NS " || fail "pullhelper sent no ns=: $m"
}

@test "crictl agrees (mirror down): containerd 1.6 and pullhelper both fall back to the registry for the manifest and blobs" {
    ctrd_require
    local port
    port=$(_ph_free_port) || fail "no free port"
    hosts_conf "https://127.0.0.1:$port" '"pull", "resolve"'
    ctrd_hosts_start
    local before_u u
    before_u=$(log_barrier img)
    run ctrd_crictl pull "$UP_HOST/fixtures/tiny:latest"
    assert_success
    run_pullhelper pull --containerd-config "$T/config.toml" "$UP_HOST/fixtures/tiny:latest" "oci:$OUT/tiny"
    assert_json_result
    assert_dest_complete "$OUT/tiny"
    u=$(new_requests img "$before_u")
    assert_equal "$(kinds_by containerd/ "$u")" "blob manifest "
    assert_equal "$(kinds_by pullhelper/ "$u")" "blob manifest "
}

###############################################################################
# Per-host headers, per-blob fallback, retries, resume, dial_timeout, a
# refused credential — through tests/faultproxy in front of the cache (the
# proxy has its own TLS and CA and forwards everything to the cache)

# proxy_conf PROXY_NAME [HOST_LINES...]: hosts.toml whose first host is the
# fault proxy PROXY_NAME (pull, resolve; its CA; each HOST_LINE added after
# its table), then the upstream as server; the cache's credential keyed by
# the proxy's host (the proxy forwards it; PROXY_PASSWORD_FILE overrides
# the password), the upstream's by its own.
proxy_conf() {
    local name=$1 host ca l
    shift
    host=$(_fp_var "$name" HOST) && ca=$(_fp_var "$name" CA) || fail "no fault proxy $name"
    mkdir -p "$T/hosts/$UP_HOST"
    {
        echo "server = \"https://$UP_HOST\""
        echo "ca = \"$REGISTRY_CA\""
        echo
        echo "[host.\"https://$host\"]"
        echo '  capabilities = ["pull", "resolve"]'
        echo "  ca = \"$ca\""
        for l in "$@"; do echo "  $l"; done
    } >"$T/hosts/$UP_HOST/hosts.toml"
    cred containerd "$T/mirror.toml" --key "$host" --user "$MIRROR_USER" --password-file "${PROXY_PASSWORD_FILE:-$MIRROR_DIR/password}"
    cred containerd "$T/up.toml"
    ctrd_config "$T/mirror.toml" "$T/up.toml"
}

# start_cache_proxy: a fault proxy named CACHE in front of the cache,
# logging the X-Dragonfly-Registry header's value.
start_cache_proxy() {
    start_faultproxy CACHE "$MIRROR_URL" --upstream-ca "$MIRROR_CA" --log-header X-Dragonfly-Registry
}

# endpoint_field HOST FIELD: FIELD of the result's .endpoints entry for HOST
# (null when HOST served nothing).
endpoint_field() {
    "$PH_PYTHON" -c '
import json, sys
r = json.loads(sys.stdin.read())
v = [e.get(sys.argv[2]) for e in r.get("endpoints") or [] if e["host"] == sys.argv[1]]
print("null" if not v else json.dumps(v[0]))' "$1" "$2" <<<"$output"
}

# fp_status_count NAME STATUS: how many requests NAME answered with STATUS.
fp_status_count() {
    "$PH_PYTHON" -c 'import json,sys; print(sum(1 for l in open(sys.argv[1]) if json.loads(l)["status"] == int(sys.argv[2])))' \
        "$(_fp_var "$1" LOG)" "$2"
}

# tiny_layer: the digest of the first layer of fixtures/tiny for this
# platform (through an index when tiny is one).
tiny_layer() {
    registry_manifest fixtures/tiny:latest >"$T/top.json"
    local inst
    inst=$("$PH_PYTHON" -c '
import json, sys
m = json.load(open(sys.argv[1]))
if "layers" in m:
    print("")
else:
    print([x["digest"] for x in m["manifests"] if x.get("platform", {}).get("architecture") == "amd64"][0])' "$T/top.json")
    [[ -z $inst ]] || registry_manifest "fixtures/tiny@$inst" >"$T/top.json"
    "$PH_PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["layers"][0]["digest"])' "$T/top.json"
}

@test "header: a mirror that requires a header (Dragonfly's X-Dragonfly-Registry) gets it on every request and serves the pull" {
    start_cache_proxy
    faultproxy_rules CACHE "[{\"match\": {}, \"require_header\": \"X-Dragonfly-Registry=https://$UP_HOST\"}]"
    proxy_conf CACHE "[host.\"https://$FP_CACHE_HOST\".header]" "  X-Dragonfly-Registry = [\"https://$UP_HOST\"]"
    local before_u u
    before_u=$(log_barrier img)
    run_pullhelper pull --containerd-config "$T/config.toml" "$UP_HOST/fixtures/tiny" "oci:$OUT/tiny"
    assert_json_result
    assert_dest_complete "$OUT/tiny"
    assert_secret_absent "$output" "$stderr"
    (($(faultproxy_count CACHE '/v2/fixtures/tiny/blobs/') > 0)) || fail "the mirror served no blob: $(faultproxy_log CACHE)"
    assert_equal "$(fp_status_count CACHE 403)" 0
    "$PH_PYTHON" -c '
import json, sys
for l in open(sys.argv[1]):
    if json.loads(l).get("values", {}).get("X-Dragonfly-Registry") != sys.argv[2]:
        sys.exit("a request without the header: " + l)' "$FP_CACHE_LOG" "https://$UP_HOST" || fail "a request lacked the header"
    assert_equal "$(json_get '.endpoints[0].host' <<<"$output")" "$FP_CACHE_HOST"
    assert_equal "$(json_get '.endpoints[1]' <<<"$output")" null
    u=$(new_requests img "$before_u")
    ! grep -q '"GET /v2/fixtures/tiny/blobs/' <<<"$u" || fail "the upstream served blobs: $u"
}

@test "header: without the header in hosts.toml the mirror refuses (403) and the registry serves the pull" {
    start_cache_proxy
    faultproxy_rules CACHE "[{\"match\": {}, \"require_header\": \"X-Dragonfly-Registry=https://$UP_HOST\"}]"
    proxy_conf CACHE
    run_pullhelper pull --containerd-config "$T/config.toml" "$UP_HOST/fixtures/tiny" "oci:$OUT/tiny"
    assert_json_result
    assert_dest_complete "$OUT/tiny"
    (($(fp_status_count CACHE 403) > 0)) || fail "the mirror refused nothing: $(faultproxy_log CACHE)"
    assert_equal "$(endpoint_field "$FP_CACHE_HOST" blobs)" null
    (($(endpoint_field "$UP_HOST" blobs) > 0)) || fail "the registry served no blob: $output"
}

@test "per-blob fallback: the mirror lacks one layer (404) — that blob alone comes from the registry" {
    start_cache_proxy
    local layer before_u u
    layer=$(tiny_layer)
    [[ $layer == sha256:* ]] || fail "no layer digest found: $layer"
    faultproxy_rules CACHE "[{\"match\": {\"path\": \"/blobs/$layer\$\"}, \"status\": 404, \"body\": \"{\\\"errors\\\":[{\\\"code\\\":\\\"BLOB_UNKNOWN\\\"}]}\"}]"
    proxy_conf CACHE
    before_u=$(log_barrier img)
    run_pullhelper pull --containerd-config "$T/config.toml" "$UP_HOST/fixtures/tiny" "oci:$OUT/tiny"
    assert_json_result
    assert_dest_complete "$OUT/tiny"
    u=$(new_requests img "$before_u")
    assert_equal "$(grep -c '"GET /v2/fixtures/tiny/blobs/' <<<"$u")" 1
    grep -q "\"GET /v2/fixtures/tiny/blobs/$layer" <<<"$u" || fail "the registry served another blob: $u"
    assert_equal "$(endpoint_field "$UP_HOST" blobs)" 1
    (($(endpoint_field "$FP_CACHE_HOST" blobs) >= 1)) || fail "the mirror served no blob: $output"
    # every manifest still came from the mirror
    assert_equal "$(endpoint_field "$UP_HOST" manifests)" 0
}

@test "fallback: a mirror whose credential is refused (401) is passed over; the registry serves the pull" {
    start_cache_proxy
    printf 'not-the-password' >"$T/wrong-password"
    PROXY_PASSWORD_FILE=$T/wrong-password proxy_conf CACHE
    local before_u u
    before_u=$(log_barrier img)
    run_pullhelper pull --containerd-config "$T/config.toml" "$UP_HOST/fixtures/tiny" "oci:$OUT/tiny"
    assert_json_result
    assert_dest_complete "$OUT/tiny"
    assert_secret_absent "$output" "$stderr"
    (($(fp_status_count CACHE 401) > 0)) || fail "the mirror never refused: $(faultproxy_log CACHE)"
    u=$(new_requests img "$before_u")
    grep -q '"GET /v2/fixtures/tiny/manifests/' <<<"$u" || fail "the registry served no manifest: $u"
    assert_equal "$(json_get '.endpoints[0].host' <<<"$output")" "$UP_HOST"
    assert_equal "$(json_get '.endpoints[1]' <<<"$output")" null
}

@test "retry per blob: the mirror answers 503 (Retry-After: 0) to the first blob request and the registry is down — the blob is asked again, the pull is one attempt" {
    start_cache_proxy
    faultproxy_rules CACHE '[{"match": {"path": "/blobs/"}, "count": 1, "status": 503, "retry_after": 0}]'
    local port
    port=$(_ph_free_port) || fail "no free port"
    proxy_conf CACHE
    # The server is a closed port: only the mirror can serve.
    sed -i "s|^server = .*|server = \"https://127.0.0.1:$port\"|" "$T/hosts/$UP_HOST/hosts.toml"
    run_pullhelper pull --containerd-config "$T/config.toml" --retry-delay 10ms "$UP_HOST/fixtures/tiny" "oci:$OUT/tiny"
    assert_json_result
    assert_dest_complete "$OUT/tiny"
    assert_equal "$(json_get .attempts <<<"$output")" 1
    assert_equal "$(fp_status_count CACHE 503)" 1
    assert_equal "$(grep -c 'request failed; retrying' <<<"$stderr")" 1
}

@test "resume: a body that breaks off mid-layer is resumed with a Range request at the offset reached" {
    start_cache_proxy
    local layer
    layer=$(tiny_layer)
    faultproxy_rules CACHE "[{\"match\": {\"path\": \"/blobs/$layer\$\", \"header\": [\"!Range\"]}, \"count\": 1, \"reset_after\": 10}]"
    proxy_conf CACHE
    run_pullhelper pull --containerd-config "$T/config.toml" "$UP_HOST/fixtures/tiny" "oci:$OUT/tiny"
    assert_json_result
    assert_dest_complete "$OUT/tiny"
    "$PH_PYTHON" -c '
import json, sys
rs = [json.loads(l)["range"] for l in open(sys.argv[1]) if json.loads(l)["range"]]
sys.exit(0 if rs == ["bytes=10-"] else "Range requests: %r" % rs)' "$FP_CACHE_LOG" ||
        fail "no single resume at byte 10: $(faultproxy_log CACHE)"
    assert_equal "$(json_get .attempts <<<"$output")" 1
}

# start_blackhole: a loopback port whose connects never complete: a
# listener with a backlog of 0 whose one queue slot is taken and never
# accepted, so the kernel drops every further SYN. Sets BH_HOST, BH_PID.
start_blackhole() {
    timeout 300 "$PH_PYTHON" -c '
import os, socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(0)
port = s.getsockname()[1]
fill = socket.create_connection(("127.0.0.1", port), timeout=5)  # takes the one slot
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(port))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
import time
time.sleep(300)  # until the test ends it (or timeout does)
' "$T/bh.port" </dev/null 3>&- &
    BH_PID=$!
    local deadline=$((SECONDS + 10))
    until [[ -s $T/bh.port ]]; do
        ((SECONDS < deadline)) || fail "the blackhole did not start"
        sleep 0.05
    done
    BH_HOST=127.0.0.1:$(<"$T/bh.port")
}

@test "dial_timeout: a mirror whose connects hang costs its dial_timeout (1s), not containerd's 30s default" {
    start_blackhole
    mkdir -p "$T/hosts/$UP_HOST"
    {
        echo "server = \"https://$UP_HOST\""
        echo "ca = \"$REGISTRY_CA\""
        echo
        echo "[host.\"https://$BH_HOST\"]"
        echo '  capabilities = ["pull", "resolve"]'
        echo '  dial_timeout = "1s"'
    } >"$T/hosts/$UP_HOST/hosts.toml"
    cred containerd "$T/up.toml"
    ctrd_config "$T/up.toml"
    run_pullhelper explain --containerd-config "$T/config.toml" "$UP_HOST/fixtures/tiny"
    assert_equal "$(json_get '.plan.endpoints[0].dial_timeout' <<<"$output")" 1s
    # --timeout 25s: with the 30s default the first connect alone would
    # outlast the pull (exit 6); with 1s each request moves on at once.
    run_pullhelper pull --containerd-config "$T/config.toml" --timeout 25s "$UP_HOST/fixtures/tiny" "oci:$OUT/tiny"
    assert_json_result
    assert_dest_complete "$OUT/tiny"
    assert_equal "$(json_get '.endpoints[0].host' <<<"$output")" "$UP_HOST"
    assert_equal "$(json_get '.endpoints[1]' <<<"$output")" null
}

@test "dial_timeout: an invalid value makes containerd ignore hosts.toml (its certificate files only): pullhelper does the same and warns, naming the file" {
    mkdir -p "$T/hosts/$UP_HOST"
    printf 'server = "https://%s"\n[host."https://127.0.0.1:1"]\n  dial_timeout = "soon"\n' "$UP_HOST" >"$T/hosts/$UP_HOST/hosts.toml"
    printf 'version = 2\n[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "%s"\n' "$T/hosts" >"$T/config.toml"
    run_pullhelper explain --containerd-config "$T/config.toml" "$UP_HOST/fixtures/tiny"
    assert_equal "$(json_get '.plan.endpoints[0].source' <<<"$output")" "containerd default"
    assert_equal "$(json_get '.plan.endpoints[1]' <<<"$output")" null
    # The key and the kind of error, not the value: hosts.toml may be a
    # symlink to a root-only file, whose values are not repeated.
    json_get '.plan.warnings' <<<"$output" | grep -F "$T/hosts/$UP_HOST/hosts.toml" | grep -q 'dial_timeout: time: invalid duration' ||
        fail "no warning naming the file and the key: $output"
}

# upstream_proxy_conf PASSWORD_FILE: hosts.toml whose first host is a closed
# port (a mirror that is down) and whose server is the fault proxy UPP in
# front of the upstream, which refuses (401, a Basic challenge) every
# request without the upstream's right credential; the server's
# credential is read from PASSWORD_FILE.
upstream_proxy_conf() {
    local port good
    port=$(_ph_free_port) || fail "no free port"
    good=$({ printf '%s:' "$REGISTRY_USER"; tr -d '\n' <"$REGISTRY_DIR/password"; } | base64 -w0)
    faultproxy_rules UPP "[{\"match\": {}, \"require_header\": \"Authorization=Basic $good\", \"status\": 401, \"headers\": {\"WWW-Authenticate\": \"Basic realm=\\\"up\\\"\"}}]"
    mkdir -p "$T/hosts/$UP_HOST"
    {
        echo "server = \"https://$FP_UPP_HOST\""
        echo "ca = \"$FP_UPP_CA\""
        echo
        echo "[host.\"https://127.0.0.1:$port\"]"
        echo '  capabilities = ["pull", "resolve"]'
    } >"$T/hosts/$UP_HOST/hosts.toml"
    cred containerd "$T/up.toml" --key "$FP_UPP_HOST" --password-file "$1"
    ctrd_config "$T/up.toml"
}

@test "credentials: behind a mirror that is down, the registry's own credential (configs.\"SERVER\".auth) reaches it and pulls; a wrong one is exit 3 naming it" {
    start_faultproxy UPP "$REGISTRY_URL" --upstream-ca "$REGISTRY_CA"
    upstream_proxy_conf "$REGISTRY_DIR/password"
    run_pullhelper pull --containerd-config "$T/config.toml" "$UP_HOST/fixtures/tiny" "oci:$OUT/tiny"
    assert_json_result
    assert_dest_complete "$OUT/tiny"
    assert_equal "$(json_get '.endpoints[0].host' <<<"$output")" "$FP_UPP_HOST"
    assert_equal "$(json_get '.credential.key' <<<"$output")" "configs.\"$FP_UPP_HOST\".auth"
    (($(fp_status_count UPP 401) > 0)) || fail "the server never challenged: $(faultproxy_log UPP)"
    printf 'not-the-password' >"$T/wrong-password"
    upstream_proxy_conf "$T/wrong-password"
    run_pullhelper 3 pull --containerd-config "$T/config.toml" "$UP_HOST/fixtures/tiny" "oci:$OUT/tiny2"
    assert_json_error unauthorized
    [[ $ph_error_message == *"refused every matching credential"*"configs.\\\"$FP_UPP_HOST\\\".auth"*"$REGISTRY_USER"* ]] ||
        fail "the refused credential is not named: $ph_error_message"
    assert_secret_absent "$output" "$stderr"
    [[ ! -e $OUT/tiny2 ]] || fail "DEST was created"
    assert_no_staging "$OUT"
}

@test "short names with containerd rules: nginx:1.27 is docker.io/library/nginx:1.27 (the CRI's normalisation), through the Spegel hosts.toml" {
    mkdir -p "$T/certs.d/docker.io"
    printf "server = 'https://registry-1.docker.io'\n[host.'http://127.0.0.1:30020']\ncapabilities = ['pull', 'resolve']\n" >"$T/certs.d/docker.io/hosts.toml"
    printf 'version = 2\n[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "%s"\n' "$T/certs.d" >"$T/config.toml"
    # A registries.conf whose short-name rules would say otherwise: not read
    # with containerd rules.
    printf 'unqualified-search-registries = ["registry.example"]\n' >"$T/registries.conf"
    nonet_pullhelper explain --containerd-config "$T/config.toml" --registries-conf "$T/registries.conf" nginx:1.27
    assert_equal "$(json_get .plan.reference <<<"$output")" docker.io/library/nginx:1.27
    assert_equal "$(json_get '.plan.endpoints[0].host' <<<"$output")" 127.0.0.1:30020
    # Without containerd rules the registries.conf rules apply.
    nonet_pullhelper explain --registries-conf "$T/registries.conf" nginx:1.27
    assert_equal "$(json_get .plan.reference <<<"$output")" registry.example/nginx:1.27
}
