#!/usr/bin/env bats
#
# Insecure registries over plain HTTP (issue 24 item 1), as containers/image
# reaches them: docker/docker_client.go detectPropertiesHelper pings
# https://HOST/v2/ and, when that fails and the registry is insecure (TLS
# verification skipped), http://HOST/v2/, and then uses http. A registry is
# insecure by registries.conf `insecure = true`, by trust.insecure_registries
# (--insecure-registry) or by --tls-verify=false. Where plain HTTP is not
# allowed, a server answering HTTP to HTTPS is exit 4 (tls), naming those
# three ways. containerd's rules stay containerd's (ConfigureHosts: plain
# HTTP for an http:// host; one with TLS settings of its own, on a port
# other than 80, is tried over https first and falls back to plain HTTP on
# httpFallback's conditions).
#
# setup_file builds:
#   - a network namespace phhttp-PID with a veth pair to the host (host side
#     10.214.N.1/24, namespace side 10.214.N.2/24, N random per run);
#   - docker-registry inside it on 10.214.N.2 port 80, plain HTTP, with
#     htpasswd auth;
#   - the name registry.local, which resolves to 10.214.N.2 only through an
#     /etc/hosts entry: every pullhelper and skopeo here runs in a mount
#     namespace of its own (unshare -m) where /etc/hosts is a file of the
#     test's and /etc/resolv.conf names 127.0.0.1, where nothing listens, so
#     that no name is ever asked of a real nameserver.

load helpers

setup_file() {
    [[ $(id -u) == 0 ]] || skip "needs root (network namespaces, veth, mounts)"
    local cmd
    for cmd in ip nsenter unshare mount skopeo; do
        command -v "$cmd" >/dev/null || skip "$cmd not installed"
    done

    HTTP_NS="phhttp-$$"
    HTTP_VETH_HOST="phhh$$"
    HTTP_VETH_NS="phhn$$"
    export HTTP_NS HTTP_VETH_HOST HTTP_VETH_NS

    local n attempt
    for attempt in $(seq 1 50); do
        n=$((RANDOM % 250 + 3))
        if [[ -z $(ip -4 route show "10.214.$n.0/24") && -z $(ip -4 -o addr show | grep -F " 10.214.$n.") ]]; then
            break
        fi
        n=""
    done
    [[ -n $n ]] || fail "no free 10.214.N.0/24 subnet"
    HTTP_HOST_IP="10.214.$n.1"
    HTTP_IP="10.214.$n.2"
    export HTTP_HOST_IP HTTP_IP

    ip netns add "$HTTP_NS"
    ip link add "$HTTP_VETH_HOST" type veth peer name "$HTTP_VETH_NS" netns "$HTTP_NS"
    ip addr add "$HTTP_HOST_IP/24" dev "$HTTP_VETH_HOST"
    ip link set "$HTTP_VETH_HOST" up
    ip -n "$HTTP_NS" addr add "$HTTP_IP/24" dev "$HTTP_VETH_NS"
    ip -n "$HTTP_NS" link set "$HTTP_VETH_NS" up
    ip -n "$HTTP_NS" link set lo up

    PH_REGISTRY_NETNS=$HTTP_NS PH_REGISTRY_LISTEN=$HTTP_IP PH_REGISTRY_PORT=80 start_registry --no-tls
    push_fixture tiny
    TINY_DIGEST=$(registry_digest fixtures/tiny:latest)
    HTTP_AUTHFILE="$BATS_FILE_TMPDIR/http-auth.json"
    registry_auth_alias "$HTTP_AUTHFILE" registry.local registry.local:80
    export TINY_DIGEST HTTP_AUTHFILE
    registry_save http

    # The name, and a resolver that answers nothing.
    HTTP_HOSTS="$BATS_FILE_TMPDIR/hosts"
    printf '127.0.0.1\tlocalhost\n::1\tlocalhost\n%s\tregistry.local\n' "$HTTP_IP" >"$HTTP_HOSTS"
    HTTP_RESOLV="$BATS_FILE_TMPDIR/resolv.conf"
    printf 'search neutral.test\nnameserver 127.0.0.1\n' >"$HTTP_RESOLV"
    export HTTP_HOSTS HTTP_RESOLV

    # with_names CMD ARGS...: run CMD in a mount namespace of its own with
    # the test's /etc/hosts and resolv.conf (and never without them).
    WITH_NAMES="$BATS_FILE_TMPDIR/with-names"
    cat >"$WITH_NAMES" <<EOF
#!/bin/sh
# CMD ARGS... with registry.local in /etc/hosts and no real nameserver (086-insecure-http.bats)
exec unshare -m --propagation private /bin/sh -c '
mount --bind "\$1" /etc/hosts && mount --bind "\$2" /etc/resolv.conf || exit 125
grep -q registry.local /etc/hosts && ! grep -qv -e "^nameserver 127.0.0.1\\\$" -e "^search " /etc/resolv.conf || exit 125
shift 2
exec "\$@"' sh "$HTTP_HOSTS" "$HTTP_RESOLV" "\$@"
EOF
    chmod +x "$WITH_NAMES"
    PH_REAL_PULLHELPER=$(realpath -m "$PULLHELPER")
    PH_WRAPPED="$BATS_FILE_TMPDIR/pullhelper-with-names"
    printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$WITH_NAMES" "$PH_REAL_PULLHELPER" >"$PH_WRAPPED"
    chmod +x "$PH_WRAPPED"
    export WITH_NAMES PH_REAL_PULLHELPER PH_WRAPPED
}

