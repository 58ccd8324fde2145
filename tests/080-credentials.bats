#!/usr/bin/env bats
#
# Credential sources and scoped trust (issue 7), against the TLS+htpasswd
# registry: pull secrets (raw and as Secret manifests), the node's docker
# config, a kubelet credential-provider plugin speaking the real v1 exec
# protocol (tests/fake-credential-provider.py), containerd's config.toml, a
# service-account token, containers auth.json; the try order, the exit-3
# report naming every source refused, explain, trust.ca_files, token
# rotation, and containerd compatibility (Debian's containerd 1.6 and crictl
# against the same config.toml). Issue 24: broken credential files fail
# where their owner fails (exit 2) and warn where it warns, and
# registries.conf's credential-helpers (fake docker-credential-NAME scripts
# on PATH, fake_helper) are consulted in order.
#
# The registry has two htpasswd users: $REGISTRY_USER (password in
# $REGISTRY_DIR/password) and "serviceaccount", whose password is the token in
# $SA_SECRET. Credential files are written by tests/cred-files.py, which
# reads those files itself: no secret is in argv, the environment or output.
# "Wrong" credentials are "wrong-" + the right secret, so a leaked wrong one
# is caught by the same absence checks.
#
# Every test runs with HOME, XDG_RUNTIME_DIR, XDG_CONFIG_HOME and the working
# directory in its own temporary directory, so that no default search path
# (containers auth.json, certs.d, the kubelet's cwd and $HOME) of this host
# takes part.

load helpers

# The per-node credential-provider response cache (pull.DefaultProviderCacheDir).
PROVIDER_CACHE=/run/pullhelper/credential-provider-cache

setup_file() {
    fixture tiny
    SA_SECRET="$BATS_FILE_TMPDIR/sa-token"
    (
        umask 077
        openssl rand -hex 24 >"$SA_SECRET"
    )
    export SA_SECRET
    PH_REGISTRY_EXTRA_USERS="serviceaccount=$SA_SECRET" start_registry
    push_fixture tiny
    TINY_DIGEST=$(registry_digest fixtures/tiny:latest)
    export TINY_DIGEST
}

teardown_file() {
    ctrd_stop_all
    stop_registry
    rm -rf "$PROVIDER_CACHE"
}

setup() {
    rm -rf "$PROVIDER_CACHE"
    T=$BATS_TEST_TMPDIR
    OUT="$T/out"
    mkdir -p "$OUT" "$T/home" "$T/xdg-runtime" "$T/xdg-config" "$T/cwd"
    export HOME="$T/home" XDG_RUNTIME_DIR="$T/xdg-runtime" XDG_CONFIG_HOME="$T/xdg-config"
    unset REGISTRY_AUTH_FILE DOCKER_CONFIG
    cd "$T/cwd" || return
    PH_OPTS=(--cert-dir "$REGISTRY_CERT_DIR")
    CTRD_DIR=""
}

teardown() {
    if [[ -n ${CTRD_DIR:-} ]]; then
        ctrd_stop "$CTRD_DIR"
    fi
    rm -rf "$PROVIDER_CACHE"
}

###############################################################################
# Helpers of this file

# cred FORMAT DST [OPTIONS]: write a credential file (tests/cred-files.py).
cred() {
    "$PH_PYTHON" "$PH_TESTS_DIR/cred-files.py" "$@" || fail "cred-files.py $* failed"
}

# assert_credential SOURCE FILE KEY USER: the last pull succeeded with exactly
# this credential and copied the pushed tiny image.
assert_credential() {
    assert_json_result || return
    assert_equal "$(json_get .credential.source <<<"$output")" "$1"
    assert_equal "$(json_get .credential.file <<<"$output")" "$2"
    assert_equal "$(json_get .credential.key <<<"$output")" "$3"
    assert_equal "$(json_get .credential.username <<<"$output")" "$4"
    assert_equal "$(json_get .digest <<<"$output")" "$TINY_DIGEST"
}

# assert_no_secrets TEXT...: none of the texts contains the registry password,
# its auth field (right or wrong) or the service-account token.
assert_no_secrets() {
    assert_secret_absent "$@" || return
    local tok bad t
    tok=$(tr -d '\n' <"$SA_SECRET")
    bad=$("$PH_PYTHON" -c '
import json, sys
print(json.load(open(sys.argv[1]))["auths"][sys.argv[2]]["auth"])' "$REGISTRY_BADAUTHFILE" "$REGISTRY_HOST")
    for t in "$@"; do
        [[ $t != *"$tok"* ]] || {
            fail "the service-account token appears in the output"
            return 1
        }
        [[ $t != *"$bad"* ]] || {
            fail "the (wrong) auth field appears in the output"
            return 1
        }
    done
}

# provider_setup [ENV_NAME=VALUE...]: a credential-provider bin dir
# ($T/provider-bin/fake-provider -> tests/fake-credential-provider.py) and a
# CredentialProviderConfig $T/provider.yaml matching $REGISTRY_HOST whose
# plugin returns the registry's credential, records its requests in
# $T/provider-requests.jsonl and gets the extra environment given.
provider_setup() {
    mkdir -p "$T/provider-bin"
    ln -sf "$PH_TESTS_DIR/fake-credential-provider.py" "$T/provider-bin/fake-provider"
    PROVIDER_RECORD="$T/provider-requests.jsonl"
    {
        cat <<EOF
apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: fake-provider
    matchImages:
      - "$REGISTRY_HOST"
    defaultCacheDuration: "10m"
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    args: ["--mode", "bats"]
    env:
      - name: FAKE_PROVIDER_PASSWORD_FILE
        value: "$REGISTRY_DIR/password"
      - name: FAKE_PROVIDER_USERNAME
        value: "$REGISTRY_USER"
      - name: FAKE_PROVIDER_RECORD
        value: "$PROVIDER_RECORD"
EOF
        local e
        for e in "$@"; do
            printf '      - name: %s\n        value: "%s"\n' "${e%%=*}" "${e#*=}"
        done
    } >"$T/provider.yaml"
    PROVIDER_OPTS=(--credential-provider-config "$T/provider.yaml" --credential-provider-bin-dir "$T/provider-bin")
}

# provider_runs: how many times the plugin ran.
provider_runs() {
    if [[ -f $PROVIDER_RECORD ]]; then
        wc -l <"$PROVIDER_RECORD"
    else
        echo 0
    fi
}

# broken_cred FORMAT MODE FILE: write (authjson, dockercfg) or append to
# (containerd, a config.toml) FILE a credential for $REGISTRY_HOST whose auth
# field is broken: MODE unpadded (base64 without its padding: containers/image
# and containerd decode padded base64 only) or nocolon (the base64 of the
# password alone). The password is read from $REGISTRY_DIR/password here.
broken_cred() {
    "$PH_PYTHON" - "$@" "$REGISTRY_HOST" "$REGISTRY_USER" "$REGISTRY_DIR/password" <<'PY' || fail "broken_cred $* failed"
import base64, json, os, sys
fmt, mode, dst, host, user, pwfile = sys.argv[1:7]
pw = open(pwfile).read().strip()
if mode == "unpadded":
    s = user + ":" + pw
    while len(s) % 3 == 0:
        s += "x"
    field = base64.b64encode(s.encode()).decode().rstrip("=")
elif mode == "nocolon":
    field = base64.b64encode(pw.encode()).decode()
else:
    sys.exit("mode " + mode)
flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if fmt == "containerd" else os.O_TRUNC)
with os.fdopen(os.open(dst, flags, 0o600), "w") as f:
    if fmt == "authjson":
        json.dump({"auths": {host: {"auth": field}}}, f)
    elif fmt == "dockercfg":
        json.dump({"https://" + host + "/v1/": {"auth": field, "email": "e@example.com"}}, f)
    elif fmt == "containerd":
        f.write('\n[plugins."io.containerd.grpc.v1.cri".registry.configs.%s.auth]\nauth = %s\n' % (json.dumps(host), json.dumps(field)))
    else:
        sys.exit("format " + fmt)
PY
}

