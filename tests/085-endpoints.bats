#!/usr/bin/env bats
#
# Per-host endpoints, credentials and trust (the restructure issue): a pull
# talks to several hosts (a containerd hosts.toml server, registries.conf
# mirrors) and each gets its own credential and certificates. Two real
# registries on loopback, each with its own CA and its own htpasswd user:
# "img" is the image's registry, "other" serves the same image as a
# hosts.toml server or a registries.conf mirror. Also: the child reads no
# host configuration (every file root-only, under /tmp), and the isolated
# child sends the real version in its User-Agent.

load helpers

setup_file() {
    start_registry
    push_fixture tiny
    registry_save img
    registry_clear
    start_registry
    push_fixture tiny
    registry_save other
    registry_restore img
}

# What the signature case leaves outside bats' directories.
teardown() {
    if [[ -n ${LOOKASIDE_PID:-} ]]; then
        kill "$LOOKASIDE_PID" 2>/dev/null || true
        wait "$LOOKASIDE_PID" 2>/dev/null || true
    fi
    [[ -z ${LOOKASIDE_DIR:-} ]] || rm -rf "$LOOKASIDE_DIR"
}

teardown_file() {
    registry_restore other
    stop_registry
    registry_restore img
    stop_registry
}

setup() {
    ph_test_setup
    T=$BATS_TEST_TMPDIR
    registry_restore other
    OTHER_HOST=$REGISTRY_HOST OTHER_DIR=$REGISTRY_DIR OTHER_USER=$REGISTRY_USER OTHER_CA=$REGISTRY_CA
    registry_restore img
    REGISTRY_HOST_IMG=$REGISTRY_HOST
    TINY_DIGEST=$(registry_digest fixtures/tiny:latest)
}

cred() {
    "$PH_PYTHON" "$PH_TESTS_DIR/cred-files.py" "$@" || fail "cred-files.py $* failed"
}

# manifest_gets img|other: how many manifest GETs that registry has logged,
# after a barrier request (so everything before it is in the log).
manifest_gets() {
    registry_restore "$1"
    registry_log_barrier >/dev/null
    grep -c 'http.request.method=GET http.request.remoteaddr=[^ ]* http.request.uri="\?/v2/fixtures/tiny/manifests/' "$REGISTRY_LOG" || true
    registry_restore img
}

# no_secrets TEXT...: neither registry's password (or auth field) is in TEXT.
no_secrets() {
    registry_restore other
    assert_secret_absent "$@"
    registry_restore img
    assert_secret_absent "$@"
}

# json_len PATH: the length of the JSON array at PATH of $output.
json_len() {
    json_get "$1" <<<"$output" | "$PH_PYTHON" -c 'import json, sys; print(len(json.load(sys.stdin)))'
}

# containerd_hosts_server: $T/config.toml whose config_path directory gives
# the image's registry a hosts.toml with server = the other registry (its CA
# in hosts.toml), and CRI configs for both hosts: the other registry's
# right credential and a wrong one for the image's registry.
containerd_hosts_server() {
    mkdir -p "$T/hosts/$REGISTRY_HOST"
    cat >"$T/hosts/$REGISTRY_HOST/hosts.toml" <<EOF
server = "https://$OTHER_HOST"
ca = "$OTHER_CA"
EOF
    cred containerd "$T/other.toml" --key "$OTHER_HOST" --user "$OTHER_USER" --password-file "$OTHER_DIR/password"
    cred containerd "$T/img.toml" --wrong
    {
        cat "$T/other.toml"
        echo
        grep -v '^version' "$T/img.toml"
        echo
        echo '[plugins."io.containerd.grpc.v1.cri".registry]'
        echo "  config_path = \"$T/hosts\""
    } >"$T/config.toml"
    chmod 600 "$T/config.toml"
}

@test "hosts.toml server: explain lists the server endpoint with its own credential and CA; the image's registry is not an endpoint" {
    containerd_hosts_server
    run_pullhelper explain --containerd-config "$T/config.toml" "$REGISTRY_HOST/fixtures/tiny"
    no_secrets "$output" "$stderr"
    assert_equal "$(json_get .plan.endpoint_rules <<<"$output")" containerd
    assert_equal "$(json_len .plan.endpoints)" 1
    assert_equal "$(json_get .plan.endpoints[0].host <<<"$output")" "$OTHER_HOST"
    assert_equal "$(json_get .plan.endpoints[0].source <<<"$output")" "containerd hosts.toml server"
    assert_equal "$(json_get .plan.endpoints[0].credentials[0].key <<<"$output")" "configs.\"$OTHER_HOST\".auth"
    assert_equal "$(json_get .plan.endpoints[0].credentials[0].username <<<"$output")" "$OTHER_USER"
    assert_equal "$(json_get .plan.endpoints[0].trust.ca_files <<<"$output")" "[\"$OTHER_CA\"]"
}

