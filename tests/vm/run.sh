#!/usr/bin/env bash
# tests/vm/run.sh (make test-vm): prove pullhelper's cgroup v2 paths on a real
# kernel. Starts the test registry (TLS + htpasswd, certificate valid for
# 10.0.2.2) and a stalling proxy on the host's loopback, boots Debian's kernel
# with a busybox initramfs under QEMU (pure cgroup v2), lets the guest run
# tests/vm/guest-tests.sh against them through QEMU's user network, and
# asserts the result lines it prints on the serial console.
#
# run.sh --systemd (make test-vm-systemd): the same with Debian's systemd as
# PID 1 on a root filesystem built by tests/vm/systemd/build.sh (mmdebstrap),
# running tests/vm/systemd/guest-tests.sh: the systemd cgroup driver.
#
# Environment: PH_VM_TIMEOUT (seconds QEMU may run, default 1200: the
# guest needs about 220 s on an idle 2-core host and can take more than
# twice that while the host is busy; the bound is for a guest that hangs),
# PH_VM_KEEP=1 keeps the work directory (serial log, disk image),
# PH_VM_ONLY="name ..." runs only those guest tests, and
# PH_VM_GUEST_SCRIPT=FILE boots with FILE as the guest tests (development).
# The serial log of the last run is copied to tests/.cache/vm/serial.log
# (tests/.cache/vm-systemd/serial.log with --systemd).
set -euo pipefail
start_s=$SECONDS
VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TESTS_DIR=$(cd "$VM_DIR/.." && pwd)
ROOT=$(cd "$TESTS_DIR/.." && pwd)
MODE=cgroupfs
if [[ ${1:-} == --systemd ]]; then
    MODE=systemd
elif [[ -n ${1:-} ]]; then
    echo "run.sh: unknown argument $1 (only --systemd)" >&2
    exit 2
fi
VM_TIMEOUT=${PH_VM_TIMEOUT:-1200}

# Every test the guest must report (in this order); a missing one fails.
if [[ $MODE == systemd ]]; then
    CACHE=${PH_VM_SYSTEMD_CACHE:-$ROOT/tests/.cache/vm-systemd}
    BUILD=$VM_DIR/systemd/build.sh
    EXPECTED="systemd_pid1 scope_in_slice scope_limits sigterm usage_and_removal parent_killed join_pod_scope join_pod_slice"
    FIXTURES="tiny medium"
else
    CACHE=${PH_VM_CACHE:-$ROOT/tests/.cache/vm}
    BUILD=$VM_DIR/build.sh
    EXPECTED="born_in_cgroup limit_files privilege_drop mount_namespace sigterm dns_mount_namespace usage pids_max memory_max io_throttle_pull io_throttle_buffered cpu_throttle"
    FIXTURES="tiny medium mem"
fi
# Reported as skipped: not implemented in pullhelper yet.
SKIPPABLE=""

log() { printf '\033[1m== %s\033[0m\n' "$*" >&2; }

# helpers.bash is written for bats; outside bats its bats calls are no-ops
# (as in tests/demo.sh), and fail prints and fails.
export BATS_TEST_DIRNAME=$TESTS_DIR
WORK=$(mktemp -d /tmp/pullhelper-vm.XXXXXX)
chmod 0700 "$WORK"
export BATS_FILE_TMPDIR=$WORK
load() { :; }
bats_require_minimum_version() { :; }
fail() {
    printf 'run.sh: %s\n' "${*:-failed}" >&2
    return 1
}
# shellcheck source=tests/helpers.bash
source "$TESTS_DIR/helpers.bash"

