#!/usr/bin/env bats
#
# --progress-fd N: JSON Lines events (start, layer_start, layer_progress,
# layer_done, config_start/config_done, done, error), each with "type" and
# "ts". The ~100 MB pull goes through tests/tarpit.py with a rate limit so
# that it lasts long enough for layer_progress events. At the end:
# --progress-format bootc (bootc's progress-v0 lines).

load helpers

setup_file() {
    start_registry
    push_fixture tiny
    push_fixture big
    push_fixture multi
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

# check_events FILE RESULT_JSON START_NS END_NS CHECKS...: python checks of
# the event stream in FILE; prints one line per problem and exits 1 if any.
# CHECKS: wellformed, success, progress_rate, need_progress.
check_events() {
    "$PH_PYTHON" - "$@" <<'EOF'
import json, re, sys
from datetime import datetime, timezone

path, result_json, start_ns, end_ns = sys.argv[1:5]
checks = set(sys.argv[5:])
start, end = int(start_ns) / 1e9, int(end_ns) / 1e9
problems = []

def parse_ts(s):
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", s or "")
    if not m:
        raise ValueError("not RFC 3339: %r" % s)
    base = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")
    tz = m.group(3)
    off = 0 if tz == "Z" else (1 if tz[0] == "+" else -1) * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60)
    frac = float("0." + m.group(2)) if m.group(2) else 0.0
    return base.replace(tzinfo=timezone.utc).timestamp() - off + frac

events = []
with open(path) as f:
    for n, line in enumerate(f, 1):
        try:
            e = json.loads(line)
        except ValueError as err:
            problems.append("line %d is not JSON (%s): %r" % (n, err, line[:200]))
            continue
        if not isinstance(e, dict) or not isinstance(e.get("type"), str):
            problems.append("line %d has no type: %r" % (n, line[:200]))
            continue
        try:
            e["_t"] = parse_ts(e.get("ts"))
        except ValueError as err:
            problems.append("line %d (%s): bad ts: %s" % (n, e["type"], err))
            e["_t"] = None
        else:
            # Within the run (1 s slack for clock granularity).
            if not (start - 1 <= e["_t"] <= end + 1):
                problems.append("line %d (%s): ts %s is outside the run" % (n, e["type"], e["ts"]))
        events.append(e)

if not events:
    problems.append("no events")

if "success" in checks and events:
    result = json.loads(result_json)
    types = [e["type"] for e in events]
    if types[0] != "start":
        problems.append("first event is %s, not start" % types[0])
    if types[-1] != "done":
        problems.append("last event is %s, not done" % types[-1])
    if types.count("done") != 1:
        problems.append("%d done events" % types.count("done"))
    done = events[-1]
    if done.get("digest") != result["digest"]:
        problems.append("done.digest %s != result digest %s" % (done.get("digest"), result["digest"]))
    if done.get("bytes") != result["bytes"]:
        problems.append("done.bytes %s != result bytes %s" % (done.get("bytes"), result["bytes"]))
    if done.get("layers") != result["layers"]:
        problems.append("done.layers %s != result layers %s" % (done.get("layers"), result["layers"]))
    starts = [e["digest"] for e in events if e["type"] == "layer_start"]
    dones = {}
    for i, e in enumerate(events):
        if e["type"] == "layer_done":
            if e["digest"] in dones:
                problems.append("two layer_done for %s" % e["digest"])
            dones[e["digest"]] = (i, e)
    if len(starts) != len(set(starts)):
        problems.append("repeated layer_start: %s" % starts)
    if set(starts) != set(dones):
        problems.append("layer_start digests %s != layer_done digests %s" % (sorted(set(starts)), sorted(dones)))
    if len(dones) != result["layers"]:
        problems.append("%d layers done, result says %d" % (len(dones), result["layers"]))
    for d in starts:
        si = next(i for i, e in enumerate(events) if e["type"] == "layer_start" and e["digest"] == d)
        if d in dones:
            di, de = dones[d]
            if di < si:
                problems.append("layer_done before layer_start for %s" % d)
            if not de.get("skipped") and de.get("bytes") != de.get("size"):
                problems.append("layer_done %s: bytes %s != size %s" % (d, de.get("bytes"), de.get("size")))
        for e in events:
            if e["type"] == "layer_progress" and e["digest"] == d:
                i = events.index(e)
                if not (si < i < dones.get(d, (len(events),))[0]):
                    problems.append("layer_progress for %s outside its layer_start..layer_done" % d)
                if not (0 <= e.get("bytes", -1) <= e.get("size", 0)):
                    problems.append("layer_progress %s: bytes %s not in 0..size %s" % (d, e.get("bytes"), e.get("size")))
    cs = [e for e in events if e["type"] == "config_start"]
    cd = [e for e in events if e["type"] == "config_done"]
    if len(cs) != 1 or len(cd) != 1 or cs[0].get("digest") != cd[0].get("digest"):
        problems.append("want one config_start and one config_done for the same digest, got %d/%d" % (len(cs), len(cd)))

prog = {}
for e in events:
    if e["type"] == "layer_progress" and e["_t"] is not None:
        prog.setdefault(e.get("digest"), []).append(e)
if "need_progress" in checks and not prog:
    problems.append("no layer_progress events at all")
if "progress_rate" in checks:
    for d, evs in prog.items():
        last_bytes = -1
        for a, b in zip(evs, evs[1:]):
            # At most 4 a second: successive events for a layer >= ~250 ms apart.
            if b["_t"] - a["_t"] < 0.2:
                problems.append("layer_progress for %s only %.0f ms apart" % (d[:19], (b["_t"] - a["_t"]) * 1000))
        for e in evs:
            if e["bytes"] < last_bytes:
                problems.append("layer_progress bytes went down for %s" % d[:19])
            last_bytes = e["bytes"]

for p in problems:
    print(p)
sys.exit(1 if problems else 0)
EOF
}

