#!/usr/bin/env bats
#
# pullhelper explain (the resolved plan, without touching the network),
# the TOML policy file (--policy, PULLHELPER_POLICY, --profile, flags over
# the file, `policy check` errors with FILE:LINE: key) and `version`.

load helpers

setup_file() {
    start_registry
    push_fixture tiny
    POLICY_DIR="$BATS_FILE_TMPDIR/policy"
    mkdir -p "$POLICY_DIR"
    export POLICY_DIR
    cat >"$POLICY_DIR/good.toml" <<EOF
# pullhelper policy used by 030-explain-policy.bats
version = 1

[pull]
retries = 5
retry_delay = "250ms"
timeout = "10m"
stall_timeout = "30s"
parallel_layers = 2

[auth]
authfile = "$REGISTRY_AUTHFILE"

[trust]
cert_dir = "$REGISTRY_CERT_DIR"
tls_verify = true

[profiles.os-update.pull]
retries = 9
parallel_layers = 1
timeout = "1h"

[profiles.pod-prefetch.pull]
retries = 0
EOF
}

teardown_file() {
    stop_tarpit
    stop_registry
}

setup() {
    ph_test_setup
}

teardown() {
    stop_tarpit
}

# log_lines: lines in the registry log now.
log_lines() {
    wc -l <"$REGISTRY_LOG"
}

# assert_registry_untouched BEFORE REPO: the registry log has no line more
# than BEFORE and none that mentions REPO.
assert_registry_untouched() {
    assert_equal "$(log_lines)" "$1"
    if grep -qF -- "$2" "$REGISTRY_LOG"; then
        fail "the registry log mentions $2: $(grep -F -- "$2" "$REGISTRY_LOG" | head -3)"
    fi
}

# policy_file NAME CONTENT: write $OUT/NAME.toml (printf format) and print its path.
policy_file() {
    local f="$OUT/$1.toml"
    # shellcheck disable=SC2059
    printf "$2" >"$f"
    echo "$f"
}

# assert_policy_error FILE LINE KEY: the last run printed a usage error whose
# message starts with "FILE:LINE: KEY".
assert_policy_error() {
    assert_json_error usage
    [[ $ph_error_message == "$1:$2: $3"* ]] ||
        fail "message is '$ph_error_message'; want it to start with '$1:$2: $3'"
}

###############################################################################
# explain

@test "explain: plan fields, credential without the secret, and no network" {
    local before
    before=$(registry_log_barrier)
    run_pullhelper explain "${PH_OPTS[@]}" "$REGISTRY_HOST/explain-only/tiny:v1" "oci:$OUT/layout:v1"
    assert_json_result
    local plan
    plan=$(json_get .plan <<<"$output")
    assert_equal "$(json_get .reference <<<"$plan")" "$REGISTRY_HOST/explain-only/tiny:v1"
    assert_equal "$(json_get .registry <<<"$plan")" "$REGISTRY_HOST"
    assert_equal "$(json_get .destination.transport <<<"$plan")" oci
    assert_equal "$(json_get .destination.path <<<"$plan")" "$OUT/layout"
    assert_equal "$(json_get .destination.ref <<<"$plan")" v1
    assert_equal "$(json_get '.credentials[0].source' <<<"$plan")" containers-auth.json
    assert_equal "$(json_get '.credentials[0].file' <<<"$plan")" "$REGISTRY_AUTHFILE"
    assert_equal "$(json_get '.credentials[0].key' <<<"$plan")" "$REGISTRY_HOST"
    assert_equal "$(json_get '.credentials[0].username' <<<"$plan")" "$REGISTRY_USER"
    assert_equal "$(json_get '.auth_files[0].path' <<<"$plan")" "$REGISTRY_AUTHFILE"
    assert_equal "$(json_get .trust.cert_dir <<<"$plan")" "$REGISTRY_CERT_DIR"
    assert_equal "$(json_get .trust.searched <<<"$plan")" "[\"$REGISTRY_CERT_DIR\"]"
    assert_equal "$(json_get .trust.verify <<<"$plan")" true
    assert_equal "$(json_get .retries <<<"$plan")" 3
    assert_equal "$(json_get .parallel_layers <<<"$plan")" 6
    [[ $(json_get .signature_policy.source <<<"$plan") =~ ^(system|builtin)$ ]] ||
        fail "signature_policy.source is not system/builtin without a flag or policy"
    [[ $(json_get .settings <<<"$output") != null ]] || fail "no settings"
    # Never the secret, in any form.
    assert_secret_absent "$output" "$stderr"
    # No side effects: nothing sent to the registry, nothing written.
    assert_registry_untouched "$before" explain-only
    [[ ! -e $OUT/layout ]] || fail "explain created DEST"
    assert_no_staging "$OUT"
}