QEMU_PID=""
# stop_qemu: QEMU_PID is `timeout`, which leads its own process group with
# QEMU in it: TERM (timeout passes it on), then KILL the group.
stop_qemu() {
    [[ -n $QEMU_PID ]] || return 0
    if kill -0 "$QEMU_PID" 2>/dev/null; then
        kill -TERM "$QEMU_PID" 2>/dev/null || true
        local i
        for i in 1 2 3 4 5 6 7 8 9 10; do
            kill -0 "$QEMU_PID" 2>/dev/null || break
            sleep 0.5
        done
        kill -KILL -- "-$QEMU_PID" 2>/dev/null || kill -KILL "$QEMU_PID" 2>/dev/null || true
    fi
    wait "$QEMU_PID" 2>/dev/null || true
    QEMU_PID=""
}
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    stop_qemu
    stop_tarpit >/dev/null 2>&1 || true
    stop_registry >/dev/null 2>&1 || true
    if [[ ${PH_VM_KEEP:-0} == 1 ]]; then
        rm -rf "$WORK/overlay" "$WORK/initrd"
        echo "run.sh: kept $WORK" >&2
    else
        rm -rf "$WORK"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

###############################################################################
log "building (cached): kernel, modules, initramfs$([[ $MODE == systemd ]] && echo ", root filesystem")"
t=$SECONDS
vars=$(bash "$BUILD")
eval "$vars"
echo "kernel package $VM_KERNEL_PKG; build step $((SECONDS - t)) s" >&2

###############################################################################
log "registry on 127.0.0.1 with a certificate for 10.0.2.2, fixtures, stalling proxy"
t=$SECONDS
export PH_REGISTRY_EXTRA_SANS=IP:10.0.2.2
export PH_REGISTRY_LIFETIME=$((VM_TIMEOUT + 300)) PH_TARPIT_LIFETIME=$((VM_TIMEOUT + 300))
start_registry
# tiny (4 KiB), medium (2 x 10 MiB, incompressible: ~21 MB to transfer and
# write) and mem (3 x 25 MiB, incompressible: ~79 MB, so that its page cache
# alone outgrows a 64 MiB memory.max).
push_fixture tiny
push_fixture_args medium fixtures/medium -layers 2 -layer-size 10485760 -compressible 0 -seed 5
[[ " $FIXTURES " != *" mem "* ]] ||
    push_fixture_args mem fixtures/mem -layers 3 -layer-size 26214400 -compressible 0 -seed 6
# Stops forwarding the registry's data after 2 MB on each connection: a pull
# through it stalls mid-layer and stays there (for the tests that look at a
# running pull).
start_tarpit 2000000
echo "registry $REGISTRY_HOST, tarpit $TARPIT_HOST; setup $((SECONDS - t)) s" >&2

# What the guest gets, laid at / over the base initramfs: the CA, auth.json
# keyed by the guest's view of both ports (0600, written by python, never
# printed), and the addresses and expected digests.
OV="$WORK/overlay"
mkdir -p "$OV/etc/phvm/certs"
cp "$REGISTRY_CA" "$OV/etc/phvm/certs/ca.crt"
(
    umask 077
    "$PH_PYTHON" -c '
import json, sys
src, key, dst = sys.argv[1:4]
with open(src) as f:
    auth = json.load(f)["auths"][key]["auth"]
with open(dst, "w") as f:
    json.dump({"auths": {k: {"auth": auth} for k in sys.argv[4:]}}, f)
' "$REGISTRY_AUTHFILE" "$REGISTRY_HOST" "$OV/etc/phvm/auth.json" \
        "10.0.2.2:$REGISTRY_PORT" "10.0.2.2:${TARPIT_HOST##*:}"
)
chmod 0600 "$OV/etc/phvm/auth.json"
{
    echo "REG=10.0.2.2:$REGISTRY_PORT"
    echo "TARPIT=10.0.2.2:${TARPIT_HOST##*:}"
    for f in $FIXTURES; do
        echo "DIGEST_$f=$(registry_digest "fixtures/$f:latest")"
    done
    echo "ONLY=\"${PH_VM_ONLY:-}\""
} >"$OV/etc/phvm/env"
# Development: PH_VM_GUEST_SCRIPT=FILE replaces the guest tests for one run.
if [[ -n ${PH_VM_GUEST_SCRIPT:-} ]]; then
    mkdir -p "$OV/phvm"
    install -m 0755 "$PH_VM_GUEST_SCRIPT" "$OV/phvm/guest-tests.sh"