now_ns() {
    date +%s%N
}

@test "progress: big through a rate-limited proxy — start first, done last, every layer_start has its layer_done, done matches the result" {
    # 8 MB/s per connection: the ~54 MB of layers take about 2 s.
    start_tarpit -1 --rate 8000000
    local t0 t1
    t0=$(now_ns)
    run_pullhelper pull --authfile "$TARPIT_AUTHFILE" --cert-dir "$REGISTRY_CERT_DIR" --progress-fd 3 \
        "$TARPIT_HOST/fixtures/big" "oci:$OUT/big" 3>"$OUT/progress.jsonl"
    t1=$(now_ns)
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$(registry_digest fixtures/big:latest)"
    local result=$output
    run check_events "$OUT/progress.jsonl" "$result" "$t0" "$t1" wellformed success need_progress
    assert_success
}

@test "progress: layer_progress at most 4 a second per layer (>= 200 ms apart), bytes never decrease" {
    start_tarpit -1 --rate 6000000
    local t0 t1
    t0=$(now_ns)
    run_pullhelper pull --authfile "$TARPIT_AUTHFILE" --cert-dir "$REGISTRY_CERT_DIR" --progress-fd 3 \
        "$TARPIT_HOST/fixtures/big" "oci:$OUT/big" 3>"$OUT/progress.jsonl"
    t1=$(now_ns)
    local result=$output
    # The pull lasted long enough that a per-layer rate could be exceeded.
    (((t1 - t0) / 1000000 > 1500)) || fail "the pull took only $(((t1 - t0) / 1000000)) ms: the rate limit did not work"
    run check_events "$OUT/progress.jsonl" "$result" "$t0" "$t1" wellformed need_progress progress_rate
    assert_success
    # At least 3 progress events for some layer (otherwise the rate check proves nothing).
    run "$PH_PYTHON" -c '
import collections, json, sys
c = collections.Counter(json.loads(l).get("digest") for l in open(sys.argv[1]) if "\"layer_progress\"" in l)
print(max(c.values()) if c else 0)' "$OUT/progress.jsonl"
    ((output >= 3)) || fail "only $output layer_progress events for the busiest layer"
}