@test "hosts.toml server: the pull goes to the server with the server's credential and CA; the image's registry sees nothing" {
    containerd_hosts_server
    local before_img before_other
    before_img=$(manifest_gets img)
    before_other=$(manifest_gets other)
    run_pullhelper pull --containerd-config "$T/config.toml" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/tiny"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$TINY_DIGEST"
    assert_equal "$(json_get .credential.key <<<"$output")" "configs.\"$OTHER_HOST\".auth"
    no_secrets "$output" "$stderr"
    (($(manifest_gets other) > before_other)) || fail "the server registry served no manifest"
    assert_equal "$(manifest_gets img)" "$before_img"
    # As containerd does, every request to a host other than the image's
    # registry names it: ?ns=<registry> (URL-encoded).
    registry_restore other
    grep -q "http.request.uri=\"\?/v2/fixtures/tiny/manifests/[^ ]*?ns=${REGISTRY_HOST_IMG//:/%3A}" "$REGISTRY_LOG" ||
        fail "no manifest request with ns=$REGISTRY_HOST_IMG: $(grep -o 'http.request.uri=[^ ]*manifests[^ ]*' "$REGISTRY_LOG" | sort -u | head -5)"
    registry_restore img
}

@test "hosts.toml server: the image registry's credential is never offered to the server (a server without its own credential refuses: exit 3)" {
    containerd_hosts_server
    # Only the image's registry has a (right) credential now.
    cred containerd "$T/img-right.toml"
    {
        cat "$T/img-right.toml"
        echo
        echo '[plugins."io.containerd.grpc.v1.cri".registry]'
        echo "  config_path = \"$T/hosts\""
    } >"$T/config.toml"
    run_pullhelper 3 pull --containerd-config "$T/config.toml" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/tiny"
    assert_json_error unauthorized
    [[ ! -e $OUT/tiny ]] || fail "DEST was written"
}

# mirror_conf: a registries.conf (0600, under /tmp) whose mirror for the
# image's registry is the other registry; an auth file with each host's own
# credential (the mirror's is wrong with --wrong-mirror); per-host
# certificate directories with each registry's own CA (0700).
mirror_conf() {
    cat >"$T/registries.conf" <<EOF
[[registry]]
prefix = "$REGISTRY_HOST"
location = "$REGISTRY_HOST"
[[registry.mirror]]
location = "$OTHER_HOST"
EOF
    local wrong=()
    [[ ${1:-} == --wrong-mirror ]] && wrong=(--wrong)
    cred authjson "$T/img-auth.json"
    cred authjson "$T/other-auth.json" --key "$OTHER_HOST" --user "$OTHER_USER" --password-file "$OTHER_DIR/password" "${wrong[@]}"
    mirror_policy "$T" "$REGISTRY_HOST" "$REGISTRY_CA" "$T/img-auth.json" "$OTHER_HOST" "$OTHER_CA" "$T/other-auth.json"
}

@test "registries.conf mirror: explain lists the mirror first with its own credential and certificate directory, then the registry" {
    mirror_conf
    run_pullhelper explain --policy "$T/policy.toml" "$REGISTRY_HOST/fixtures/tiny"
    no_secrets "$output" "$stderr"
    assert_equal "$(json_get .plan.endpoint_rules <<<"$output")" registries.conf
    assert_equal "$(json_get .plan.endpoints[0].host <<<"$output")" "$OTHER_HOST"
    assert_equal "$(json_get .plan.endpoints[0].mirror <<<"$output")" true
    assert_equal "$(json_get .plan.endpoints[0].credentials[0].username <<<"$output")" "$OTHER_USER"
    assert_equal "$(json_get .plan.endpoints[0].trust.cert_dir <<<"$output")" "$T/certs.d/$OTHER_HOST"
    assert_equal "$(json_get .plan.endpoints[1].host <<<"$output")" "$REGISTRY_HOST"
    assert_equal "$(json_get .plan.endpoints[1].credentials[0].username <<<"$output")" "$REGISTRY_USER"
    assert_equal "$(json_get .plan.endpoints[1].trust.cert_dir <<<"$output")" "$T/certs.d/$REGISTRY_HOST"
}

