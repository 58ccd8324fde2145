#!/usr/bin/env bats
#
# Checks of the test harness itself (helpers.bash, imagegen, the local
# registry); pullhelper is not needed here.

load helpers

setup_file() {
    fixture tiny
    fixture multi
    start_registry
}

teardown_file() {
    stop_registry
}

@test "harness: registry requires auth and serves TLS with the per-run CA" {
    # Anonymous: 401 with a Basic challenge.
    run registry_curl --anon -o /dev/null -w '%{http_code}' /v2/
    assert_success
    assert_output 401
    run registry_curl --anon -D - -o /dev/null /v2/
    # (HTTP/2: header names are lower case)
    assert_output --regexp '[Ww]ww-[Aa]uthenticate: Basic realm="pullhelper-tests"'

    # With the credentials from the curl config file: 200.
    run registry_curl -o /dev/null -w '%{http_code}' /v2/
    assert_output 200

    # The server certificate does not verify without our CA.
    run curl -sS -o /dev/null --max-time 10 "$REGISTRY_URL/v2/"
    assert_failure
    assert_output --partial 'certificate'

    # Credentials files are private and hold no plain password.
    run stat -c '%a' "$REGISTRY_AUTHFILE" "$REGISTRY_BADAUTHFILE" "$REGISTRY_DIR/password"
    assert_output $'600\n600\n600'
    run grep -rF -- "$(<"$REGISTRY_DIR/password")" "$REGISTRY_AUTHFILE" "$REGISTRY_BADAUTHFILE" "$REGISTRY_DIR/config.yml"
    assert_failure
    [[ -z ${REGISTRY_PASSWORD:-} ]]
    run env
    refute_output --partial "$(<"$REGISTRY_DIR/password")"

    # The cert dir is usable by skopeo (and holds only the CA).
    run ls "$REGISTRY_CERT_DIR"
    assert_output ca.crt
}

@test "harness: push tiny; auth file works, bad and missing credentials do not" {
    push_fixture tiny

    # shellcheck disable=SC2046
    run ph_skopeo inspect $(registry_skopeo_opts) "docker://$REGISTRY_HOST/fixtures/tiny:latest"
    assert_success
    assert_equal "$(json_get .Architecture <<<"$output")" amd64
    assert_equal "$(json_get .Layers <<<"$output" | json_get '[0]' | cut -c1-7)" sha256:

    # shellcheck disable=SC2046
    run ph_skopeo inspect $(registry_skopeo_opts - --bad-creds) "docker://$REGISTRY_HOST/fixtures/tiny:latest"
    assert_failure
    assert_output --regexp 'unauthorized|authentication required'

    # shellcheck disable=SC2046
    run ph_skopeo inspect $(registry_skopeo_opts - --anon) "docker://$REGISTRY_HOST/fixtures/tiny:latest"
    assert_failure
    assert_output --regexp 'unauthorized|authentication required'

    # Without the CA, TLS verification fails.
    run ph_skopeo inspect --authfile "$REGISTRY_AUTHFILE" "docker://$REGISTRY_HOST/fixtures/tiny:latest"
    assert_failure
    assert_output --partial 'certificate'
}

@test "harness: registry_digest of pushed tiny equals its OCI layout manifest digest" {
    local want
    want="sha256:$(sha256sum <"$(fixture_blob tiny "$(fixture_digest tiny)")" | cut -d' ' -f1)"
    assert_equal "$(fixture_digest tiny)" "$want"

    push_fixture tiny fixtures/tiny-again:v1
    run registry_digest fixtures/tiny-again:v1
    assert_success
    assert_output "$want"

    # The registry itself agrees (Docker-Content-Digest of a HEAD).
    run registry_curl -I -H 'Accept: application/vnd.oci.image.manifest.v1+json' /v2/fixtures/tiny-again/manifests/v1
    assert_success
    assert_output --regexp "[Dd]ocker-[Cc]ontent-[Dd]igest: $want"

    # Same flags and seed: regenerating gives the same digest.
    run "$PH_CACHE/imagegen" -out "$BATS_TEST_TMPDIR/again" $(_ph_fixture_args tiny)
    assert_success
    assert_output "$want"
}

@test "harness: multi is an index of 3 platforms and survives a push unchanged" {
    local dir index platforms
    dir=$(fixture_dir multi)
    index=$(fixture_blob multi "$(fixture_digest multi)")
    assert_equal "$(json_get .mediaType <"$index")" application/vnd.oci.image.index.v1+json
    assert_equal "$(json_get '.manifests[3]' <"$index")" null
    platforms=$(for i in 0 1 2; do
        json_get ".manifests[$i].platform" <"$index"
    done)
    assert_equal "$platforms" '{"architecture":"amd64","os":"linux"}
{"architecture":"arm64","os":"linux"}
{"architecture":"arm","os":"linux","variant":"v7"}'
    # Each platform has its own layers.
    run bash -c "ls '$dir/blobs/sha256' | wc -l"
    # 1 index + 3 x (manifest + config + 2 layers)
    assert_output 13

    push_fixture multi
    run registry_digest fixtures/multi:latest
    assert_output "$(fixture_digest multi)"
    run registry_manifest fixtures/multi:latest
    assert_equal "$(json_get '.manifests[2].platform.variant' <<<"$output")" v7

    # skopeo resolves the tag to the platform image it is asked for.
    # shellcheck disable=SC2046
    run ph_skopeo --override-arch arm64 inspect $(registry_skopeo_opts) "docker://$REGISTRY_HOST/fixtures/multi:latest"
    assert_success
    assert_equal "$(json_get .Architecture <<<"$output")" arm64
}