@test "explain: opens no connection at all (a listening proxy logs none)" {
    start_tarpit -1
    run_pullhelper explain --authfile "$TARPIT_AUTHFILE" --cert-dir "$REGISTRY_CERT_DIR" \
        "$TARPIT_HOST/fixtures/tiny" "dir:$OUT/d"
    assert_json_result
    assert_equal "$(json_get .plan.registry <<<"$output")" "$TARPIT_HOST"
    assert_equal "$(json_get '.plan.credentials[0].key' <<<"$output")" "$TARPIT_HOST"
    # Prove the proxy logs connections, after the fact: one curl through it.
    if grep -q ' conn ' "$TARPIT_LOG"; then
        fail "explain connected to the registry: $(cat "$TARPIT_LOG")"
    fi
    curl -s -o /dev/null --max-time 5 --cacert "$REGISTRY_CA" "https://$TARPIT_HOST/v2/" || true
    wait_for_file_match "$TARPIT_LOG" ' conn 1 ' 5
}

@test "explain: destinations dir:, oci-archive:P:T, docker-archive:P:REF, and no DEST" {
    run_pullhelper explain "$REGISTRY_HOST/fixtures/tiny" "dir:$OUT/d"
    assert_equal "$(json_get .plan.destination.transport <<<"$output")" dir
    assert_equal "$(json_get .plan.destination.path <<<"$output")" "$OUT/d"
    run_pullhelper explain "$REGISTRY_HOST/fixtures/tiny" "oci-archive:$OUT/a.tar:v3"
    assert_equal "$(json_get .plan.destination.transport <<<"$output")" oci-archive
    assert_equal "$(json_get .plan.destination.path <<<"$output")" "$OUT/a.tar"
    assert_equal "$(json_get .plan.destination.ref <<<"$output")" v3
    run_pullhelper explain "$REGISTRY_HOST/fixtures/tiny" "docker-archive:$OUT/d.tar:example.com/x/y:z"
    assert_equal "$(json_get .plan.destination.transport <<<"$output")" docker-archive
    assert_equal "$(json_get .plan.destination.path <<<"$output")" "$OUT/d.tar"
    assert_equal "$(json_get .plan.destination.ref <<<"$output")" example.com/x/y:z
    # DEST is optional for explain; the reference gets its default tag.
    run_pullhelper explain "$REGISTRY_HOST/fixtures/tiny"
    assert_equal "$(json_get .plan.reference <<<"$output")" "$REGISTRY_HOST/fixtures/tiny:latest"
    # ...but a bad one is still a usage error.
    run_pullhelper 2 explain "$REGISTRY_HOST/fixtures/tiny" "bogus:$OUT/x"
    assert_json_error usage
    [[ ! -e $OUT/d && ! -e $OUT/a.tar && ! -e $OUT/d.tar ]] || fail "explain wrote a destination"
}

