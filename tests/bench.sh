#!/usr/bin/env bash
# make bench: pullhelper against skopeo (the same containers/image library),
# side by side in one invocation, on a local TLS+auth registry. Prints the
# median wall time and peak RSS of each tool per image and the ratios to
# skopeo. Numbers are for comparison within one run only: these machines are
# shared and noisy, so nothing here is asserted.
set -euo pipefail
cd "$(dirname "$0")"
export BATS_TEST_DIRNAME=$PWD
BATS_FILE_TMPDIR=$(mktemp -d /tmp/pullhelper-bench.XXXXXX)
export BATS_FILE_TMPDIR
load() { :; }
bats_require_minimum_version() { :; }
# shellcheck source=tests/helpers.bash
source ./helpers.bash
trap 'stop_registry >/dev/null 2>&1 || true; rm -rf "$BATS_FILE_TMPDIR"' EXIT

ROUNDS=${ROUNDS:-5}
start_registry >/dev/null
for f in big many; do push_fixture "$f" >/dev/null; done
echo "registry $REGISTRY_HOST; $ROUNDS rounds per tool and image; skopeo $(skopeo --version | awk '{print $3}')" >&2

"$PH_PYTHON" - "$ROUNDS" "$REGISTRY_HOST" "$REGISTRY_AUTHFILE" "$REGISTRY_CERT_DIR" "$PULLHELPER" "$BATS_FILE_TMPDIR" <<'PY'
import os, shutil, statistics, subprocess, sys, time
rounds, host, authfile, certdir, ph, tmp = int(sys.argv[1]), *sys.argv[2:]
policy = os.path.join(tmp, "policy.json")
open(policy, "w").write('{"default":[{"type":"insecureAcceptAnything"}]}')
tools = {
    "skopeo": lambda img, dst: ["skopeo", "--policy", policy, "copy", "--quiet", "--src-authfile", authfile,
                                "--src-cert-dir", certdir, f"docker://{host}/fixtures/{img}", f"oci:{dst}"],
    "pullhelper --no-isolation": lambda img, dst: [ph, "pull", "--no-isolation", "--signature-policy", policy,
                                "--authfile", authfile, "--cert-dir", certdir, f"{host}/fixtures/{img}", f"oci:{dst}"],
    "pullhelper (isolated)": lambda img, dst: [ph, "pull", "--signature-policy", policy, "--authfile", authfile,
                                "--cert-dir", certdir, f"{host}/fixtures/{img}", f"oci:{dst}"],
}
def run(argv):
    dst = os.path.join(tmp, "dst")
    shutil.rmtree(dst, ignore_errors=True)
    argv = [a.replace("@DST@", dst) for a in argv]
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    dt = time.monotonic() - t0
    err = p.stderr.read().decode()
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"{argv[0]} failed ({p.returncode}): {err[-400:]}")
    return dt, ru.ru_maxrss / 1024.0
print(f"{'image':6} {'tool':28} {'median s':>9} {'ratio':>6} {'peak RSS MiB':>13} {'ratio':>6}")
for img in ["big", "many"]:
    base = None
    for name, mk in tools.items():
        res = []
        for r in range(rounds):  # interleaving would be fairer per round; keep order simple and fixed
            res.append(run(mk(img, "@DST@")))
        t = statistics.median(x[0] for x in res)
        m = statistics.median(x[1] for x in res)
        if base is None:
            base = (t, m)
        print(f"{img:6} {name:28} {t:9.3f} {t/base[0]:6.2f} {m:13.1f} {m/base[1]:6.2f}")
PY
