#!/usr/bin/env bats
#
# pullhelper pull into containers-storage:[vfs@GRAPHROOT+RUNROOT]REF: a vfs
# store under the test directory, read back with podman and skopeo (Debian
# packages), against the real registry started by setup_file.

load helpers

BUSYBOX=/bin/busybox

setup_file() {
    start_registry
    push_fixture tiny
    push_fixture multi
    # The shell fixture: busybox-static (make deps) as /bin/busybox, /bin/sh
    # a symlink to it. The layout depends on the host's busybox, so its name
    # carries the binary's digest (a new busybox is a new fixture).
    if [[ -x $BUSYBOX ]]; then
        local sum
        sum=$(sha256sum "$BUSYBOX" | cut -c1-16)
        push_fixture_args "shell-$sum" fixtures/shell -layers 0 -platforms "linux/$("$(_ph_go)" env GOARCH)" \
            -file "$BUSYBOX:/bin/busybox" -symlink /bin/sh=busybox -cmd '["/bin/sh"]'
    fi
}

teardown_file() {
    stop_registry
}

setup() {
    ph_test_setup
    PODMAN_CGROUP=/pullhelper-bats-podman-$$-$BATS_TEST_NUMBER
    STORE=$BATS_TEST_TMPDIR/store
    GRAPH=$STORE/graph
    RUN=$STORE/run
    # A storage.conf of the test's own: nothing from the host's
    # /etc/containers (podman needs runroot and graphroot in it).
    STORAGE_CONF=$BATS_TEST_TMPDIR/storage.conf
    printf '[storage]\ndriver = "vfs"\nrunroot = "%s"\ngraphroot = "%s"\n' "$RUN" "$GRAPH" >"$STORAGE_CONF"
    POLICY=$BATS_TEST_TMPDIR/policy.toml
    printf 'version = 1\n[dest]\nstorage_conf = "%s"\n' "$STORAGE_CONF" >"$POLICY"
    DEST="containers-storage:[vfs@$GRAPH+$RUN]$REGISTRY_HOST/fixtures/tiny:v1"
}

# podman_store ARGS...: podman on the test's store only.
podman_store() {
    CONTAINERS_STORAGE_CONF=$STORAGE_CONF podman --root "$GRAPH" --runroot "$RUN" --storage-driver vfs "$@"
}

# teardown: nothing the test's store mounted stays mounted (an overlay
# store's container or layer mounts), innermost first.
teardown() {
    local m
    # A background process a failed test left (a pull, a lock holder).
    [[ -z ${BG_PID:-} ]] || { kill -KILL "$BG_PID" 2>/dev/null; wait "$BG_PID" 2>/dev/null; } || true
    [[ -z ${L_PID:-} ]] || { kill -KILL "$L_PID" 2>/dev/null; wait "$L_PID" 2>/dev/null; } || true
    findmnt -rn -o TARGET | grep -F "$BATS_TEST_TMPDIR/" | sort -r | while read -r m; do
        umount "$m" || umount -l "$m" || true
    done
    # The (empty, the containers were --rm) cgroups podman_run made.
    local c
    for c in /sys/fs/cgroup/*/"${PODMAN_CGROUP#/}" /sys/fs/cgroup/"${PODMAN_CGROUP#/}"; do
        [[ -d $c ]] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null
    done
    return 0
}

# podman_run ARGS...: podman run --rm on the test's store, with the
# container state (--tmpdir) under the test directory, cgroupfs under a
# cgroup parent of the test's own (teardown removes it), the file
# events backend and runc. The ulimits are below this environment's: podman's
# defaults (nofile 1048576, nproc its own raised hard limit) are above the
# hard limits here and runc's prlimit then fails with EPERM ("error setting
# rlimit type 7/6: operation not permitted") without CAP_SYS_RESOURCE.
podman_run() {
    CONTAINERS_STORAGE_CONF=$STORAGE_CONF podman --root "$GRAPH" --runroot "$RUN" --storage-driver "${DRIVER:-vfs}" \
        --tmpdir "$BATS_TEST_TMPDIR/libpod" --cgroup-manager cgroupfs --events-backend file --runtime runc \
        run --rm --network none --cgroup-parent "$PODMAN_CGROUP" --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 "$@"
}

# blob_gets FROM: the blob GETs in the registry log after line FROM.
blob_gets() {
    tail -n +"$(($1 + 1))" "$REGISTRY_LOG" | grep -oE '"GET /v2/[^ "]*/blobs/sha256:[0-9a-f]{64}' | sed 's/.*blobs\///' || true
}

@test "containers-storage: tiny into a vfs store — podman and skopeo list it with the registry's digest, the ID is the config digest" {
    skip_unless_cmd podman
    local want config
    want=$(registry_digest fixtures/tiny:latest)
    config=$(registry_manifest fixtures/tiny:latest | json_get .config.digest)

    run_pullhelper pull --policy "$POLICY" "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "$DEST"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$want"
    assert_equal "$(json_get .destination <<<"$output")" "$DEST"
    assert_equal "$(json_get .image_id <<<"$output")" "$config"
    # The store it went to: the driver it runs with, its roots, the conf.
    local store
    store=$(json_get .store <<<"$output")
    assert_equal "$(json_get .type <<<"$store")" containers-storage
    assert_equal "$(json_get .driver <<<"$store")" vfs
    assert_equal "$(json_get .graph_root <<<"$store")" "$GRAPH"
    assert_equal "$(json_get .run_root <<<"$store")" "$RUN"
    assert_equal "$(json_get .storage_conf <<<"$store")" "$STORAGE_CONF"
    assert_equal "$(json_get '.names[0]' <<<"$store")" "$REGISTRY_HOST/fixtures/tiny:v1"
    # Staging lived in the graph root and is gone; no OCI layout left there.
    run ls -A "$GRAPH"
    refute_output --partial .pullhelper-staging-
    refute_output --partial pullhelper-import

    run podman_store images --digests --no-trunc --format '{{.Repository}}:{{.Tag}} {{.Digest}} {{.ID}}'
    assert_success
    echo "$output"
    assert_output "$REGISTRY_HOST/fixtures/tiny:v1 $want $config"

    run ph_skopeo inspect "containers-storage:[vfs@$GRAPH+$RUN]$REGISTRY_HOST/fixtures/tiny:v1"
    assert_success
    assert_equal "$(json_get .Digest <<<"$output")" "$want"
    # The stored manifest is the registry's, byte for byte.
    run ph_skopeo inspect --raw "containers-storage:[vfs@$GRAPH+$RUN]$REGISTRY_HOST/fixtures/tiny:v1"
    assert_success
    assert_equal "sha256:$(printf '%s' "$output" | sha256sum | cut -d' ' -f1)" "$want"
}

