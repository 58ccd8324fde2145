#!/usr/bin/env bats
#
# pullhelper cri in front of CRI-O (issue 25): the pull goes into
# containers-storage: with CRI-O's storage configuration and answers the
# image_ref CRI-O's PullImage answers (the bare storage ID).
#
# CRI-O itself cannot run here: Debian 12 packages no cri-o (`apt-cache
# policy cri-o` knows no such package), and CRI-O needs conmon, an OCI
# runtime and its own build. So the runtime endpoint is a stand-in,
# tests/criostandin (built below; not part of the shipped binary): it
# answers RuntimeService/Version as CRI-O's server.Version does
# (runtime_name "cri-o") and ImageFsInfo with nothing (crictl checks the
# image endpoint with it), no other call. What is real: crictl (the
# client), pullhelper cri, the htpasswd registry of helpers.bash, the
# containers-storage store CRI-O would use, and podman reading that store.

load helpers
load cri

setup_file() {
    [[ $(id -u) == 0 ]] || return 0
    fixture tiny
    start_registry
    push_fixture tiny
    STANDIN="$BATS_FILE_TMPDIR/criostandin"
    local out
    out=$(cd "$PH_ROOT" && GOFLAGS= CGO_ENABLED=0 "$(_ph_go)" build -o "$STANDIN" ./tests/criostandin 2>&1) ||
        fail "go build ./tests/criostandin failed: $out"
    export STANDIN
}

teardown_file() {
    [[ -z ${REGISTRY_PID:-} ]] || stop_registry
}

setup() {
    [[ $(id -u) == 0 ]] || skip "pullhelper cri runs as root"
    skip_unless_cmd podman
    CRICTL=$(command -v crictl || true)
    [[ -n $CRICTL ]] || CRICTL="$PH_CACHE/bin/crictl"
    [[ -x $CRICTL ]] || skip "crictl not found in PATH or $PH_CACHE/bin (make deps builds it)"
    cri_setup crio
    RT_PID=""
    # storage.conf names store A; the tests' crio.conf moves it.
    STORAGE_CONF=$T/storage.conf
    printf '[storage]\ndriver = "vfs"\nrunroot = "%s"\ngraphroot = "%s"\n' "$T/a/run" "$T/a/graph" >"$STORAGE_CONF"
    printf 'version = 1\n[dest]\nstorage_conf = "%s"\n' "$STORAGE_CONF" >"$T/policy.toml"
    RT_SOCK=$T/crio/crio.sock
    mkdir -p "$T/crio"
    "$STANDIN" -listen "$RT_SOCK" -runtime-version 1.36.0 </dev/null >"$T/standin.log" 2>&1 &
    RT_PID=$!
    local deadline=$((SECONDS + 30))
    until [[ -S $RT_SOCK ]]; do
        _ph_pid_alive "$RT_PID" || { fail "criostandin exited: $(cat "$T/standin.log")"; return; }
        ((SECONDS < deadline)) || { fail "criostandin did not listen within 30 s"; return; }
        sleep 0.05
    done
}

teardown() {
    cri_stop
    [[ -z ${RT_PID:-} ]] || _ph_stop_pid "$RT_PID" criostandin
    cri_cgroups_rm "$CG_PARENT"
}

# cri_up [FLAGS...]: pullhelper cri on $PH_SOCK in front of the stand-in,
# logging to $T/cri.log; waits (at most 30 s) for it to serve (cri.bash's
# cri_serve; pcrictl: the image service at pullhelper).
cri_up() {
    cri_serve "$RT_SOCK" --cert-dir "$REGISTRY_CERT_DIR" "$@"
}

# config_hex REPO:TAG: the hex of the image's config digest (CRI-O's and
# containers-storage's image ID).
config_hex() {
    # shellcheck disable=SC2046
    registry_skopeo inspect --config --raw $(registry_skopeo_opts) "docker://$REGISTRY_HOST/$1" | sha256sum | cut -d' ' -f1
}