@test "explain: --profile applies the profile over the file's [pull]; a flag overrides both" {
    local f=$POLICY_DIR/good.toml
    run_pullhelper explain --policy "$f" --profile os-update "$REGISTRY_HOST/fixtures/tiny"
    local plan
    plan=$(json_get .plan <<<"$output")
    assert_equal "$(json_get .policy.file <<<"$plan")" "$f"
    assert_equal "$(json_get .policy.profile <<<"$plan")" os-update
    # From the profile:
    assert_equal "$(json_get .retries <<<"$plan")" 9
    assert_equal "$(json_get .parallel_layers <<<"$plan")" 1
    assert_equal "$(json_get .timeout_ns <<<"$plan")" 3600000000000
    # From the file's [pull], [auth] and [trust]:
    assert_equal "$(json_get .retry_delay_ns <<<"$plan")" 250000000
    assert_equal "$(json_get .stall_timeout_ns <<<"$plan")" 30000000000
    assert_equal "$(json_get '.credentials[0].file' <<<"$plan")" "$REGISTRY_AUTHFILE"
    assert_equal "$(json_get '.credentials[0].username' <<<"$plan")" "$REGISTRY_USER"
    assert_equal "$(json_get .trust.cert_dir <<<"$plan")" "$REGISTRY_CERT_DIR"

    # Without --profile: the file's [pull].
    run_pullhelper explain --policy "$f" "$REGISTRY_HOST/fixtures/tiny"
    assert_equal "$(json_get .plan.retries <<<"$output")" 5
    assert_equal "$(json_get .plan.parallel_layers <<<"$output")" 2
    assert_equal "$(json_get .plan.policy.profile <<<"$output")" null

    # Flags win over the profile.
    run_pullhelper explain --policy "$f" --profile os-update --retries 4 --parallel-layers 3 \
        "$REGISTRY_HOST/fixtures/tiny"
    assert_equal "$(json_get .plan.retries <<<"$output")" 4
    assert_equal "$(json_get .plan.parallel_layers <<<"$output")" 3
    assert_equal "$(json_get .plan.timeout_ns <<<"$output")" 3600000000000

    # An unknown profile is a usage error naming the profiles there are.
    run_pullhelper 2 explain --policy "$f" --profile nope "$REGISTRY_HOST/fixtures/tiny"
    assert_json_error usage
    [[ $ph_error_message == *nope* && $ph_error_message == *os-update* ]] ||
        fail "message does not name the missing and the existing profiles"
}

@test "policy: PULLHELPER_POLICY is used when --policy is absent; --policy wins over it" {
    PULLHELPER_POLICY=$POLICY_DIR/good.toml run_pullhelper explain "$REGISTRY_HOST/fixtures/tiny"
    assert_equal "$(json_get .plan.policy.file <<<"$output")" "$POLICY_DIR/good.toml"
    assert_equal "$(json_get .plan.retries <<<"$output")" 5
    assert_equal "$(json_get '.plan.credentials[0].file' <<<"$output")" "$REGISTRY_AUTHFILE"

    local other
    other=$(policy_file other 'version = 1\n[pull]\nretries = 7\n')
    PULLHELPER_POLICY=$POLICY_DIR/good.toml run_pullhelper explain --policy "$other" "$REGISTRY_HOST/fixtures/tiny"
    assert_equal "$(json_get .plan.policy.file <<<"$output")" "$other"
    assert_equal "$(json_get .plan.retries <<<"$output")" 7

    # A PULLHELPER_POLICY that does not exist is an error, not silently skipped.
    PULLHELPER_POLICY=$OUT/missing.toml run_pullhelper 2 explain "$REGISTRY_HOST/fixtures/tiny"
    assert_json_error usage
    [[ $ph_error_message == *"$OUT/missing.toml"* ]] || fail "message does not name the file"
}

