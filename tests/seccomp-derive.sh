#!/bin/bash
# Re-derives the system calls the pull child makes under its seccomp filter
# (privdrop.Allowed). Runs the given bats files (default: the ones that
# exercise the most pull paths) with $PULLHELPER replaced by a wrapper that
# runs the real binary under `strace -f`, then keeps, from each trace, only
# the lines of the re-executed child (execve of /proc/self/exe as
# pullhelper-child, and every thread or process it clones) after its
# seccomp(SECCOMP_SET_MODE_FILTER) returned, and prints each system call
# name with how many times it was seen and its distinct failures.
#
#   make build && tests/seccomp-derive.sh [OUTDIR] [tests/NNN-x.bats ...]
#
# Needs strace (apt-get install -y strace); it is not needed by `make test`.
# A call listed here but not in privdrop.Allowed failed with EPERM under the
# filter: add it (if it belongs to a pull), or explain why the child copes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$(mktemp -d /tmp/seccomp-derive.XXXXXX)}
shift || true
files=("$@")
if ((${#files[@]} == 0)); then
    files=(tests/010-pull.bats tests/060-privileges.bats tests/070-network.bats tests/080-credentials.bats
        tests/112-rates.bats tests/120-resume.bats tests/130-containers-storage.bats tests/135-containerd.bats
        tests/136-containerd2.bats)
fi
command -v strace >/dev/null || { echo "seccomp-derive: strace not installed (apt-get install -y strace)" >&2; exit 2; }
real=${PULLHELPER:-$root/bin/pullhelper}
[[ -x $real ]] || { echo "seccomp-derive: $real not built (make build)" >&2; exit 2; }
mkdir -p "$out/bin" "$out/traces"
cat >"$out/bin/pullhelper" <<WRAP
#!/bin/bash
exec strace -f -qq -s 32 -o "$out/traces/t.\$\$.\$RANDOM" "$real" "\$@"
WRAP
chmod 0755 "$out/bin/pullhelper"
cd "$root"
rc=0
PULLHELPER=$out/bin/pullhelper bats "${files[@]}" >"$out/bats.log" 2>&1 || rc=$?
echo "seccomp-derive: bats exit $rc (failures under strace are expected where a test times signals; see $out/bats.log)" >&2
python3 "$root/tests/seccomp-derive.py" "$out"/traces/t.* | tee "$out/syscalls.txt"
echo "seccomp-derive: traces in $out/traces, summary in $out/syscalls.txt" >&2