teardown_file() {
    local pid
    if [[ -f $BATS_FILE_TMPDIR/registry-http.env ]]; then
        registry_restore http
        stop_registry
    fi
    if [[ -n ${HTTP_NS:-} ]]; then
        for pid in $(ip netns pids "$HTTP_NS" 2>/dev/null); do
            kill -KILL "$pid" 2>/dev/null
        done
        ip netns del "$HTTP_NS" 2>/dev/null
    fi
    [[ -n ${HTTP_VETH_HOST:-} ]] && ip link del "$HTTP_VETH_HOST" 2>/dev/null
    return 0
}

setup() {
    [[ $(id -u) == 0 ]] || skip "needs root"
    registry_restore http
    OUT=$BATS_TEST_TMPDIR/out
    mkdir -p "$OUT"
    PULLHELPER=$PH_WRAPPED
    OPTS=(--authfile "$HTTP_AUTHFILE" --retries 0)
}

# manifest_gets: how many manifest GETs the registry logged (from the host's
# veth address: every client here), after a barrier request.
manifest_gets() {
    registry_log_barrier >/dev/null
    grep -c "http.request.method=GET http.request.remoteaddr=\"\?${HTTP_HOST_IP//./\\.}:[0-9]*\"\? http.request.uri=\"\?/v2/fixtures/tiny/manifests/" "$REGISTRY_LOG" || true
}

# assert_pulled_over_http: the pull succeeded, DEST holds the image, it came
# from registry.local, and the registry served the manifest (it speaks only
# plain HTTP); no secret in the output.
assert_pulled_over_http() {
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$TINY_DIGEST"
    assert_equal "$(json_get '.manifests[0].digest' <"$OUT/dest/index.json")" "$TINY_DIGEST"
    assert_equal "$(json_get '.endpoints[0].host' <<<"$output")" "registry.local"
    (($(manifest_gets) > ${1:?before})) || fail "the registry logged no manifest GET from $HTTP_HOST_IP"
    [[ $stderr == *"using plain http"* ]] || fail "no log line says plain http is used: $stderr"
    assert_secret_absent "$output" "$stderr"
}

@test "harness: registry.local resolves inside the wrapper (the host's /etc/hosts lacks it); the registry speaks plain HTTP on port 80, nothing on 443" {
    run "$WITH_NAMES" getent hosts registry.local
    assert_success
    [[ $output == "$HTTP_IP"*registry.local* ]] || fail "registry.local is not $HTTP_IP inside: $output"
    # (never looked up outside: that would ask the host's nameserver)
    ! grep -qw registry.local /etc/hosts || fail "the host's /etc/hosts names registry.local"
    [[ $(_ph_http_status "http://$HTTP_IP/v2/") == 401 ]] || fail "no plain-HTTP registry on $HTTP_IP:80"
    [[ $(_ph_http_status "https://$HTTP_IP/v2/") == 000 ]] || fail "something answers https on $HTTP_IP:443"
}

@test "registries.conf insecure = true: registry.local (https :443 refused) is pulled over http :80" {
    cat >"$BATS_TEST_TMPDIR/registries.conf" <<'EOF'
[[registry]]
location = "registry.local"
insecure = true
EOF
    local before
    before=$(manifest_gets)
    run_pullhelper pull "${OPTS[@]}" --registries-conf "$BATS_TEST_TMPDIR/registries.conf" \
        registry.local/fixtures/tiny "oci:$OUT/dest"
    assert_pulled_over_http "$before"
}