@test "containers-storage: a second pull fetches no blob (the store's layers and config are known); the image stays listed once" {
    skip_unless_cmd podman
    local config before layers
    config=$(registry_manifest fixtures/tiny:latest | json_get .config.digest)
    layers=$(registry_manifest fixtures/tiny:latest | "$PH_PYTHON" -c 'import json,sys; print("\n".join(l["digest"] for l in json.load(sys.stdin)["layers"]))')
    [[ -n $layers ]] || fail "the fixture has no layers"

    before=$(registry_log_barrier)
    run_pullhelper pull --policy "$POLICY" "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "$DEST"
    assert_json_result
    # The first pull fetched every layer (so the log check below can fail).
    local got l
    got=$(blob_gets "$before")
    for l in $layers; do
        grep -qx "$l" <<<"$got" || fail "the first pull did not fetch layer $l: $got"
    done

    before=$(registry_log_barrier)
    run_pullhelper pull --policy "$POLICY" "${PH_OPTS[@]}" --progress-fd 3 "$REGISTRY_HOST/fixtures/tiny" "${DEST%:v1}:v2" 3>"$OUT/events"
    assert_json_result
    got=$(blob_gets "$before")
    echo "blobs fetched by the second pull: $got"
    for l in $layers; do
        ! grep -qx "$l" <<<"$got" || fail "the second pull fetched layer $l again"
    done
    # Nor the config: the store's is handed to the copy (its bytes, digest
    # checked), so the second pull fetches no blob at all.
    [[ -z $got ]] || fail "the second pull fetched blobs: $got (config $config)"
    grep -q '"skipped":true' "$OUT/events" || fail "no skipped layer event"

    run podman_store images --digests --no-trunc --format '{{.ID}} {{.Repository}}:{{.Tag}}'
    assert_success
    echo "$output"
    # One image (one ID) with both names.
    assert_equal "$(cut -d' ' -f1 <<<"$output" | sort -u)" "$config"
    assert_output --partial "$REGISTRY_HOST/fixtures/tiny:v1"
    assert_output --partial "$REGISTRY_HOST/fixtures/tiny:v2"
}

@test "containers-storage: explain shows the store settings; a bad DEST is exit 2 with a one-line message and touches nothing" {
    run_pullhelper explain --policy "$POLICY" "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "$DEST"
    echo "$output" | grep -q . || fail "no explain output"
    local store
    store=$(json_get .plan.destination.store <<<"$output")
    assert_equal "$(json_get .driver <<<"$store")" vfs
    assert_equal "$(json_get .graph_root <<<"$store")" "$GRAPH"
    assert_equal "$(json_get .run_root <<<"$store")" "$RUN"
    assert_equal "$(json_get .storage_conf <<<"$store")" "$STORAGE_CONF"
    [[ ! -e $STORE ]] || fail "explain created $STORE"

    local before bad
    before=$(registry_log_barrier)
    for bad in "containers-storage:[vfs@$GRAPH+$RUN" "containers-storage:[vfs@relative+$RUN]x" \
        "containers-storage:[btrfs@$GRAPH+$RUN]x" "containers-storage:[vfs@$GRAPH+$RUN]" \
        "containers-storage:[vfs@$GRAPH+$RUN]Bad/Name"; do
        run_pullhelper 2 pull --policy "$POLICY" "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "$bad"
        assert_json_error usage
        [[ $ph_error_message != *$'\n'* ]] || fail "message is not one line: $ph_error_message"
        [[ $ph_error_message == *containers-storage* || $ph_error_message == *driver* ]] || fail "message names nothing to fix: $ph_error_message"
    done
    assert_equal "$(wc -l <"$REGISTRY_LOG")" "$before"
    [[ ! -e $STORE ]] || fail "a refused DEST created $STORE"
}

# _said TEXT: the background pull said TEXT on stderr.
_said() { grep -qF -- "$1" "$OUT/bg.err"; }

@test "containers-storage: kill -9 of the parent mid-import (a layer in the store, no image record yet) — podman lists no image; the rerun completes" {
    skip_unless_cmd podman
    [[ -x $PULLHELPER_HOSTILE_BIN ]] || fail "hostile build missing: $PULLHELPER_HOSTILE_BIN (make build-hostile)"
    local want
    want=$(registry_digest fixtures/tiny:latest)
    # The import's temporary files go in staging, not in $TMPDIR.
    mkdir "$BATS_TEST_TMPDIR/tmp"
    env TMPDIR="$BATS_TEST_TMPDIR/tmp" PULLHELPER_HOSTILE_IMPORT=hold-after-layer "$PULLHELPER_HOSTILE_BIN" pull --policy "$POLICY" "${PH_OPTS[@]}" \
        "$REGISTRY_HOST/fixtures/tiny" "$DEST" >"$OUT/bg.out" 2>"$OUT/bg.err" &
    local pid=$! rc=0
    local deadline=$((SECONDS + 120))
    until _said "holding the import with layer"; do
        ((SECONDS < deadline)) || { kill -KILL "$pid"; fail "the import was never held: $(cat "$OUT/bg.err")"; return; }
        kill -0 "$pid" 2>/dev/null || { fail "the pull exited before the import was held: $(cat "$OUT/bg.out" "$OUT/bg.err")"; return; }
        sleep 0.05
    done
    kill -KILL "$pid"
    wait "$pid" || rc=$?
    assert_equal "$rc" 137
    # containers/image's blob-info cache is in the killed pull's staging
    # (swept below), none in $TMPDIR.
    run ls -A "$BATS_TEST_TMPDIR/tmp"
    assert_output ""
    ls -d "$GRAPH"/.pullhelper-staging-*/blob-info-cache >/dev/null || fail "no blob-info cache in the killed pull's staging"

    # The layer is in the store, the image is not: nothing is listed.
    local layer
    layer=$(registry_manifest fixtures/tiny:latest | json_get '.layers[0].digest')
    grep -qF "\"$layer\"" "$GRAPH/vfs-layers/layers.json" || fail "the layer $layer is not in the store: the kill was not mid-import"
    run podman_store images -a --noheading
    assert_success
    assert_output ""
    run ph_skopeo inspect "containers-storage:[vfs@$GRAPH+$RUN]$REGISTRY_HOST/fixtures/tiny:v1"
    assert_failure

    # gc DEST finds the killed pull's staging in the graph root.
    ls -d "$GRAPH"/.pullhelper-staging-* >/dev/null || fail "the killed pull left no staging in $GRAPH"
    run_pullhelper gc --policy "$POLICY" "$DEST"
    [[ $(json_get .staging <<<"$output") == *"$GRAPH/.pullhelper-staging-"* ]] || fail "gc did not sweep the staging in $GRAPH"
    ! ls -d "$GRAPH"/.pullhelper-staging-* 2>/dev/null || fail "staging left in $GRAPH after gc"

    run_pullhelper pull --policy "$POLICY" "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "$DEST"
    assert_json_result
    run podman_store images --digests --no-trunc --format '{{.Repository}}:{{.Tag}} {{.Digest}}'
    assert_success
    assert_output "$REGISTRY_HOST/fixtures/tiny:v1 $want"
    run ph_skopeo inspect "containers-storage:[vfs@$GRAPH+$RUN]$REGISTRY_HOST/fixtures/tiny:v1"
    assert_success
    run ls -A "$GRAPH"
    refute_output --partial .pullhelper-staging-
}