@test "progress: a plain tiny pull writes well-formed events with valid ts and a done with the result digest" {
    local t0 t1
    t0=$(now_ns)
    run_pullhelper pull "${PH_OPTS[@]}" --progress-fd 3 "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/tiny" 3>"$OUT/progress.jsonl"
    t1=$(now_ns)
    local result=$output
    run check_events "$OUT/progress.jsonl" "$result" "$t0" "$t1" wellformed success
    assert_success
    # The progress fd carries events only; stdout carries only the result.
    assert_equal "$(grep -c '"type":"done"' "$OUT/progress.jsonl")" 1
    [[ $result != *'"type"'* ]] || fail "progress events leaked to stdout"
}

# check_resolved FILE RESULT_JSON: the one resolved event (issue 24 item 13)
# comes after start and before any blob event, with the result's digest,
# media type, instance digest, layers and bytes (the declared sizes of the
# distinct configs and layers), config_size the part that is configs.
check_resolved() {
    "$PH_PYTHON" - "$@" <<'EOF2'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
result = json.loads(sys.argv[2])
problems = []
types = [e["type"] for e in events]
res = [i for i, t in enumerate(types) if t == "resolved"]
blobs = [i for i, t in enumerate(types) if t.startswith("layer_") or t.startswith("config_")]
if len(res) != 1:
    problems.append("%d resolved events: %s" % (len(res), types))
else:
    i, e = res[0], events[res[0]]
    if types[0] != "start" or i == 0:
        problems.append("resolved is not after start: %s" % types)
    if blobs and min(blobs) < i:
        problems.append("a blob event before resolved: %s" % types)
    for k, rk in (("digest", "digest"), ("media_type", "media_type"), ("layers", "layers"), ("size", "bytes")):
        if e.get(k) != result.get(rk):
            problems.append("resolved.%s %r != result %s %r" % (k, e.get(k), rk, result.get(rk)))
    if e.get("instance_digest") != result.get("instance_digest"):
        problems.append("resolved.instance_digest %r != result %r" % (e.get("instance_digest"), result.get("instance_digest")))
    configs = sum(x.get("size", 0) for x in events if x["type"] == "config_done")
    if e.get("config_size") != configs:
        problems.append("resolved.config_size %r != the config's size %r" % (e.get("config_size"), configs))
    if e.get("attempt") != 1:
        problems.append("resolved.attempt %r, not 1" % e.get("attempt"))
for p in problems:
    print(p)
sys.exit(1 if problems else 0)
EOF2
}

@test "progress: a resolved event after start and before any blob announces the digest, layers and bytes of the result" {
    run_pullhelper pull "${PH_OPTS[@]}" --progress-fd 3 "$REGISTRY_HOST/fixtures/big" "oci:$OUT/big" 3>"$OUT/progress.jsonl"
    assert_json_result
    local result=$output
    run check_resolved "$OUT/progress.jsonl" "$result"
    assert_success
    # An index: the instance chosen (--platform's), its layers and sizes.
    run_pullhelper pull "${PH_OPTS[@]}" --platform linux/arm64 --progress-fd 3 "$REGISTRY_HOST/fixtures/multi" \
        "oci:$OUT/multi" 3>"$OUT/multi.jsonl"
    assert_json_result
    result=$output
    [[ $(json_get .instance_digest <<<"$result") == sha256:* ]] || fail "no instance digest: $result"
    run check_resolved "$OUT/multi.jsonl" "$result"
    assert_success
}

@test "progress: layers already in the oci: layout are reported skipped:true" {
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/shared:a"
    local layer
    layer=$(registry_manifest fixtures/tiny:latest | json_get '.layers[0].digest')
    run_pullhelper pull "${PH_OPTS[@]}" --progress-fd 3 "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/shared:b" \
        3>"$OUT/progress.jsonl"
    run "$PH_PYTHON" -c '
import json, sys
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e["type"] == "layer_done" and e["digest"] == sys.argv[2]:
        print(json.dumps(e.get("skipped")))' "$OUT/progress.jsonl" "$layer"
    assert_success
    assert_output true
}