# auth_field FILE KEY: the auth field of "auths"."KEY" in FILE (to check
# that a broken one is not repeated).
auth_field() {
    "$PH_PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["auths"][sys.argv[2]]["auth"])' "$1" "$2"
}

# fake_helper NAME MODE: a docker-credential-NAME in $T/bin (put first on
# PATH) that appends "NAME REGISTRY" to $T/helper-calls for each get, then:
# MODE right answers $REGISTRY_USER and the password (read from
# $REGISTRY_DIR/password when it runs) for $REGISTRY_HOST and "credentials
# not found" for any other registry; none always "credentials not found";
# fail exits 1 with another message.
fake_helper() {
    mkdir -p "$T/bin"
    local f="$T/bin/docker-credential-$1"
    cat >"$f" <<EOF
#!/bin/sh
[ "\$1" = get ] || exit 3
read -r reg
echo "$1 \$reg" >>"$T/helper-calls"
case "$2:\$reg" in
right:$REGISTRY_HOST)
    printf '{"ServerURL":"%s","Username":"%s","Secret":"%s"}\n' "\$reg" "$REGISTRY_USER" "\$(tr -d '\n' <"$REGISTRY_DIR/password")" ;;
fail:*)
    echo "the keychain is locked" >&2
    exit 1 ;;
*)
    echo "credentials not found in native keychain"
    exit 1 ;;
esac
EOF
    chmod 755 "$f"
    case ":$PATH:" in
        *":$T/bin:"*) ;;
        *) export PATH="$T/bin:$PATH" ;;
    esac
}

# helpers_conf NAME...: $T/registries.conf (0600) whose credential-helpers
# are NAME..., in that order.
helpers_conf() {
    local list="" n
    for n in "$@"; do
        list+="${list:+, }\"$n\""
    done
    printf 'credential-helpers = [%s]\n' "$list" >"$T/registries.conf"
    chmod 600 "$T/registries.conf"
}

# containerd_key: the key pullhelper reports for a containerd configs auth.
containerd_key() {
    echo "configs.\"$REGISTRY_HOST\".auth"
}

# ---- containerd: ctrd_require, ctrd_start, ctrd_stop, ctrd_crictl (helpers.bash)

###############################################################################
# Each source on its own

@test "credentials: pull secret, raw .dockerconfigjson (username/password fields)" {
    cred dockerconfigjson "$T/secret.json" --userpass
    run_pullhelper pull "${PH_OPTS[@]}" --pull-secret "$T/secret.json" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_credential pull-secret "$T/secret.json" "$REGISTRY_HOST" "$REGISTRY_USER"
    assert_no_secrets "$output" "$stderr"
}

@test "credentials: pull secret, Secret manifest (YAML, kubernetes.io/dockerconfigjson, base64 data)" {
    cred secret-yaml "$T/regcred.yaml"
    grep -q '^type: kubernetes.io/dockerconfigjson$' "$T/regcred.yaml"
    run_pullhelper pull "${PH_OPTS[@]}" --pull-secret "$T/regcred.yaml" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_credential pull-secret "$T/regcred.yaml" "$REGISTRY_HOST" "$REGISTRY_USER"
    assert_no_secrets "$output" "$stderr"
}

@test "credentials: pull secret, legacy .dockercfg — raw, and as a JSON Secret manifest of type kubernetes.io/dockercfg" {
    cred dockercfg "$T/dockercfg"
    run_pullhelper pull "${PH_OPTS[@]}" --pull-secret "$T/dockercfg" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_credential pull-secret "$T/dockercfg" "$REGISTRY_HOST" "$REGISTRY_USER"
    assert_no_secrets "$output" "$stderr"

    cred secret-json-dockercfg "$T/legacy-secret.json"
    run_pullhelper pull "${PH_OPTS[@]}" --pull-secret "$T/legacy-secret.json" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/b"
    assert_credential pull-secret "$T/legacy-secret.json" "$REGISTRY_HOST" "$REGISTRY_USER"
    assert_no_secrets "$output" "$stderr"
}

@test "credentials: node docker config — --kubelet-docker-config DIR reads DIR/config.json; an unparseable one is skipped for CWD/config.json" {
    mkdir -p "$T/kubelet"
    cred dockerconfigjson "$T/kubelet/config.json"
    run_pullhelper pull "${PH_OPTS[@]}" --kubelet-docker-config "$T/kubelet" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_credential kubelet-node-config "$T/kubelet/config.json" "$REGISTRY_HOST" "$REGISTRY_USER"
    assert_no_secrets "$output" "$stderr"

    # The kubelet's search: the first config.json that parses wins (DIR, then
    # the working directory, $HOME/.docker, /.docker).
    echo '{"auths": ' >"$T/kubelet/config.json"
    cred dockerconfigjson "$T/cwd/config.json"
    run_pullhelper pull "${PH_OPTS[@]}" --kubelet-docker-config "$T/kubelet" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/b"
    assert_credential kubelet-node-config "$T/cwd/config.json" "$REGISTRY_HOST" "$REGISTRY_USER"
    # The kubelet logs the file it skips (ReadDockerConfigJSONFile): a warning.
    [[ $stderr == *"parsing docker config $T/kubelet/config.json: "*"skipped, as the kubelet skips it"* ]] ||
        fail "no warning names the skipped file: $stderr"

    # An auth field that does not decode fails the kubelet's decoding of the
    # file (decodeDockerConfigFieldAuth): skipped the same way, never an error.
    broken_cred authjson nocolon "$T/kubelet/config.json"
    run_pullhelper pull "${PH_OPTS[@]}" --kubelet-docker-config "$T/kubelet" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/c"
    assert_credential kubelet-node-config "$T/cwd/config.json" "$REGISTRY_HOST" "$REGISTRY_USER"
    [[ $stderr == *"parsing docker config $T/kubelet/config.json: entry \\\"$REGISTRY_HOST\\\": unable to parse auth field"*"skipped, as the kubelet skips it"* ]] ||
        fail "no warning names the skipped file and entry: $stderr"
    assert_no_secrets "$output" "$stderr"
}

@test "credentials: credential-provider plugin (v1 exec protocol): request, args, credential, per-node cache" {
    provider_setup
    run_pullhelper pull "${PH_OPTS[@]}" "${PROVIDER_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    # For a provider, .credential.file is the provider's name.
    assert_credential credential-provider fake-provider "$REGISTRY_HOST" "$REGISTRY_USER"
    assert_no_secrets "$output" "$stderr"

    # The plugin received exactly one CredentialProviderRequest for the
    # repository (the kubelet's form: no tag), with the configured args.
    assert_equal "$(provider_runs)" 1
    assert_equal "$(json_get .request <"$PROVIDER_RECORD")" \
        "{\"kind\":\"CredentialProviderRequest\",\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"image\":\"$REGISTRY_HOST/fixtures/tiny\"}"
    assert_equal "$(json_get .args <"$PROVIDER_RECORD")" '["--mode","bats"]'
    assert_equal "$(json_get .name <"$PROVIDER_RECORD")" fake-provider

    # Cached per node (cacheKeyType Registry, defaultCacheDuration 10m): the
    # next pull does not run the plugin; the cache file is private.
    run_pullhelper pull "${PH_OPTS[@]}" "${PROVIDER_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/b"
    assert_credential credential-provider fake-provider "$REGISTRY_HOST" "$REGISTRY_USER"
    assert_equal "$(provider_runs)" 1
    run stat -c '%a' "$PROVIDER_CACHE/fake-provider.json"
    assert_success
    assert_output 600
}