@test "containers-storage: one platform of a multi-platform index — the image's Digest is the index's (as containers/image's copy makes the index the top-level manifest); RepoDigests hold the index's and the platform manifest's" {
    skip_unless_cmd podman
    local index instance
    index=$(registry_digest fixtures/multi:latest)
    run_pullhelper pull --policy "$POLICY" "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/multi" "${DEST%/fixtures/tiny:v1}/fixtures/multi:v1"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$index"
    instance=$(json_get .instance_digest <<<"$output")
    [[ $instance == sha256:* && $instance != "$index" ]] || fail "no instance digest: $instance"

    run podman_store image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$REGISTRY_HOST/fixtures/multi:v1"
    assert_success
    echo "$output"
    assert_line "$REGISTRY_HOST/fixtures/multi@$index"
    assert_line "$REGISTRY_HOST/fixtures/multi@$instance"
    run podman_store images --digests --no-trunc --format '{{.Repository}}:{{.Tag}} {{.Digest}}'
    assert_success
    assert_output "$REGISTRY_HOST/fixtures/multi:v1 $index"
    # skopeo reads the platform image from the store.
    run ph_skopeo inspect "containers-storage:[vfs@$GRAPH+$RUN]$REGISTRY_HOST/fixtures/multi:v1"
    assert_success
}

# A pull by digest into REPO@DIGEST, the name CRI-O's PullImage stores a
# digest pull under (containers/image's storage reference of the pulled
# name: storageImageDestination.CommitWithOptions adds it, no tag).
@test "containers-storage: IMAGE@DIGEST into REPO@DIGEST — podman lists it by that digest, no tag; a rerun is fine; NAME:TAG@DIGEST is stored by digest; another digest is refused" {
    skip_unless_cmd podman
    local want config repo
    want=$(registry_digest fixtures/tiny:latest)
    config=$(registry_manifest fixtures/tiny:latest | json_get .config.digest)
    repo=$REGISTRY_HOST/fixtures/tiny
    local bydigest="containers-storage:[vfs@$GRAPH+$RUN]$repo@$want"
    for _ in 1 2; do
        run_pullhelper pull --policy "$POLICY" "${PH_OPTS[@]}" "$repo@$want" "$bydigest"
        assert_json_result
        assert_equal "$(json_get .digest <<<"$output")" "$want"
        assert_equal "$(json_get .image_id <<<"$output")" "$config"
        assert_equal "$(json_get '.store.names' <<<"$output")" "[\"$repo@$want\"]"
    done
    run podman_store images --digests --no-trunc --format '{{.Repository}}:{{.Tag}} {{.Digest}} {{.ID}}'
    assert_success
    echo "$output"
    assert_output "$repo:<none> $want $config"
    run podman_store image inspect --format '{{json .RepoTags}} {{range .RepoDigests}}{{.}} {{end}}' "$repo@$want"
    assert_success
    assert_output "[] $repo@$want "
    run ph_skopeo inspect --raw "$bydigest"
    assert_success
    assert_equal "sha256:$(printf '%s' "$output" | sha256sum | cut -d' ' -f1)" "$want"

    # NAME:TAG@DIGEST: the tag is dropped, the image is named by digest.
    run_pullhelper pull --policy "$POLICY" "${PH_OPTS[@]}" "$repo@$want" "containers-storage:[vfs@$GRAPH+$RUN]$repo:v9@$want"
    assert_json_result
    assert_equal "$(json_get '.store.names' <<<"$output")" "[\"$repo@$want\"]"
    run podman_store images --format '{{.Tag}}'
    refute_output --partial v9

    # IMAGE names another digest than DEST: exit 2 before any request.
    local other before
    other=sha256:$(printf x | sha256sum | cut -d' ' -f1)
    before=$(registry_log_barrier)
    run_pullhelper 2 pull --policy "$POLICY" "${PH_OPTS[@]}" "$repo@$want" "containers-storage:[vfs@$GRAPH+$RUN]$repo@$other"
    assert_json_error usage
    [[ $ph_error_message == *"$other"*"$want"* ]] || fail "message names neither digest: $ph_error_message"
    assert_equal "$(wc -l <"$REGISTRY_LOG")" "$before"
    # A tag pulled whose digest is not DEST's: the parent refuses what it
    # would commit (exit 8), the store gets no image of that name.
    run_pullhelper 8 pull --policy "$POLICY" "${PH_OPTS[@]}" "$repo" "containers-storage:[vfs@$GRAPH+$RUN]$repo@$other"
    assert_json_error verification
    [[ $ph_error_message == *"$other"*"$want"* ]] || fail "message names neither digest: $ph_error_message"
    run podman_store image exists "$repo@$other"
    assert_failure
    run ls -A "$GRAPH"
    refute_output --partial .pullhelper-staging-
}

@test "containers-storage: a multi-platform index by its digest — one platform stored, named REPO@INDEX only (no instance name, even in NamesHistory), the index its Digest and top-level manifest; RepoDigests hold the index's and the instance's" {
    skip_unless_cmd podman
    local index instance repo
    index=$(registry_digest fixtures/multi:latest)
    repo=$REGISTRY_HOST/fixtures/multi
    run_pullhelper pull --policy "$POLICY" "${PH_OPTS[@]}" "$repo@$index" "containers-storage:[vfs@$GRAPH+$RUN]$repo@$index"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$index"
    instance=$(json_get .instance_digest <<<"$output")
    [[ $instance == sha256:* && $instance != "$index" ]] || fail "no instance digest: $instance"
    assert_equal "$(json_get '.store.names' <<<"$output")" "[\"$repo@$index\"]"
    run podman_store image inspect --format '{{json .RepoTags}}' "$repo@$index"
    assert_success
    assert_output "[]"
    run podman_store image inspect --format '{{.Digest}} {{json .NamesHistory}}' "$repo@$index"
    assert_success
    assert_output "$index [\"$repo@$index\"]"
    run podman_store image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$repo@$index"
    assert_success
    assert_line "$repo@$index"
    assert_line "$repo@$instance"
    # The stored top-level manifest is the registry's index.
    run ph_skopeo inspect --raw "containers-storage:[vfs@$GRAPH+$RUN]$repo@$index"
    assert_success
    assert_equal "sha256:$(printf '%s' "$output" | sha256sum | cut -d' ' -f1)" "$index"
}