# failure_events CODE EXPECTED_RC ARGS...: run a failing pull with
# --progress-fd to $OUT/progress.jsonl, check that stdout's error code is
# CODE and that the last event is the one error event, with that code and a
# message. (The error event's ts is checked by its own test.)
failure_events() {
    local code=$1 rc=$2
    shift 2
    run_pullhelper "$rc" pull --progress-fd 3 "$@" 3>"$OUT/progress.jsonl"
    assert_json_error "$code"
    [[ -s $OUT/progress.jsonl ]] || fail "no progress events on failure"
    assert_equal "$(head -n 1 "$OUT/progress.jsonl" | json_get .type)" start
    assert_equal "$(tail -n 1 "$OUT/progress.jsonl" | json_get .type)" error
    assert_equal "$(tail -n 1 "$OUT/progress.jsonl" | json_get .code)" "$code"
    local msg
    msg=$(tail -n 1 "$OUT/progress.jsonl" | json_get .message)
    [[ -n $msg && $msg != null ]] || fail "error event without a message"
    assert_equal "$(grep -c '"type":"error"' "$OUT/progress.jsonl")" 1
    # Every line is JSON with a type.
    json_get .type <"$OUT/progress.jsonl" >/dev/null
}

@test "progress: on not_found the last event is error with the same code as stdout" {
    failure_events not_found 5 "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny:nope" "oci:$OUT/dest"
}

@test "progress: on a signature rejection the last event is error verification" {
    echo '{"default":[{"type":"reject"}]}' >"$OUT/reject.json"
    failure_events verification 8 "${PH_OPTS[@]}" --signature-policy "$OUT/reject.json" \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
}

@test "progress: on a stall the last event is error network, after the layers had started" {
    start_tarpit 1000000
    failure_events network 6 --authfile "$TARPIT_AUTHFILE" --cert-dir "$REGISTRY_CERT_DIR" \
        --stall-timeout 1s --retries 0 "$TARPIT_HOST/fixtures/big" "oci:$OUT/dest"
    grep -q '"type":"layer_start"' "$OUT/progress.jsonl" || fail "no layer_start before the stall"
}

@test "progress: the error event has a real ts (within the run), like every other event" {
    local t0 t1
    t0=$(now_ns)
    run_pullhelper 5 pull --progress-fd 3 "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny:nope" "oci:$OUT/dest" \
        3>"$OUT/progress.jsonl"
    t1=$(now_ns)
    run check_events "$OUT/progress.jsonl" "$output" "$t0" "$t1" wellformed
    assert_success
}

@test "progress: a read-only --progress-fd is refused with exit 2 naming the flag (events would be lost)" {
    # fd 7, not 3: bats reports on fd 3, and a failure inside run_pullhelper
    # must still be reported.
    : >"$OUT/progress.jsonl"
    run_pullhelper 2 pull --progress-fd 7 "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest" \
        7<"$OUT/progress.jsonl"
    assert_json_error usage
    assert_output --partial "--progress-fd 7: open read-only"
    [[ ! -e $OUT/dest ]] || fail "DEST was written although the flag was refused"
}