# podman_on GRAPH RUN ARGS...: podman on that vfs store only.
podman_on() {
    local g=$1 r=$2
    shift 2
    CONTAINERS_STORAGE_CONF=$STORAGE_CONF podman --root "$g" --runroot "$r" --storage-driver vfs "$@"
}

@test "cri-o: detected by Version (runtime_name cri-o); crictl pull lands in storage.conf's store; podman sees the ID and tag; image_ref is the bare ID, as CRI-O answers" {
    [[ ! -e /etc/crio ]] || skip "this host has /etc/crio, which the default --crio-config and --crio-config-dir would read"
    cri_up --policy "$T/policy.toml"
    local serving
    serving=$(grep '"msg":"serving"' "$T/cri.log")
    assert_equal "$(json_get .runtime <<<"$serving")" cri-o
    assert_equal "$(json_get .runtime_version <<<"$serving")" 1.36.0
    assert_equal "$(json_get .runtime_from <<<"$serving")" Version
    grep '"msg":"cri-o store"' "$T/cri.log" | grep -qF "containers-storage:[vfs@$T/a/graph+$T/a/run]IMAGE" ||
        fail "the store is not storage.conf's: $(cat "$T/cri.log")"

    local img="$REGISTRY_HOST/fixtures/tiny:latest" id digest
    id=$(config_hex fixtures/tiny:latest)
    digest=$(registry_digest fixtures/tiny:latest)
    run pcrictl pull --creds "$(creds)" "$img"
    echo "$output"
    assert_success
    # CRI-O's image_ref: the storage ID without sha256: (crictl prints it).
    assert_output "Image is up to date for $id"

    run podman_on "$T/a/graph" "$T/a/run" images --digests --no-trunc --format '{{.Repository}}:{{.Tag}} {{.Digest}} {{.ID}}'
    echo "$output"
    assert_success
    assert_output "$img $digest sha256:$id"
    run podman_on "$T/a/graph" "$T/a/run" image inspect "$img"
    assert_success
    assert_equal "$(json_get '.[0].Id' <<<"$output")" "$id"
    assert_equal "$(json_get '.[0].RepoTags[0]' <<<"$output")" "$img"
    [[ $(json_get '.[0].RepoDigests' <<<"$output") == *"$REGISTRY_HOST/fixtures/tiny@$digest"* ]] ||
        fail "RepoDigests lack the registry's digest: $output"
    local line
    line=$(grep '"msg":"pull"' "$T/cri.log")
    assert_equal "$(json_get .runtime <<<"$line")" cri-o
    assert_equal "$(json_get .image_id <<<"$line")" "sha256:$id"
    assert_secret_absent -f "$T/cri.log" "$T/cri.out"

    # Every other call goes to the runtime: the stand-in answers only
    # Version, so ListImages comes back Unimplemented from it.
    run pcrictl images
    assert_failure
    assert_output --partial Unimplemented
}