# The stored manifest is the registry's, byte for byte, as containers/image's
# copy from the registry stores it (storageImageDestination.PutManifest and
# CommitWithOptions: the manifest under manifestBigDataKey(digest) and
# "manifest", the image's Digest the registry's): a Docker schema 2 image
# too, which the staging (an oci: layout) converts to an OCI manifest. The
# old import stored the converted manifest (another digest, the OCI type), and
# a pull by the registry's digest failed (exit 9, "Digest of source image's
# manifest would not match destination reference").
@test "containers-storage: a Docker schema 2 image by tag and by digest — the registry's manifest bytes are stored (podman shows its digest and the Docker type); the pull by digest succeeds" {
    skip_unless_cmd podman
    local want repo=$REGISTRY_HOST/fixtures/v2s2 store="containers-storage:[vfs@$GRAPH+$RUN]" v2s2=application/vnd.docker.distribution.manifest.v2+json
    # shellcheck disable=SC2046
    registry_skopeo copy --quiet --format v2s2 $(registry_skopeo_opts src) $(registry_skopeo_opts dest) \
        "docker://$REGISTRY_HOST/fixtures/tiny:latest" "docker://$repo:latest"
    assert_equal "$(registry_manifest fixtures/v2s2:latest | json_get .mediaType)" "$v2s2"
    want=$(registry_digest fixtures/v2s2:latest)

    run_pullhelper pull --policy "$POLICY" "${PH_OPTS[@]}" "$repo:latest" "${store}$repo:latest"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$want"
    # No converted manifest is stored: the result names none.
    [[ $output != *destination_digest* ]] || fail "a destination digest in the result: $output"
    run podman_store image inspect --format '{{.Digest}} {{.ManifestType}}' "$repo:latest"
    assert_success
    assert_output "$want $v2s2"
    run ph_skopeo inspect --raw "${store}$repo:latest"
    assert_success
    assert_equal "sha256:$(printf '%s' "$output" | sha256sum | cut -d' ' -f1)" "$want"

    # By digest into REPO@DIGEST (what pullhelper cri sends CRI-O's store
    # for a digest-pinned image).
    run_pullhelper pull --policy "$POLICY" "${PH_OPTS[@]}" "$repo@$want" "${store}$repo@$want"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$want"
    run podman_store image inspect --format '{{.Digest}} {{.ManifestType}}' "$repo@$want"
    assert_success
    assert_output "$want $v2s2"
    run podman_store images --digests --no-trunc --format '{{.Repository}}:{{.Tag}} {{.Digest}}'
    assert_success
    echo "$output"
    assert_line "$repo:latest $want"
    run ph_skopeo inspect --raw "${store}$repo@$want"
    assert_success
    assert_equal "sha256:$(printf '%s' "$output" | sha256sum | cut -d' ' -f1)" "$want"
}

# A Docker schema 2 image whose config is as docker build writes one: the
# staging re-encodes the config as OCI; the import stores the registry's
# manifest and the registry's config (handed over by the child, checked to
# re-encode to the staged one), as containers/image's copy from the
# registry stores them: the image ID is the registry's config digest.
# Before, such an image was refused (exit 8, "names config").
@test "containers-storage: a Docker schema 2 image with a docker build config is stored with the registry's manifest and config (the image ID the registry's config digest)" {
    skip_unless_cmd podman
    push_docker_config_fixture
    local want cfg repo=$REGISTRY_HOST/fixtures/dockercfg store="containers-storage:[vfs@$GRAPH+$RUN]"
    want=$(registry_digest fixtures/dockercfg:latest)
    cfg=$(registry_manifest fixtures/dockercfg:latest | json_get .config.digest)
    run_pullhelper pull --policy "$POLICY" "${PH_OPTS[@]}" "$repo:latest" "${store}$repo:latest"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$want"
    assert_equal "$(json_get .image_id <<<"$output")" "$cfg"
    [[ $output != *destination_digest* ]] || fail "a destination digest in the result: $output"
    run podman_store image inspect --format '{{.Digest}} {{.ID}}' "$repo:latest"
    assert_success
    assert_output "$want ${cfg#sha256:}"
    run ph_skopeo inspect --config --raw "${store}$repo:latest"
    assert_success
    assert_equal "sha256:$(printf '%s' "$output" | sha256sum | cut -d' ' -f1)" "$cfg"
    [[ $output == *docker_version* ]] || fail "the stored config is not the registry's: $output"
}

# An uncompressed layer is stored as served (skopeo copy from the registry
# stores it so: the storage destination keeps the original); before, the
# staging gzipped it and the parent refused the image (exit 8). The same
# layer twice in one manifest lands too.
@test "containers-storage: an image with an uncompressed layer and one with the same layer twice are stored with the registry's manifests" {
    skip_unless_cmd podman
    local kind repo want store="containers-storage:[vfs@$GRAPH+$RUN]"
    for kind in uncompressed duplayers; do
        push_layout_fixture "$kind"
        repo=$REGISTRY_HOST/fixtures/$kind
        want=$(registry_digest "fixtures/$kind:latest")
        run_pullhelper pull --policy "$POLICY" "${PH_OPTS[@]}" "$repo:latest" "${store}$repo:latest"
        assert_json_result
        assert_equal "$(json_get .digest <<<"$output")" "$want"
        run podman_store image inspect --format '{{.Digest}}' "$repo:latest"
        assert_success
        assert_output "$want"
        run ph_skopeo inspect --raw "${store}$repo:latest"
        assert_success
        assert_equal "sha256:$(printf '%s' "$output" | sha256sum | cut -d' ' -f1)" "$want"
    done
}

# --all-architectures of a Docker manifest list: the registry's list and
# this platform's instance are stored (the staging converted every instance
# to OCI; each stored one is tied to the registry's), the list the image's
# digest, this platform's instance as served its manifest, as skopeo copy from the
# registry stores them; a pull by the list's digest lands too. Before, the
# staged index was refused as "an index inside an index" (exit 8).
@test "containers-storage: --all-architectures of a Docker manifest list stores the registry's list and this platform's instance (podman shows the list's digest); by digest too" {
    skip_unless_cmd podman
    push_docker_fixtures
    local list inst arch repo=$REGISTRY_HOST/fixtures/multiv2 store="containers-storage:[vfs@$GRAPH+$RUN]"
    local mlist=application/vnd.docker.distribution.manifest.list.v2+json
    arch=$("$(_ph_go)" env GOARCH)
    list=$(registry_digest fixtures/multiv2:latest)
    inst=$(index_instance "$(registry_manifest fixtures/multiv2:latest)" "linux/$arch")
    run_pullhelper pull --policy "$POLICY" "${PH_OPTS[@]}" --all-architectures "$repo:latest" "${store}$repo:latest"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$list"
    [[ $output != *destination_digest* ]] || fail "a destination digest in the result: $output"
    run podman_store image inspect --format '{{.Digest}} {{.Architecture}}' "$repo:latest"
    assert_success
    assert_output "$list $arch"
    run ph_skopeo inspect --raw "${store}$repo:latest"
    assert_success
    assert_equal "sha256:$(printf '%s' "$output" | sha256sum | cut -d' ' -f1)" "$inst"
    # skopeo copy from the registry (Debian's 1.9 copies no group of
    # images into a store) stores the same manifest.
    local sk="containers-storage:[vfs@$BATS_TEST_TMPDIR/sk-graph+$BATS_TEST_TMPDIR/sk-run]$repo:latest"
    # shellcheck disable=SC2046
    registry_skopeo copy --quiet $(registry_skopeo_opts src) "docker://$repo:latest" "$sk" || fail "skopeo copy failed"
    run ph_skopeo inspect --raw "$sk"
    assert_success
    assert_equal "sha256:$(printf '%s' "$output" | sha256sum | cut -d' ' -f1)" "$inst"

    run_pullhelper pull --policy "$POLICY" "${PH_OPTS[@]}" --all-architectures "$repo@$list" "${store}$repo@$list"
    assert_json_result
    run podman_store image inspect --format '{{.Digest}}' "$repo@$list"
    assert_success
    assert_output "$list"
    [[ $mlist == "$(registry_manifest fixtures/multiv2:latest | json_get .mediaType)" ]] || fail "fixtures/multiv2 is not a Docker manifest list"
}

