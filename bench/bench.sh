#!/usr/bin/env bash
# make bench: pullhelper side by side with the owners' tools on a local TLS +
# htpasswd registry, interleaved, medians, per destination kind: oci:
# (isolated and --no-isolation against skopeo copy, crane pull --format oci
# and the durable floor, bench/floor), containers-storage: (isolated against
# skopeo copy into a fresh overlay store) and containerd: (isolated against
# ctr images pull into the containerd 2.x of make deps, unpacked, native);
# see bench/bench.py for what is measured, README "Performance" for how to
# read it. Environment: ROUNDS (default 7, after one warm-up), STORE_ROUNDS
# (the containers-storage: and containerd: rows, 5), TTFB_ROUNDS (3),
# MEM_ROUNDS (3), CRI_ROUNDS (3), CRANE (path of crane; make bench builds
# the pinned one).
# With the containerd 2.x and crictl of make deps it also compares, on the
# big image, `crictl pull` through `pullhelper cri` (in front of that
# containerd) with `crictl pull` straight to containerd's own CRI, both
# unpacked (native snapshotter), as a ratio.
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
CRI_PID=""
CTRD_DIR=""
bench_cleanup() {
    local m
    [[ -z $CRI_PID ]] || _ph_stop_pid "$CRI_PID" "pullhelper cri" >/dev/null 2>&1 || true
    [[ -z $CTRD_DIR ]] || ctrd_stop "$CTRD_DIR" >/dev/null 2>&1 || true
    stop_registry >/dev/null 2>&1 || true
    # What a store pull left mounted below the bench's directory (skopeo's
    # overlay home, a layer an interrupted pull had mounted), innermost
    # first, as tests/130-containers-storage.bats' teardown does.
    { findmnt -rn -o TARGET | grep -F "$BATS_FILE_TMPDIR/" || true; } | sort -r | while read -r m; do
        umount "$m" 2>/dev/null || umount -l "$m" || echo "bench: could not unmount $m" >&2
    done
    rm -rf "$BATS_FILE_TMPDIR"
}
trap bench_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

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

# The CRI comparison: containerd 2.x with the tests' version-3 config
# (tests/cred-files.py: its own root, state and socket below the bench's
# directory; the native snapshotter for the CRI and, in
# plugins."io.containerd.transfer.v1.local".unpack_config, for the
# transfer service that containerd 2.x's CRI pulls through: without that
# entry its PullImage fails "unable to initialize unpacker: no unpack
# platforms defined", core/unpack.NewUnpacker; the registry's CA in a
# hosts.toml, its credential in the CRI's registry.configs.auth), and
# pullhelper cri in front of it with the node's credential (--authfile):
# crictl sends none, so no secret is on any command line.
BENCH_CRI_SKIP=""
CRICTL=$(command -v crictl || true)
[[ -n $CRICTL ]] || CRICTL=$PH_CACHE/bin/crictl
if [[ ! -x $PH_CONTAINERD2_DIR/containerd ]]; then
    BENCH_CRI_SKIP="no containerd $PH_CONTAINERD2_VERSION in $PH_CONTAINERD2_DIR (make deps builds it)"
elif [[ ! -x $PH_CONTAINERD2_DIR/ctr ]]; then
    BENCH_CRI_SKIP="no ctr beside containerd in $PH_CONTAINERD2_DIR (make deps builds it)"
elif [[ ! -x $CRICTL ]]; then
    BENCH_CRI_SKIP="no crictl in PATH or $PH_CACHE/bin (make deps builds it)"
else
    CTRD_BIN=$PH_CONTAINERD2_DIR/containerd
    CTRD_DIR=$BATS_FILE_TMPDIR/ctrd
    mkdir -p "$CTRD_DIR"
    "$PH_PYTHON" "$ROOT/tests/cred-files.py" containerd "$CTRD_DIR/config.toml" --state-dir "$CTRD_DIR" \
        --ca "$REGISTRY_CA" --version 3 || fail "writing containerd's config failed"
    PH_CONTAINERD_LIFETIME=14400 ctrd_start "$CTRD_DIR"
    BENCH_CRI_SOCK=$BATS_FILE_TMPDIR/cri.sock
    "$PULLHELPER" cri --listen "unix://$BENCH_CRI_SOCK" --runtime-endpoint "unix://$CTRD_DIR/c.sock" \
        --cert-dir "$REGISTRY_CERT_DIR" --authfile "$REGISTRY_AUTHFILE" --containerd-snapshotter native \
        --containerd-staging "$BATS_FILE_TMPDIR/cri-staging" --log-format json \
        </dev/null >"$BATS_FILE_TMPDIR/cri.out" 2>"$BATS_FILE_TMPDIR/cri.log" 3>&- &
    CRI_PID=$!
    deadline=$((SECONDS + 30))
    until grep -q '"msg":"serving"' "$BATS_FILE_TMPDIR/cri.log" 2>/dev/null; do
        _ph_pid_alive "$CRI_PID" || fail "pullhelper cri exited: $(cat "$BATS_FILE_TMPDIR/cri.log")"
        ((SECONDS < deadline)) || fail "pullhelper cri did not listen within 30 s"
        sleep 0.05
    done
    export BENCH_CRI_SOCK BENCH_CTRD_SOCK=$CTRD_DIR/c.sock BENCH_CRICTL=$CRICTL BENCH_CTR=$PH_CONTAINERD2_DIR/ctr
    BENCH_CTRD_VERSION=$("$CTRD_BIN" --version | awk '{print $3}')
    export BENCH_CTRD_VERSION
fi
export BENCH_CRI_SKIP BENCH_CRI_ROUNDS=${CRI_ROUNDS:-3}

export BENCH_ROUNDS=${ROUNDS:-7} BENCH_STORE_ROUNDS=${STORE_ROUNDS:-5} BENCH_TTFB_ROUNDS=${TTFB_ROUNDS:-3} BENCH_MEM_ROUNDS=${MEM_ROUNDS:-3}
export BENCH_TMP=$BATS_FILE_TMPDIR BENCH_BIN=$BATS_FILE_TMPDIR/bin BENCH_CRANE=$CRANE BENCH_PULLHELPER=$PULLHELPER
export BENCH_RESULTS=${BENCH_RESULTS:-$BENCH_DIR/results.json}
export BENCH_PROXY_PORT
BENCH_PROXY_PORT=$(_ph_free_port)
exec 3>&-
# bench.py in a session of its own, so that SIGINT or SIGTERM to this script
# reaches it and every pull it runs (meter, pullhelper, skopeo, ctr) as one
# process group; bash would otherwise run the trap only after it finished.
# The EXIT trap then stops the daemons and unmounts and removes the rest.
setsid "$PH_PYTHON" "$BENCH_DIR/bench.py" &
BENCH_PY=$!
bench_stop() {
    local deadline=$((SECONDS + 30))
    kill -TERM -- "-$BENCH_PY" 2>/dev/null || kill -TERM "$BENCH_PY" 2>/dev/null || true
    while kill -0 -- "-$BENCH_PY" 2>/dev/null && ((SECONDS < deadline)); do
        sleep 0.1
    done
    kill -KILL -- "-$BENCH_PY" 2>/dev/null || true
    echo "bench: interrupted; cleaning up" >&2
    exit "$1"
}
trap 'bench_stop 130' INT
trap 'bench_stop 143' TERM
wait "$BENCH_PY"