fi
bash "$BUILD" --overlay "$OV" "$WORK/initrd" >/dev/null

if [[ $MODE == systemd ]]; then
    # The root filesystem image, never written: QEMU keeps the guest's
    # writes in a temporary file (snapshot=on). /init mounts it, systemd
    # runs from it.
    DISK_ARGS=(-drive file="$VM_ROOTFS",if=virtio,format=raw,snapshot=on,cache=unsafe)
    APPEND="systemd.show_status=0 trace_event=cgroup:cgroup_attach_task"
else
    # Scratch disk for the IO tests (virtio-blk; the guest makes the filesystem).
    truncate -s 1G "$WORK/disk.img"
    DISK_ARGS=(-drive file="$WORK/disk.img",if=virtio,format=raw,cache=unsafe)
    APPEND="trace_event=cgroup:cgroup_attach_task,cgroup:cgroup_freeze"
fi
# CI once saw the systemd guest lock up at its first step: the tests' shell
# (bash, so the builtin "echo 1 > .../enable" of a trace event) stuck in the
# kernel on CPU#0 (soft lockup reports for 1100 s) until QEMU's timeout.
# Enabling a trace event patches the kernel's text and waits until every
# other CPU has run an IPI; under multi-threaded TCG (one host thread per
# vCPU) that wait did not end. So: the trace events are enabled on the
# command line (trace_event=), while one CPU runs; and one host thread runs
# both vCPUs (-accel tcg,thread=single), so that the static keys the tests
# flip later (the first memory cgroup, a CPU quota) are patched without a
# race between host threads (the guests take about 1.3x as long).
# softlockup_panic=1: a guest that locks up anyway ends at once (panic=-1,
# -no-reboot) instead of at VM_TIMEOUT; the panic raises the console's
# loglevel (1, so that the kernel never splits a PHVM line) and
# panic_print=0x20 replays the kernel's log, so the lockup's stacks, every
# CPU's (softlockup_all_cpu_backtrace=1), reach the serial log.
APPEND+=" softlockup_panic=1 softlockup_all_cpu_backtrace=1 panic_print=0x20"

###############################################################################
log "booting the guest (QEMU TCG, pure cgroup v2$([[ $MODE == systemd ]] && echo ", systemd as PID 1")), at most ${VM_TIMEOUT}s"
SERIAL="$WORK/serial.log"
: >"$SERIAL"
t=$SECONDS
# -nographic: the serial console is QEMU's stdout. -no-reboot with panic=-1:
# a panic (e.g. /init dying) ends QEMU. Only the user network: the guest
# reaches the host's loopback as 10.0.2.2, and nothing else is addressed.
timeout --kill-after=10 "$VM_TIMEOUT" \
    qemu-system-x86_64 -machine pc -accel tcg,thread=single -cpu max -smp 2 -m 1024 \
    -nographic -no-reboot -nodefaults -serial stdio -monitor none \
    -kernel "$VM_KERNEL" -initrd "$WORK/initrd" \
    -append "console=ttyS0 panic=-1 loglevel=1 systemd.unified_cgroup_hierarchy=1 cgroup_no_v1=all rdinit=/init $APPEND" \
    -netdev user,id=n0,net=10.0.2.0/24,host=10.0.2.2 -device e1000,netdev=n0 \
    "${DISK_ARGS[@]}" \
    </dev/null >"$SERIAL" 2>"$WORK/qemu.err" &