# One platform of an index, as containers/image's copy from the registry
# stores it: the index is the top-level manifest (the first manifest big-data
# item, so containers/storage's recomputeDigests makes it the image's
# Digest), and REPO@INDEX is the name given, with no REPO@INSTANCE name ever
# added. The old import stored the instance's digest as the image's Digest
# and named the image REPO@INSTANCE first (left in NamesHistory).
# --platform (issue 24 item 14): the instance containers/image's
# manifest.List.ChooseInstance picks for SystemContext OSChoice,
# ArchitectureChoice, VariantChoice (skopeo's --override-*), imported into
# the store; with --all-architectures the import chooses it from the staged
# index the same way.
@test "containers-storage: --platform linux/arm64 imports that platform's image (skopeo and podman inspect show arm64), with --all-architectures too" {
    skip_unless_cmd podman
    local index want store="containers-storage:[vfs@$GRAPH+$RUN]"
    index=$(registry_manifest fixtures/multi:latest)
    want=$(index_instance "$index" linux/arm64)
    run_pullhelper pull --policy "$POLICY" "${PH_OPTS[@]}" --platform linux/arm64 "$REGISTRY_HOST/fixtures/multi" \
        "${store}$REGISTRY_HOST/fixtures/multi:arm64"
    assert_json_result
    assert_equal "$(json_get .instance_digest <<<"$output")" "$want"
    run ph_skopeo inspect "${store}$REGISTRY_HOST/fixtures/multi:arm64"
    assert_success
    assert_equal "$(json_get .Architecture <<<"$output")" arm64
    assert_equal "$(json_get .Digest <<<"$output")" "$want"
    run podman_store image inspect --format '{{.Architecture}}' "$REGISTRY_HOST/fixtures/multi:arm64"
    assert_success
    assert_output arm64

    run_pullhelper pull --policy "$POLICY" "${PH_OPTS[@]}" --all-architectures --platform linux/arm/v7 \
        "$REGISTRY_HOST/fixtures/multi" "${store}$REGISTRY_HOST/fixtures/multi:all"
    assert_json_result
    run podman_store image inspect --format '{{.Architecture}}' "$REGISTRY_HOST/fixtures/multi:all"
    assert_success
    assert_output arm
    run ph_skopeo inspect --config "${store}$REGISTRY_HOST/fixtures/multi:all"
    assert_success
    assert_equal "$(json_get .variant <<<"$output")" v7
}

@test "containers-storage: podman run of the pulled shell image prints the expected output" {
    skip_unless_cmd podman
    skip_unless_cmd runc
    [[ -x $BUSYBOX ]] || skip "$BUSYBOX missing (Debian busybox-static; make deps)"
    local want ref=$REGISTRY_HOST/fixtures/shell:v1
    want=$(registry_digest fixtures/shell:latest)
    run_pullhelper pull --policy "$POLICY" "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/shell" "containers-storage:[vfs@$GRAPH+$RUN]$ref"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$want"

    run podman_run "$ref" sh -c 'echo hello-from-pullhelper; echo "sh is $(readlink /bin/sh)"'
    echo "$output"
    assert_success
    assert_output $'hello-from-pullhelper\nsh is busybox'
    # The image's own Cmd (/bin/sh) runs too: a script on stdin.
    run podman_run -i "$ref" <<<'echo from-stdin'
    assert_success
    assert_output from-stdin
}

# overlay_or_skip: the kernel mounts overlay in a mount namespace of the
# test's own, on the test directory's filesystem; else skip naming why.
overlay_or_skip() {
    local d=$BATS_TEST_TMPDIR/ovl-probe out
    mkdir -p "$d"/{lower,upper,work,merged}
    if ! out=$(unshare -m sh -c 'mount -t overlay overlay -o "lowerdir=$1/lower,upperdir=$1/upper,workdir=$1/work" "$1/merged"' sh "$d" 2>&1); then
        skip "overlay cannot be mounted on $(stat -fc %T "$d") here: ${out//$'\n'/ }"
    fi
    rm -rf "$d"
}

@test "containers-storage: an overlay store — podman lists the image with the registry's digest and runs the shell image" {
    skip_unless_cmd podman
    skip_unless_cmd runc
    [[ -x $BUSYBOX ]] || skip "$BUSYBOX missing (Debian busybox-static; make deps)"
    overlay_or_skip
    DRIVER=overlay
    printf '[storage]\ndriver = "overlay"\nrunroot = "%s"\ngraphroot = "%s"\n' "$RUN" "$GRAPH" >"$STORAGE_CONF"
    local want ref=$REGISTRY_HOST/fixtures/shell:v1
    want=$(registry_digest fixtures/shell:latest)
    run_pullhelper pull --policy "$POLICY" "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/shell" "containers-storage:[overlay@$GRAPH+$RUN]$ref"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$want"
    assert_equal "$(json_get .store.driver <<<"$output")" overlay
    [[ -d $GRAPH/overlay ]] || fail "no overlay driver directory in $GRAPH"
    [[ ! -e $GRAPH/vfs-layers ]] || fail "the store used vfs"

    run env CONTAINERS_STORAGE_CONF="$STORAGE_CONF" podman --root "$GRAPH" --runroot "$RUN" --storage-driver overlay \
        images --digests --no-trunc --format '{{.Repository}}:{{.Tag}} {{.Digest}}'
    assert_success
    assert_output "$ref $want"

    run podman_run "$ref" sh -c 'echo hello-from-pullhelper'
    echo "$output"
    assert_success
    assert_output hello-from-pullhelper
}