@test "policy: a profile's setting takes effect in a pull (retries from the profile)" {
    local port
    port=$(_ph_free_port)
    # pod-prefetch: retries = 0, so a refused connection is not retried...
    run_pullhelper 6 pull --policy "$POLICY_DIR/good.toml" --profile pod-prefetch \
        "127.0.0.1:$port/x/y" "oci:$OUT/dest"
    assert_json_error network
    [[ $stderr != *retrying* ]] || fail "retried although the profile sets retries = 0"
    # ...while a profile with retries = 2 and a short delay retries twice.
    local f
    f=$(policy_file retry2 'version = 1\n[pull]\nretries = 0\n[profiles.twice.pull]\nretries = 2\nretry_delay = "50ms"\n')
    run_pullhelper 6 pull --policy "$f" --profile twice "127.0.0.1:$port/x/y" "oci:$OUT/dest"
    assert_json_error network
    assert_equal "$(grep -c retrying <<<"$stderr")" 2
}

###############################################################################
# policy check

@test "policy check: a valid file exits 0 and lists its profiles" {
    run_pullhelper policy check "$POLICY_DIR/good.toml"
    assert_json_result
    assert_equal "$(json_get .valid <<<"$output")" true
    assert_equal "$(json_get .file <<<"$output")" "$POLICY_DIR/good.toml"
    assert_equal "$(json_get .profiles <<<"$output" | "$PH_PYTHON" -c 'import json,sys; print(" ".join(sorted(json.load(sys.stdin))))')" \
        "os-update pod-prefetch"

    local f
    f=$(policy_file minimal 'version = 1\n')
    run_pullhelper policy check "$f"
    assert_equal "$(json_get .valid <<<"$output")" true
    assert_equal "$(json_get .profiles <<<"$output")" "[]"
}

@test "policy check: unknown key → FILE:LINE: section.key" {
    local f
    f=$(policy_file unknown 'version = 1\n\n[pull]\nretries = 2\nfrobnicate = true\n')
    run_pullhelper 2 policy check "$f"
    assert_policy_error "$f" 5 pull.frobnicate
    # A section that is none of the policy's: the line, not its name (the
    # file may be no policy at all, its keys someone else's content).
    f=$(policy_file unknown-section 'version = 1\n[bogus]\nx = 1\n')
    run_pullhelper 2 policy check "$f"
    assert_policy_error "$f" 2 "unknown key outside the policy's sections"
    [[ $ph_error_message != *bogus* ]] || fail "the unknown section's name is repeated: $ph_error_message"
    f=$(policy_file unknown-profile-key 'version = 1\n[profiles.a.pull]\nretries = 1\nnope = 2\n')
    run_pullhelper 2 policy check "$f"
    assert_policy_error "$f" 4 profiles.a.pull.nope
}

@test "policy check: negative retries → FILE:LINE: pull.retries (also inside a profile)" {
    local f
    f=$(policy_file negative 'version = 1\n[pull]\nretries = -1\n')
    run_pullhelper 2 policy check "$f"
    assert_policy_error "$f" 3 pull.retries
    [[ $ph_error_message == *-1* ]] || fail "message does not quote the value"
    f=$(policy_file negative-profile 'version = 1\n\n[profiles.x.pull]\nretries = -3\n')
    run_pullhelper 2 policy check "$f"
    assert_policy_error "$f" 4 profiles.x.pull.retries
}

@test "policy check: memory_max = \"12 apples\" → FILE:LINE: cgroup.memory_max" {
    local f
    f=$(policy_file apples 'version = 1\n\n[cgroup]\nmemory_max = "12 apples"\n')
    run_pullhelper 2 policy check "$f"
    assert_policy_error "$f" 4 cgroup.memory_max
    [[ $ph_error_message == *"12 apples"* ]] || fail "message does not quote the value"
}

@test "policy check: wrong types → FILE:LINE: key (string, bool, list, integer)" {
    local f
    f=$(policy_file wt-int 'version = 1\n[pull]\nretries = "three"\n')
    run_pullhelper 2 policy check "$f"
    assert_policy_error "$f" 3 pull.retries
    f=$(policy_file wt-duration 'version = 1\n[pull]\ntimeout = true\n')
    run_pullhelper 2 policy check "$f"
    assert_policy_error "$f" 3 pull.timeout
    f=$(policy_file wt-bool 'version = 1\n[pull]\nall_architectures = "yes"\n')
    run_pullhelper 2 policy check "$f"
    assert_policy_error "$f" 3 pull.all_architectures
    f=$(policy_file wt-list 'version = 1\n[trust]\ncerts_d = "/etc/containers/certs.d"\n')
    run_pullhelper 2 policy check "$f"
    assert_policy_error "$f" 3 trust.certs_d
    f=$(policy_file wt-version 'version = "1"\n')
    run_pullhelper 2 policy check "$f"
    assert_policy_error "$f" 1 version
}