QEMU_PID=$!
# Boot time: from starting QEMU to the guest's "PHVM BEGIN" (modules
# loaded, network up).
t0=$EPOCHREALTIME boot=""
while kill -0 "$QEMU_PID" 2>/dev/null; do
    if [[ -z $boot ]] && grep -q '^PHVM BEGIN' "$SERIAL"; then
        boot=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
    fi
    sleep 0.2
done
qrc=0
wait "$QEMU_PID" || qrc=$?
QEMU_PID=""
vm_s=$((SECONDS - t))
cp "$SERIAL" "$CACHE/serial.log"
tr -d '\r' <"$SERIAL" | grep -oE 'PHVM [A-Z]+ .*' >"$WORK/phvm.txt" || true
echo "QEMU exited $qrc after ${vm_s}s (serial log: $CACHE/serial.log)" >&2
[[ -s $WORK/qemu.err ]] && sed 's/^/qemu: /' "$WORK/qemu.err" | head -20 >&2

###############################################################################
log "results"
# The serial log must not contain the credential.
secret_leak=0
assert_secret_absent -f "$SERIAL" 2>/dev/null || secret_leak=1

passed=0 failed=0 skipped=0
declare -A seen=()
while read -r _ kind name status detail; do
    [[ $kind == RESULT ]] || continue
    seen[$name]=$status
    case $status in
        pass) passed=$((passed + 1)); printf 'ok      %-22s %s\n' "$name" "$detail" ;;
        skip)
            if [[ " $SKIPPABLE " == *" $name "* ]]; then
                skipped=$((skipped + 1))
                printf 'skip    %-22s %s\n' "$name" "$detail"
            else
                failed=$((failed + 1))
                printf 'FAIL    %-22s skipped, but it must run: %s\n' "$name" "$detail"
            fi
            ;;
        *) failed=$((failed + 1)); printf 'FAIL    %-22s %s\n' "$name" "$detail" ;;
    esac
done <"$WORK/phvm.txt"
for name in $EXPECTED; do
    if [[ -n ${PH_VM_ONLY:-} && " $PH_VM_ONLY " != *" $name "* ]]; then
        continue
    fi
    if [[ -z ${seen[$name]:-} ]]; then
        failed=$((failed + 1))
        printf 'FAIL    %-22s no result line from the guest\n' "$name"
    fi
done
grep -q '^PHVM END' "$WORK/phvm.txt" || {
    failed=$((failed + 1))
    echo "FAIL    guest                  no PHVM END marker (guest crashed or timed out; exit $qrc)"
}
((secret_leak == 0)) || {
    failed=$((failed + 1))
    echo "FAIL    secrets                the registry credential appears in the serial log"
}
if ((failed)); then
    echo "--- last 40 lines of the serial log ---" >&2
    tr -d '\r' <"$SERIAL" | grep -v '^PHVM DIAG' | tail -n 40 >&2
    if tr -d '\r' <"$SERIAL" | grep -q 'Kernel panic'; then
        # The replayed log's last report: from its last "BUG:" line on.
        echo "--- the guest kernel's panic (its last report and the stacks) ---" >&2
        tr -d '\r' <"$SERIAL" | awk '/BUG: |Kernel panic/ { from = NR } { line[NR] = $0 }
            END { for (i = from; i <= NR && i < from + 300; i++) print line[i] }' >&2
    fi
    if grep -q '^PHVM DIAG' "$WORK/phvm.txt"; then
        echo "--- the guest's account of a stuck test (PHVM DIAG) ---" >&2
        grep '^PHVM DIAG' "$WORK/phvm.txt" | head -n 200 >&2
    fi
fi
echo "times: boot to tests ${boot:-?} s; $(awk '$2 == "TIME" { printf "%s %.1f s, ", $3, $4 / 1000 }' "$WORK/phvm.txt")VM ${vm_s} s, total $((SECONDS - start_s)) s" >&2
echo "$passed passed, $failed failed, $skipped skipped"
((failed == 0))