@test "trust.insecure_registries and --insecure-registry: registry.local is pulled over http" {
    cat >"$BATS_TEST_TMPDIR/policy.toml" <<'EOF'
version = 1

[trust]
insecure_registries = ["registry.local"]
EOF
    local before
    before=$(manifest_gets)
    run_pullhelper pull --policy "$BATS_TEST_TMPDIR/policy.toml" "${OPTS[@]}" registry.local/fixtures/tiny "oci:$OUT/dest"
    assert_pulled_over_http "$before"

    rm -rf "$OUT/dest"
    before=$(manifest_gets)
    run_pullhelper pull --insecure-registry registry.local "${OPTS[@]}" registry.local/fixtures/tiny "oci:$OUT/dest"
    assert_pulled_over_http "$before"
    # explain says why verification is off
    run_pullhelper explain --insecure-registry registry.local "${OPTS[@]}" registry.local/fixtures/tiny
    [[ $output == *"trust.insecure_registries registry.local"* ]] || fail "explain does not name trust.insecure_registries"
}

@test "--tls-verify=false: registry.local and registry.local:80 are pulled over http" {
    local before
    before=$(manifest_gets)
    run_pullhelper pull --tls-verify=false "${OPTS[@]}" registry.local/fixtures/tiny "oci:$OUT/dest"
    assert_pulled_over_http "$before"

    # At an explicit port the https ping gets an HTTP answer; then http.
    rm -rf "$OUT/dest"
    before=$(manifest_gets)
    run_pullhelper pull --tls-verify=false "${OPTS[@]}" registry.local:80/fixtures/tiny "oci:$OUT/dest"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$TINY_DIGEST"
    (($(manifest_gets) > before)) || fail "the registry logged no manifest GET"
}

@test "not insecure: an HTTP answer to HTTPS is exit 4 (tls) naming the three ways to allow plain HTTP; nothing is sent" {
    local before
    before=$(manifest_gets)
    run_pullhelper 4 pull "${OPTS[@]}" registry.local:80/fixtures/tiny "oci:$OUT/dest"
    assert_json_error tls
    local want
    for want in "answers plain HTTP" "insecure = true" "registries.conf" "trust.insecure_registries" \
        "--insecure-registry registry.local:80" "--tls-verify=false"; do
        [[ $ph_error_message == *"$want"* ]] || fail "the message does not say '$want': $ph_error_message"
    done
    [[ ! -e $OUT/dest ]] || fail "DEST exists after a failed pull"
    assert_equal "$(manifest_gets)" "$before"
    assert_secret_absent "$output" "$stderr"

    # Without a port nothing answers on 443: a network failure, not http.
    run_pullhelper 6 pull "${OPTS[@]}" registry.local/fixtures/tiny "oci:$OUT/dest"
    assert_json_error network
    assert_equal "$(manifest_gets)" "$before"
}

@test "containerd's rules: --insecure-registry only skips verification there; the hint names an http:// host" {
    printf 'version = 2\n' >"$BATS_TEST_TMPDIR/config.toml"
    local before
    before=$(manifest_gets)
    run_pullhelper 4 pull --containerd-config "$BATS_TEST_TMPDIR/config.toml" --insecure-registry registry.local:80 \
        "${OPTS[@]}" registry.local:80/fixtures/tiny "oci:$OUT/dest"
    assert_json_error tls
    [[ $ph_error_message == *'http://registry.local:80'* ]] || fail "the hint names no http:// host: $ph_error_message"
    [[ $ph_error_message != *"insecure = true"* ]] || fail "the hint names registries.conf for a containerd endpoint: $ph_error_message"
    assert_equal "$(manifest_gets)" "$before"
}

@test "owner's check: skopeo copy --src-tls-verify=false pulls registry.local over http (detectPropertiesHelper)" {
    # containers/image's docker/docker_client.go detectPropertiesHelper:
    # ping https://registry.local/v2/ (refused), then, the registry being
    # insecure (--src-tls-verify=false), http://registry.local/v2/.
    local policy before
    policy=$(_ph_skopeo_policy)
    before=$(manifest_gets)
    run "$WITH_NAMES" timeout --kill-after=10 "$PH_SKOPEO_TIMEOUT" skopeo --policy "$policy" copy --quiet \
        --src-tls-verify=false --src-authfile "$HTTP_AUTHFILE" \
        docker://registry.local/fixtures/tiny "oci:$OUT/skopeo"
    assert_success
    (($(manifest_gets) > before)) || fail "skopeo's pull logged no manifest GET"
    # and without --src-tls-verify=false it fails as pullhelper does
    run "$WITH_NAMES" timeout --kill-after=10 "$PH_SKOPEO_TIMEOUT" skopeo --policy "$policy" copy --quiet \
        --src-authfile "$HTTP_AUTHFILE" docker://registry.local:80/fixtures/tiny "oci:$OUT/skopeo2"
    assert_failure
    [[ $output == *"server gave HTTP response to HTTPS client"* ]] || fail "skopeo failed otherwise: $output"
}