# Issue 22 items 8, 9, 12, 13: the import as root, its store's roots.

@test "containers-storage: a staged layer with foreign urls (a tarpit behind them) is exit 8 naming the layer; the tarpit sees no connection, the store no image" {
    [[ -x $PULLHELPER_HOSTILE_BIN ]] || fail "hostile build missing: $PULLHELPER_HOSTILE_BIN (make build-hostile)"
    # The URL answers one byte a second: an import that fetched it would
    # hang there (the hang guard below then fails the test).
    start_tarpit -1 --rate 1
    local layer
    layer=$(registry_manifest fixtures/tiny:latest | json_get '.layers[0].digest')
    run --separate-stderr timeout --kill-after=10 120 env PULLHELPER_HOSTILE=after-copy:foreign-urls \
        PULLHELPER_HOSTILE_ARG="https://$TARPIT_HOST/v2/fixtures/tiny/blobs/$layer" \
        "$PULLHELPER_HOSTILE_BIN" pull --policy "$POLICY" "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "$DEST"
    echo "$output"; echo "[stderr] $stderr"
    assert_equal "$status" 8
    [[ $stderr == *"foreign-urls: layer $layer now has urls"* ]] || fail "the hostile action did not run: $stderr"
    assert_equal "$(json_get .error.code <<<"$output")" verification
    local msg
    msg=$(json_get .error.message <<<"$output")
    [[ $msg == *"$layer"* && $msg == *urls* ]] || fail "the message does not name the layer and its urls: $msg"
    stop_tarpit
    ! grep -q ' conn ' "$TARPIT_LOG" || fail "the tarpit was contacted: $(cat "$TARPIT_LOG")"
    run ls -A "$GRAPH"
    refute_output --partial .pullhelper-staging-
    if [[ -d $GRAPH/vfs-images ]]; then
        run podman_store images -a --noheading
        assert_success
        assert_output ""
    fi
}

# _bg_pull ENV...: the hostile build pulls tiny into $DEST in the
# background (stdout, stderr in $OUT/bg.*); BG_PID.
_bg_pull() {
    env "$@" "$PULLHELPER_HOSTILE_BIN" pull --policy "$POLICY" "${PH_OPTS[@]}" \
        "$REGISTRY_HOST/fixtures/tiny" "$DEST" >"$OUT/bg.out" 2>"$OUT/bg.err" &
    BG_PID=$!
}

# _bg_wait: BG_RC is the exit code of the background pull, waited for at
# most 90 s (a hang guard, not a timing assertion: past it the pull is
# killed and BG_RC is "hung").
_bg_wait() {
    local deadline=$((SECONDS + 90))
    BG_RC=0
    while kill -0 "$BG_PID" 2>/dev/null; do
        if ((SECONDS >= deadline)); then
            kill -KILL "$BG_PID"
            wait "$BG_PID" || true
            BG_PID=""
            BG_RC=hung
            return
        fi
        sleep 0.1
    done
    wait "$BG_PID" || BG_RC=$?
    BG_PID=""
}

@test "containers-storage: SIGTERM during an import that does not stop by itself ends the pull (143), leaving no staging and no image" {
    skip_unless_cmd podman
    [[ -x $PULLHELPER_HOSTILE_BIN ]] || fail "hostile build missing: $PULLHELPER_HOSTILE_BIN (make build-hostile)"
    # hang-read: the import's first blob read hangs, deaf to the pull's
    # context (as a store lock held by another process would).
    _bg_pull PULLHELPER_HOSTILE_IMPORT=hang-read
    wait_for_file_match "$OUT/bg.err" "the import hangs reading" 120 || return
    kill -TERM "$BG_PID"
    _bg_wait
    cat "$OUT/bg.out" "$OUT/bg.err"
    assert_equal "$BG_RC" 143
    assert_equal "$(json_get .error.code <"$OUT/bg.out")" interrupted
    run ls -A "$GRAPH"
    refute_output --partial .pullhelper-staging-
    run podman_store images -a --noheading
    assert_success
    assert_output ""
}

@test "containers-storage: --timeout during a stalled import ends the pull (exit 6, timed out), leaving no staging and no image" {
    skip_unless_cmd podman
    [[ -x $PULLHELPER_HOSTILE_BIN ]] || fail "hostile build missing: $PULLHELPER_HOSTILE_BIN (make build-hostile)"
    # stall-read: the import's first blob read waits for the pull's
    # context; only the --timeout deadline can end it.
    env PULLHELPER_HOSTILE_IMPORT=stall-read "$PULLHELPER_HOSTILE_BIN" pull --policy "$POLICY" "${PH_OPTS[@]}" \
        --timeout 20s --stall-timeout 5s "$REGISTRY_HOST/fixtures/tiny" "$DEST" >"$OUT/bg.out" 2>"$OUT/bg.err" &
    BG_PID=$!
    _bg_wait
    cat "$OUT/bg.out" "$OUT/bg.err"
    grep -qF "the import stalls reading" "$OUT/bg.err" || fail "the import never stalled"
    assert_equal "$BG_RC" 6
    assert_equal "$(json_get .error.code <"$OUT/bg.out")" network
    [[ $(json_get .error.message <"$OUT/bg.out") == *"timed out after 20s (--timeout)"* ]] || fail "message: $(cat "$OUT/bg.out")"
    run ls -A "$GRAPH"
    refute_output --partial .pullhelper-staging-
    run podman_store images -a --noheading
    assert_success
    assert_output ""
}

# _victim: a root-only file whose content must survive ($VICTIM, $VICTIM_SUM).
_victim() {
    VICTIM=$BATS_TEST_TMPDIR/victim
    head -c 4096 /dev/urandom >"$VICTIM"
    chmod 0600 "$VICTIM"
    VICTIM_SUM=$(sha256sum "$VICTIM")
}

@test "containers-storage: a RUNROOT a local user made, with vfs-layers/mountpoints.lock linked to a root file, is exit 9 naming it and its owner; the file is unchanged" {
    _victim
    # The user's directory in a sticky world-writable one (as /tmp).
    local shared=$BATS_TEST_TMPDIR/shared
    mkdir -m 1777 "$shared"
    RUN=$shared/run
    mkdir -p "$RUN/vfs-layers"
    ln -s "$VICTIM" "$RUN/vfs-layers/mountpoints.lock"
    chown -hR 65534:65534 "$RUN"
    DEST="containers-storage:[vfs@$GRAPH+$RUN]$REGISTRY_HOST/fixtures/tiny:v1"
    local before
    before=$(registry_log_barrier)
    run_pullhelper 9 pull --policy "$POLICY" "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "$DEST"
    assert_json_error destination
    [[ $ph_error_message == *"run root $RUN"* && $ph_error_message == *"uid 65534"* ]] || fail "message: $ph_error_message"
    assert_equal "$(sha256sum "$VICTIM")" "$VICTIM_SUM"
    assert_equal "$(find "$RUN" -uid 0 | wc -l)" 0
    # Refused before the pull: nothing was asked of the registry.
    assert_equal "$(tail -n "+$((before + 1))" "$REGISTRY_LOG" | grep -c '/v2/fixtures/' || true)" 0
}