@test "registries.conf mirror: the mirror serves the pull with its own credential and CA (files root-only under /tmp); the registry sees nothing" {
    mirror_conf
    local before_img before_other
    before_img=$(manifest_gets img)
    before_other=$(manifest_gets other)
    run_pullhelper pull --policy "$T/policy.toml" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/tiny"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$TINY_DIGEST"
    no_secrets "$output" "$stderr"
    (($(manifest_gets other) > before_other)) || fail "the mirror served no manifest"
    assert_equal "$(manifest_gets img)" "$before_img"
}

@test "registries.conf mirror: a mirror that refuses its (wrong) credential falls back to the registry with the registry's own" {
    mirror_conf --wrong-mirror
    local before_img
    before_img=$(manifest_gets img)
    run_pullhelper pull --policy "$T/policy.toml" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/tiny"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$TINY_DIGEST"
    (($(manifest_gets img) > before_img)) || fail "the registry was not asked after the mirror refused"
}

@test "the child reads no host configuration: a signature policy that only this run's root-only file allows, under /tmp" {
    mirror_conf
    cat >"$T/sig.json" <<EOF
{"default": [{"type": "reject"}],
 "transports": {"docker": {"$REGISTRY_HOST": [{"type": "insecureAcceptAnything"}]}}}
EOF
    chmod 600 "$T/sig.json"
    run_pullhelper pull --policy "$T/policy.toml" --signature-policy "$T/sig.json" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/tiny"
    assert_json_result
    # The same file rejecting this registry is honoured too.
    sed -i "s|\"$REGISTRY_HOST\": \[{\"type\": \"insecureAcceptAnything\"}\]|\"$REGISTRY_HOST\": [{\"type\": \"reject\"}]|" "$T/sig.json"
    run_pullhelper 8 pull --policy "$T/policy.toml" --signature-policy "$T/sig.json" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/tiny2"
    assert_json_error verification
}

# gpg_key NAME DIR: a throwaway OpenPGP key (GNUPGHOME=DIR), its public
# key exported to DIR/pub.gpg; prints its fingerprint.
gpg_key() {
    local name=$1 dir=$2
    mkdir -p -m 700 "$dir"
    GNUPGHOME=$dir gpg --batch --quiet --pinentry-mode loopback --passphrase '' \
        --quick-gen-key "$name <$name@example.com>" default default never 2>/dev/null || return 1
    GNUPGHOME=$dir gpg --batch --quiet --export "$name@example.com" >"$dir/pub.gpg" || return 1
    GNUPGHOME=$dir gpg --batch --with-colons --list-keys "$name@example.com" | awk -F: '/^fpr:/ {print $10; exit}'
}

# in_etc_containers ARGS...: run ARGS (run --separate-stderr) in a private
# mount namespace whose /etc/containers is $T/etc-containers.
in_etc_containers() {
    echo "\$ (unshare -m, /etc/containers = $T/etc-containers) $*"
    run --separate-stderr unshare -m sh -c 'mount --bind "$1" /etc/containers && shift && exec "$@"' \
        sh "$T/etc-containers" timeout --kill-after=10 "$PH_TIMEOUT" "$@"
    echo "$output"
    echo "[stderr] $stderr"
}