@test "policy check: TOML syntax error → FILE:LINE: key" {
    local f
    f=$(policy_file syntax 'version = 1\n[pull]\nretries = = 2\n')
    run_pullhelper 2 policy check "$f"
    assert_policy_error "$f" 3 pull.retries
    # A broken table header: at least FILE:LINE:.
    f=$(policy_file syntax2 'version = 1\n[pull\nretries = 2\n')
    run_pullhelper 2 policy check "$f"
    assert_json_error usage
    [[ $ph_error_message =~ ^"$f":[23]: ]] || fail "message '$ph_error_message' does not start with FILE:LINE:"
}

@test "policy check: missing or unsupported version → FILE:LINE: version" {
    local f
    f=$(policy_file noversion '[pull]\nretries = 2\n')
    run_pullhelper 2 policy check "$f"
    assert_policy_error "$f" 1 version
    f=$(policy_file version2 'version = 2\n')
    run_pullhelper 2 policy check "$f"
    assert_policy_error "$f" 1 version
    # A missing file is an error too.
    run_pullhelper 2 policy check "$OUT/does-not-exist.toml"
    assert_json_error usage
    [[ $ph_error_message == *"$OUT/does-not-exist.toml"* ]] || fail "message does not name the file"
}

@test "policy: a pull with an invalid policy fails with 2 before any network" {
    local f before
    f=$(policy_file invalid 'version = 1\n[pull]\nretries = -1\n')
    before=$(registry_log_barrier)
    run_pullhelper 2 pull --policy "$f" "${PH_OPTS[@]}" "$REGISTRY_HOST/invalid-policy/tiny" "oci:$OUT/dest"
    assert_policy_error "$f" 3 pull.retries
    PULLHELPER_POLICY=$f run_pullhelper 2 pull "${PH_OPTS[@]}" "$REGISTRY_HOST/invalid-policy/tiny" "oci:$OUT/dest"
    assert_policy_error "$f" 3 pull.retries
    assert_registry_untouched "$before" invalid-policy
    [[ ! -e $OUT/dest ]] || fail "DEST created"
    assert_no_staging "$OUT"
}

@test "explain refuses what pull refuses from the files it reads first, with the same code and message: a signature policy that does not parse, a missing trust.ca_files file, a --cert-dir that is a file" {
    echo '{"default": [' >"$OUT/bad-sig.json"
    local ca
    ca=$(policy_file ca "version = 1\n[[trust.ca_files]]\nregistry = \"$REGISTRY_HOST\"\nfile = \"$OUT/missing-ca.pem\"\n")
    touch "$OUT/a-file"
    local want exit code flags msg before pulled
    for want in "2|usage|--signature-policy $OUT/bad-sig.json|signature policy $OUT/bad-sig.json: " \
        "4|tls|--policy $ca|reading $OUT/missing-ca.pem: no such file or directory" \
        "4|tls|--cert-dir $OUT/a-file|reading certificate directory $OUT/a-file: "; do
        IFS='|' read -r exit code flags msg <<<"$want"
        before=$(registry_log_barrier)
        # shellcheck disable=SC2086
        run_pullhelper "$exit" pull "${PH_OPTS[@]}" $flags "$REGISTRY_HOST/explain-files/tiny" "oci:$OUT/dest"
        assert_json_error "$code"
        [[ $ph_error_message == "$msg"* ]] || fail "pull $flags: $ph_error_message"
        pulled=$ph_error_message
        # shellcheck disable=SC2086
        run_pullhelper "$exit" explain "${PH_OPTS[@]}" $flags "$REGISTRY_HOST/explain-files/tiny" "oci:$OUT/dest"
        assert_json_error "$code"
        assert_equal "$ph_error_message" "$pulled"
        assert_registry_untouched "$before" explain-files
        [[ ! -e $OUT/dest ]] || fail "DEST created"
    done
}