@test "cri-o: the store of crio.conf and its drop-ins, with CRI-O's precedence, takes the pull; a short name resolves through registries.conf and names the stored image" {
    local c=$T/etc/crio
    mkdir -p "$c/crio.conf.d/10-sub"
    # crio.conf moves the graph root (over storage.conf's), a drop-in in a
    # subdirectory sets another that a later drop-in overrides, and a
    # drop-in with an empty root keeps it (UpdateFromDropInFile).
    printf '[crio]\nroot = "%s"\nstorage_driver = "vfs"\n[crio.runtime]\ncgroup_manager = "cgroupfs"\n' "$T/b/graph" >"$c/crio.conf"
    printf '[crio]\nroot = "%s"\n' "$T/wrong/graph" >"$c/crio.conf.d/10-sub/50.conf"
    printf '[crio]\nroot = "%s"\nrunroot = "%s"\n' "$T/c/graph" "$T/c/run" >"$c/crio.conf.d/20-store.conf"
    printf '[crio]\nroot = ""\n' >"$c/crio.conf.d/30-empty.conf"
    printf 'unqualified-search-registries = ["%s"]\n' "$REGISTRY_HOST" >"$T/registries.conf"
    cri_up --storage-conf "$STORAGE_CONF" --crio-config "$c/crio.conf" --crio-config-dir "$c/crio.conf.d" --registries-conf "$T/registries.conf" \
        --authfile "$REGISTRY_AUTHFILE"
    assert_equal "$(grep '"msg":"serving"' "$T/cri.log" | json_get .runtime_from)" --crio-config

    local id
    id=$(config_hex fixtures/tiny:latest)
    # A short name: CRI-O resolves it through registries.conf (the one
    # unqualified-search registry); the stored image is named after it.
    # The request's credential (no server_address) is docker.io's, as the
    # name reads before resolution, and is not offered to the registry the
    # name resolves to (CRI-O would offer it to every candidate): the node's
    # --authfile entry for that registry pulls.
    run pcrictl pull --creds "$(creds)" fixtures/tiny
    echo "$output"
    assert_success
    assert_equal "$(grep '"msg":"pull"' "$T/cri.log" | json_get .registry)" docker.io
    assert_output "Image is up to date for $id"
    run podman_on "$T/c/graph" "$T/c/run" images --no-trunc --format '{{.Repository}}:{{.Tag}} {{.ID}}'
    echo "$output"
    assert_success
    assert_output "$REGISTRY_HOST/fixtures/tiny:latest sha256:$id"
    # Nothing went to storage.conf's store, the crio.conf root or the
    # overridden drop-in's.
    [[ ! -e $T/a/graph && ! -e $T/b/graph && ! -e $T/wrong ]] || fail "a store other than the drop-ins' was created: $(ls "$T")"
}

@test "cri-o: a crio.conf drop-in CRI-O could not load is exit 2 naming the file, not its content; conflicting runtime flags are exit 2 naming them" {
    local c=$T/etc/crio
    mkdir -p "$c/crio.conf.d"
    printf '[crio]\nroot = "%s"\n' "$T/b/graph" >"$c/crio.conf"
    # TOML's parser quotes what it found ("expected value but found ..."):
    # the message keeps the file and line, never that.
    printf '[crio]\nrunroot = secretmarker%s\n' "$$" >"$c/crio.conf.d/50-broken.conf"
    run_pullhelper 2 cri --listen "unix://$T/ph/cri.sock" --runtime-endpoint "unix://$RT_SOCK" --storage-conf "$STORAGE_CONF" \
        --crio-config "$c/crio.conf" --crio-config-dir "$c/crio.conf.d"
    assert_json_error usage
    assert_output --partial "$c/crio.conf.d/50-broken.conf (--crio-config-dir): unable to decode it"
    refute_output --partial secretmarker
    [[ ! -e $T/ph/cri.sock && ! -e $T/b ]] || fail "something was created: $(ls -R "$T")"

    # A named --crio-config that is missing fails, as CRI-O's --config does.
    run_pullhelper 2 cri --listen "unix://$T/ph/cri.sock" --runtime-endpoint "unix://$RT_SOCK" --storage-conf "$STORAGE_CONF" \
        --crio-config "$c/none.conf" --crio-config-dir "$c/none.d"
    assert_json_error usage
    assert_output --partial "$c/none.conf (--crio-config): file does not exist"

    run_pullhelper 2 cri --listen "unix://$T/ph/cri.sock" --runtime-endpoint "unix://$RT_SOCK" --runtime cri-o --containerd-config "$c/crio.conf"
    assert_json_error usage
    assert_output --partial "--containerd-config (auth.containerd_config) is containerd's"
    run_pullhelper 2 cri --listen "unix://$T/ph/cri.sock" --runtime-endpoint "unix://$RT_SOCK" --storage-conf "$STORAGE_CONF" --pin
    assert_json_error usage
    assert_output --partial "--pin is for a containerd: DEST, and the runtime is cri-o (from --storage-conf)"
    run_pullhelper 2 cri --listen "unix://$T/ph/cri.sock" --runtime-endpoint "unix://$RT_SOCK" --runtime crio
    assert_json_error usage
    assert_output --partial '--runtime \"crio\": want auto, containerd or cri-o'
    [[ ! -e $T/ph/cri.sock ]] || fail "a socket was created"
}