@test "credentials: containerd config.toml — configs.auth and configs.tls.ca_file, no --cert-dir" {
    # (Every containerd config here has mirrors."HOST".endpoint =
    # ["https://HOST"]: containerd 1.6 reaches a loopback registry without
    # one over plain http, and the test registry speaks TLS only.)
    cred containerd "$T/config.toml" --https-endpoint --ca "$REGISTRY_CA"
    run_pullhelper pull --containerd-config "$T/config.toml" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_credential containerd-config "$T/config.toml" "$(containerd_key)" "$REGISTRY_USER"
    assert_no_secrets "$output" "$stderr"

    # The CA comes from that tls table: without it, the https endpoint is
    # verified against the system pool alone, exit 4.
    cred containerd "$T/notls.toml" --https-endpoint
    run_pullhelper 4 pull --containerd-config "$T/notls.toml" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/b"
    assert_json_error tls
    [[ ! -e $OUT/b ]] || fail "DEST was created"
}

@test "credentials: service-account token as the password of user serviceaccount" {
    cred token "$T/token" --password-file "$SA_SECRET"
    run_pullhelper pull "${PH_OPTS[@]}" --service-account-token "$T/token" --service-account-registry "$REGISTRY_HOST" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_credential service-account-token "$T/token" "$REGISTRY_HOST" serviceaccount
    assert_no_secrets "$output" "$stderr"

    # A pattern for other registries: the token is not offered (anonymous).
    run_pullhelper 3 pull "${PH_OPTS[@]}" --service-account-token "$T/token" --service-account-registry '*.svc:5000' \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/b"
    assert_json_error unauthorized
    [[ $ph_error_message == *"refused anonymous access"* ]] || fail "message: $ph_error_message"
}

@test "credentials: containers auth.json (--authfile)" {
    cred authjson "$T/auth.json"
    run_pullhelper pull "${PH_OPTS[@]}" --authfile "$T/auth.json" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_credential containers-auth.json "$T/auth.json" "$REGISTRY_HOST" "$REGISTRY_USER"
    assert_no_secrets "$output" "$stderr"
}

###############################################################################
# Order: a refused credential is followed by the next one

@test "credentials: wrong pull secret, then right auth.json — the result names auth.json" {
    cred dockerconfigjson "$T/bad-secret.json" --wrong
    cred authjson "$T/auth.json"
    run_pullhelper pull "${PH_OPTS[@]}" --pull-secret "$T/bad-secret.json" --authfile "$T/auth.json" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_credential containers-auth.json "$T/auth.json" "$REGISTRY_HOST" "$REGISTRY_USER"
    # The refused one is logged by file, not by secret.
    [[ $stderr == *"refused a credential"*"$T/bad-secret.json"* ]] ||
        fail "stderr does not log the refused pull secret: $stderr"
    assert_no_secrets "$output" "$stderr"
}

@test "credentials: right service-account token and wrong containerd config — containerd's configs auth is not tried (the kubelet sent a credential)" {
    cred containerd "$T/config.toml" --https-endpoint --wrong --ca "$REGISTRY_CA"
    cred token "$T/token" --password-file "$SA_SECRET"
    run_pullhelper pull --containerd-config "$T/config.toml" \
        --service-account-token "$T/token" --service-account-registry "$REGISTRY_HOST" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_credential service-account-token "$T/token" "$REGISTRY_HOST" serviceaccount
    [[ $stderr != *"refused a credential"* ]] || fail "a credential was refused: $stderr"
    assert_no_secrets "$output" "$stderr"
}

@test "credentials: wrong pull secret and right containerd configs auth — exit 3, containerd's is never offered (registryHosts reads it only without a CRI credential)" {
    cred dockerconfigjson "$T/bad-secret.json" --wrong
    cred containerd "$T/config.toml" --https-endpoint --ca "$REGISTRY_CA"
    run_pullhelper 3 pull --containerd-config "$T/config.toml" --pull-secret "$T/bad-secret.json" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_json_error unauthorized
    local want="registry $REGISTRY_HOST refused every matching credential for $REGISTRY_HOST/fixtures/tiny:latest: "
    want+="[1] pull-secret $T/bad-secret.json key \"$REGISTRY_HOST\" user \"$REGISTRY_USER\""
    [[ $ph_error_message == "$want"* && $ph_error_message != *"[2]"* ]] || fail "error message
  got:  $ph_error_message
  want: $want"
    # Without the pull secret, the same config pulls.
    run_pullhelper pull --containerd-config "$T/config.toml" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/b"
    assert_credential containerd-config "$T/config.toml" "$(containerd_key)" "$REGISTRY_USER"
    assert_no_secrets "$output" "$stderr"
}

@test "credentials: wrong pull secret, wrong node config, right provider — the provider's is used; the later auth.json is not needed" {
    cred dockerconfigjson "$T/bad-secret.json" --wrong
    mkdir -p "$T/kubelet"
    cred dockerconfigjson "$T/kubelet/config.json" --wrong
    provider_setup
    cred authjson "$T/auth.json"
    run_pullhelper pull "${PH_OPTS[@]}" --pull-secret "$T/bad-secret.json" --kubelet-docker-config "$T/kubelet" \
        "${PROVIDER_OPTS[@]}" --authfile "$T/auth.json" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_credential credential-provider fake-provider "$REGISTRY_HOST" "$REGISTRY_USER"
    # Exactly the two before it were refused.
    assert_equal "$(grep -c 'refused a credential' <<<"$stderr")" 2
    [[ $stderr == *"$T/bad-secret.json"*"$T/kubelet/config.json"* ]] || fail "stderr: $stderr"
    assert_no_secrets "$output" "$stderr"
}

@test "credentials: right pull secret first — accepted at once, nothing refused" {
    cred dockerconfigjson "$T/secret.json"
    run_pullhelper pull "${PH_OPTS[@]}" --pull-secret "$T/secret.json" --authfile "$REGISTRY_BADAUTHFILE" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_credential pull-secret "$T/secret.json" "$REGISTRY_HOST" "$REGISTRY_USER"
    [[ $stderr != *"refused"* ]] || fail "a credential was refused: $stderr"
}

###############################################################################
# All refused, none matching

@test "credentials: every source wrong — exit 3 lists each source (file, key, user) in try order, no secret" {
    cred dockerconfigjson "$T/bad-secret.json" --wrong
    mkdir -p "$T/kubelet"
    cred dockerconfigjson "$T/kubelet/config.json" --wrong
    provider_setup FAKE_PROVIDER_PASSWORD_PREFIX=wrong-
    cred containerd "$T/config.toml" --https-endpoint --wrong --ca "$REGISTRY_CA"
    cred token "$T/token" --password-file "$SA_SECRET" --wrong
    run_pullhelper 3 pull "${PH_OPTS[@]}" --pull-secret "$T/bad-secret.json" --kubelet-docker-config "$T/kubelet" \
        "${PROVIDER_OPTS[@]}" --containerd-config "$T/config.toml" \
        --service-account-token "$T/token" --service-account-registry "$REGISTRY_HOST" \
        --authfile "$REGISTRY_BADAUTHFILE" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_json_error unauthorized
    local h=$REGISTRY_HOST u=$REGISTRY_USER
    local want="registry $h refused every matching credential for $h/fixtures/tiny:latest: "
    want+="[1] pull-secret $T/bad-secret.json key \"$h\" user \"$u\"; "
    want+="[2] kubelet-node-config $T/kubelet/config.json key \"$h\" user \"$u\"; "
    want+="[3] credential-provider fake-provider key \"$h\" user \"$u\"; "
    want+="[4] service-account-token $T/token key \"$h\" user \"serviceaccount\"; "
    want+="[5] containers-auth.json $REGISTRY_BADAUTHFILE key \"$h\" user \"$u\""
    [[ $ph_error_message == "$want"* ]] || fail "error message
  got:  $ph_error_message
  want: $want..."
    # containerd's configs auth is not among them: the kubelet sent credentials.
    [[ $ph_error_message != *"[6]"* && $ph_error_message != *containerd-config* ]] ||
        fail "more than five credentials tried: $ph_error_message"
    assert_no_secrets "$output" "$stderr"
    [[ ! -e $OUT/a ]] || fail "DEST was created"
    assert_no_staging "$OUT"
}

