#!/usr/bin/env bash
# make demo: start a throwaway local registry (TLS from a CA generated now,
# htpasswd auth), push a generated sample image, pull it with pullhelper and
# show the result. Everything it creates is removed on exit.
set -euo pipefail
cd "$(dirname "$0")"
export BATS_TEST_DIRNAME=$PWD
BATS_FILE_TMPDIR=$(mktemp -d /tmp/pullhelper-demo.XXXXXX)
export BATS_FILE_TMPDIR
# helpers.bash is written for bats; outside bats its two bats calls are no-ops.
load() { :; }
bats_require_minimum_version() { :; }
# shellcheck source=tests/helpers.bash
source ./helpers.bash

cleanup() {
    stop_registry >/dev/null 2>&1 || true
    rm -rf "$BATS_FILE_TMPDIR"
}
trap cleanup EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*" >&2; }

say "generating a sample image and starting a local registry (TLS + htpasswd)"
fixture tiny >/dev/null
start_registry
push_fixture tiny demo/sample:1.0 >/dev/null
echo "registry: https://$REGISTRY_HOST  (CA: $REGISTRY_CERT_DIR/ca.crt, auth file: $REGISTRY_AUTHFILE)" >&2

dest="$BATS_FILE_TMPDIR/layout"
say "pullhelper explain (no network)"
"$PULLHELPER" explain --authfile "$REGISTRY_AUTHFILE" --cert-dir "$REGISTRY_CERT_DIR" \
    "$REGISTRY_HOST/demo/sample:1.0" "oci:$dest:1.0" | json_get .plan.credentials

say "pullhelper pull $REGISTRY_HOST/demo/sample:1.0 oci:$dest:1.0"
"$PULLHELPER" pull --authfile "$REGISTRY_AUTHFILE" --cert-dir "$REGISTRY_CERT_DIR" \
    "$REGISTRY_HOST/demo/sample:1.0" "oci:$dest:1.0" | tee "$BATS_FILE_TMPDIR/result.json"

say "checking: the registry's digest, and skopeo reading the pulled layout"
served=$(registry_digest demo/sample:1.0)
pulled=$(json_get .digest <"$BATS_FILE_TMPDIR/result.json")
echo "registry serves $served" >&2
echo "pullhelper got  $pulled" >&2
skopeo inspect "oci:$dest:1.0" | json_get .Layers >&2
[[ "$served" == "$pulled" ]] || { echo "demo: digest mismatch" >&2; exit 1; }
say "demo OK"