@test "explain by another user than root: a file of root's it cannot read (a 0600 client key) is a warning, not an error" {
    [[ $(id -u) == 0 ]] || skip "needs root to become another user"
    local certs="$BATS_TEST_TMPDIR/certs"
    mkdir -p "$certs"
    echo cert >"$certs/client.cert"
    echo key >"$certs/client.key" && chmod 600 "$certs/client.key"
    run --separate-stderr env -i PATH="$PATH" HOME=/nonexistent setpriv --reuid 65534 --regid 65534 --clear-groups \
        "$PULLHELPER" explain --cert-dir "$certs" "$REGISTRY_HOST/fixtures/tiny"
    echo "rc=$status stdout=$output stderr=$stderr"
    assert_equal "$status" 0
    assert_equal "$(json_get .plan.reference <<<"$output")" "$REGISTRY_HOST/fixtures/tiny:latest"
    [[ $stderr == *"warning: explain as uid 65534 cannot read a file pull reads as root, and checked the files pull reads only up to it: "*"permission denied"* ]] ||
        fail "no warning: $stderr"
    # As root it reads and checks them, as pull does: this pair does not load.
    run_pullhelper 4 explain --cert-dir "$certs" "$REGISTRY_HOST/fixtures/tiny"
    assert_json_error tls
    [[ $ph_error_message == "loading the certificates of $REGISTRY_HOST: client certificate client.cert and key client.key: "* ]] ||
        fail "$ph_error_message"
}

###############################################################################
# signature policy source

@test "signature policy: source is flag, policy-file or system as configured" {
    echo '{"default":[{"type":"insecureAcceptAnything"}]}' >"$OUT/accept.json"
    run_pullhelper explain --signature-policy "$OUT/accept.json" "$REGISTRY_HOST/fixtures/tiny"
    assert_equal "$(json_get .plan.signature_policy.source <<<"$output")" flag
    assert_equal "$(json_get .plan.signature_policy.file <<<"$output")" "$OUT/accept.json"

    local f
    f=$(policy_file sigpol "version = 1\n[pull]\nsignature_policy = \"$OUT/accept.json\"\n")
    run_pullhelper explain --policy "$f" "$REGISTRY_HOST/fixtures/tiny"
    assert_equal "$(json_get .plan.signature_policy.source <<<"$output")" policy-file
    assert_equal "$(json_get .plan.signature_policy.file <<<"$output")" "$OUT/accept.json"

    # The pull reports the same in its result.
    run_pullhelper pull --policy "$f" "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_equal "$(json_get .signature_policy.source <<<"$output")" policy-file

    if [[ -f /etc/containers/policy.json ]]; then
        run_pullhelper explain "$REGISTRY_HOST/fixtures/tiny"
        assert_equal "$(json_get .plan.signature_policy.source <<<"$output")" system
        assert_equal "$(json_get .plan.signature_policy.file <<<"$output")" /etc/containers/policy.json
    fi
}

