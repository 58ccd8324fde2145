#!/usr/bin/env bats
#
# pullhelper pull: every destination transport and the JSON result, against
# the real registry (TLS with a per-run CA, htpasswd auth) started by
# setup_file.

load helpers

setup_file() {
    start_registry
    push_fixture tiny
    push_fixture big
    push_fixture many
    push_fixture multi
}

teardown_file() {
    stop_registry
}

setup() {
    ph_test_setup
}

# sha256_file FILE: sha256:HEX of the file's bytes.
sha256_file() {
    echo "sha256:$(sha256sum <"$1" | cut -d' ' -f1)"
}

# assert_layout_blobs_verify LAYOUT: every blob of the OCI layout hashes to
# its name.
assert_layout_blobs_verify() {
    local f n=0
    for f in "$1"/blobs/sha256/*; do
        [[ $(sha256sum <"$f" | cut -d' ' -f1) == "${f##*/}" ]] ||
            fail "blob $f does not match its digest"
        n=$((n + 1))
    done
    ((n > 0)) || fail "no blobs in $1"
}

@test "pull: tiny into oci: — result fields, skopeo reads the layout, digest equals the registry's" {
    local want
    want=$(registry_digest fixtures/tiny:latest)

    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/tiny:v1"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$want"
    assert_equal "$(json_get .image <<<"$output")" "$REGISTRY_HOST/fixtures/tiny"
    assert_equal "$(json_get .reference <<<"$output")" "$REGISTRY_HOST/fixtures/tiny@$want"
    assert_equal "$(json_get .media_type <<<"$output")" application/vnd.oci.image.manifest.v1+json
    assert_equal "$(json_get .destination <<<"$output")" "oci:$OUT/tiny:v1"
    assert_equal "$(json_get .layers <<<"$output")" 1
    assert_equal "$(json_get .attempts <<<"$output")" 1
    # An oci: layout stores the manifest as served: no destination_digest.
    assert_equal "$(json_get .destination_digest <<<"$output")" null
    assert_equal "$(json_get .instance_digest <<<"$output")" null
    local bytes ms
    bytes=$(json_get .bytes <<<"$output")
    ms=$(json_get .duration_ms <<<"$output")
    [[ $bytes =~ ^[0-9]+$ && $bytes -gt 0 ]] || fail "bytes is '$bytes'"
    [[ $ms =~ ^[0-9]+$ ]] || fail "duration_ms is '$ms'"
    # timings split duration_ms into its phases, none negative, the copy
    # the child's.
    local sum
    sum=$("$PH_PYTHON" -c '
import json, sys
t = json.load(sys.stdin)["timings"]
ks = ("setup_ms", "copy_ms", "verify_ms", "commit_ms", "cleanup_ms")
assert set(t) == set(ks) and all(isinstance(t[k], int) and t[k] >= 0 for k in ks) and t["copy_ms"] > 0, t
print(sum(t[k] for k in ks))' <<<"$output") || fail "bad timings in the result"
    ((sum == ms)) || fail "timings sum to $sum ms, duration_ms is $ms"
    [[ $(json_get .isolation <<<"$output") != null ]] || fail "no isolation field"
    [[ $(json_get .signature_policy.source <<<"$output") =~ ^(flag|policy-file|system|builtin)$ ]] ||
        fail "bad signature_policy.source"

    # skopeo (a peer implementation) reads what pullhelper wrote.
    run ph_skopeo inspect "oci:$OUT/tiny:v1"
    assert_success
    assert_equal "$(json_get .Digest <<<"$output")" "$want"
    assert_equal "$(json_get .Architecture <<<"$output")" amd64
    run ph_skopeo inspect --raw "oci:$OUT/tiny:v1"
    assert_success
    assert_equal "$output" "$(registry_manifest fixtures/tiny:latest)"
    assert_layout_blobs_verify "$OUT/tiny"
    assert_no_staging "$OUT"
}

# The isolated copy is never told DEST's path (target.Spec.Anonymous):
# its lines name no destination rather than "oci:DEST:1.0"; the parent's
# "pulling" and "pulled" lines name the real one, as the result does
# (issue 24 item 16).
@test "pull: the log lines name DEST's real path (a relative DEST made absolute); the child's name none" {
    cd "$OUT"
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:rel:1.0"
    assert_json_result
    assert_equal "$(json_get .destination <<<"$output")" "oci:$OUT/rel:1.0"
    grep -v '^pullhelper-child:' <<<"$stderr" | grep -q "msg=pulling .*destination=oci:$OUT/rel:1.0" ||
        fail "the parent's pulling line does not name DEST: $stderr"
    grep -v '^pullhelper-child:' <<<"$stderr" | grep -q "msg=pulled .*destination=oci:$OUT/rel:1.0" ||
        fail "the parent's pulled line does not name DEST: $stderr"
    grep -q '^pullhelper-child:.*msg=pulling' <<<"$stderr" || fail "the child's pulling line is gone: $stderr"
    [[ $stderr != *DEST* ]] || fail "a log line names the anonymous DEST: $stderr"
}

@test "pull: big (~100 MB) into oci: — skopeo inspect reads it and its manifest digest equals the registry's (issue 2 done-when)" {
    local want
    want=$(registry_digest fixtures/big:latest)

    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/big:latest" "oci:$OUT/big:latest"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$want"
    assert_equal "$(json_get .layers <<<"$output")" 4
    local bytes
    bytes=$(json_get .bytes <<<"$output")

    # The layers' sizes as the registry's manifest declares them.
    local manifest layer_sum
    manifest=$(registry_manifest fixtures/big:latest)
    layer_sum=$("$PH_PYTHON" -c 'import json,sys; print(sum(l["size"] for l in json.loads(sys.argv[1])["layers"]))' "$manifest")
    ((layer_sum > 50000000)) || fail "fixture big has only $layer_sum compressed bytes"
    ((bytes >= layer_sum && bytes <= layer_sum + 1048576)) ||
        fail "bytes $bytes is not the layers' $layer_sum (+ config)"

    run ph_skopeo inspect "oci:$OUT/big:latest"
    assert_success
    assert_equal "$(json_get .Digest <<<"$output")" "$want"
    assert_equal "$(json_get .Layers <<<"$output" | "$PH_PYTHON" -c 'import json,sys; print(len(json.load(sys.stdin)))')" 4
    # The stored manifest is byte for byte the registry's, and its digest too.
    local stored
    stored=$(json_get '.manifests[0].digest' <"$OUT/big/index.json")
    assert_equal "$stored" "$want"
    assert_equal "$(sha256_file "$OUT/big/blobs/sha256/${want#sha256:}")" "$want"
    assert_layout_blobs_verify "$OUT/big"
    assert_no_staging "$OUT"
}

@test "pull: dir: stores the registry's manifest bytes and skopeo reads it" {
    local want
    want=$(registry_digest fixtures/tiny:latest)
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "dir:$OUT/tinydir"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$want"
    assert_equal "$(json_get .destination <<<"$output")" "dir:$OUT/tinydir"
    assert_equal "$(sha256_file "$OUT/tinydir/manifest.json")" "$want"
    run ph_skopeo inspect "dir:$OUT/tinydir"
    assert_success
    assert_equal "$(json_get .Digest <<<"$output")" "$want"
    assert_no_staging "$OUT"
}

@test "pull: oci-archive:PATH:TAG writes a tar that skopeo reads by that tag" {
    local want
    want=$(registry_digest fixtures/many:latest)
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/many" "oci-archive:$OUT/many.tar:v7"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$want"
    [[ -f $OUT/many.tar ]] || fail "no archive at $OUT/many.tar"
    run ph_skopeo inspect "oci-archive:$OUT/many.tar:v7"
    assert_success
    assert_equal "$(json_get .Digest <<<"$output")" "$want"
    # The archive's index names the tag.
    run tar -xOf "$OUT/many.tar" index.json
    assert_success
    assert_equal "$(json_get '.manifests[0].annotations."org.opencontainers.image.ref.name"' <<<"$output")" v7
    assert_no_staging "$OUT"
}

@test "pull: docker-archive:PATH:REF records REF as the RepoTag; destination_digest differs" {
    local want ref=example.com/pullhelper/tiny:v2
    want=$(registry_digest fixtures/tiny:latest)
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "docker-archive:$OUT/tiny.tar:$ref"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$want"
    local dd
    dd=$(json_get .destination_digest <<<"$output")
    [[ $dd =~ ^sha256:[0-9a-f]{64}$ ]] || fail "destination_digest is '$dd'"
    [[ $dd != "$want" ]] || fail "docker-archive converts the manifest, but destination_digest == digest"

    run tar -xOf "$OUT/tiny.tar" manifest.json
    assert_success
    assert_equal "$(json_get '.[0].RepoTags' <<<"$output")" "[\"$ref\"]"
    # skopeo finds the image by that tag (and not by another).
    run ph_skopeo inspect "docker-archive:$OUT/tiny.tar:$ref"
    assert_success
    assert_equal "$(json_get .Architecture <<<"$output")" amd64
    run ph_skopeo inspect "docker-archive:$OUT/tiny.tar:example.com/pullhelper/tiny:other"
    assert_failure
    assert_no_staging "$OUT"
}

# containers/image's docker/internal/tarfile Writer records the RepoTag
# fully qualified (tag.Name():tag.Tag()); its Reader.ChooseManifestItem
# compares reference.ParseNormalizedNamed of each RepoTag: the verifier
# compares the same normalised references (issue 24 item 4).
@test "pull: docker-archive:PATH:demo/app:1 and :app (Docker Hub short names) verify; the RepoTag is the normalised name skopeo finds" {
    local ref want
    for ref in demo/app:1 app; do
        case $ref in
            demo/app:1) want=docker.io/demo/app:1 ;;
            app) want=docker.io/library/app:latest ;;
        esac
        rm -f "$OUT/short.tar"
        run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "docker-archive:$OUT/short.tar:$ref"
        assert_json_result
        run tar -xOf "$OUT/short.tar" manifest.json
        assert_success
        assert_equal "$(json_get '.[0].RepoTags' <<<"$output")" "[\"$want\"]"
        run ph_skopeo inspect "docker-archive:$OUT/short.tar:$ref"
        assert_success
        assert_equal "$(json_get .Architecture <<<"$output")" amd64
    done
    assert_no_staging "$OUT"
}