@test "signature policy: a signedBy keyPath in a directory only root can read, under /tmp, is read by the parent: a signed image pulls into oci:, another key rejects it (exit 8), another tag of it is refused and its digest accepted, an http lookaside is read while the registry is verified, and a file:// lookaside only root can read is handed over" {
    skip_if_not_root "bind-mounting over /etc/containers needs root"
    skip_unless_cmd unshare "needed for a private mount namespace"
    skip_unless_cmd gpg "signs the image"
    skip_unless_cmd skopeo "signs the image (standalone-sign)"
    [[ -d /etc/containers ]] || skip "no /etc/containers to stand in for"
    local fpr other la sigdir key
    fpr=$(gpg_key signer "$T/gnupg") && [[ -n $fpr ]] || skip "gpg cannot make a key here"
    other=$(gpg_key other "$T/gnupg-other") && [[ -n $other ]] || skip "gpg cannot make a key here"
    # The keys the policies name: root's, in a 0700 directory under /tmp
    # (the child sees a private /tmp and runs as another uid).
    mkdir -m 700 "$T/rootonly"
    cp "$T/gnupg/pub.gpg" "$T/rootonly/pub.gpg"
    cp "$T/gnupg-other/pub.gpg" "$T/rootonly/other.gpg"
    chmod 600 "$T/rootonly/"*.gpg
    # The signature, in a lookaside directory the child can read (outside
    # /tmp), named by registries.d in a private mount namespace: the host's
    # /etc/containers is not changed.
    registry_manifest fixtures/tiny:latest >"$T/manifest.json"
    la=$(mktemp -d /var/tmp/pullhelper-lookaside.XXXXXX)
    sigdir="$la/fixtures/tiny@sha256=${TINY_DIGEST#sha256:}"
    mkdir -p "$sigdir"
    if ! GNUPGHOME=$T/gnupg skopeo standalone-sign "$T/manifest.json" "$REGISTRY_HOST/fixtures/tiny:latest" "$fpr" -o "$sigdir/signature-1"; then
        rm -rf "$la"
        fail "skopeo standalone-sign failed"
    fi
    chmod -R a+rX "$la"
    cp -a /etc/containers "$T/etc-containers"
    mkdir -p "$T/etc-containers/registries.d"
    printf 'docker:\n  %s:\n    lookaside: file://%s\n' "$REGISTRY_HOST" "$la" >"$T/etc-containers/registries.d/pullhelper-test.yaml"
    for key in pub other; do
        cat >"$T/sig-$key.json" <<EOF
{"default": [{"type": "reject"}],
 "transports": {"docker": {"$REGISTRY_HOST/fixtures/tiny": [{"type": "signedBy", "keyType": "GPGKeys", "keyPath": "$T/rootonly/$key.gpg"}]}}}
EOF
        chmod 600 "$T/sig-$key.json"
    done
    LOOKASIDE_DIR=$la # teardown removes it (outside /tmp: the child must see it)
    in_etc_containers "$PULLHELPER" pull "${PH_OPTS[@]}" --signature-policy "$T/sig-pub.json" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/tiny"
    assert_equal "$status" 0
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$TINY_DIGEST"
    # Another key: the signature is checked, not skipped.
    in_etc_containers "$PULLHELPER" pull "${PH_OPTS[@]}" --signature-policy "$T/sig-other.json" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/tiny2"
    assert_equal "$status" 8
    assert_json_error verification
    [[ ! -e $OUT/tiny2 ]] || fail "DEST was committed"

    # The image is judged as requested (containers/image's copy from
    # docker://IMAGE): the signature claims :latest, so the same image by
    # another tag is refused, and by its digest accepted
    # (matchRepoDigestOrExact).
    push_fixture tiny fixtures/tiny:other
    in_etc_containers "$PULLHELPER" pull "${PH_OPTS[@]}" --signature-policy "$T/sig-pub.json" "$REGISTRY_HOST/fixtures/tiny:other" "oci:$OUT/tiny3"
    assert_equal "$status" 8
    assert_json_error verification
    in_etc_containers "$PULLHELPER" pull "${PH_OPTS[@]}" --signature-policy "$T/sig-pub.json" "$REGISTRY_HOST/fixtures/tiny@$TINY_DIGEST" "oci:$OUT/tiny4"
    assert_equal "$status" 0
    assert_json_result

    # The same lookaside over plain http while the registry is verified
    # over https: read as containers/image reads it, with no credential.
    local port
    mkfifo "$T/port"
    exec {fd}<>"$T/port"
    "$PH_PYTHON" - "$la" "$T/port" <<'PY' &
import functools, http.server, sys
h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), h)
with open(sys.argv[2], "w") as f:
    f.write("%d\n" % s.server_address[1])