@test "signature policy: builtin when /etc/containers/policy.json is absent (unshare -m)" {
    skip_if_not_root "bind-mounting over /etc/containers needs root"
    skip_unless_cmd unshare "needed for a private mount namespace"
    if ! unshare -m true 2>/dev/null; then
        skip "unshare -m does not work here (no mount namespaces)"
    fi
    [[ -d /etc/containers ]] || skip "no /etc/containers on this host to hide"
    mkdir -p "$OUT/empty-etc-containers"
    run --separate-stderr unshare -m sh -c \
        'mount --bind "$1" /etc/containers && exec "$2" explain "$3"' \
        sh "$OUT/empty-etc-containers" "$PULLHELPER" "$REGISTRY_HOST/fixtures/tiny"
    assert_success
    assert_equal "$(json_get .plan.signature_policy.source <<<"$output")" builtin
    local note
    note=$(json_get .plan.signature_policy.note <<<"$output")
    [[ -n $note && $note != null ]] || fail "builtin signature policy has no note saying what it does"
    # And a real pull reports it too.
    run --separate-stderr unshare -m sh -c \
        'mount --bind "$1" /etc/containers && exec "$2" pull --authfile "$4" --cert-dir "$5" "$3" "oci:$6"' \
        sh "$OUT/empty-etc-containers" "$PULLHELPER" "$REGISTRY_HOST/fixtures/tiny" \
        "$REGISTRY_AUTHFILE" "$REGISTRY_CERT_DIR" "$OUT/dest"
    assert_success
    assert_equal "$(json_get .signature_policy.source <<<"$output")" builtin
    # The host's /etc/containers was not affected.
    [[ -d /etc/containers ]] && ! mountpoint -q /etc/containers || fail "/etc/containers changed on the host"
}

###############################################################################
# version

@test "version: prints one JSON object with a version and an integer protocol" {
    run_pullhelper version
    assert_json_result
    local v
    v=$(json_get .version <<<"$output")
    [[ -n $v && $v != null ]] || fail "no version in $output"
    v=$(json_get .protocol <<<"$output")
    [[ $v =~ ^[1-9][0-9]*$ ]] || fail "protocol is not a positive integer in $output"
}

###############################################################################
# hostile or odd local input: every error at once, bounds, overflow, injection

@test "policy check: three bad values → three FILE:LINE: key (--flag): problem lines on stderr, joined with '; ' in JSON, exit 2" {
    local f
    f=$(policy_file three 'version = 1\n[pull]\ntimeout = "soon"\nparallel_layers = 100\n[cgroup]\ndriver = "lxc"\n')
    run_pullhelper 2 policy check "$f"
    assert_json_error usage
    local want1="$f:3: pull.timeout (--timeout): invalid duration \"soon\""
    local want2="$f:4: pull.parallel_layers (--parallel-layers): must be between 1 and 64, not 100"
    local want3="$f:6: cgroup.driver: must be \"auto\", \"cgroupfs\" or \"systemd\", not \"lxc\""
    assert_equal "${#stderr_lines[@]}" 3
    [[ ${stderr_lines[0]} == "pullhelper: $want1"* ]] || fail "line 1 is '${stderr_lines[0]}'"
    [[ ${stderr_lines[1]} == "pullhelper: $want2"* ]] || fail "line 2 is '${stderr_lines[1]}'"
    [[ ${stderr_lines[2]} == "pullhelper: $want3"* ]] || fail "line 3 is '${stderr_lines[2]}'"
    [[ $ph_error_message == "$want1"*"; $want2; $want3" ]] ||
        fail "JSON message '$ph_error_message' does not join the three problems with '; '"
    # A pull with that policy fails the same way, before any network.
    run_pullhelper 2 explain --policy "$f" "$REGISTRY_HOST/fixtures/tiny"
    assert_equal "${#stderr_lines[@]}" 3
}

@test "policy check: 80 KB of nested arrays is refused before decoding (exit 2, bounded memory), as is a file over 1 MiB" {
    local f="$OUT/deep.toml"
    "$PH_PYTHON" -c 'import sys; sys.stdout.write("version = 1\na = " + "[" * 40000 + "]" * 40000 + "\n")' >"$f"
    # 2 GiB of address space (the Go runtime reserves a few hundred MiB at
    # start): the decoder took 16 GB on this file.
    run bash -c 'ulimit -v 2097152 && exec timeout --kill-after=10 120 "$1" policy check "$2"' _ "$PULLHELPER" "$f"
    echo "$output"
    assert_equal "$status" 2
    assert_output --partial "$f:2: arrays or inline tables nested deeper than 16 levels, the limit"
    f="$OUT/big.toml"
    "$PH_PYTHON" -c 'import sys; sys.stdout.write("version = 1\n" + "# padding\n" * 110000)' >"$f"
    run_pullhelper 2 policy check "$f"
    assert_json_error usage
    assert_equal "$ph_error_message" "$f: policy file larger than 1048576 bytes (1 MiB), the limit; a policy is a few KiB"
}