# A progress reader that never reads: the pipe (shrunk to one page) is full
# before pullhelper starts, so every event write would block. The pull goes
# through the tarpit, which stalls it after 1 MB (--stall-timeout 0: it never
# ends by itself). SIGTERM or --timeout must end the run with its own exit
# code within the flush bound, not hang until SIGKILL.
#
# stuck_reader_pull MODE PULLHELPER_ARGS...: run such a pull (start_tarpit
# first) and print its exit code, or "hung". MODE sigterm: once the tarpit
# logged the stall, SIGTERM it. MODE wait: just wait (the pull must end by
# itself, e.g. --timeout). Its stdout and stderr are in $OUT/stdout and
# $OUT/stderr.
stuck_reader_pull() {
    "$PH_PYTHON" - "$PULLHELPER" "$TARPIT_LOG" "$OUT" "$@" <<'EOF'
import array, fcntl, os, signal, subprocess, sys, termios, time

ph, log, out, mode = sys.argv[1:5]
args = sys.argv[5:]
F_SETPIPE_SZ, F_GETPIPE_SZ = 1031, 1032
r, w = os.pipe()
fcntl.fcntl(w, F_SETPIPE_SZ, 4096)
size = fcntl.fcntl(w, F_GETPIPE_SZ)
os.set_blocking(w, False)
try:
    while True:
        os.write(w, b"x" * size)
except BlockingIOError:
    pass
os.set_blocking(w, True)  # the worst case: a blocking descriptor

def queued():
    n = array.array("i", [0])
    fcntl.ioctl(r, termios.FIONREAD, n)
    return n[0]

if queued() != size:
    print("setup: pipe holds %d bytes, not its capacity %d" % (queued(), size))
    sys.exit(1)
with open(os.path.join(out, "stdout"), "wb") as so, open(os.path.join(out, "stderr"), "wb") as se:
    p = subprocess.Popen([ph, "pull", "--progress-fd", str(w)] + args, pass_fds=(w,), stdout=so, stderr=se,
                         stdin=subprocess.DEVNULL)
os.close(w)
deadline = time.monotonic() + 120
while mode == "sigterm" and "stalled" not in open(log).read():
    if p.poll() is not None:
        print("pullhelper exited with %s before the stall" % p.returncode)
        sys.exit(1)
    if time.monotonic() > deadline:
        p.kill()
        p.wait()
        print("the pull never reached the tarpit's stall (blocked on the progress pipe?)")
        sys.exit(1)
    time.sleep(0.05)
if mode == "sigterm" and queued() != size:
    print("someone read the pipe: %d bytes left of %d" % (queued(), size))
    sys.exit(1)
if mode == "sigterm":
    p.send_signal(signal.SIGTERM)
try:
    print(p.wait(timeout=60 if mode == "sigterm" else 180))
except subprocess.TimeoutExpired:
    p.kill()
    p.wait()
    print("hung: still running (%s)" % mode)
EOF
}

@test "progress: a reader that never reads does not block SIGTERM (exit 143, not a hang)" {
    start_tarpit 1000000
    run stuck_reader_pull sigterm --authfile "$TARPIT_AUTHFILE" --cert-dir "$REGISTRY_CERT_DIR" \
        --stall-timeout 0 --retries 0 "$TARPIT_HOST/fixtures/big" "oci:$OUT/dest"
    echo "$output"
    echo "[stderr] $(cat "$OUT/stderr")"
    assert_success
    assert_output 143
    run json_get .error.code <"$OUT/stdout"
    assert_output interrupted
    grep -q -- "--progress-fd [0-9]*: the reader took no events" "$OUT/stderr" ||
        fail "no warning that the progress events were given up"
}

@test "progress: a reader that never reads does not block --timeout (exit 6, not a hang)" {
    start_tarpit 1000000
    # The tarpit stalls the 100 MB pull after 1 MB, so --timeout ends it
    # whenever the stall comes.
    run stuck_reader_pull wait --authfile "$TARPIT_AUTHFILE" --cert-dir "$REGISTRY_CERT_DIR" \
        --stall-timeout 0 --retries 0 --timeout 5s "$TARPIT_HOST/fixtures/big" "oci:$OUT/dest"
    echo "$output"
    echo "[stderr] $(cat "$OUT/stderr")"
    assert_success
    assert_output 6
    run json_get .error.message <"$OUT/stdout"
    assert_output --partial "timed out after 5s"
}

# --progress-format bootc: bootc's progress-v0 JSON Lines (api/bootc.go;
# bootc-dev/bootc crates/lib/src/progress_jsonl.rs).
#
# bootc_timed_pull TIMES ARGS...: run pullhelper ARGS with fd 3 the write
# end of a pipe that this reader drains as the lines come, writing to TIMES
# "t0 NS" (CLOCK_MONOTONIC before the spawn) and then "NS LINE" per line, NS
# its arrival. pullhelper's stdout and stderr go to $OUT/stdout and
# $OUT/stderr; the exit code is pullhelper's.
bootc_timed_pull() {
    "$PH_PYTHON" - "$PULLHELPER" "$OUT" "$@" 3>&- <<'EOF'
import fcntl, os, subprocess, sys, time

ph, out, times = sys.argv[1:4]
args = sys.argv[4:]
# Both ends above 10 first: the pipe may well get fd 3 itself.
ends = os.pipe()
r, w = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in ends)
for fd in ends:
    os.close(fd)