s.serve_forever()
PY
    LOOKASIDE_PID=$!
    read -r -t 120 -u "$fd" port || fail "the lookaside server did not start"
    exec {fd}<&-
    printf 'docker:\n  %s:\n    lookaside: http://127.0.0.1:%s\n' "$REGISTRY_HOST" "$port" >"$T/etc-containers/registries.d/pullhelper-test.yaml"
    in_etc_containers "$PULLHELPER" pull "${PH_OPTS[@]}" --signature-policy "$T/sig-pub.json" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/tiny5"
    assert_equal "$status" 0
    assert_json_result

    # A file:// lookaside only root can read, under /tmp (the copy, another
    # uid with a private /tmp, could not read it): the parent reads the
    # repository's signatures and hands them over.
    mkdir -m 700 "$T/rootsigs"
    cp -a "$la/." "$T/rootsigs/"
    chmod -R go-rwx "$T/rootsigs"
    printf 'docker:\n  %s:\n    lookaside: file://%s\n' "$REGISTRY_HOST" "$T/rootsigs" >"$T/etc-containers/registries.d/pullhelper-test.yaml"
    in_etc_containers "$PULLHELPER" pull "${PH_OPTS[@]}" --signature-policy "$T/sig-pub.json" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/tiny6"
    assert_equal "$status" 0
    assert_json_result
}

@test "User-Agent: the isolated child sends pullhelper/VERSION, the version the binary reports" {
    local version
    version=$("$PULLHELPER" version | json_get .version)
    [[ -n $version && $version != null ]] || fail "no version"
    registry_log_barrier >/dev/null
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/tiny"
    assert_json_result
    registry_log_barrier >/dev/null
    grep -q "http.request.uri=/v2/fixtures/tiny/manifests/[^ ]* http.request.useragent=\"\\?pullhelper/$version" "$REGISTRY_LOG" ||
        fail "no manifest request with User-Agent pullhelper/$version in $REGISTRY_LOG: $(grep -o 'useragent=[^ ]*' "$REGISTRY_LOG" | sort | uniq -c)"
    ! grep -q 'useragent="\?pullhelper/dev' "$REGISTRY_LOG" || fail "a request sent pullhelper/dev"
}

@test "signature policy: the parent judges the image again — a child that ignored a rejecting policy commits nothing (exit 8)" {
    cat >"$T/sig.json" <<EOF2
{"default": [{"type": "insecureAcceptAnything"}],
 "transports": {"docker": {"$REGISTRY_HOST": [{"type": "reject"}]}}}
EOF2
    PULLHELPER_HOSTILE=after-drop:ignore-signature-policy PULLHELPER=$PULLHELPER_HOSTILE_BIN \
        run_pullhelper 8 pull "${PH_OPTS[@]}" --signature-policy "$T/sig.json" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/tiny"
    assert_json_error verification
    [[ $stderr == *"hostile: running ignore-signature-policy"* ]] || fail "the hostile action did not run"
    [[ $(json_get .error.message <<<"$output") == *"rejects"* ]] || fail "message: $output"
    [[ ! -e $OUT/tiny ]] || fail "DEST was committed"
    assert_no_staging "$OUT"
}

# endpoint_of HOST: the result's ($output) endpoints entry for HOST as
# compact JSON, or null.
endpoint_of() {
    "$PH_PYTHON" -c '
import json, sys
r = json.loads(sys.argv[2])
m = [e for e in r.get("endpoints") or [] if e.get("host") == sys.argv[1]]
print(json.dumps(m[0], separators=(",", ":")) if m else "null")' "$1" "$output"
}

# blob_event_hosts FILE: the distinct hosts of the non-skipped layer_done
# and config_done events in the progress file FILE, one a line ("-" for none).
blob_event_hosts() {
    "$PH_PYTHON" -c '
import json, sys
hosts = set()
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e["type"] in ("layer_done", "config_done") and not e.get("skipped"):
        hosts.add(e.get("host") or "-")
print("\n".join(sorted(hosts)))' "$1"
}

@test "registries.conf mirror: the result's endpoints name the mirror as serving the manifest and every blob (bytes > 0), and the progress events name it" {
    mirror_conf
    run_pullhelper pull --policy "$T/policy.toml" --progress-fd 3 "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/tiny" 3>"$T/progress.jsonl"
    assert_json_result
    assert_equal "$(json_get .endpoints[0].host <<<"$output")" "$OTHER_HOST"
    (($(json_get .endpoints[0].manifests <<<"$output") >= 1)) || fail "the mirror served no manifest: $(json_get .endpoints <<<"$output")"
    (($(json_get .endpoints[0].blobs <<<"$output") >= 2)) || fail "the mirror served fewer than config + layer: $(json_get .endpoints <<<"$output")"
    (($(json_get .endpoints[0].bytes <<<"$output") > 0)) || fail "no bytes from the mirror: $(json_get .endpoints <<<"$output")"
    assert_equal "$(endpoint_of "$REGISTRY_HOST")" null
    assert_equal "$(json_len .endpoints)" 1
    # Every blob fetched shows its host in its done event.
    assert_equal "$(blob_event_hosts "$T/progress.jsonl")" "$OTHER_HOST"
}