@test "flags: a duration that overflows is a usage error naming the flag and the maximum (it was no timeout)" {
    run_pullhelper 2 explain --timeout 9223372037 "$REGISTRY_HOST/fixtures/tiny"
    assert_json_error usage
    [[ $ph_error_message == '--timeout: invalid duration "9223372037": too large; the maximum is 2562047h47m16.854775807s (9223372036 seconds)' ]] ||
        fail "message is '$ph_error_message'"
    run_pullhelper 2 explain --stall-timeout 3000000h "$REGISTRY_HOST/fixtures/tiny"
    assert_json_error usage
    [[ $ph_error_message == "--stall-timeout: "*"too large; the maximum is"* ]] || fail "message is '$ph_error_message'"
    run_pullhelper 2 explain --memory-max 9000000000000Mi "$REGISTRY_HOST/fixtures/tiny"
    assert_json_error usage
    [[ $ph_error_message == "--memory-max: "*"too large; the maximum is 9223372036854775807 bytes"* ]] || fail "message is '$ph_error_message'"
    # The largest whole-second value still works.
    run_pullhelper explain --timeout 9223372036 "$REGISTRY_HOST/fixtures/tiny"
    assert_equal "$(json_get .plan.timeout_ns <<<"$output")" 9223372036000000000
}

@test "flags: --dns-option, --dns and --dns-search with a newline cannot inject a nameserver (exit 2 naming the flag)" {
    local nl=$'\n'
    run_pullhelper 2 explain --dns 10.0.0.10 --dns-option "ndots:1${nl}nameserver 192.0.2.66" "$REGISTRY_HOST/fixtures/tiny"
    assert_json_error usage
    [[ $ph_error_message == "--dns-option: entry 1: "*"want NAME or NAME:VALUE"* ]] || fail "message is '$ph_error_message'"
    run_pullhelper 2 explain --dns "fe80::1%lo${nl}nameserver 192.0.2.66" "$REGISTRY_HOST/fixtures/tiny"
    assert_json_error usage
    [[ $ph_error_message == "--dns: entry 1: "*"is not an interface name"* ]] || fail "message is '$ph_error_message'"
    run_pullhelper 2 explain --dns 10.0.0.10 --dns-search "svc.local${nl}nameserver 192.0.2.66" "$REGISTRY_HOST/fixtures/tiny"
    assert_json_error usage
    [[ $ph_error_message == "--dns-search: entry 1: "*"is not a domain name"* ]] || fail "message is '$ph_error_message'"
    run_pullhelper 2 explain --dns 10.0.0.10 --dns-option "rotate x" "$REGISTRY_HOST/fixtures/tiny"
    assert_json_error usage
    # The policy file's hosts entries likewise.
    local f
    f=$(policy_file hosts 'version = 1\n[network]\nmode = "cluster-dns"\n[network.dns]\nnameservers = ["10.0.0.10"]\nhosts = ["10.0.0.2 reg\\n192.0.2.66 other"]\n')
    run_pullhelper 2 policy check "$f"
    assert_policy_error "$f" 6 "network.dns.hosts: entry 1"
    # What the kubelet writes is still accepted.
    run_pullhelper explain --dns 10.0.0.10 --dns-option ndots:2 --dns-option single-request-reopen "$REGISTRY_HOST/fixtures/tiny"
    [[ $(json_get .plan.isolation.network.dns.resolv_conf <<<"$output") == *"options ndots:2 single-request-reopen"* ]] ||
        fail "resolv.conf: $(json_get .plan.isolation.network.dns.resolv_conf <<<"$output")"
}