os.dup2(w, 3)
os.close(w)
t0 = time.monotonic_ns()
with open(os.path.join(out, "stdout"), "wb") as so, open(os.path.join(out, "stderr"), "wb") as se:
    p = subprocess.Popen(["timeout", "--kill-after=10", "300", ph] + args, pass_fds=(3,), stdout=so, stderr=se,
                         stdin=subprocess.DEVNULL)
os.close(3)
buf = b""
with open(times, "w") as f, os.fdopen(r, "rb", buffering=0) as rf:
    f.write("t0 %d\n" % t0)
    while True:
        chunk = rf.read(65536)
        now = time.monotonic_ns()
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            f.write("%d %s\n" % (now, line.decode()))
    if buf:
        f.write("%d %s\n" % (time.monotonic_ns(), buf.decode()))
sys.exit(p.wait())
EOF
}

# check_bootc FILE MANIFEST CHECKS...: check the bootc lines in FILE (plain,
# or "NS LINE" as bootc_timed_pull writes them, with CHECK timed) against
# bootc's published schema (docs/src/progress-v0.schema.json at
# bootc-dev/bootc 534c76ea: every property is required, uint64s are
# non-negative integers) and against MANIFEST, the image manifest's JSON.
# CHECKS: fresh (every layer fetched), announced (fresh, and every
# ProgressBytes line has the final totals: the resolved event's, before
# every layer started), cached (every layer already in DEST),
# failed (the last step incomplete), timed (at most 5 lines a second but for
# Start and the final two). Prints one line per problem; exit 1 if any.
check_bootc() {
    "$PH_PYTHON" - "$@" <<'EOF'
import json, sys

path, manifest = sys.argv[1:3]
checks = set(sys.argv[3:])
S, U, B, A = "string", "uint64", "boolean", "array"
KEYS = {
    "Start": {"type": S, "version": S},
    "ProgressBytes": {"type": S, "task": S, "description": S, "id": S, "bytesCached": U, "bytes": U,
                      "bytesTotal": U, "stepsCached": U, "steps": U, "stepsTotal": U, "subtasks": A},
    "ProgressSteps": {"type": S, "task": S, "description": S, "id": S, "stepsCached": U, "steps": U,
                      "stepsTotal": U, "subtasks": A},
}
SUB = {"ProgressBytes": {"subtask": S, "description": S, "id": S, "bytesCached": U, "bytes": U, "bytesTotal": U},
       "ProgressSteps": {"subtask": S, "description": S, "id": S, "completed": B}}
problems = []

def kind_ok(v, k):
    if k == S: return isinstance(v, str)
    if k == B: return isinstance(v, bool)
    if k == A: return isinstance(v, list)
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**64

def check_obj(o, want, where):
    if not isinstance(o, dict):
        problems.append("%s: not an object" % where)
        return
    if set(o) != set(want):
        problems.append("%s: keys %s, bootc's schema has %s" % (where, sorted(o), sorted(want)))
    for k, kind in want.items():
        if k in o and not kind_ok(o[k], kind):
            problems.append("%s: %s=%r is not a %s" % (where, k, o[k], kind))

t0, times, events = None, [], []
for n, raw in enumerate(open(path), 1):
    raw = raw.rstrip("\n")
    if "timed" in checks:
        ns, _, raw = raw.partition(" ")
        if ns == "t0":
            t0 = int(raw)
            continue
        times.append(int(ns))
    try:
        e = json.loads(raw)
    except ValueError as err:
        problems.append("line %d is not JSON (%s): %r" % (n, err, raw[:200]))
        continue
    t = e.get("type") if isinstance(e, dict) else None
    if t not in KEYS:
        problems.append("line %d: type %r is not bootc's" % (n, t))
        continue
    check_obj(e, KEYS[t], "line %d (%s)" % (n, t))
    for i, s in enumerate(e.get("subtasks") or []):
        check_obj(s, SUB[t], "line %d (%s) subtask %d" % (n, t, i))
    events.append(e)

if len(events) < 3:
    problems.append("%d lines; want Start and at least the final two" % len(events))
else:
    types = [e["type"] for e in events]
    if types[0] != "Start" or events[0].get("version") != "0.1.0":
        problems.append("first line %s, not Start version 0.1.0" % json.dumps(events[0]))
    if types.count("Start") != 1:
        problems.append("%d Start lines" % types.count("Start"))
    last, fb = events[-1], events[-2]
    if types[-1] != "ProgressSteps" or types[-2] != "ProgressBytes":
        problems.append("the last two lines are %s, not the final ProgressBytes and ProgressSteps" % types[-2:])
    else:
        subs = last["subtasks"]
        if "failed" in checks:
            if not subs or subs[-1]["completed"] or last["steps"] >= last["stepsTotal"]:
                problems.append("failed pull, yet the last step is complete: %s" % json.dumps(last))
        elif last["steps"] != last["stepsTotal"] or not subs or not all(s["completed"] for s in subs) \
                or len(subs) != last["stepsTotal"]:
            problems.append("the final ProgressSteps is not complete: %s" % json.dumps(last))
        layers = {l["digest"]: l["size"] for l in json.loads(manifest)["layers"]} if manifest else {}
        total = sum(layers.values())
        got = {s["id"]: s for s in fb["subtasks"]}
        if "fresh" in checks or "cached" in checks:
            if set(got) != set(layers):
                problems.append("subtask ids %s != the manifest's layers %s" % (sorted(got), sorted(layers)))
            for d, s in got.items():
                if s["bytes"] != s["bytesTotal"] or s["bytesTotal"] != layers.get(d):
                    problems.append("layer %s: bytes %d / bytesTotal %d, manifest size %s" % (d, s["bytes"], s["bytesTotal"], layers.get(d)))
        if "announced" in checks:
            # The resolved event gives the totals from the first
            # ProgressBytes line on (bootc's bytes_to_download and
            # n_layers_to_fetch), before any layer started.
            pbs = [e for e in events if e["type"] == "ProgressBytes"]
            if len(pbs) < 3:
                problems.append("only %d ProgressBytes lines" % len(pbs))
            for e in pbs:
                if e["bytesTotal"] != total or e["stepsTotal"] != len(layers):
                    problems.append("ProgressBytes bytesTotal %d stepsTotal %d, want %d and %d from the start" % (e["bytesTotal"], e["stepsTotal"], total, len(layers)))
                    break
        if "fresh" in checks:
            want = dict(bytesCached=0, bytes=total, bytesTotal=total, stepsCached=0, steps=len(layers), stepsTotal=len(layers))
        elif "cached" in checks:
            want = dict(bytesCached=total, bytes=0, bytesTotal=0, stepsCached=len(layers), steps=0, stepsTotal=0)
        else:
            want = {}
        for k, v in want.items():
            if fb[k] != v:
                problems.append("final ProgressBytes %s=%d, want %d" % (k, fb[k], v))
    prev = 0
    for e in events:
        if e["type"] != "ProgressBytes":
            continue
        if e["bytes"] < prev:
            problems.append("ProgressBytes bytes went down: %d after %d" % (e["bytes"], prev))
        prev = e["bytes"]
        if e["bytes"] > e["bytesTotal"] > 0:
            problems.append("ProgressBytes bytes %d > bytesTotal %d" % (e["bytes"], e["bytesTotal"]))
    if "timed" in checks:
        # The translator writes a rate-limited line at least 200 ms after
        # the previous one (by CLOCK_MONOTONIC); Start and the final two are
        # exempt. The first limited line is queued after t0 and the final
        # line arrives after the last limited one was queued, so N limited
        # lines need N <= 5 * (arrival of the last line - t0) + 1, however
        # late the reader or the pipe delivered any of them.
        limited = len(events) - 3
        span = (times[-1] - t0) / 1e9
        print("bootc: %d lines, %d rate-limited, over %.2f s" % (len(events), limited, span), file=sys.stderr)
        if limited > 5 * span + 1:
            problems.append("%d rate-limited lines in %.2f s: more than 5 a second" % (limited, span))
        if limited < 5:
            problems.append("only %d rate-limited lines: the rate check proves nothing" % limited)

for p in problems:
    print(p)
sys.exit(1 if problems else 0)
EOF
}