@test "containers-storage: a GRAPHROOT a local user made, with storage.lock linked to a root file, is exit 9; the file is unchanged and nothing of root's is created there" {
    _victim
    local shared=$BATS_TEST_TMPDIR/shared
    mkdir -m 1777 "$shared"
    GRAPH=$shared/graph
    mkdir "$GRAPH"
    ln -s "$VICTIM" "$GRAPH/storage.lock"
    chown -hR 65534:65534 "$GRAPH"
    DEST="containers-storage:[vfs@$GRAPH+$RUN]$REGISTRY_HOST/fixtures/tiny:v1"
    run_pullhelper 9 pull --policy "$POLICY" "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "$DEST"
    assert_json_error destination
    [[ $ph_error_message == *"graph root $GRAPH"* && $ph_error_message == *"uid 65534"* ]] || fail "message: $ph_error_message"
    assert_equal "$(sha256sum "$VICTIM")" "$VICTIM_SUM"
    assert_equal "$(find "$GRAPH" -uid 0 | wc -l)" 0
    [[ ! -e $RUN ]] || fail "the refused pull created the run root $RUN"

    # A root-owned GRAPHROOT holding a user's entry at its top is refused
    # too (the store would open it).
    GRAPH=$BATS_TEST_TMPDIR/graph2
    mkdir -p "$GRAPH/vfs-layers"
    ln -s "$VICTIM" "$GRAPH/vfs-layers/layers.lock"
    chown -h 65534:65534 "$GRAPH/vfs-layers/layers.lock"
    DEST="containers-storage:[vfs@$GRAPH+$RUN]$REGISTRY_HOST/fixtures/tiny:v1"
    run_pullhelper 9 pull --policy "$POLICY" "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "$DEST"
    assert_json_error destination
    [[ $ph_error_message == *"vfs-layers/layers.lock, owned by uid 65534"* ]] || fail "message: $ph_error_message"
    assert_equal "$(sha256sum "$VICTIM")" "$VICTIM_SUM"
}

@test "containers-storage: a store another process keeps locked is exit 9 within --lock-timeout, naming the store" {
    mkdir -p "$GRAPH"
    # Another process (a podman, say) holds the store's lock.
    "$PH_PYTHON" -c '
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.lockf(fd, fcntl.LOCK_EX)
with open(sys.argv[2], "w") as f:
    f.write("locked\n")
time.sleep(600)
' "$GRAPH/storage.lock" "$OUT/locked" &
    BG_PID=$!
    wait_for_file_match "$OUT/locked" locked 10
    run_pullhelper 9 pull --policy "$POLICY" "${PH_OPTS[@]}" --lock-timeout 3s "$REGISTRY_HOST/fixtures/tiny" "$DEST"
    kill "$BG_PID"
    wait "$BG_PID" || true
    BG_PID=""
    assert_json_error destination
    [[ $ph_error_message == *"stayed locked by another process for 3s"* && $ph_error_message == *"$GRAPH"* ]] || fail "message: $ph_error_message"
    run ls -A "$GRAPH"
    refute_output --partial .pullhelper-staging-
}

# _wait_lock_waiter FILE: until a process waits for a POSIX lock on FILE
# (/proc/locks shows it with "->"), at most 60 s.
_wait_lock_waiter() {
    local ino deadline=$((SECONDS + 60))
    ino=$(stat -c %i "$1")
    until grep -qE -- "-> POSIX +ADVISORY +WRITE +[0-9]+ +[0-9a-f]+:[0-9a-f]+:$ino " /proc/locks; do
        ((SECONDS < deadline)) || { fail "nobody waited for the lock on $1: $(cat /proc/locks)"; return 1; }
        kill -0 "$BG_PID" 2>/dev/null || { fail "the pull ended before waiting for the store: $(cat "$OUT/bg.out" "$OUT/bg.err")"; return 1; }
        sleep 0.05
    done
}

# _hold_store_lock: another process (a podman, say) holds the store's lock
# until the test ends (L_PID).
_hold_store_lock() {
    mkdir -p "$GRAPH"
    "$PH_PYTHON" -c '
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.lockf(fd, fcntl.LOCK_EX)
with open(sys.argv[2], "w") as f:
    f.write("locked\n")
time.sleep(600)
' "$GRAPH/storage.lock" "$OUT/locked" &
    L_PID=$!
    wait_for_file_match "$OUT/locked" locked 10
}

_release_store_lock() {
    kill "$L_PID" 2>/dev/null || true
    wait "$L_PID" 2>/dev/null || true
}

@test "containers-storage: SIGTERM while the store is locked by another process ends the pull (143) at once, not after --lock-timeout" {
    _hold_store_lock
    "$PULLHELPER" pull --policy "$POLICY" "${PH_OPTS[@]}" --lock-timeout 1h "$REGISTRY_HOST/fixtures/tiny" "$DEST" >"$OUT/bg.out" 2>"$OUT/bg.err" &
    BG_PID=$!
    _wait_lock_waiter "$GRAPH/storage.lock" || { _release_store_lock; return 1; }
    kill -TERM "$BG_PID"
    _bg_wait
    _release_store_lock
    cat "$OUT/bg.out" "$OUT/bg.err"
    assert_equal "$BG_RC" 143
    assert_equal "$(json_get .error.code <"$OUT/bg.out")" interrupted
    run ls -A "$GRAPH"
    refute_output --partial .pullhelper-staging-
}

@test "containers-storage: --timeout while the store is locked by another process is exit 6 (timed out), not a wait for --lock-timeout" {
    _hold_store_lock
    "$PULLHELPER" pull --policy "$POLICY" "${PH_OPTS[@]}" --lock-timeout 1h --timeout 3s "$REGISTRY_HOST/fixtures/tiny" "$DEST" >"$OUT/bg.out" 2>"$OUT/bg.err" &
    BG_PID=$!
    _bg_wait
    _release_store_lock
    cat "$OUT/bg.out" "$OUT/bg.err"
    assert_equal "$BG_RC" 6
    assert_equal "$(json_get .error.code <"$OUT/bg.out")" network
    [[ $(json_get .error.message <"$OUT/bg.out") == *"timed out after 3s (--timeout)"* ]] || fail "message: $(cat "$OUT/bg.out")"
    run ls -A "$GRAPH"
    refute_output --partial .pullhelper-staging-
}

