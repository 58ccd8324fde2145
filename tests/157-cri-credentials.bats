#!/usr/bin/env bats
#
# pullhelper cri (issue 25): the PullImage request's AuthConfig as
# containerd's CRI takes it (internal/cri/server/images ParseAuth), against
# a token-auth docker-registry (auth: token) whose realm is tests/tokenserver
# on 127.0.0.2: an identity_token is exchanged at the realm as an OAuth2
# refresh token (containerd's FetchTokenWithOAuth, grant_type=refresh_token),
# and the request's credential goes to its one registry host, never to a
# hosts.toml mirror (tests/faultproxy in front of the same registry).
# crictl cannot send an identity_token: tests/cripull sends the request,
# its AuthConfig read from stdin.

load helpers
load containerd-cases
load faultproxy
load cri

CTRD_FLAVOR=2

setup_file() {
    [[ $(id -u) == 0 ]] || return 0
    fixture tiny
    local out
    TOKENSERVER="$BATS_FILE_TMPDIR/tokenserver"
    CRIPULL="$BATS_FILE_TMPDIR/cripull"
    out=$(cd "$PH_ROOT" && GOFLAGS= CGO_ENABLED=0 "$(_ph_go)" build -o "$TOKENSERVER" ./tests/tokenserver 2>&1 &&
        GOFLAGS= CGO_ENABLED=0 "$(_ph_go)" build -o "$CRIPULL" ./tests/cripull 2>&1) ||
        fail "go build ./tests/tokenserver ./tests/cripull failed: $out"
    TOKEN_DIR="$BATS_FILE_TMPDIR/token"
    mkdir -m 0700 "$TOKEN_DIR"
    # The token server serves TLS with the registry's certificate (made by
    # start_registry, for 127.0.0.2 too) and checks the refresh token and
    # the push password in the registry's directory, reached through the
    # link "reg" made once the registry exists; it is read per request.
    (
        "$TOKENSERVER" -listen 127.0.0.2:0 -port-file "$TOKEN_DIR/port" -dir "$TOKEN_DIR/reg" \
            -bundle "$TOKEN_DIR/bundle.crt" -log "$TOKEN_DIR/token.log" -lifetime 20m \
            </dev/null >"$TOKEN_DIR/out" 2>&1 3>&- &
        echo $! >"$TOKEN_DIR/pid"
    )
    TOKEN_PID=$(<"$TOKEN_DIR/pid")
    local deadline=$((SECONDS + 30))
    until [[ -s $TOKEN_DIR/port ]]; do
        _ph_pid_alive "$TOKEN_PID" || { fail "tokenserver exited: $(cat "$TOKEN_DIR/out")"; return; }
        ((SECONDS < deadline)) || { fail "tokenserver did not listen within 30 s"; return; }
        sleep 0.05
    done
    TOKEN_REALM="https://127.0.0.2:$(<"$TOKEN_DIR/port")/token"
    PH_REGISTRY_TOKEN_REALM=$TOKEN_REALM PH_REGISTRY_TOKEN_BUNDLE=$TOKEN_DIR/bundle.crt PH_REGISTRY_EXTRA_SANS=IP:127.0.0.2 \
        start_registry
    ln -s "$REGISTRY_DIR" "$TOKEN_DIR/reg"
    (
        umask 077
        openssl rand -hex 24 >"$REGISTRY_DIR/refresh-token"
    )
    push_fixture tiny
    export TOKENSERVER CRIPULL TOKEN_DIR TOKEN_PID TOKEN_REALM
}

teardown_file() {
    [[ -z ${REGISTRY_PID:-} ]] || stop_registry
    [[ -z ${TOKEN_PID:-} ]] || _ph_stop_pid "$TOKEN_PID" tokenserver
}

setup() {
    skip_if_not_root
    cri_setup cricreds
}

teardown() {
    stop_all_faultproxies
    cri_stop
    [[ -z ${CTRD_DIR:-} ]] || ctrd_stop "$CTRD_DIR"
    cri_cgroups_rm "$CG_PARENT"
}

# cripull IMAGE <AUTH_JSON: one PullImage with that AuthConfig.
cripull() {
    timeout --kill-after=5 120 "$CRIPULL" -socket "$PH_SOCK" -image "$1" -timeout 100s
}