@test "credentials: nothing matches the registry — anonymous, exit 3 'refused anonymous access'" {
    cred dockerconfigjson "$T/other-secret.json" --key other.example:5000
    cred authjson "$T/other-auth.json" --key other.example:5000
    cred token "$T/token" --password-file "$SA_SECRET"
    run_pullhelper 3 pull "${PH_OPTS[@]}" --pull-secret "$T/other-secret.json" --authfile "$T/other-auth.json" \
        --service-account-token "$T/token" --service-account-registry other.example:5000 \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_json_error unauthorized
    [[ $ph_error_message == *"refused anonymous access"* ]] || fail "message: $ph_error_message"
    [[ $ph_error_message != *"refused every matching credential"* ]] || fail "message: $ph_error_message"
    assert_no_secrets "$output" "$stderr"
}

###############################################################################
# Broken credential files fail where their owner fails (issue 24)

# containers/image pkg/docker/config: findCredentialsInFile fails on a file
# that does not parse (authPath.parse; ~/.dockercfg, the legacy format, too)
# and decodeDockerAuth on an auth field that is not padded base64;
# getCredentialsWithHomeDir returns the error and newDockerClientFromRef
# fails the pull with it. pullhelper: exit 2, one line naming file and key.
@test "broken credentials: an auth.json that does not parse, an auth field not padded base64, a ~/.dockercfg of either — exit 2 naming file and key (containers/image getCredentialsWithHomeDir, decodeDockerAuth)" {
    printf '{"auths": {"%s": {"auth": "' "$REGISTRY_HOST" >"$T/auth.json"
    run_pullhelper 2 pull "${PH_OPTS[@]}" --authfile "$T/auth.json" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_json_error usage
    [[ $ph_error_message == "looking up credentials for $REGISTRY_HOST: auth file $T/auth.json does not parse: "* ]] ||
        fail "message: $ph_error_message"
    [[ ! -e $OUT/a ]] || fail "DEST was created"

    broken_cred authjson unpadded "$T/auth.json"
    local field
    field=$(auth_field "$T/auth.json" "$REGISTRY_HOST")
    run_pullhelper 2 pull "${PH_OPTS[@]}" --authfile "$T/auth.json" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_json_error usage
    assert_equal "$ph_error_message" "looking up credentials for $REGISTRY_HOST: auth file $T/auth.json: auths.\"$REGISTRY_HOST\".auth is not valid base64 (padding is required)"
    [[ $output != *"$field"* && $stderr != *"$field"* ]] || fail "the broken auth field is in the output"
    assert_no_secrets "$output" "$stderr"

    # The default search (no --authfile) reaches ~/.dockercfg, the legacy format.
    broken_cred dockercfg unpadded "$HOME/.dockercfg"
    run_pullhelper 2 pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_json_error usage
    assert_equal "$ph_error_message" "looking up credentials for $REGISTRY_HOST: auth file $HOME/.dockercfg: \"https://$REGISTRY_HOST/v1/\".auth is not valid base64 (padding is required)"
    echo '[1,' >"$HOME/.dockercfg"
    run_pullhelper 2 pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_json_error usage
    [[ $ph_error_message == "looking up credentials for $REGISTRY_HOST: auth file $HOME/.dockercfg does not parse: "* ]] ||
        fail "message: $ph_error_message"
    assert_no_secrets "$output" "$stderr"
    [[ ! -e $OUT/a ]] || fail "DEST was created"
}

# decodeDockerAuth: an auth field without a colon is only a warning
# ("missing semicolon"): the entry is skipped and the next file searched.
@test "broken credentials: an auth field without a colon is skipped with a warning and the next auth file's credential pulls (containers/image decodeDockerAuth)" {
    mkdir -p "$XDG_CONFIG_HOME/containers" "$HOME/.docker"
    broken_cred authjson nocolon "$XDG_CONFIG_HOME/containers/auth.json"
    cred authjson "$HOME/.docker/config.json"
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_credential containers-auth.json "$HOME/.docker/config.json" "$REGISTRY_HOST" "$REGISTRY_USER"
    [[ $stderr == *"auth file $XDG_CONFIG_HOME/containers/auth.json: auths.\\\"$REGISTRY_HOST\\\".auth decodes to no user:password (no colon); skipped"* ]] ||
        fail "no warning names the skipped entry: $stderr"
    assert_no_secrets "$output" "$stderr"
}

# containerd's ParseAuth (1.x pkg/cri/server/image_pull.go, 2.x
# internal/cri/server/images/image_pull.go): base64.StdEncoding.Decode
# fails on unpadded base64, "invalid decoded auth" without a colon, and the
# request to the host fails with it.
@test "broken credentials: containerd configs.\"HOST\".auth not padded base64 or without a colon — exit 2 naming config.toml and the key (containerd ParseAuth)" {
    local mode
    for mode in unpadded nocolon; do
        cred containerd "$T/config.toml" --https-endpoint --no-auth --ca "$REGISTRY_CA"
        broken_cred containerd "$mode" "$T/config.toml"
        run_pullhelper 2 pull --containerd-config "$T/config.toml" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
        assert_json_error usage
        [[ $ph_error_message == "containerd config $T/config.toml: $(containerd_key): "* ]] || fail "message: $ph_error_message"
        case $mode in
            unpadded) [[ $ph_error_message == *": illegal base64 data at input byte "* ]] || fail "message: $ph_error_message" ;;
            nocolon) [[ $ph_error_message == *": invalid decoded auth" ]] || fail "message: $ph_error_message" ;;
        esac
        assert_no_secrets "$output" "$stderr"
        [[ ! -e $OUT/a ]] || fail "DEST was created"
    done
}

###############################################################################
# registries.conf credential-helpers (issue 24)