@test "cri-o: a graph root from crio.conf in a directory a local user owns is refused before anything is created there" {
    local c=$T/etc/crio u=$T/user
    mkdir -p "$c" "$u"
    chown 65534:65534 "$u"
    chmod 0755 "$T"
    printf '[crio]\nroot = "%s"\nrunroot = "%s"\n' "$u/graph" "$T/r/run" >"$c/crio.conf"
    cri_up --storage-conf "$STORAGE_CONF" --crio-config "$c/crio.conf" --crio-config-dir "$c/none.d"
    run pcrictl pull --creds "$(creds)" "$REGISTRY_HOST/fixtures/tiny:latest"
    echo "$output"
    assert_failure
    assert_output --partial "pullhelper: destination:"
    assert_output --partial "$u"
    run ls -A "$u"
    assert_success
    assert_output ""
}

# A pull by digest, as the kubelet sends one for every digest-pinned pod
# image: CRI-O's PullImage (server/image_pull.go, internal/storage
# PullImage) copies into containers/image's storage reference of the
# pulled name, which stores the image as REPO@DIGEST with no tag
# (storageImageDestination.CommitWithOptions), and answers the bare
# storage ID as for a tag.
@test "cri-o: crictl pull REPO@DIGEST stores the image as REPO@DIGEST, no tag; podman lists that digest; image_ref is the bare ID; a second pull of the digest is fine" {
    local c=$T/etc/crio
    mkdir -p "$c"
    printf '[crio]\nroot = "%s"\nrunroot = "%s"\nstorage_driver = "vfs"\n' "$T/d/graph" "$T/d/run" >"$c/crio.conf"
    cri_up --storage-conf "$STORAGE_CONF" --crio-config "$c/crio.conf" --crio-config-dir "$c/none.d"
    local repo="$REGISTRY_HOST/fixtures/tiny" id digest
    id=$(config_hex fixtures/tiny:latest)
    digest=$(registry_digest fixtures/tiny:latest)
    local n
    for n in 1 2; do
        run pcrictl pull --creds "$(creds)" "$repo@$digest"
        echo "$output"
        assert_success
        assert_output "Image is up to date for $id"
        [[ $(grep -c '"msg":"pull"' "$T/cri.log") == "$n" ]] || fail "pull $n: $(grep -c '"msg":"pull"' "$T/cri.log") pull lines: $(cat "$T/cri.log")"
    done
    grep '"msg":"pull"' "$T/cri.log" | while read -r line; do
        assert_equal "$(json_get .image_id <<<"$line")" "sha256:$id"
    done

    run podman_on "$T/d/graph" "$T/d/run" images --digests --no-trunc --format '{{.Repository}}:{{.Tag}} {{.Digest}} {{.ID}}'
    echo "$output"
    assert_success
    assert_output "$repo:<none> $digest sha256:$id"
    run podman_on "$T/d/graph" "$T/d/run" image inspect "$repo@$digest"
    assert_success
    assert_equal "$(json_get '.[0].Id' <<<"$output")" "$id"
    assert_equal "$(json_get '.[0].RepoTags' <<<"$output")" "[]"
    [[ $(json_get '.[0].RepoDigests' <<<"$output") == *"$repo@$digest"* ]] || fail "RepoDigests lack $repo@$digest: $output"
    assert_secret_absent -f "$T/cri.log" "$T/cri.out"

    # A malformed digest is still InvalidArgument, before any pull.
    run pcrictl pull --creds "$(creds)" "$repo@sha256:abc"
    echo "$output"
    assert_failure
    assert_output --partial InvalidArgument
    [[ $(grep -c '"msg":"pull started"' "$T/cri.log") == 2 ]] || fail "a malformed digest was pulled: $(cat "$T/cri.log")"
    assert_equal "$(grep '"msg":"pull"' "$T/cri.log" | tail -1 | json_get .code)" InvalidArgument
}