@test "containers-storage: storage.conf's imagestore in a directory a local user made (images.lock linked to a root file) is exit 9 naming it; the file is unchanged" {
    _victim
    local shared=$BATS_TEST_TMPDIR/shared
    mkdir -m 1777 "$shared"
    local is=$shared/imgstore
    mkdir -p "$is/vfs-images"
    ln -s "$VICTIM" "$is/vfs-images/images.lock"
    chown -hR 65534:65534 "$is"
    printf 'imagestore = "%s"\n' "$is" >>"$STORAGE_CONF"
    run_pullhelper 9 pull --policy "$POLICY" "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "$DEST"
    assert_json_error destination
    [[ $ph_error_message == *"image store $is"* && $ph_error_message == *"uid 65534"* && $ph_error_message == *"imagestore in storage.conf"* ]] || fail "message: $ph_error_message"
    assert_equal "$(sha256sum "$VICTIM")" "$VICTIM_SUM"
    assert_equal "$(find "$is" -uid 0 | wc -l)" 0

    # additionalimagestores (read-only stores c/storage opens the lock
    # files of): checked too, never created.
    printf '[storage]\ndriver = "vfs"\nrunroot = "%s"\ngraphroot = "%s"\n[storage.options]\nadditionalimagestores = ["%s"]\n' "$RUN" "$GRAPH" "$is" >"$STORAGE_CONF"
    run_pullhelper 9 pull --policy "$POLICY" "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "$DEST"
    assert_json_error destination
    [[ $ph_error_message == *"additional image store $is"* && $ph_error_message == *"additionalimagestores in storage.conf"* ]] || fail "message: $ph_error_message"
    assert_equal "$(sha256sum "$VICTIM")" "$VICTIM_SUM"
    assert_equal "$(find "$is" -uid 0 | wc -l)" 0
}

@test "containers-storage: a root-owned imagestore is created root 0700 and holds the image record" {
    local is=$BATS_TEST_TMPDIR/imgstore
    printf 'imagestore = "%s"\n' "$is" >>"$STORAGE_CONF"
    run_pullhelper pull --policy "$POLICY" "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "$DEST"
    assert_json_result
    [[ -s $is/vfs-images/images.json ]] || fail "no image records in the image store $is"
    [[ $(stat -c '%u %a' "$is") == "0 700" ]] || fail "image store $is: $(stat -c '%u %a' "$is")"
    # (Debian's podman predates imagestore: the record is read directly.)
    grep -qF "\"$REGISTRY_HOST/fixtures/tiny:v1\"" "$is/vfs-images/images.json" || fail "the image store has no record of the image: $(cat "$is/vfs-images/images.json")"
}

# layers_of GRAPH DRIVER: each layer of a store's layers.json as
# "ID PARENT COMPRESSED-DIGEST COMPRESSED-SIZE COMPRESSION DIFF-DIGEST DIFF-SIZE
# UIDSET GIDSET", in order.
layers_of() {
    "$PH_PYTHON" - "$1/$2-layers/layers.json" <<'PY'
import json, sys
for l in json.load(open(sys.argv[1])):
    print(l["id"], l.get("parent", "-"), l.get("compressed-diff-digest"), l.get("compressed-size"), l.get("compression"),
          l.get("diff-digest"), l.get("diff-size"), l.get("uidset"), l.get("gidset"))
PY
}

@test "containers-storage: the layers pullhelper applies before the import are containers/image's — the same IDs, parents, digests, sizes, compression and ID sets as skopeo copy makes in a second store" {
    push_fixture_args layers3 fixtures/layers3 -layers 3 -layer-size 65536 -seed 31
    local ref=$REGISTRY_HOST/fixtures/layers3:latest
    run_pullhelper pull --policy "$POLICY" "${PH_OPTS[@]}" "$ref" "containers-storage:[vfs@$GRAPH+$RUN]$ref"
    assert_json_result
    local sk=$BATS_TEST_TMPDIR/skopeo-store
    # shellcheck disable=SC2046
    CONTAINERS_STORAGE_CONF=$STORAGE_CONF run registry_skopeo copy --quiet $(registry_skopeo_opts src) \
        "docker://$ref" "containers-storage:[vfs@$sk/graph+$sk/run]$ref"
    assert_success
    local ours theirs
    ours=$(layers_of "$GRAPH" vfs)
    theirs=$(layers_of "$sk/graph" vfs)
    echo "pullhelper:"$'\n'"$ours"$'\n'"skopeo:"$'\n'"$theirs"
    assert_equal "$(wc -l <<<"$ours")" 3
    assert_equal "$ours" "$theirs"
    # The image record is the same too (its ID, top layer).
    assert_equal "$(podman_store images --no-trunc --format '{{.ID}}')" \
        "$(CONTAINERS_STORAGE_CONF=$STORAGE_CONF podman --root "$sk/graph" --runroot "$sk/run" --storage-driver vfs images --no-trunc --format '{{.ID}}')"
}

@test "containers-storage: a config whose DiffID is not its layer's is exit 9 (as containers/image's commitLayer refuses it); no layer of it is in the store" {
    fixture tiny
    local bad=$BATS_TEST_TMPDIR/bad-diffid
    cp -r "$(fixture_dir tiny)" "$bad"
    # The config's diff_ids[0] replaced, the config and manifest re-digested.
    "$PH_PYTHON" - "$bad" <<'PY'
import hashlib, json, os, sys
root = sys.argv[1]
def blob(d): return os.path.join(root, "blobs", "sha256", d.split(":", 1)[1])
def put(b):
    d = "sha256:" + hashlib.sha256(b).hexdigest()
    open(blob(d), "wb").write(b)
    return d
idx = json.load(open(os.path.join(root, "index.json")))
mdesc = idx["manifests"][0]
man = json.load(open(blob(mdesc["digest"])))
cfg = json.load(open(blob(man["config"]["digest"])))
cfg["rootfs"]["diff_ids"][0] = "sha256:" + "0" * 64
cb = json.dumps(cfg).encode()
man["config"]["digest"], man["config"]["size"] = put(cb), len(cb)
mb = json.dumps(man).encode()
mdesc["digest"], mdesc["size"] = put(mb), len(mb)
json.dump(idx, open(os.path.join(root, "index.json"), "w"))
PY
    local ref=$REGISTRY_HOST/fixtures/bad-diffid:latest
    # shellcheck disable=SC2046
    run registry_skopeo copy --quiet --preserve-digests $(registry_skopeo_opts dest) "oci:$bad:latest" "docker://$ref"
    assert_success
    run_pullhelper 9 pull --policy "$POLICY" "${PH_OPTS[@]}" "$ref" "containers-storage:[vfs@$GRAPH+$RUN]$ref"
    assert_json_error destination
    [[ $ph_error_message == *"does not match config's DiffID"* ]] || fail "message: $ph_error_message"
    # No layer and no image: the DiffID is computed from the blob before
    # anything is applied.
    if [[ -f $GRAPH/vfs-layers/layers.json ]]; then
        assert_equal "$(layers_of "$GRAPH" vfs)" ""
    fi
    run podman_store images -q
    assert_success
    assert_output ""
}