# containers/image pkg/docker/config getCredentialsWithHomeDir: the helpers
# of sysregistriesv2.CredentialHelpers in registries.conf's order,
# "containers-auth.json" standing for the auth files, every other NAME run as
# `docker-credential-NAME get` with the registry on stdin
# (getCredsFromCredHelper); the first with a credential wins; the errors
# only when none has one.
@test "credential-helpers: consulted in registries.conf's order — one without the credential, then one with it, by the parent; the auth files listed after are not needed" {
    fake_helper first none
    fake_helper second right
    helpers_conf first second containers-auth.json
    cred authjson "$T/auth.json" --wrong
    run_pullhelper pull "${PH_OPTS[@]}" --registries-conf "$T/registries.conf" --authfile "$T/auth.json" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_credential credential-helper "$T/registries.conf" "credential-helpers second" "$REGISTRY_USER"
    [[ $stderr != *"refused"* ]] || fail "a credential was refused: $stderr"
    # Each ran once, in order, asked for the registry.
    assert_equal "$(cat "$T/helper-calls")" "first $REGISTRY_HOST
second $REGISTRY_HOST"
    assert_no_secrets "$output" "$stderr"

    # The other order: the auth files first; their credential wins, no helper runs.
    rm -f "$T/helper-calls"
    cred authjson "$T/auth.json"
    helpers_conf containers-auth.json second
    run_pullhelper pull "${PH_OPTS[@]}" --registries-conf "$T/registries.conf" --authfile "$T/auth.json" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/b"
    assert_credential containers-auth.json "$T/auth.json" "$REGISTRY_HOST" "$REGISTRY_USER"
    [[ ! -e $T/helper-calls ]] || fail "a helper ran: $(cat "$T/helper-calls")"

    # A broken auth file does not fail the pull when a later helper has the
    # credential.
    echo '{' >"$T/auth.json"
    run_pullhelper pull "${PH_OPTS[@]}" --registries-conf "$T/registries.conf" --authfile "$T/auth.json" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/c"
    assert_credential credential-helper "$T/registries.conf" "credential-helpers second" "$REGISTRY_USER"
    assert_no_secrets "$output" "$stderr"
}

@test "credential-helpers: a failing helper and no other credential — exit 2 naming the helper and registries.conf; with a later helper that has one, the pull goes on" {
    fake_helper locked fail
    fake_helper second right
    helpers_conf locked containers-auth.json
    cred authjson "$T/auth.json" --key other.example:5000
    run_pullhelper 2 pull "${PH_OPTS[@]}" --registries-conf "$T/registries.conf" --authfile "$T/auth.json" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_json_error usage
    assert_equal "$ph_error_message" "looking up credentials for $REGISTRY_HOST: running credential helper docker-credential-locked for $REGISTRY_HOST (credential-helpers locked in $T/registries.conf): exit status 1"
    [[ ! -e $OUT/a ]] || fail "DEST was created"

    helpers_conf locked second
    run_pullhelper pull "${PH_OPTS[@]}" --registries-conf "$T/registries.conf" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_credential credential-helper "$T/registries.conf" "credential-helpers second" "$REGISTRY_USER"
    assert_no_secrets "$output" "$stderr"
}