@test "cri-o: a runtime socket root does not own is refused, named with its owner: at start (--runtime auto's Version call) and for every forwarded call" {
    chown 65534:65534 "$RT_SOCK"
    # auto: the Version call is refused at each dial; after the bounded wait
    # (15 s) the start fails naming the socket and its owner.
    run_pullhelper 2 cri --listen "unix://$T/ph/cri.sock" --runtime-endpoint "unix://$RT_SOCK" --policy "$T/policy.toml"
    assert_json_error usage
    assert_output --partial "runtime socket $RT_SOCK is owned by uid 65534, not root"
    [[ ! -e $T/ph/cri.sock ]] || fail "a socket was created"
    # Named: the service starts; crictl's ImageFsInfo, forwarded, is not
    # sent to that socket.
    cri_up --runtime cri-o --storage-conf "$STORAGE_CONF" --crio-store "[vfs@$T/s/graph+$T/s/run]"
    run pcrictl imagefsinfo
    echo "$output"
    assert_failure
    assert_output --partial "owned by uid 65534, not root"
}

@test "cri-o: a refused connection fails 'RegistryUnavailable: …' and a signature policy's rejection 'SignatureValidationFailed: …', code Unknown, as CRI-O's PullImage fails them (the kubelet's evalCRIPullErr reads the prefix)" {
    local c=$T/etc/crio
    mkdir -p "$c"
    printf '[crio]\nstorage_driver = "vfs"\n' >"$c/crio.conf"
    printf '{"default":[{"type":"reject"}]}\n' >"$T/reject.json"
    cri_up --storage-conf "$STORAGE_CONF" --crio-config "$c/crio.conf" --crio-config-dir "$c/none.d" \
        --signature-policy "$T/reject.json" --retries 0
    run pcrictl pull "127.0.0.1:1/fixtures/tiny:latest"
    echo "$output"
    assert_failure
    assert_output --partial "code = Unknown desc = RegistryUnavailable: pullhelper: network: "
    run pcrictl pull --creds "$(creds)" "$REGISTRY_HOST/fixtures/tiny:latest"
    echo "$output"
    assert_failure
    assert_output --partial "code = Unknown desc = SignatureValidationFailed: pullhelper: verification: "
    assert_equal "$(grep '"msg":"pull"' "$T/cri.log" | tail -1 | json_get .code)" Unknown
    assert_secret_absent -f "$T/cri.log" "$T/cri.out"
}

# CRI-O's node credentials: [crio.image] global_auth_file is its only auth
# file (SystemContext.AuthFilePath), so a pull without the kubelet's
# credential authenticates with it, and while it is missing no file gives
# one (root's ~/.docker/config.json is not read, as CRI-O reads none);
# without the setting the default files are searched.
@test "cri-o: [crio.image] global_auth_file is the node's only credential file for a pull without the kubelet's credential; a missing one gives none; without it the default files are searched" {
    local c=$T/etc/crio img="$REGISTRY_HOST/fixtures/tiny:latest"
    mkdir -p "$c" "$T/home/.docker" "$T/home2"
    cp "$REGISTRY_AUTHFILE" "$T/home/.docker/config.json"
    printf '[crio]\nstorage_driver = "vfs"\n[crio.image]\nglobal_auth_file = "%s"\n' "$T/missing.json" >"$c/crio.conf"
    HOME=$T/home cri_up --storage-conf "$STORAGE_CONF" --crio-config "$c/crio.conf" --crio-config-dir "$c/none.d"
    run pcrictl pull "$img"
    echo "$output"
    assert_failure
    assert_output --partial Unauthenticated
    [[ $output == *"$T/missing.json"* && $output != *"$T/home/.docker/config.json"* ]] ||
        fail "the refusal does not name global_auth_file alone as the file searched: $output"
    cri_stop
    printf '[crio]\nstorage_driver = "vfs"\n' >"$c/crio.conf"
    CRI_APPEND=1 HOME=$T/home cri_up --storage-conf "$STORAGE_CONF" --crio-config "$c/crio.conf" --crio-config-dir "$c/none.d"
    run pcrictl pull "$img"
    echo "$output"
    assert_success
    cri_stop
    # Another name of the image: the store has the first one.
    push_fixture tiny fixtures/tiny-gaf:latest
    printf '[crio]\nstorage_driver = "vfs"\n[crio.image]\nglobal_auth_file = "%s"\n' "$REGISTRY_AUTHFILE" >"$c/crio.conf"
    CRI_APPEND=1 HOME=$T/home2 cri_up --storage-conf "$STORAGE_CONF" --crio-config "$c/crio.conf" --crio-config-dir "$c/none.d"
    local before
    before=$(registry_log_barrier)
    run pcrictl pull "$REGISTRY_HOST/fixtures/tiny-gaf:latest"
    echo "$output"
    assert_success
    assert_equal "$(pull_lines | tail -1 | json_get .result)" ok
    tail -n +"$((before + 1))" "$REGISTRY_LOG" | grep -q '"GET /v2/fixtures/tiny-gaf/manifests/' || fail "the registry was not asked for the manifest"
    assert_secret_absent -f "$T/cri.log" "$T/cri.out"
}