@test "containerd's rules: a hosts.toml server named http:// is asked over plain HTTP (ConfigureHosts)" {
    mkdir -p "$BATS_TEST_TMPDIR/certs.d/registry.local"
    printf 'server = "http://registry.local"\n' >"$BATS_TEST_TMPDIR/certs.d/registry.local/hosts.toml"
    cat >"$BATS_TEST_TMPDIR/config.toml" <<EOF
version = 2
[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "$BATS_TEST_TMPDIR/certs.d"
EOF
    local before
    before=$(manifest_gets)
    run_pullhelper pull --containerd-config "$BATS_TEST_TMPDIR/config.toml" "${OPTS[@]}" \
        registry.local/fixtures/tiny "oci:$OUT/dest"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$TINY_DIGEST"
    (($(manifest_gets) > before)) || fail "the registry logged no manifest GET"
    [[ $stderr != *"using plain http"* ]] || fail "an http:// host went through the insecure fallback: $stderr"
}

@test "containerd's rules: a hosts.toml server http:// with TLS settings (skip_verify, or a CA) is tried over https first (ConfigureHosts); https refused where no port is named, the same request goes over plain HTTP (httpFallback); on port 80 it stays plain HTTP" {
    local d
    for d in certs.d certs80.d certsca.d; do
        printf 'version = 2\n[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "%s"\n' \
            "$BATS_TEST_TMPDIR/$d" >"$BATS_TEST_TMPDIR/$d.toml"
    done
    mkdir -p "$BATS_TEST_TMPDIR/certs.d/registry.local" "$BATS_TEST_TMPDIR/certs80.d/registry.local:80" "$BATS_TEST_TMPDIR/certsca.d/registry.local"
    printf 'server = "http://registry.local"\nskip_verify = true\n' >"$BATS_TEST_TMPDIR/certs.d/registry.local/hosts.toml"
    # A host given a CA is verified over https, and still falls back when
    # https is refused (containerd's isPortError: no port named).
    printf 'server = "http://registry.local"\nca = "%s"\n' "$REGISTRY_CA" >"$BATS_TEST_TMPDIR/certsca.d/registry.local/hosts.toml"
    printf 'server = "http://registry.local:80"\nskip_verify = true\n' >"$BATS_TEST_TMPDIR/certs80.d/registry.local:80/hosts.toml"
    run_pullhelper explain --containerd-config "$BATS_TEST_TMPDIR/certs.d.toml" "${OPTS[@]}" registry.local/fixtures/tiny "oci:$OUT/dest"
    assert_equal "$(json_get '.plan.endpoints[0].scheme' <<<"$output")" https
    assert_equal "$(json_get '.plan.endpoints[0].tls_fallback' <<<"$output")" true
    local before
    before=$(manifest_gets)
    run_pullhelper pull --containerd-config "$BATS_TEST_TMPDIR/certs.d.toml" "${OPTS[@]}" \
        registry.local/fixtures/tiny "oci:$OUT/dest"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$TINY_DIGEST"
    (($(manifest_gets) > before)) || fail "the registry logged no manifest GET"
    [[ $(grep -c "using http from now on" <<<"$stderr") == 1 ]] || fail "want one line saying the host is asked over http from now on: $stderr"
    run_pullhelper pull --containerd-config "$BATS_TEST_TMPDIR/certsca.d.toml" "${OPTS[@]}" \
        registry.local/fixtures/tiny "oci:$OUT/destca"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$TINY_DIGEST"
    [[ $(grep -c "using http from now on" <<<"$stderr") == 1 ]] || fail "the host with a CA did not fall back once: $stderr"
    # Port 80 is not ambiguous: plain HTTP from the start, no fallback.
    run_pullhelper explain --containerd-config "$BATS_TEST_TMPDIR/certs80.d.toml" "${OPTS[@]}" registry.local:80/fixtures/tiny "oci:$OUT/dest80"
    assert_equal "$(json_get '.plan.endpoints[0].scheme' <<<"$output")" http
    run_pullhelper pull --containerd-config "$BATS_TEST_TMPDIR/certs80.d.toml" "${OPTS[@]}" \
        registry.local:80/fixtures/tiny "oci:$OUT/dest80"
    assert_json_result
    [[ $stderr != *"using http from now on"* ]] || fail "port 80 went through the fallback: $stderr"
}