@test "pull: multi-arch index — digest is the index's, instance_digest the linux/amd64 entry" {
    local index want amd64
    index=$(registry_manifest fixtures/multi:latest)
    want=$(registry_digest fixtures/multi:latest)
    amd64=$("$PH_PYTHON" -c '
import json, sys
idx = json.loads(sys.argv[1])
m = [m["digest"] for m in idx["manifests"] if m["platform"]["os"] == "linux" and m["platform"]["architecture"] == "amd64"]
assert len(m) == 1, m
print(m[0])' "$index")

    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/multi" "oci:$OUT/multi"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$want"
    assert_equal "$(json_get .media_type <<<"$output")" application/vnd.oci.image.index.v1+json
    assert_equal "$(json_get .instance_digest <<<"$output")" "$amd64"
    assert_equal "$(json_get .layers <<<"$output")" 2
    # Only the platform image is stored.
    assert_equal "$(json_get '.manifests[0].digest' <"$OUT/multi/index.json")" "$amd64"
    run ph_skopeo inspect "oci:$OUT/multi"
    assert_success
    assert_equal "$(json_get .Digest <<<"$output")" "$amd64"
    assert_equal "$(json_get .Architecture <<<"$output")" amd64
}

@test "pull: --all-architectures stores the whole index (every platform) unchanged" {
    local want
    want=$(registry_digest fixtures/multi:latest)
    run_pullhelper pull "${PH_OPTS[@]}" --all-architectures "$REGISTRY_HOST/fixtures/multi" "oci:$OUT/all:latest"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$want"
    assert_equal "$(json_get .layers <<<"$output")" 6

    assert_equal "$(json_get '.manifests[0].digest' <"$OUT/all/index.json")" "$want"
    assert_equal "$(json_get '.manifests[0].mediaType' <"$OUT/all/index.json")" application/vnd.oci.image.index.v1+json
    run ph_skopeo inspect --raw "oci:$OUT/all:latest"
    assert_success
    assert_equal "$output" "$(registry_manifest fixtures/multi:latest)"
    # Every platform's manifest, config and layers are there.
    local arch
    for arch in amd64 arm64 arm; do
        run ph_skopeo --override-arch "$arch" inspect "oci:$OUT/all:latest"
        assert_success
        assert_equal "$(json_get .Architecture <<<"$output")" "$arch"
    done
    # 1 index + 3 x (manifest + config + 2 layers)
    assert_equal "$(find "$OUT/all/blobs/sha256" -type f | wc -l)" 13
    assert_layout_blobs_verify "$OUT/all"
}

# A Docker schema 2 image whose config is as docker build writes one:
# containers/image stores it into an oci: layout as OCI with the config
# re-encoded as an OCI config (the Docker-only fields dropped: another
# digest); the parent checks the stored config is that re-encoding of the
# registry's, which the child hands over. Before, every such image was
# refused (exit 8, "the stored manifest names config ..., the served one
# ..."): only configs that re-encode to themselves passed.
@test "pull: a Docker schema 2 image with a docker build config lands in oci: with the config re-encoded as OCI (as skopeo stores it)" {
    push_docker_config_fixture
    local want cfg stored scfg
    want=$(registry_digest fixtures/dockercfg:latest)
    cfg=$(registry_manifest fixtures/dockercfg:latest | json_get .config.digest)
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/dockercfg" "oci:$OUT/d:latest"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$want"
    stored=$(json_get .destination_digest <<<"$output")
    [[ $stored == sha256:* && $stored != "$want" ]] || fail "no converted manifest reported: $output"
    assert_equal "$(json_get '.manifests[0].digest' <"$OUT/d/index.json")" "$stored"
    scfg=$(json_get .config.digest <"$OUT/d/blobs/sha256/${stored#sha256:}")
    [[ $scfg != "$cfg" ]] || fail "the config was not re-encoded"
    run ph_skopeo inspect --config --raw "oci:$OUT/d:latest"
    assert_success
    [[ $output != *docker_version* ]] || fail "the stored config keeps Docker-only fields: $output"
    assert_equal "$(json_get .rootfs.diff_ids <<<"$output")" "$(registry_skopeo inspect --config --raw $(registry_skopeo_opts) "docker://$REGISTRY_HOST/fixtures/dockercfg:latest" | json_get .rootfs.diff_ids)"
    assert_equal "$(layer_digests "$(cat "$OUT/d/blobs/sha256/${stored#sha256:}")")" "$(layer_digests "$(registry_manifest fixtures/dockercfg:latest)")"
    assert_layout_blobs_verify "$OUT/d"
}

# An uncompressed layer (…layer.v1.tar) is stored as the registry serves it
# in every DEST: containers/image's oci: layout destination gzips it unless
# told otherwise (another blob, another manifest), and the parent refused
# that as neither the served layer nor its uncompressed form (exit 8, in
# oci:, oci-archive: and the stores). ctr and the runtimes' stores keep it.
@test "pull: an image with an uncompressed layer lands as served in oci: (the registry's digest), oci-archive:, dir: and docker-archive:" {
    push_layout_fixture uncompressed
    local want layer
    want=$(registry_digest fixtures/uncompressed:latest)
    layer=$(registry_manifest fixtures/uncompressed:latest | json_get '.layers[0].digest')
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/uncompressed" "oci:$OUT/u:latest"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$want"
    assert_equal "$(json_get '.manifests[0].digest' <"$OUT/u/index.json")" "$want"
    [[ -f $OUT/u/blobs/sha256/${layer#sha256:} ]] || fail "the uncompressed layer $layer is not in the layout"
    assert_layout_blobs_verify "$OUT/u"
    local d
    for d in "oci-archive:$OUT/u.tar:latest" "dir:$OUT/u-dir" "docker-archive:$OUT/u-d.tar:fixtures/uncompressed:latest"; do
        run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/uncompressed" "$d"
        assert_json_result
        run ph_skopeo inspect --raw "$d"
        assert_success
    done
    assert_equal "$(ph_skopeo inspect --raw "oci-archive:$OUT/u.tar:latest" | json_get '.layers[0].digest')" "$layer"
}

# The same layer twice in one manifest: each copy of it is the one blob.
@test "pull: an image with the same layer twice lands in oci: as the registry serves it" {
    push_layout_fixture duplayers
    local want
    want=$(registry_digest fixtures/duplayers:latest)
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/duplayers" "oci:$OUT/dup:latest"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$want"
    assert_equal "$(json_get .layers <<<"$output")" 2 # distinct layers (README "Result")
    assert_equal "$(layer_digests "$(cat "$OUT/dup/blobs/sha256/${want#sha256:}")")" "$(layer_digests "$(registry_manifest fixtures/duplayers:latest)")"
    assert_layout_blobs_verify "$OUT/dup"
}

# layer_digests MANIFEST: its layers' digests, space-separated.
layer_digests() {
    "$PH_PYTHON" -c 'import json, sys; print(" ".join(l["digest"] for l in json.loads(sys.argv[1])["layers"]))' "$1"
}

# A Docker manifest list with --all-architectures: containers/image's copy
# into an oci: layout stores the list converted to an OCI index and each
# Docker schema 2 instance converted to OCI, as skopeo copy --all does; the
# parent ties each stored instance to the registry's, in the list's order:
# the same platform, config and layers. (Debian's skopeo 1.9 rewrites the
# arm/v7 instance's config as it converts it, so its layout is not this
# containers/image's byte for byte.) Before, the stored index was refused
# as "an index inside an index" (exit 8).
@test "pull: --all-architectures of a Docker manifest list stores the list and instances converted to OCI, each tied to the registry's" {
    push_docker_fixtures
    local list stored idx i raw served inst
    list=$(registry_digest fixtures/multiv2:latest)
    run_pullhelper pull "${PH_OPTS[@]}" --all-architectures "$REGISTRY_HOST/fixtures/multiv2" "oci:$OUT/all:latest"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$list"
    assert_equal "$(json_get .media_type <<<"$output")" application/vnd.docker.distribution.manifest.list.v2+json
    assert_equal "$(json_get .layers <<<"$output")" 6
    stored=$(json_get .destination_digest <<<"$output")
    assert_equal "$(json_get '.manifests[0].digest' <"$OUT/all/index.json")" "$stored"
    assert_equal "$(json_get '.manifests[0].mediaType' <"$OUT/all/index.json")" application/vnd.oci.image.index.v1+json
    idx=$(cat "$OUT/all/blobs/sha256/${stored#sha256:}")
    raw=$(registry_manifest fixtures/multiv2:latest)
    for i in 0 1 2; do
        assert_equal "$(json_get ".manifests[$i].platform" <<<"$idx")" "$(json_get ".manifests[$i].platform" <<<"$raw")"
        served=$(registry_manifest "fixtures/multiv2@$(json_get ".manifests[$i].digest" <<<"$raw")")
        assert_equal "$(json_get .mediaType <<<"$served")" application/vnd.docker.distribution.manifest.v2+json
        inst=$(cat "$OUT/all/blobs/sha256/$(json_get ".manifests[$i].digest" <<<"$idx" | cut -d: -f2)")
        assert_equal "$(json_get .mediaType <<<"$inst")" application/vnd.oci.image.manifest.v1+json
        assert_equal "$(json_get .config.digest <<<"$inst")" "$(json_get .config.digest <<<"$served")"
        assert_equal "$(layer_digests "$inst")" "$(layer_digests "$served")"
    done
    assert_layout_blobs_verify "$OUT/all"
    for arch in amd64 arm64 arm; do
        run ph_skopeo --override-arch "$arch" inspect "oci:$OUT/all:latest"
        assert_success
        assert_equal "$(json_get .Architecture <<<"$output")" "$arch"
    done
}

# A docker-archive: holds one image (containers/image's destination takes no
# group of images; skopeo copy --all refuses it too): --all-architectures
# of an index into one is exit 2 once the index is resolved, before any blob
# is fetched, naming what to do; a single image still lands. Before, the
# whole index was downloaded and the pull failed exit 1 ("internal").
@test "pull: --all-architectures of an index into docker-archive: is exit 2 before any blob; of a single image it lands" {
    local before
    before=$(registry_log_barrier)
    run_pullhelper 2 pull "${PH_OPTS[@]}" --all-architectures "$REGISTRY_HOST/fixtures/multi" "docker-archive:$OUT/all.tar"
    assert_json_error usage
    [[ $ph_error_message == *"a docker-archive: DEST holds one image; pull without --all-architectures"* ]] || fail "message: $ph_error_message"
    [[ ! -e $OUT/all.tar ]] || fail "DEST was created"
    registry_log_barrier >/dev/null
    [[ -z $(tail -n "+$((before + 1))" "$REGISTRY_LOG" | grep -E '"GET /v2/fixtures/multi/blobs/') ]] || fail "blobs were fetched: $(tail -n "+$((before + 1))" "$REGISTRY_LOG")"
    run_pullhelper pull "${PH_OPTS[@]}" --all-architectures "$REGISTRY_HOST/fixtures/tiny" "docker-archive:$OUT/tiny.tar"
    assert_json_result
    [[ -s $OUT/tiny.tar ]] || fail "no archive written"
}

# --platform (issue 24 item 14): the instance containers/image's
# manifest.List.ChooseInstance picks with SystemContext OSChoice,
# ArchitectureChoice and VariantChoice (skopeo's --override-os/-arch/-variant),
# checked by digest against the registry's index, and what skopeo reads back.
@test "pull: --platform linux/arm64 and linux/arm/v7 store that platform's instance of the index, by digest" {
    local index want pl
    index=$(registry_manifest fixtures/multi:latest)
    for pl in linux/arm64 linux/arm/v7; do
        want=$(index_instance "$index" "$pl")
        [[ $want == sha256:* ]] || fail "no $pl instance in the fixture"
        rm -rf "$OUT/plat"
        run_pullhelper pull "${PH_OPTS[@]}" --platform "$pl" "$REGISTRY_HOST/fixtures/multi" "oci:$OUT/plat"
        assert_json_result
        assert_equal "$(json_get .digest <<<"$output")" "$(registry_digest fixtures/multi:latest)"
        assert_equal "$(json_get .instance_digest <<<"$output")" "$want"
        assert_equal "$(json_get '.manifests[0].digest' <"$OUT/plat/index.json")" "$want"
        # The stored image's config names that platform.
        run ph_skopeo inspect --config "oci:$OUT/plat"
        assert_success
        assert_equal "$("$PH_PYTHON" -c '
import json, sys
c = json.loads(sys.argv[1])
print("/".join([c["os"], c["architecture"]] + ([c["variant"]] if c.get("variant") else [])))' "$output")" "$pl"
    done
    # explain shows it, in the plan and in the text summary; a policy key
    # sets it too.
    run_pullhelper explain "${PH_OPTS[@]}" --platform linux/arm/v7 "$REGISTRY_HOST/fixtures/multi" "oci:$OUT/x"
    assert_equal "$(json_get .plan.platform <<<"$output")" '{"os":"linux","architecture":"arm","variant":"v7"}'
    run_pullhelper explain --format text "${PH_OPTS[@]}" --platform linux/arm64 "$REGISTRY_HOST/fixtures/multi" "oci:$OUT/x"
    assert_output --partial "platform linux/arm64"
    printf 'version = 1\n[pull]\nplatform = "linux/arm64"\n' >"$OUT/plat.toml"
    run_pullhelper pull --policy "$OUT/plat.toml" "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/multi" "oci:$OUT/bypolicy"
    assert_equal "$(json_get .instance_digest <<<"$output")" "$(index_instance "$index" linux/arm64)"
}

@test "pull: --platform refuses linux, a/b/c/d and Linux/AMD64 with exit 2 naming --platform (and pull.platform in a policy file)" {
    local bad
    for bad in linux a/b/c/d Linux/AMD64 linux//v7; do
        run_pullhelper 2 pull "${PH_OPTS[@]}" --platform "$bad" "$REGISTRY_HOST/fixtures/multi" "oci:$OUT/bad"
        assert_json_error usage
        [[ $ph_error_message == *"--platform"*"OS/ARCH[/VARIANT]"* ]] || fail "$bad: $ph_error_message"
        [[ ! -e $OUT/bad ]] || fail "DEST written for --platform $bad"
    done
    printf 'version = 1\n[pull]\nplatform = "linux"\n' >"$OUT/bad.toml"
    run_pullhelper 2 explain --policy "$OUT/bad.toml" "$REGISTRY_HOST/fixtures/multi"
    assert_json_error usage
    [[ $ph_error_message == *"pull.platform"*"OS/ARCH[/VARIANT]"* ]] || fail "$ph_error_message"
}

@test "pull: --platform with no instance in the index is not_found naming the platform" {
    run_pullhelper 5 pull "${PH_OPTS[@]}" --platform linux/s390x "$REGISTRY_HOST/fixtures/multi" "oci:$OUT/none"
    assert_json_error not_found
    assert_output --partial "platform linux/s390x"
}

@test "pull: many (32 layers) — result and layout have 32 layers" {
    run_pullhelper pull "${PH_OPTS[@]}" --parallel-layers 4 "$REGISTRY_HOST/fixtures/many" "oci:$OUT/many"
    assert_json_result
    assert_equal "$(json_get .layers <<<"$output")" 32
    assert_equal "$(json_get .digest <<<"$output")" "$(registry_digest fixtures/many:latest)"
    run ph_skopeo inspect "oci:$OUT/many"
    assert_success
    assert_equal "$(json_get .Layers <<<"$output" | "$PH_PYTHON" -c 'import json,sys; print(len(json.load(sys.stdin)))')" 32
    assert_layout_blobs_verify "$OUT/many"
}

@test "pull: a second tag into an existing oci: layout keeps both tags" {
    local tiny many
    tiny=$(registry_digest fixtures/tiny:latest)
    many=$(registry_digest fixtures/many:latest)
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/shared:one"
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/many" "oci:$OUT/shared:two"
    assert_equal "$(json_get .digest <<<"$output")" "$many"

    run "$PH_PYTHON" -c '
import json, sys
idx = json.load(open(sys.argv[1]))
for m in sorted(idx["manifests"], key=lambda m: m["annotations"]["org.opencontainers.image.ref.name"]):
    print(m["annotations"]["org.opencontainers.image.ref.name"], m["digest"])' "$OUT/shared/index.json"
    assert_success
    assert_output "one $tiny
two $many"
    run ph_skopeo inspect "oci:$OUT/shared:one"
    assert_success
    assert_equal "$(json_get .Digest <<<"$output")" "$tiny"
    run ph_skopeo inspect "oci:$OUT/shared:two"
    assert_success
    assert_equal "$(json_get .Digest <<<"$output")" "$many"
    assert_layout_blobs_verify "$OUT/shared"
    assert_no_staging "$OUT"
}

@test "pull: by digest (IMAGE@sha256:...) copies exactly that manifest" {
    local want
    want=$(registry_digest fixtures/many:latest)
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/many@$want" "oci:$OUT/bydigest"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$want"
    assert_equal "$(json_get .reference <<<"$output")" "$REGISTRY_HOST/fixtures/many@$want"
    assert_equal "$(json_get .layers <<<"$output")" 32
    assert_equal "$(json_get '.manifests[0].digest' <"$OUT/bydigest/index.json")" "$want"
}

@test "pull: re-pull into an existing dir: replaces it cleanly" {
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "dir:$OUT/d"
    echo junk >"$OUT/d/junk"
    local before
    before=$(ls -a "$OUT" | sort)

    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/many" "dir:$OUT/d"
    assert_json_result
    local want
    want=$(registry_digest fixtures/many:latest)
    assert_equal "$(sha256_file "$OUT/d/manifest.json")" "$want"
    [[ ! -e $OUT/d/junk ]] || fail "the old content of DEST survived the re-pull"
    # Exactly the new image: manifest.json, version, config and 32 layers.
    assert_equal "$(find "$OUT/d" -type f | wc -l)" 35
    run ph_skopeo inspect "dir:$OUT/d"
    assert_success
    assert_equal "$(json_get .Digest <<<"$output")" "$want"
    # Nothing else (staging, backup) is left beside DEST.
    assert_equal "$(ls -a "$OUT" | sort)" "$before"
}

@test "pull: a replaced dir: or oci-archive: DEST keeps its owner and mode, as skopeo (which keeps the inode) leaves them; a directory with a version file of its own is not a dir: image and is left alone" {
    local gid
    gid=$(getent group users | cut -d: -f3) || skip "no group users in /etc/group"
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "dir:$OUT/d"
    chgrp "$gid" "$OUT/d"
    chmod 2770 "$OUT/d"
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/many" "dir:$OUT/d"
    assert_equal "$(stat -c '%a %u %g' "$OUT/d")" "2770 0 $gid"
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci-archive:$OUT/o.tar:v1"
    chmod 600 "$OUT/o.tar"
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci-archive:$OUT/o.tar:v1"
    assert_equal "$(stat -c '%a' "$OUT/o.tar")" 600
    # Someone's notes in a file named version do not make a dir: image.
    mkdir "$OUT/notes"
    echo "my notes" >"$OUT/notes/version"
    echo important >"$OUT/notes/data.txt"
    run_pullhelper 9 pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "dir:$OUT/notes"
    assert_json_error destination
    [[ $ph_error_message == *"is not a dir: image"* ]] || fail "message: $ph_error_message"
    assert_equal "$(cat "$OUT/notes/data.txt")" important
}

@test "pull: result credential names the auth file, key and username (--authfile and REGISTRY_AUTH_FILE)" {
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/c1"
    assert_equal "$(json_get .credential.source <<<"$output")" containers-auth.json
    assert_equal "$(json_get .credential.file <<<"$output")" "$REGISTRY_AUTHFILE"
    assert_equal "$(json_get .credential.key <<<"$output")" "$REGISTRY_HOST"
    assert_equal "$(json_get .credential.username <<<"$output")" "$REGISTRY_USER"

    # Same file through the environment variable.
    REGISTRY_AUTH_FILE=$REGISTRY_AUTHFILE run_pullhelper pull --cert-dir "$REGISTRY_CERT_DIR" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/c2"
    assert_equal "$(json_get .credential.file <<<"$output")" "$REGISTRY_AUTHFILE"
    assert_equal "$(json_get .credential.username <<<"$output")" "$REGISTRY_USER"
}

@test "pull: the password appears nowhere in stdout, stderr or progress output (success and failure)" {
    # Success, with every log source turned up.
    run_pullhelper pull "${PH_OPTS[@]}" --debug --log-format json --progress-fd 3 \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/s1" 3>"$OUT/progress1.jsonl"
    [[ -s $OUT/progress1.jsonl ]] || fail "no progress events written"
    assert_secret_absent "$output" "$stderr"
    assert_secret_absent -f "$OUT/progress1.jsonl"
    [[ $stderr == *'"level"'* ]] || fail "--log-format json did not log JSON on stderr"

    # Failure with the wrong password (which contains the right one).
    run_pullhelper 3 pull --authfile "$REGISTRY_BADAUTHFILE" --cert-dir "$REGISTRY_CERT_DIR" \
        --debug --progress-fd 3 "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/s2" 3>"$OUT/progress2.jsonl"
    assert_secret_absent "$output" "$stderr"
    assert_secret_absent -f "$OUT/progress2.jsonl"
    assert_json_error unauthorized
}