@test "credential-helpers: explain shows which helper serves the host, in order, then the auth files; it runs none and shows no secret" {
    fake_helper first none
    fake_helper second right
    helpers_conf first second containers-auth.json
    cred authjson "$T/auth.json"
    run_pullhelper explain "${PH_OPTS[@]}" --registries-conf "$T/registries.conf" --authfile "$T/auth.json" \
        "$REGISTRY_HOST/fixtures/tiny"
    local want
    want=$("$PH_PYTHON" -c '
import json, sys
h, u, t = sys.argv[1:4]
rc = t + "/registries.conf"
helper = "credential-helpers %s: docker-credential-%s get " + h + " (run at pull time; not run by explain)"
print(json.dumps([
    {"id": "cred-1", "source": "credential-helper", "file": rc, "key": helper % ("first", "first")},
    {"id": "cred-2", "source": "credential-helper", "file": rc, "key": helper % ("second", "second")},
    {"id": "cred-3", "source": "containers-auth.json", "file": t + "/auth.json", "key": h, "username": u},
], separators=(",", ":")))' "$REGISTRY_HOST" "$REGISTRY_USER" "$T")
    assert_equal "$(json_get .plan.credentials <<<"$output")" "$want"
    assert_equal "$(json_get '.plan.endpoints[-1].credentials' <<<"$output")" "$want"
    [[ ! -e $T/helper-calls ]] || fail "explain ran a helper: $(cat "$T/helper-calls")"
    assert_no_secrets "$output" "$stderr"

    # An auth file's credHelpers entry (findCredentialsInFile) is not run
    # by explain either; the pull runs it.
    printf '{"credHelpers": {"%s": "second"}}\n' "$REGISTRY_HOST" >"$T/auth.json"
    helpers_conf containers-auth.json
    run_pullhelper explain "${PH_OPTS[@]}" --registries-conf "$T/registries.conf" --authfile "$T/auth.json" \
        "$REGISTRY_HOST/fixtures/tiny"
    assert_equal "$(json_get '.plan.credentials[0].key' <<<"$output")" \
        "credHelpers.$REGISTRY_HOST: docker-credential-second get $REGISTRY_HOST (run at pull time; not run by explain)"
    [[ ! -e $T/helper-calls ]] || fail "explain ran a helper: $(cat "$T/helper-calls")"
    run_pullhelper pull "${PH_OPTS[@]}" --registries-conf "$T/registries.conf" --authfile "$T/auth.json" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_credential credential-helper "$T/auth.json" "credHelpers.$REGISTRY_HOST" "$REGISTRY_USER"
    assert_equal "$(cat "$T/helper-calls")" "second $REGISTRY_HOST"
    assert_no_secrets "$output" "$stderr"
}

###############################################################################
# explain

@test "explain: .plan.credentials lists every candidate in try order (source, file, key, username), .plan.trust the material; no secret; nothing sent to the registry" {
    cred dockerconfigjson "$T/secret.json"
    mkdir -p "$T/kubelet"
    cred dockercfg "$T/kubelet/.dockercfg"
    provider_setup
    cred containerd "$T/config.toml" --https-endpoint --ca "$REGISTRY_CA"
    cred token "$T/token" --password-file "$SA_SECRET"
    cred authjson "$T/auth.json"
    local before
    registry_log_barrier >/dev/null
    before=$(registry_request_count)
    run_pullhelper explain "${PH_OPTS[@]}" --pull-secret "$T/secret.json" --kubelet-docker-config "$T/kubelet" \
        "${PROVIDER_OPTS[@]}" --containerd-config "$T/config.toml" \
        --service-account-token "$T/token" --service-account-registry "$REGISTRY_HOST" \
        --authfile "$T/auth.json" "$REGISTRY_HOST/fixtures/tiny"
    assert_no_secrets "$output" "$stderr"
    local h=$REGISTRY_HOST u=$REGISTRY_USER
    local want
    want=$("$PH_PYTHON" -c '
import json, sys
h, u, t, reg = sys.argv[1:5]
# Each candidate carries the id its secret travels under (one per secret).
print(json.dumps([dict(id="cred-%d" % (i + 1), **c) for i, c in enumerate([
    {"source": "pull-secret", "file": t + "/secret.json", "key": h, "username": u},
    {"source": "kubelet-node-config", "file": t + "/kubelet/.dockercfg", "key": h, "username": u},
    {"source": "credential-provider", "file": t + "/provider.yaml", "key": "(plugins run at pull time; not run by explain)"},
    # containerd-config is not offered: the kubelet sends credentials.
    {"source": "service-account-token", "file": t + "/token", "key": h, "username": "serviceaccount"},
    {"source": "containers-auth.json", "file": t + "/auth.json", "key": h, "username": u},
])], separators=(",", ":")))' "$h" "$u" "$T" "$REGISTRY_DIR")
    assert_equal "$(json_get .plan.credentials <<<"$output")" "$want"

    # Trust: the flat --cert-dir, and containerd's ca_file for this host.
    assert_equal "$(json_get .plan.trust.cert_dir <<<"$output")" "$REGISTRY_CERT_DIR"
    assert_equal "$(json_get .plan.trust.searched <<<"$output")" "[\"$REGISTRY_CERT_DIR\"]"
    assert_equal "$(json_get .plan.trust.verify <<<"$output")" true
    assert_equal "$(json_get .plan.trust.ca_files <<<"$output")" "[\"$REGISTRY_CA\"]"

    # No password, token or auth field under any name.
    run "$PH_PYTHON" -c '
import json, sys
bad = []
def walk(v, path):
    if isinstance(v, dict):
        for k, x in v.items():
            kl = k.lower()
            if kl in ("password", "identitytoken", "identity_token", "registrytoken", "token_value", "secret") or (
                    kl == "auth" and isinstance(x, str)):
                bad.append(path + "." + k)
            walk(x, path + "." + k)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            walk(x, "%s[%d]" % (path, i))
walk(json.loads(sys.argv[1]), "")
print(" ".join(bad))' "$output"
    assert_success
    assert_output ""

    # explain does not talk to the registry (the only request logged since
    # is the barrier's own) and runs no plugin: plugins may use the network.
    registry_log_barrier >/dev/null
    assert_equal "$(($(registry_request_count) - before))" 1
    assert_equal "$(provider_runs)" 0
}

@test "explain: the policy file's [auth] keys give the same candidates as the flags" {
    cred dockerconfigjson "$T/secret.json"
    mkdir -p "$T/kubelet"
    cred dockerconfigjson "$T/kubelet/config.json"
    provider_setup
    cred containerd "$T/config.toml" --https-endpoint --ca "$REGISTRY_CA"
    cred token "$T/token" --password-file "$SA_SECRET"
    cred authjson "$T/auth.json"
    cat >"$T/policy.toml" <<EOF
version = 1
[auth]
pull_secrets = ["$T/secret.json"]
kubelet_docker_config = "$T/kubelet"
credential_provider_config = "$T/provider.yaml"
credential_provider_bin_dir = "$T/provider-bin"
containerd_config = "$T/config.toml"
service_account_token = "$T/token"
service_account_registries = ["$REGISTRY_HOST"]
authfile = "$T/auth.json"
[trust]
cert_dir = "$REGISTRY_CERT_DIR"
EOF
    run_pullhelper explain --policy "$T/policy.toml" "$REGISTRY_HOST/fixtures/tiny"
    local from_policy
    from_policy=$(json_get .plan.credentials <<<"$output")
    assert_equal "$(json_get '.plan.credentials[3].source' <<<"$output")" service-account-token

    run_pullhelper explain "${PH_OPTS[@]}" --pull-secret "$T/secret.json" --kubelet-docker-config "$T/kubelet" \
        "${PROVIDER_OPTS[@]}" --containerd-config "$T/config.toml" \
        --service-account-token "$T/token" --service-account-registry "$REGISTRY_HOST" \
        --authfile "$T/auth.json" "$REGISTRY_HOST/fixtures/tiny"
    assert_equal "$(json_get .plan.credentials <<<"$output")" "$from_policy"

    # And the policy pulls with them.
    run_pullhelper pull --policy "$T/policy.toml" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_credential pull-secret "$T/secret.json" "$REGISTRY_HOST" "$REGISTRY_USER"
}

###############################################################################
# trust.ca_files scoped to registry patterns

@test "trust: ca_files scoped to this registry is trusted without --cert-dir; scoped to other patterns, exit 4" {
    cred authjson "$T/auth.json"
    cat >"$T/policy.toml" <<EOF
version = 1
[trust]
ca_files = [{registry = "$REGISTRY_HOST", file = "$REGISTRY_CA"}]
EOF
    run_pullhelper pull --policy "$T/policy.toml" --authfile "$T/auth.json" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_credential containers-auth.json "$T/auth.json" "$REGISTRY_HOST" "$REGISTRY_USER"
    run_pullhelper explain --policy "$T/policy.toml" --authfile "$T/auth.json" "$REGISTRY_HOST/fixtures/tiny"
    assert_equal "$(json_get .plan.trust.ca_files <<<"$output")" "[\"$REGISTRY_CA\"]"
    assert_equal "$(json_get .plan.trust.cert_dir <<<"$output")" null

    cat >"$T/other.toml" <<EOF
version = 1
[trust]
ca_files = [
  {registry = "*.svc:5000", file = "$REGISTRY_CA"},
  {registry = "127.0.0.1:1", file = "$REGISTRY_CA"},
  {registry = "localhost:$REGISTRY_PORT", file = "$REGISTRY_CA"},
]
EOF
    run_pullhelper 4 pull --policy "$T/other.toml" --authfile "$T/auth.json" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/b"
    assert_json_error tls
    [[ ! -e $OUT/b ]] || fail "DEST was created"
    run_pullhelper explain --policy "$T/other.toml" --authfile "$T/auth.json" "$REGISTRY_HOST/fixtures/tiny"
    assert_equal "$(json_get .plan.trust.ca_files <<<"$output")" null
}

###############################################################################
# Issue 16: provider service-account tokens (KEP-4412), provider config
# directories, containerd 2.x configuration

# provider_token_attrs REQUIRE [REQUIRED_KEYS [OPTIONAL_KEYS]]: append
# tokenAttributes (audience "pullhelper-test", cacheType ServiceAccount) to
# $T/provider.yaml's provider.
provider_token_attrs() {
    {
        echo "    tokenAttributes:"
        echo "      serviceAccountTokenAudience: pullhelper-test"
        echo "      cacheType: ServiceAccount"
        echo "      requireServiceAccount: $1"
        [[ -z ${2:-} ]] || echo "      requiredServiceAccountAnnotationKeys: [$2]"
        [[ -z ${3:-} ]] || echo "      optionalServiceAccountAnnotationKeys: [$3]"
    } >>"$T/provider.yaml"
}

@test "provider service-account token: the token (from a file) and the listed annotations reach the plugin, whose credential the registry accepts; never in output" {
    local pat="$T/pod-token"
    (
        umask 077
        printf 'pod-token-%s\n' "$(openssl rand -hex 16)" >"$pat"
    )
    provider_setup FAKE_PROVIDER_EXPECT_TOKEN_FILE="$pat"
    provider_token_attrs true '"example.com/role"' '"example.com/opt", "example.com/absent"'
    local -a sa=(--provider-service-account-token "$pat"
        --provider-service-account-annotation example.com/role=puller
        --provider-service-account-annotation example.com/opt=yes
        --provider-service-account-annotation example.com/unlisted=not-sent)
    run_pullhelper pull "${PH_OPTS[@]}" "${PROVIDER_OPTS[@]}" "${sa[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_credential credential-provider fake-provider "$REGISTRY_HOST" "$REGISTRY_USER"
    assert_no_secrets "$output" "$stderr"
    local tok
    tok=$(tr -d '\n' <"$pat")
    [[ $output != *"$tok"* && $stderr != *"$tok"* ]] || fail "the pod token appears in the output"
    assert_equal "$(provider_runs)" 1
    assert_equal "$(json_get .request.serviceAccountTokenSha256 <"$PROVIDER_RECORD")" "$(printf %s "$tok" | sha256sum | cut -d' ' -f1)"
    assert_equal "$(json_get .request.serviceAccountAnnotations <"$PROVIDER_RECORD")" '{"example.com/opt":"yes","example.com/role":"puller"}'
    ! grep -qF -- "$tok" "$PROVIDER_CACHE/fake-provider.json" || fail "the pod token is in the provider cache"

    # Cached per service account: the same token and annotations do not run
    # the plugin again; another annotation value is another cache entry.
    run_pullhelper pull "${PH_OPTS[@]}" "${PROVIDER_OPTS[@]}" "${sa[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/b"
    assert_credential credential-provider fake-provider "$REGISTRY_HOST" "$REGISTRY_USER"
    assert_equal "$(provider_runs)" 1
    run_pullhelper pull "${PH_OPTS[@]}" "${PROVIDER_OPTS[@]}" --provider-service-account-token "$pat" \
        --provider-service-account-annotation example.com/role=admin "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/c"
    assert_credential credential-provider fake-provider "$REGISTRY_HOST" "$REGISTRY_USER"
    assert_equal "$(provider_runs)" 2

    # Another token file: the plugin refuses it (it checks the token), so no
    # credential and the pull is anonymous -- the token is what the plugin got.
    echo "pod-token-other" >"$T/other-token"
    rm -rf "$PROVIDER_CACHE"
    run_pullhelper 3 pull "${PH_OPTS[@]}" "${PROVIDER_OPTS[@]}" --provider-service-account-token "$T/other-token" \
        --provider-service-account-annotation example.com/role=puller "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/d"
    assert_json_error unauthorized
    [[ $stderr != *pod-token-other* && $output != *pod-token-other* ]] || fail "the other token appears in the output"
}

@test "provider service-account token on a descriptor (--provider-service-account-token-fd): the plugin gets that token and the annotations, explain names fd:N; with the file form too, exit 2" {
    local pat="$T/pod-token"
    (
        umask 077
        printf 'pod-token-%s\n' "$(openssl rand -hex 16)" >"$pat"
    )
    provider_setup FAKE_PROVIDER_EXPECT_TOKEN_FILE="$pat"
    provider_token_attrs true '"example.com/role"'
    run_pullhelper pull "${PH_OPTS[@]}" "${PROVIDER_OPTS[@]}" --provider-service-account-token-fd 5 \
        --provider-service-account-annotation example.com/role=puller "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a" 5<"$pat"
    assert_credential credential-provider fake-provider "$REGISTRY_HOST" "$REGISTRY_USER"
    local tok
    tok=$(tr -d '\n' <"$pat")
    [[ $output != *"$tok"* && $stderr != *"$tok"* ]] || fail "the pod token appears in the output"
    assert_equal "$(provider_runs)" 1
    assert_equal "$(json_get .request.serviceAccountTokenSha256 <"$PROVIDER_RECORD")" "$(printf %s "$tok" | sha256sum | cut -d' ' -f1)"
    assert_equal "$(json_get .request.serviceAccountAnnotations <"$PROVIDER_RECORD")" '{"example.com/role":"puller"}'

    run_pullhelper explain "${PH_OPTS[@]}" "${PROVIDER_OPTS[@]}" --provider-service-account-token-fd 5 \
        --provider-service-account-annotation example.com/role=puller "$REGISTRY_HOST/fixtures/tiny" 5<"$pat"
    [[ $output == *'"fd:5"'* ]] || fail "explain does not name the token fd:5: $output"
    [[ $output != *"$tok"* ]] || fail "explain shows the token"

    run_pullhelper 2 pull "${PH_OPTS[@]}" "${PROVIDER_OPTS[@]}" --provider-service-account-token-fd 5 \
        --provider-service-account-token "$pat" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/b" 5<"$pat"
    assert_json_error usage
    [[ $ph_error_message == *--provider-service-account-token-fd* ]] || fail "the message does not name the flag: $ph_error_message"
    [[ ! -e $OUT/b ]] || fail "DEST was created"
}

@test "provider service-account token: a provider that requires a service account gets none — skipped as the kubelet skips it, explain says why, the pull is anonymous" {
    provider_setup
    provider_token_attrs true
    run_pullhelper explain "${PH_OPTS[@]}" "${PROVIDER_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny"
    assert_equal "$(json_get .plan.credentials <<<"$output")" "[]"
    [[ $(json_get .plan.warnings <<<"$output") == *'credential provider \"fake-provider\": it requires a service account (tokenAttributes.requireServiceAccount: true) and none was given (--provider-service-account-token)'* ]] ||
        fail "explain does not say why: $output"
    run_pullhelper 3 pull "${PH_OPTS[@]}" "${PROVIDER_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_json_error unauthorized
    [[ $ph_error_message == *"refused anonymous access"* ]] || fail "message: $ph_error_message"
    assert_equal "$(provider_runs)" 0

    # A required annotation the service account lacks: skipped too.
    local pat="$T/pod-token"
    echo pod-token-4711 >"$pat"
    provider_setup
    provider_token_attrs true '"example.com/role"'
    run_pullhelper explain "${PH_OPTS[@]}" "${PROVIDER_OPTS[@]}" --provider-service-account-token "$pat" "$REGISTRY_HOST/fixtures/tiny"
    [[ $(json_get .plan.warnings <<<"$output") == *"required annotation example.com/role not found"* ]] || fail "explain: $output"
    [[ $output != *pod-token-4711* ]] || fail "explain shows the token"
}

@test "provider config: --credential-provider-config DIR merges *.json, *.yaml, *.yml in lexical order; a duplicate name, an unparsable file or an empty directory is exit 2 naming it" {
    provider_setup
    local d="$T/providers.d"
    mkdir -p "$d"
    cp "$T/provider.yaml" "$d/20-fake.yaml"
    printf '%s\n' '{"apiVersion": "kubelet.config.k8s.io/v1", "kind": "CredentialProviderConfig", "providers": [' \
        '  {"name": "other", "matchImages": ["other.example.com"], "defaultCacheDuration": "1m",' \
        '   "apiVersion": "credentialprovider.kubelet.k8s.io/v1"}]}' >"$d/10-other.json"
    echo "not a config" >"$d/README.md"
    ln -sf "$PH_TESTS_DIR/fake-credential-provider.py" "$T/provider-bin/other"
    local -a cpo=(--credential-provider-config "$d" --credential-provider-bin-dir "$T/provider-bin")
    run_pullhelper pull "${PH_OPTS[@]}" "${cpo[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_credential credential-provider fake-provider "$REGISTRY_HOST" "$REGISTRY_USER"
    assert_equal "$(provider_runs)" 1

    cp "$T/provider.yaml" "$d/30-again.yml"
    run_pullhelper 2 pull "${PH_OPTS[@]}" "${cpo[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/b"
    assert_json_error usage
    [[ $ph_error_message == *"$d/30-again.yml: duplicate provider name \"fake-provider\" (also in $d/20-fake.yaml)"* ]] ||
        fail "message: $ph_error_message"

    rm "$d/30-again.yml"
    echo '{"apiVersion": ' >"$d/40-broken.json"
    run_pullhelper 2 pull "${PH_OPTS[@]}" "${cpo[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/b"
    assert_json_error usage
    [[ $ph_error_message == *"$d/40-broken.json"* ]] || fail "message: $ph_error_message"

    mkdir "$T/empty.d"
    run_pullhelper 2 explain --credential-provider-config "$T/empty.d" --credential-provider-bin-dir "$T/provider-bin" "$REGISTRY_HOST/fixtures/tiny"
    assert_json_error usage
    [[ $ph_error_message == *"no configuration files found in directory $T/empty.d"* ]] || fail "message: $ph_error_message"
    [[ ! -e $OUT/b ]] || fail "DEST was created"
}

@test "containerd 2.x: version = 3 and 4 config.toml, imports drop-in with the io.containerd.cri.v1.images registry — its configs auth pulls; an unknown version or a missing import is exit 2 naming the file (the importing one)" {
    mkdir -p "$T/containerd/conf.d" "$T/containerd/certs.d/$REGISTRY_HOST"
    cred containerd "$T/v2.toml" --https-endpoint --ca "$REGISTRY_CA"
    # containerd 2.x reads no registry.configs.*.tls: the registry's CA is a
    # hosts.toml's, under config_path (which excludes the mirror entry).
    printf 'server = "https://%s"\nca = "%s"\n' "$REGISTRY_HOST" "$REGISTRY_CA" >"$T/containerd/certs.d/$REGISTRY_HOST/hosts.toml"
    v3_registry() {
        sed -e 's/^version = 2$/version = 3/' -e 's/io\.containerd\.grpc\.v1\.cri/io.containerd.cri.v1.images/g' \
            -e '/registry\.mirrors\./,+1d' -e '/\.tls\]$/,+1d' "$T/v2.toml"
        printf '[plugins."io.containerd.cri.v1.images".registry]\n  config_path = "%s"\n' "$T/containerd/certs.d"
    }
    v3_registry >"$T/containerd/conf.d/registry.toml"
    grep -q 'io.containerd.cri.v1.images' "$T/containerd/conf.d/registry.toml" || fail "sed did not convert the section"
    ! grep -q 'tls\|mirrors' "$T/containerd/conf.d/registry.toml" || fail "sed left the tls or mirrors table: $(cat "$T/containerd/conf.d/registry.toml")"
    printf 'version = 3\nimports = ["conf.d/*.toml"]\n' >"$T/containerd/config.toml"
    run_pullhelper pull --containerd-config "$T/containerd/config.toml" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_credential containerd-config "$T/containerd/conf.d/registry.toml" "$(containerd_key)" "$REGISTRY_USER"
    assert_no_secrets "$output" "$stderr"

    # The version 2 section in a version 3 file is not containerd 2's
    # registry: neither its auth nor its CA is used.
    sed -e 's/^version = 2$/version = 3/' "$T/v2.toml" >"$T/containerd/conf.d/registry.toml"
    run_pullhelper '?' pull --containerd-config "$T/containerd/config.toml" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/b"
    [[ $status -ne 0 ]] || fail "pulled with a section containerd 2 ignores"
    [[ $output != *containerd-config* ]] || fail "used the version 2 section: $output"

    # Version 4 (containerd 2.4: only the server tables moved) keeps the
    # registry in the image service's table; its version 3 drop-in is read.
    v3_registry >"$T/containerd/conf.d/registry.toml"
    printf 'version = 4\nimports = ["conf.d/*.toml"]\n' >"$T/containerd/config.toml"
    run_pullhelper pull --containerd-config "$T/containerd/config.toml" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/v4"
    assert_credential containerd-config "$T/containerd/conf.d/registry.toml" "$(containerd_key)" "$REGISTRY_USER"

    printf 'version = 5\n' >"$T/v5.toml"
    run_pullhelper 2 pull --containerd-config "$T/v5.toml" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/c"
    assert_json_error usage
    [[ $ph_error_message == *"$T/v5.toml: unsupported version 5"* ]] || fail "message: $ph_error_message"

    printf 'version = 3\nimports = ["gone.toml"]\n' >"$T/containerd/config.toml"
    run_pullhelper 2 pull --containerd-config "$T/containerd/config.toml" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/c"
    assert_json_error usage
    # The importing file and its entry: the imported path is that file's
    # content, not repeated.
    [[ $ph_error_message == *"$T/containerd/config.toml: imports: a file its entry 1 names: no such file"* ]] || fail "message: $ph_error_message"
    [[ ! -e $OUT/c ]] || fail "DEST was created"
}

###############################################################################
# Service-account token rotation

@test "credentials: the service-account token is re-read on every run (projected-volume ..data swap)" {
    # The kubelet's projected volume: token -> ..data/token, ..data -> a
    # timestamped directory, swapped atomically on rotation.
    local vol="$T/sa-volume"
    mkdir -p "$vol/..2026_01_01" "$vol/..2026_01_02" "$vol/..2026_01_03"
    cred token "$vol/..2026_01_01/token" --password-file "$SA_SECRET" --wrong
    cred token "$vol/..2026_01_02/token" --password-file "$SA_SECRET"
    cred token "$vol/..2026_01_03/token" --password-file "$SA_SECRET" --wrong
    ln -s ..2026_01_01 "$vol/..data"
    ln -s ..data/token "$vol/token"
    local -a sa=(--service-account-token "$vol/token" --service-account-registry "$REGISTRY_HOST")

    run_pullhelper 3 pull "${PH_OPTS[@]}" "${sa[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_json_error unauthorized
    [[ $ph_error_message == *"[1] service-account-token $vol/token key \"$REGISTRY_HOST\" user \"serviceaccount\""* ]] ||
        fail "message: $ph_error_message"

    ln -sfn ..2026_01_02 "$vol/..data.tmp" && mv -T "$vol/..data.tmp" "$vol/..data"
    run_pullhelper pull "${PH_OPTS[@]}" "${sa[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_credential service-account-token "$vol/token" "$REGISTRY_HOST" serviceaccount

    ln -sfn ..2026_01_03 "$vol/..data.tmp" && mv -T "$vol/..data.tmp" "$vol/..data"
    run_pullhelper 3 pull "${PH_OPTS[@]}" "${sa[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/c"
    assert_json_error unauthorized
    assert_no_secrets "$output" "$stderr"
}

###############################################################################
# containerd compatibility: Debian's containerd 1.6 + crictl, same config.toml

@test "containerd: crictl pull and pullhelper --containerd-config pull the same digest with config.toml's auth and CA" {
    ctrd_require
    CTRD_DIR="$T/ctrd"
    mkdir -p "$CTRD_DIR"
    cred containerd "$CTRD_DIR/config.toml" --state-dir "$CTRD_DIR" --ca "$REGISTRY_CA"
    ctrd_start "$CTRD_DIR"

    run ctrd_crictl pull "$REGISTRY_HOST/fixtures/tiny"
    assert_success
    run ctrd_crictl inspecti -o json "$REGISTRY_HOST/fixtures/tiny"
    assert_success
    assert_equal "$(json_get '.status.repoDigests' <<<"$output")" "[\"$REGISTRY_HOST/fixtures/tiny@$TINY_DIGEST\"]"

    run_pullhelper pull --containerd-config "$CTRD_DIR/config.toml" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_credential containerd-config "$CTRD_DIR/config.toml" "$(containerd_key)" "$REGISTRY_USER"
    assert_no_secrets "$output" "$stderr"
}

@test "containerd: with the auth removed from config.toml (containerd restarted), crictl pull and pullhelper both fail" {
    ctrd_require
    CTRD_DIR="$T/ctrd"
    mkdir -p "$CTRD_DIR"
    # With the auth: crictl pulls (so what fails below fails for the auth).
    cred containerd "$CTRD_DIR/config.toml" --state-dir "$CTRD_DIR" --ca "$REGISTRY_CA"
    ctrd_start "$CTRD_DIR"
    run ctrd_crictl pull "$REGISTRY_HOST/fixtures/tiny"
    assert_success
    run ctrd_crictl rmi "$REGISTRY_HOST/fixtures/tiny"
    assert_success
    ctrd_stop "$CTRD_DIR"

    cred containerd "$CTRD_DIR/config.toml" --state-dir "$CTRD_DIR" --ca "$REGISTRY_CA" --no-auth
    run grep -c -e '\.auth\]' -e 'username' "$CTRD_DIR/config.toml"
    assert_output 0
    ctrd_start "$CTRD_DIR"
    run ctrd_crictl pull "$REGISTRY_HOST/fixtures/tiny"
    assert_failure
    assert_output --regexp '401|[Uu]nauthorized'
    run ctrd_crictl inspecti "$REGISTRY_HOST/fixtures/tiny"
    assert_failure

    run_pullhelper 3 pull --containerd-config "$CTRD_DIR/config.toml" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/a"
    assert_json_error unauthorized
    [[ $ph_error_message == *"refused anonymous access"* ]] || fail "message: $ph_error_message"
    [[ ! -e $OUT/a ]] || fail "DEST was created"
}
