#!/usr/bin/env bats
#
# Inline secrets (issue 17): --pull-secret-fd N and --authfile-fd N, the way
# a non-Go agent passes them (a shell redirection here; package client uses
# pipes, see client/client_test.go). The descriptor is read once by the
# parent; the child gets the credential over its plan pipe, as for files.

load helpers

setup_file() {
    [[ $(id -u) == 0 ]] || skip "the isolated pull needs root"
    # A second htpasswd user, "serviceaccount", whose password is a token.
    head -c 24 /dev/urandom | base64 | tr -d '/+=' >"$BATS_FILE_TMPDIR/sa-token"
    PH_REGISTRY_EXTRA_USERS="serviceaccount=$BATS_FILE_TMPDIR/sa-token" start_registry
    push_fixture tiny
}

teardown_file() {
    stop_registry
}

setup() {
    [[ $(id -u) == 0 ]] || skip "the isolated pull needs root"
    ph_test_setup
}

@test "--pull-secret-fd: the pull secret on a descriptor; the result names fd:N" {
    run_pullhelper pull --cert-dir "$REGISTRY_CERT_DIR" --pull-secret-fd 5 \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest" 5<"$REGISTRY_AUTHFILE"
    assert_equal "$(json_get .credential.source <<<"$output")" pull-secret
    assert_equal "$(json_get .credential.file <<<"$output")" fd:5
    assert_equal "$(json_get .credential.username <<<"$output")" "$REGISTRY_USER"
}

@test "--authfile-fd: the auth file on a pipe (stdin); --authfile-fd with --authfile is exit 2" {
    run_pullhelper pull --cert-dir "$REGISTRY_CERT_DIR" --authfile-fd 0 \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest" < <(cat "$REGISTRY_AUTHFILE")
    assert_equal "$(json_get .credential.source <<<"$output")" containers-auth.json
    assert_equal "$(json_get .credential.file <<<"$output")" fd:0
    run_pullhelper 2 pull --cert-dir "$REGISTRY_CERT_DIR" --authfile-fd 0 --authfile "$REGISTRY_AUTHFILE" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest2" <"$REGISTRY_AUTHFILE"
    assert_json_error usage
    [[ $ph_error_message == *--authfile-fd* ]] || fail "message does not name --authfile-fd: $ph_error_message"
}

# A writer that never closes its end: the pull's --timeout bounds the read
# (it waited until a signal), exit 6 as the pull's own deadline; nothing is
# asked of the registry, nothing made.
@test "--authfile-fd whose writer never closes its end: --timeout ends the read, exit 6 naming the flag" {
    mkfifo "$OUT/fifo"
    local before
    before=$(wc -l <"$REGISTRY_LOG")
    # The FIFO opened read-write: a writer that stays, never closing.
    exec 8<>"$OUT/fifo"
    run_pullhelper 6 pull --cert-dir "$REGISTRY_CERT_DIR" --authfile-fd 5 --timeout 2s \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest" 5<"$OUT/fifo"
    exec 8>&-
    assert_json_error network
    [[ $ph_error_message == *"--authfile-fd 5: the pull's --timeout passed while reading it"* ]] ||
        fail "the message does not name the flag and the timeout: $ph_error_message"
    [[ ! -e $OUT/dest ]] || fail "DEST was created"
    assert_no_staging "$OUT"
    assert_equal "$(wc -l <"$REGISTRY_LOG")" "$before"
}

@test "--pull-secret-fd with the wrong password is exit 3 naming fd:N, never the secret" {
    run_pullhelper 3 pull --cert-dir "$REGISTRY_CERT_DIR" --pull-secret-fd 6 \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest" 6<"$REGISTRY_BADAUTHFILE"
    assert_json_error unauthorized
    [[ $ph_error_message == *fd:6* ]] || fail "message does not name fd:6: $ph_error_message"
    ! grep -qF "$(cat "$REGISTRY_DIR/password")" <<<"$output$stderr" || fail "the password is in the output"
    [[ ! -e $OUT/dest ]] || fail "DEST was created"
}

@test "bad descriptors are exit 2 naming the flag, before any network byte" {
    local before
    before=$(wc -l <"$REGISTRY_LOG")
    local -a cases=("--pull-secret-fd 9|not an open file descriptor" "--pull-secret-fd 1|stdout"
        "--authfile-fd x|descriptor number" "--pull-secret-fd 7 --authfile-fd 7|already given")
    local c args what
    for c in "${cases[@]}"; do
        args=${c%%|*}
        what=${c#*|}
        # shellcheck disable=SC2086
        run_pullhelper 2 pull --cert-dir "$REGISTRY_CERT_DIR" $args "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest" 7</dev/null
        assert_json_error usage
        [[ $ph_error_message == *"${args%% *}"* ]] || fail "$args: message does not name the flag: $ph_error_message"
        [[ $ph_error_message == *"$what"* ]] || fail "$args: message does not say '$what': $ph_error_message"
    done
    assert_equal "$(wc -l <"$REGISTRY_LOG")" "$before"
}

@test "explain takes --pull-secret-fd too and shows fd:N, never the secret" {
    run_pullhelper explain --pull-secret-fd 5 "$REGISTRY_HOST/fixtures/tiny" 5<"$REGISTRY_AUTHFILE"
    assert_equal "$(json_get '.plan.credentials[0].file' <<<"$output")" fd:5
    ! grep -qF "$(cat "$REGISTRY_DIR/password")" <<<"$output$stderr" || fail "the password is in explain's output"
}

@test "--service-account-token-fd: the token on a descriptor; without a registry pattern exit 2" {
    run_pullhelper pull --cert-dir "$REGISTRY_CERT_DIR" --service-account-token-fd 5 \
        --service-account-registry "$REGISTRY_HOST" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest" 5<"$BATS_FILE_TMPDIR/sa-token"
    assert_equal "$(json_get .credential.source <<<"$output")" service-account-token
    assert_equal "$(json_get .credential.file <<<"$output")" fd:5
    run_pullhelper 2 pull --cert-dir "$REGISTRY_CERT_DIR" --service-account-token-fd 5 \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest2" 5<"$BATS_FILE_TMPDIR/sa-token"
    assert_json_error usage
    [[ $ph_error_message == *--service-account-registry* ]] || fail "message does not name --service-account-registry: $ph_error_message"
    ! grep -qF "$(cat "$BATS_FILE_TMPDIR/sa-token")" <<<"$output$stderr" || fail "the token is in the output"
}