# auth_json FILE KEY=VALUE-FILE...: an AuthConfig JSON (0600) whose fields
# are read from files (the secrets never pass through argv).
auth_json() {
    local out=$1
    shift
    (umask 077 && "$PH_PYTHON" -c '
import json, sys
print(json.dumps({k: open(f).read().strip() for k, f in (a.split("=", 1) for a in sys.argv[1:])}))' "$@" >"$out")
}

# token_log_since N: the token server's log lines after line N.
token_log_since() {
    tail -n "+$(($1 + 1))" "$TOKEN_DIR/token.log"
}

# assert_token_absent FILE...: the refresh token is in none of the files.
assert_token_absent() {
    local tok f
    tok=$(<"$REGISTRY_DIR/refresh-token")
    for f in "$@"; do
        if grep -qF -- "$tok" "$f"; then
            fail "the identity token appears in $f"
            return 1
        fi
    done
}

@test "cri: a request's identity_token is exchanged at the realm as an OAuth2 refresh token (containerd's FetchTokenWithOAuth); the pull lands; the token is in no log, error, argv or environment" {
    cri_up
    local img="$REGISTRY_HOST/fixtures/tiny:latest" before
    # Without it the registry refuses the pull: the token is what lets it in.
    echo '{}' >"$T/none.json"
    run cripull "$img" <"$T/none.json"
    assert_failure
    assert_output --partial "code=Unauthenticated"

    before=$(wc -l <"$TOKEN_DIR/token.log")
    auth_json "$T/auth.json" identity_token="$REGISTRY_DIR/refresh-token"
    run cripull "$img" <"$T/auth.json"
    echo "$output"
    assert_success
    assert_output --regexp '^image_ref=sha256:[0-9a-f]{64}$'
    token_log_since "$before" | grep -qx 'POST grant=refresh_token result=ok scope=repository:fixtures/tiny:pull' ||
        fail "the token server saw no refresh-token grant: $(token_log_since "$before")"
    # Only the OAuth2 grant: no Basic GET (pullhelper has no password).
    ! token_log_since "$before" | grep -v '^POST grant=refresh_token result=ok' || fail "other token requests: $(token_log_since "$before")"
    run ctr_k8s images ls -q
    assert_success
    assert_line "$img"
    assert_equal "$(json_get .code <<<"$(grep '"msg":"pull"' "$T/cri.log" | tail -n 1)")" OK

    # A wrong identity token: Unauthenticated, the realm's refusal named,
    # the token never repeated.
    (umask 077 && echo "wrong-$(openssl rand -hex 12)" >"$T/wrong")
    auth_json "$T/wrong.json" identity_token="$T/wrong"
    run cripull "$REGISTRY_HOST/fixtures/tiny@$(registry_digest fixtures/tiny:latest)" <"$T/wrong.json"
    echo "$output"
    assert_failure
    assert_output --partial "code=Unauthenticated"
    [[ $output != *"$(<"$T/wrong")"* ]] || fail "the wrong token is in the error"
    grep -qF -- "$(<"$T/wrong")" "$T/cri.log" "$T/cri.out" && fail "the wrong token is in the log"

    echo "$output" >"$T/output"
    tr '\0' '\n' <"/proc/$CRI_PID/cmdline" >"$T/cmdline"
    tr '\0' '\n' <"/proc/$CRI_PID/environ" >"$T/environ"
    assert_token_absent "$T/cri.log" "$T/cri.out" "$T/output" "$TOKEN_DIR/token.log" "$REGISTRY_LOG" "$T/cmdline" "$T/environ"
}

@test "cri: a realm without OAuth2 (its refresh-token POST 404) gets the identity_token as a Basic password with no user, as containerd's authorizer falls back to FetchToken; the pull lands" {
    cri_up
    local before
    touch "$REGISTRY_DIR/no-oauth"
    before=$(wc -l <"$TOKEN_DIR/token.log")
    auth_json "$T/auth.json" identity_token="$REGISTRY_DIR/refresh-token"
    run cripull "$REGISTRY_HOST/fixtures/tiny:latest" <"$T/auth.json"
    rm -f "$REGISTRY_DIR/no-oauth"
    echo "$output"
    assert_success
    assert_output --regexp '^image_ref=sha256:'
    token_log_since "$before" | grep -qx 'POST grant=refresh_token result=not-found scope=repository:fixtures/tiny:pull' ||
        fail "no refresh-token POST first: $(token_log_since "$before")"
    token_log_since "$before" | grep -qx 'GET grant=basic-identity-token result=ok scope=repository:fixtures/tiny:pull' ||
        fail "no fallback GET: $(token_log_since "$before")"
    tr '\0' '\n' <"/proc/$CRI_PID/cmdline" >"$T/cmdline"
    assert_token_absent "$T/cri.log" "$T/cri.out" "$TOKEN_DIR/token.log" "$REGISTRY_LOG" "$T/cmdline"
}

@test "cri: the request's credential goes to its registry only, not to a hosts.toml mirror of it (the mirror's log has no Authorization); the pull falls to the registry and lands" {
    start_faultproxy MIRROR "$REGISTRY_URL"
    mkdir -p "$T/hosts/$REGISTRY_HOST"
    # The mirror trusts the registry's CA too (the realm's certificate):
    # with the credential it would get a token and pass it on.
    {
        echo "server = \"https://$REGISTRY_HOST\""
        echo "ca = \"$REGISTRY_CA\""
        echo "[host.\"https://$FP_MIRROR_HOST\"]"
        echo '  capabilities = ["pull", "resolve"]'
        echo "  ca = [\"$FP_MIRROR_CA\", \"$REGISTRY_CA\"]"
    } >"$T/hosts/$REGISTRY_HOST/hosts.toml"
    printf 'version = 2\n[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "%s"\n' "$T/hosts" >"$T/config.toml"
    cri_up --containerd-config "$T/config.toml"
    local before
    before=$(wc -l <"$TOKEN_DIR/token.log")
    (umask 077 && printf '{"username":"%s","password":"%s"}\n' "$REGISTRY_USER" "$(tr -d '\n' <"$REGISTRY_DIR/password")" >"$T/auth.json")
    run cripull "$REGISTRY_HOST/fixtures/tiny:latest" <"$T/auth.json"
    echo "$output"
    assert_success
    assert_output --regexp '^image_ref=sha256:'
    # The mirror was asked first, without any Authorization.
    (($(faultproxy_count MIRROR '^/v2/') >= 1)) || fail "the mirror was not asked: $(faultproxy_log MIRROR)"
    "$PH_PYTHON" -c '
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if "Authorization" in e["headers"]:
        sys.exit("the mirror got an Authorization header: " + line)' "$FP_MIRROR_LOG" || fail "the credential reached the mirror"
    # The registry's token came with the request's password: first the
    # OAuth2 password grant, which containerd's doBearerAuth POSTs (this
    # realm refuses it, 401), then containerd's fallback, a Basic GET; once
    # for the registry; the mirror's anonymous try was refused.
    token_log_since "$before" | grep -qx 'POST grant=password result=denied scope=repository:fixtures/tiny:pull' ||
        fail "no password grant first: $(token_log_since "$before")"
    token_log_since "$before" | grep -qx 'GET grant=basic result=ok scope=repository:fixtures/tiny:pull' ||
        fail "no token for the registry: $(token_log_since "$before")"
    assert_secret_absent -f "$T/cri.log" "$T/cri.out" "$FP_MIRROR_LOG"
}

@test "cri: a server_address that is not one registry host (a pattern, user info) is InvalidArgument naming it; nothing is pulled" {
    cri_up
    local sa
    for sa in '*.*' "u@$REGISTRY_HOST"; do
        (umask 077 && printf '{"username":"%s","password":"%s","server_address":"%s"}\n' "$REGISTRY_USER" "$(tr -d '\n' <"$REGISTRY_DIR/password")" "$sa" >"$T/auth.json")
        run cripull "$REGISTRY_HOST/fixtures/tiny:latest" <"$T/auth.json"
        echo "$output"
        assert_failure
        assert_output --partial "code=InvalidArgument"
        assert_output --partial "server_address \"$sa\""
        assert_secret_absent "$output"
    done
    assert_secret_absent -f "$T/cri.log" "$T/cri.out"
    [[ -z $(ctr_image_line "$REGISTRY_HOST/fixtures/tiny:latest") ]] || fail "an image was imported"
}