@test "cri-o: [crio.image] signature_policy is the node's policy unless pullhelper names its own; signature_policy_dir/NAMESPACE.json replaces it for that namespace's pods, as CRI-O's pullImage does" {
    local c=$T/etc/crio
    mkdir -p "$c" "$T/policies"
    printf '{"default":[{"type":"reject"}]}\n' >"$T/reject.json"
    printf '{"default":[{"type":"insecureAcceptAnything"}]}\n' >"$T/accept.json"
    cp "$T/reject.json" "$T/policies/strict.json"
    printf '[crio]\nstorage_driver = "vfs"\n[crio.image]\nsignature_policy = "%s"\nsignature_policy_dir = "%s"\n' \
        "$T/accept.json" "$T/policies" >"$c/crio.conf"
    cri_up --storage-conf "$STORAGE_CONF" --crio-config "$c/crio.conf" --crio-config-dir "$c/none.d"
    local img="$REGISTRY_HOST/fixtures/tiny:latest" ns
    for ns in strict other; do
        printf '{"metadata":{"name":"p","namespace":"%s","uid":"u-%s"}}\n' "$ns" "$ns" >"$T/pod-$ns.json"
    done
    # The strict namespace's own policy rejects; another namespace, and a
    # pull without a pod, get the node's (crio.conf's), which accepts.
    run pcrictl pull --creds "$(creds)" --pod-config "$T/pod-strict.json" "$img"
    echo "$output"
    assert_failure
    assert_output --partial "SignatureValidationFailed: "
    grep '"msg":"pull started"' "$T/cri.log" | grep -qF "\"signature_policy\":\"$T/policies/strict.json\"" ||
        fail "the pull's pod settings do not name the namespace's policy: $(grep '"msg":"pull started"' "$T/cri.log")"
    run pcrictl pull --creds "$(creds)" --pod-config "$T/pod-other.json" "$img"
    assert_success
    run pcrictl pull --creds "$(creds)" "$img"
    assert_success
    # A namespace that is no namespace name never becomes a path.
    printf '{"metadata":{"name":"p","namespace":"../policies/strict","uid":"u"}}\n' >"$T/pod-bad.json"
    run pcrictl pull --creds "$(creds)" --pod-config "$T/pod-bad.json" "$img"
    assert_failure
    assert_output --partial InvalidArgument
    cri_stop
    # crio.conf's policy rejecting: the node's pulls fail, unless
    # pullhelper's own --signature-policy names one.
    printf '[crio]\nstorage_driver = "vfs"\n[crio.image]\nsignature_policy = "%s"\n' "$T/reject.json" >"$c/crio.conf"
    cri_up --storage-conf "$STORAGE_CONF" --crio-config "$c/crio.conf" --crio-config-dir "$c/none.d"
    run pcrictl pull --creds "$(creds)" "$img"
    assert_failure
    assert_output --partial "SignatureValidationFailed: "
    cri_stop
    CRI_APPEND=1 cri_up --storage-conf "$STORAGE_CONF" --crio-config "$c/crio.conf" --crio-config-dir "$c/none.d" --signature-policy "$T/accept.json"
    run pcrictl pull --creds "$(creds)" "$img"
    assert_success
}