@test "progress: --progress-format bootc, a real rate-limited pull: bootc's schema, Start first, totals are the layers' sizes, at most 5 a second" {
    start_tarpit -1 --rate 6000000
    run bootc_timed_pull "$OUT/bootc.times" pull --authfile "$TARPIT_AUTHFILE" --cert-dir "$REGISTRY_CERT_DIR" \
        --progress-format bootc --progress-fd 3 "$TARPIT_HOST/fixtures/big" "oci:$OUT/big"
    echo "[stderr] $(cat "$OUT/stderr")"
    assert_success
    run cat "$OUT/stdout"
    assert_json_result
    assert_equal "$(json_get .digest <<<"$output")" "$(registry_digest fixtures/big:latest)"
    run check_bootc "$OUT/bootc.times" "$(registry_manifest fixtures/big:latest)" fresh timed
    assert_success
    # The default format's types never appear.
    ! grep -q '"type":"layer_' "$OUT/bootc.times" || fail "pullhelper events in the bootc stream"
}

# One layer at a time, so that most lines come before the last layer
# started: bytesTotal and stepsTotal are the image's layers' from the first
# ProgressBytes line on (the resolved event), as bootc's are
# (handle_layer_progress_print: bytes_to_download, n_layers_to_fetch).
@test "progress: --progress-format bootc has bytesTotal and stepsTotal of every layer from the first line (the resolved event)" {
    start_tarpit -1 --rate 20000000
    run bootc_timed_pull "$OUT/bootc.times" pull --authfile "$TARPIT_AUTHFILE" --cert-dir "$REGISTRY_CERT_DIR" \
        --parallel-layers 1 --progress-format bootc --progress-fd 3 "$TARPIT_HOST/fixtures/big" "oci:$OUT/big"
    echo "[stderr] $(cat "$OUT/stderr")"
    assert_success
    run check_bootc "$OUT/bootc.times" "$(registry_manifest fixtures/big:latest)" fresh announced timed
    assert_success
}