@test "registries.conf mirror: after a refused mirror credential, the endpoints name the registry as serving the blobs and not the mirror" {
    mirror_conf --wrong-mirror
    run_pullhelper pull --policy "$T/policy.toml" --progress-fd 3 "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/tiny" 3>"$T/progress.jsonl"
    assert_json_result
    local reg
    reg=$(endpoint_of "$REGISTRY_HOST")
    [[ $reg != null ]] || fail "the registry is not an endpoint: $(json_get .endpoints <<<"$output")"
    (($(json_get .blobs <<<"$reg") >= 2)) || fail "the registry served fewer than config + layer: $reg"
    (($(json_get .bytes <<<"$reg") > 0)) || fail "no bytes from the registry: $reg"
    (($(json_get .manifests <<<"$reg") >= 1)) || fail "the registry served no manifest: $reg"
    assert_equal "$(endpoint_of "$OTHER_HOST")" null
    assert_equal "$(blob_event_hosts "$T/progress.jsonl")" "$REGISTRY_HOST"
}

@test "explain --format text: a readable summary, each endpoint once (a hosts.toml [host] equal to server is listed twice in the plan, once here) (issue 24 item 14)" {
    containerd_hosts_server
    cat >"$T/hosts/$REGISTRY_HOST/hosts.toml" <<EOF2
server = "https://$OTHER_HOST"
ca = "$OTHER_CA"

[host."https://$OTHER_HOST"]
  capabilities = ["pull", "resolve"]
  ca = "$OTHER_CA"
EOF2
    run_pullhelper explain --containerd-config "$T/config.toml" "$REGISTRY_HOST/fixtures/tiny"
    assert_equal "$(json_len .plan.endpoints)" 2
    assert_equal "$(json_get .plan.endpoints[0].host <<<"$output")" "$OTHER_HOST"
    assert_equal "$(json_get .plan.endpoints[1].host <<<"$output")" "$OTHER_HOST"
    run_pullhelper explain --format text --containerd-config "$T/config.toml" "$REGISTRY_HOST/fixtures/tiny"
    no_secrets "$output" "$stderr"
    [[ $output == "image        $REGISTRY_HOST/fixtures/tiny:latest"* ]] || fail "the summary does not start with the image: $output"
    assert_equal "$(grep -c "^  [0-9]*\. https://$OTHER_HOST" <<<"$output")" 1
    [[ $output == *"credential   containerd"*"username $OTHER_USER"* ]] || fail "the endpoint's credential is not named: $output"
    [[ $output == *"isolation    unprivileged child in cgroup: user dynamic, seccomp on"* ]] || fail "no isolation line: $output"
    run_pullhelper 2 explain --format yaml "$REGISTRY_HOST/fixtures/tiny"
    assert_json_error usage
    [[ $ph_error_message == *--format* ]] || fail "the error does not name --format: $ph_error_message"
}

@test "containerd's default host for a loopback registry (http, skip_verify) is tried over https first, as containerd 2.x's ConfigureHosts does: this TLS registry serves the pull, its credential never goes over plain http" {
    mkdir -p "$T/hosts"
    cred containerd "$T/img.toml"
    {
        cat "$T/img.toml"
        echo
        echo '[plugins."io.containerd.grpc.v1.cri".registry]'
        echo "  config_path = \"$T/hosts\""
    } >"$T/config.toml"
    chmod 600 "$T/config.toml"
    run_pullhelper explain --containerd-config "$T/config.toml" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_equal "$(json_get '.plan.endpoints[0].scheme' <<<"$output")" https
    assert_equal "$(json_get '.plan.endpoints[0].tls_fallback' <<<"$output")" true
    run_pullhelper pull --containerd-config "$T/config.toml" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$TINY_DIGEST"
    [[ $stderr != *"using http from now on"* ]] || fail "a TLS registry was asked over plain http: $stderr"
    assert_secret_absent "$output" "$stderr"
}
