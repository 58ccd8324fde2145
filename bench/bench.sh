#!/usr/bin/env bash
# make bench: pullhelper (isolated and --no-isolation) side by side with
# skopeo copy, crane pull --format oci and the durable floor (bench/floor),
# on a local TLS + htpasswd registry, interleaved, medians; see bench/bench.py
# for what is measured and README "Performance" for how to read it.
# Environment: ROUNDS (default 7, after one warm-up), TTFB_ROUNDS (3),
# MEM_ROUNDS (3), CRANE (path of crane; make bench builds the pinned one).
set -euo pipefail
BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
export BATS_TEST_DIRNAME=$ROOT/tests
BATS_FILE_TMPDIR=$(mktemp -d /var/tmp/pullhelper-bench.XXXXXX)
export BATS_FILE_TMPDIR
# helpers.bash is written for bats; outside it, these are enough.
load() { :; }
bats_require_minimum_version() { :; }
fail() { echo "bench: ${*:-failed}" >&2; exit 1; }
# shellcheck source=tests/helpers.bash
source "$ROOT/tests/helpers.bash"
trap 'stop_registry >/dev/null 2>&1 || true; rm -rf "$BATS_FILE_TMPDIR"' EXIT

[[ $(id -u) -eq 0 ]] || fail "run as root (the isolated pull needs it)"
CRANE=${CRANE:-$PH_CACHE/bin/crane}
[[ -x $CRANE ]] || fail "crane not found at $CRANE (make bench builds it)"
[[ -x $PULLHELPER ]] || fail "pullhelper not built at $PULLHELPER (make build)"

mkdir -p "$BATS_FILE_TMPDIR/bin"
(cd "$ROOT" && go build -trimpath -o "$BATS_FILE_TMPDIR/bin/" ./bench/floor ./bench/meter) ||
    fail "building bench/floor and bench/meter failed"

# The bench's images, cached in tests/.cache/images under their own names
# (the tests' big/many/medium fixtures are left alone).
declare -A IMAGES=(
    [big]="-layers 4 -layer-size 67108864 -compressible 0.5 -seed 21"
    [medium]="-layers 8 -layer-size 16777216 -compressible 0.5 -seed 22"
    [many-small]="-layers 64 -layer-size 262144 -compressible 0.5 -seed 23"
)
echo "bench: generating images (cached in $PH_CACHE/images/bench-*)" >&2
for name in big medium many-small; do
    # shellcheck disable=SC2086
    fixture "bench-$name" ${IMAGES[$name]}
done

start_registry >/dev/null
opts=()
_ph_skopeo_supports_preserve_digests && opts+=(--preserve-digests)
for name in big medium many-small; do
    # shellcheck disable=SC2046
    registry_skopeo copy --quiet "${opts[@]}" $(registry_skopeo_opts dest) \
        "$(fixture_ref "bench-$name")" "docker://$REGISTRY_HOST/bench/$name:latest" ||
        fail "pushing bench-$name failed"
done

export BENCH_ROUNDS=${ROUNDS:-7} BENCH_TTFB_ROUNDS=${TTFB_ROUNDS:-3} BENCH_MEM_ROUNDS=${MEM_ROUNDS:-3}
export BENCH_TMP=$BATS_FILE_TMPDIR BENCH_BIN=$BATS_FILE_TMPDIR/bin BENCH_CRANE=$CRANE BENCH_PULLHELPER=$PULLHELPER
export BENCH_RESULTS=${BENCH_RESULTS:-$BENCH_DIR/results.json}
export BENCH_PROXY_PORT
BENCH_PROXY_PORT=$(_ph_free_port)
exec 3>&-
"$PH_PYTHON" "$BENCH_DIR/bench.py"