@test "progress: --progress-format bootc counts layers already in the oci: layout as cached" {
    run_pullhelper pull "${PH_OPTS[@]}" "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/shared:a"
    run_pullhelper pull "${PH_OPTS[@]}" --progress-format bootc --progress-fd 3 \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/shared:b" 3>"$OUT/bootc.jsonl"
    assert_json_result
    run check_bootc "$OUT/bootc.jsonl" "$(registry_manifest fixtures/tiny:latest)" cached
    assert_success
}

@test "progress: --progress-format bootc on not_found: Start first, the final lines leave the step incomplete" {
    run_pullhelper 5 pull "${PH_OPTS[@]}" --progress-format bootc --progress-fd 3 \
        "$REGISTRY_HOST/fixtures/tiny:nope" "oci:$OUT/dest" 3>"$OUT/bootc.jsonl"
    assert_json_error not_found
    run check_bootc "$OUT/bootc.jsonl" "" failed
    assert_success
}

@test "progress: an unknown --progress-format is exit 2 naming the flag, before anything is pulled" {
    run_pullhelper 2 pull "${PH_OPTS[@]}" --progress-format yaml --progress-fd 3 \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest" 3>"$OUT/bootc.jsonl"
    assert_json_error usage
    assert_output --partial '--progress-format: want pullhelper or bootc, not \"yaml\"'
    [[ ! -s $OUT/bootc.jsonl ]] || fail "events written for a refused format"
    [[ ! -e $OUT/dest ]] || fail "DEST was written although the flag was refused"
}