@test "harness: corrupt_blob makes skopeo copy fail; restore_blob undoes it" {
    push_fixture tiny fixtures/corrupt:latest
    local layer
    layer=$(registry_manifest fixtures/corrupt:latest | json_get '.layers[0].digest')
    [[ $layer == sha256:* ]]
    local size_before
    size_before=$(stat -c %s "$(registry_blob_path "$layer")")

    corrupt_blob "$layer"
    assert_equal "$(stat -c %s "$(registry_blob_path "$layer")")" "$size_before"
    run cmp -s "$(registry_blob_path "$layer")" "$(fixture_blob tiny "$layer")"
    assert_failure

    # shellcheck disable=SC2046
    run ph_skopeo copy $(registry_skopeo_opts src) "docker://$REGISTRY_HOST/fixtures/corrupt:latest" "dir:$BATS_TEST_TMPDIR/out1"
    assert_failure
    assert_output --regexp 'Digest did not match|digest|gzip|invalid'

    restore_blob "$layer"
    # shellcheck disable=SC2046
    run ph_skopeo copy $(registry_skopeo_opts src) "docker://$REGISTRY_HOST/fixtures/corrupt:latest" "dir:$BATS_TEST_TMPDIR/out2"
    assert_success
    cmp "$BATS_TEST_TMPDIR/out2/${layer#sha256:}" "$(fixture_blob tiny "$layer")"
}

@test "harness: run_pullhelper checks the exit code and separates stdout/stderr" {
    local fake="$BATS_TEST_TMPDIR/fake-pullhelper"
    cat >"$fake" <<'EOF'
#!/bin/sh
echo "out:$*"
echo "err:$*" >&2
exit "${1:-0}"
EOF
    chmod +x "$fake"
    PULLHELPER=$fake

    run_pullhelper 0 0 hello
    assert_output "out:0 hello"
    assert_equal "$stderr" "err:0 hello"

    run_pullhelper 3 3
    assert_equal "$status" 3
    run_pullhelper '?' 5
    assert_equal "$status" 5

    # A mismatch fails and reports the command and both streams.
    local report
    if report=$(run_pullhelper 0 4 oops 2>&1); then
        fail "run_pullhelper accepted exit code 4 when 0 was expected"
    fi
    [[ $report == *"exit code"*4* && $report == *"out:4 oops"* && $report == *"err:4 oops"* ]] ||
        fail "unexpected report: $report"

    PH_TIMEOUT=1
    echo 'sleep 30' >>"$fake"
    sed -i 's/^exit.*//' "$fake"
    if report=$(run_pullhelper 0 2>&1); then
        fail "run_pullhelper did not time out"
    fi
    [[ $report == *"timed out after 1s"* ]] || fail "unexpected report: $report"
}

@test "harness: json_get" {
    local doc='{"error":{"code":"E_AUTH","n":3,"ok":true,"list":[1,{"a":"x"}],"k.e y":null}}'
    assert_equal "$(json_get .error.code <<<"$doc")" E_AUTH
    assert_equal "$(json_get .error.n <<<"$doc")" 3
    assert_equal "$(json_get .error.ok <<<"$doc")" true
    assert_equal "$(json_get '.error.list[1].a' <<<"$doc")" x
    assert_equal "$(json_get '.error.list[-1]' <<<"$doc")" '{"a":"x"}'
    assert_equal "$(json_get '.error."k.e y"' <<<"$doc")" null
    assert_equal "$(json_get .error.missing.deeper <<<"$doc")" null
    assert_equal "$(json_field .error.code <<<"$doc")" E_AUTH
    assert_equal "$(printf '{"a":1}\n{"a":"two"}\n' | json_get .a)" $'1\ntwo'
    run json_get .a <<<'not json'
    assert_failure
    run json_get '.error.list.a' <<<"$doc"
    assert_failure
}

@test "harness: start_registry --no-tls --no-auth in a subshell" {
    (
        trap stop_registry EXIT
        unset REGISTRY_PID REGISTRY_DIR
        start_registry --no-tls --no-auth
        [[ $REGISTRY_URL == http://127.0.0.1:* ]]
        code=$(curl -s -o /dev/null -w '%{http_code}' "$REGISTRY_URL/v2/")
        [[ $code == 200 ]] || fail "anonymous GET /v2/ gave $code"
        push_fixture tiny
        [[ $(registry_digest fixtures/tiny:latest) == "$(fixture_digest tiny)" ]]
        pid=$REGISTRY_PID
        stop_registry
        ! kill -0 "$pid" 2>/dev/null || [[ $(awk '{print $3}' "/proc/$pid/stat") == Z ]]
        stop_registry # idempotent
    )
    # The file's own registry is untouched.
    run registry_curl -o /dev/null -w '%{http_code}' /v2/
    assert_output 200
}
