#!/usr/bin/env bats
#
# What the root parent takes from the child's messages (issue 22 findings 4
# and 6, and the wire review): a compromised child (bin/pullhelper-hostile,
# actions in reexec/hostile_wire.go) sending fat events, or one line that
# amplifies when decoded, cannot grow the parent's memory, whatever the
# progress format or however slow its reader; its report's claims never
# reach the result (image_id, store, media_type, layers, bytes and the
# endpoints' hosts are what the parent verified or planned); its text
# reaches stdout, stderr and the progress fd escaped and bounded, never
# as a record of the parent's log.

load helpers

setup_file() {
    start_registry
    push_fixture tiny
}

teardown_file() {
    stop_registry
}

setup() {
    ph_test_setup
    skip_if_not_root "the isolated child needs root to start"
    [[ -x $PULLHELPER_HOSTILE_BIN ]] || fail "hostile build missing: $PULLHELPER_HOSTILE_BIN (make build-hostile)"
    [[ -x /usr/bin/time ]] || skip "needs GNU time (/usr/bin/time) to read the parent's peak RSS"
}

# A generous bound on the parent's peak resident set (its baseline is
# about 30 MiB): a memory bound, not a timing.
MAX_RSS_KIB=$((100 << 10))
# The bound when the child sends a maximal last line (the report), which the
# parent holds whole once.
MAX_LAST_LINE_RSS_KIB=$((200 << 10))

# hostile_pull ACTIONS FD-REDIRECT ARGS...: the hostile build's pull with
# $PULLHELPER_HOSTILE=ACTIONS, under GNU time; sets rc, $OUT/stdout,
# $OUT/stderr and rss_kib, the largest resident set among the parent and
# the processes it reaped (the child's is small: it only sends).
hostile_pull() {
    local actions=$1
    shift
    rc=0
    PULLHELPER_HOSTILE=$actions timeout --kill-after=10 "$PH_TIMEOUT" /usr/bin/time -f %M -o "$OUT/rss" \
        "$PULLHELPER_HOSTILE_BIN" pull "${PH_OPTS[@]}" "$@" >"$OUT/stdout" 2>"$OUT/stderr" || rc=$?
    rss_kib=$(tail -1 "$OUT/rss")
    echo "exit $rc, peak RSS ${rss_kib} KiB"
    grep -v '^pullhelper-child: hostile' "$OUT/stderr" | tail -5
}

@test "fat events (64 × a 2 MiB digest), --progress-format bootc: the parent stays bounded and refuses the child" {
    hostile_pull after-drop:fat-events --progress-format bootc --progress-fd 5 \
        "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest" 5>"$OUT/events"
    grep -q "hostile: running fat-events" "$OUT/stderr" || fail "the hostile action did not run"
    ((rss_kib < MAX_RSS_KIB)) || fail "the parent's peak RSS is ${rss_kib} KiB, over ${MAX_RSS_KIB} KiB"
    assert_equal "$rc" 7
    assert_equal "$(json_get .error.code <"$OUT/stdout")" isolation
    [[ $(json_get .error.message <"$OUT/stdout") == *"oversized message"* ]] || fail "the error does not name the oversized message: $(cat "$OUT/stdout")"
    [[ ! -e $OUT/dest ]] || fail "DEST was created"
    # No line on the progress fd carries a fat field.
    ! grep -q aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa "$OUT/events" ||
        fail "a fat digest reached the progress fd"
}

@test "fat events with a progress reader that never reads (default format): the parent stays bounded" {
    mkfifo "$OUT/fifo"
    # Opened read-write and never read: the pipe fills, writes block.
    hostile_pull after-drop:fat-events --progress-fd 5 "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest" 5<>"$OUT/fifo"
    grep -q "hostile: running fat-events" "$OUT/stderr" || fail "the hostile action did not run"
    ((rss_kib < MAX_RSS_KIB)) || fail "the parent's peak RSS is ${rss_kib} KiB, over ${MAX_RSS_KIB} KiB"
    assert_equal "$rc" 7
    assert_equal "$(json_get .error.code <"$OUT/stdout")" isolation
    [[ ! -e $OUT/dest ]] || fail "DEST was created"
}

@test "events whose digest, media type and host are not what they name are dropped; the pull goes on" {
    hostile_pull after-drop:fat-fields --progress-fd 5 "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest" 5>"$OUT/events"
    grep -q "hostile: running fat-fields" "$OUT/stderr" || fail "the hostile action did not run"
    assert_equal "$rc" 0
    ((rss_kib < MAX_RSS_KIB)) || fail "the parent's peak RSS is ${rss_kib} KiB, over ${MAX_RSS_KIB} KiB"
    grep -q "dropped an event of the pull child" "$OUT/stderr" || fail "the dropped events were not reported"
    # Every event on the progress fd has fields of a digest's, a media
    # type's and a host's size and form; the copy's own progress is there.
    "$PH_PYTHON" - "$OUT/events" <<'PY'
import json, re, sys
n = 0
for line in open(sys.argv[1]):
    e = json.loads(line)
    n += 1
    d, mt, h = e.get("digest", ""), e.get("media_type", ""), e.get("host", "")
    assert not d or re.fullmatch(r"sha256:[0-9a-f]{64}", d), "digest %.80r" % d
    assert len(mt) <= 255 and len(h) <= 259, "media type %.80r host %.80r" % (mt, h)
assert n > 2, "only %d events" % n
PY
}

@test "a false report: image_id, store and media_type in the result are what the parent verified, not the child's claims" {
    hostile_pull after-copy:false-report "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    grep -q "hostile: false-report: sent" "$OUT/stderr" || fail "the hostile action did not run"
    assert_equal "$rc" 0
    local res
    res=$(cat "$OUT/stdout")
    echo "$res"
    assert_equal "$(json_get .image_id <<<"$res")" null
    assert_equal "$(json_get .store <<<"$res")" null
    # The media type is the one of the manifest whose digest DEST holds.
    local digest want
    digest=$(json_get .digest <<<"$res")
    want=$("$PH_PYTHON" -c '
import json, sys
m = json.load(open(sys.argv[1] + "/blobs/sha256/" + sys.argv[2].split(":")[1]))
print(m.get("mediaType", ""))' "$OUT/dest" "$digest")
    [[ -n $want ]] || fail "the fixture's manifest names no mediaType"
    assert_equal "$(json_get .media_type <<<"$res")" "$want"
    [[ $res != *hostile.claim* && $res != *hostile.sock* && $res != *eeeeeeee* ]] || fail "a claim of the child reached the result"
}

# no_controls FILE...: fails when a file holds a terminal control: a C0
# control other than newline (ESC, BEL, NUL, backspace, CR), DEL, a C1
# control (U+0080–U+009F, NEL among them) or U+2028/U+2029.
no_controls() {
    "$PH_PYTHON" - "$@" <<'PY'
import re, sys
bad = re.compile(r"[\x00-\x09\x0b-\x1f\x7f\u0080-\u009f\u2028\u2029]")
for f in sys.argv[1:]:
    text = open(f, "rb").read().decode("utf-8", "replace")
    m = bad.search(text)
    assert not m, "%s: %r at %d: %r" % (f, m.group(), m.start(), text[max(m.start() - 40, 0):m.start() + 40])
PY
}

@test "a report line that amplifies when decoded (8 M empty endpoints): refused before decoding, the parent stays bounded" {
    hostile_pull after-copy:wire-amp "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    grep -q "hostile: running wire-amp" "$OUT/stderr" || fail "the hostile action did not run"
    # (not "sent": the parent kills the child as soon as it has read and
    # refused the line, which can be before the child prints that it sent it)
    # The parent reads this one line whole before its shape is walked: a
    # maximal last line (about 23 MiB, read in growing buffers, freed when the
    # collector runs) comes on top of the baseline, so this case's bound is
    # MAX_LAST_LINE_RSS_KIB (seen: 104 MiB once, about 60 most runs; decoding
    # the endpoints took it to 1.2 GiB).
    ((rss_kib < MAX_LAST_LINE_RSS_KIB)) || fail "the parent's peak RSS is ${rss_kib} KiB, over ${MAX_LAST_LINE_RSS_KIB} KiB"
    assert_equal "$rc" 7
    assert_equal "$(json_get .error.code <"$OUT/stdout")" isolation
    [[ $(json_get .error.message <"$OUT/stdout") == *"array of more than"* ]] || fail "the error does not name the array: $(cat "$OUT/stdout")"
    [[ ! -e $OUT/dest ]] || fail "DEST was created"
}

@test "a line the parent cannot decode (a 20 MiB number): the error quotes none of it, and the final error event is written" {
    hostile_pull after-copy:wire-bignum --progress-fd 5 "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest" 5>"$OUT/events"
    grep -q "hostile: running wire-bignum" "$OUT/stderr" || fail "the hostile action did not run"
    # (not "sent": the parent kills the child once it fails to decode the
    # line, which can be before the child prints that it sent it)
    assert_equal "$rc" 7
    assert_equal "$(json_get .error.code <"$OUT/stdout")" isolation
    (($(wc -c <"$OUT/stdout") < 4096 && $(wc -c <"$OUT/stderr") < 65536)) ||
        fail "stdout $(wc -c <"$OUT/stdout") bytes, stderr $(wc -c <"$OUT/stderr") bytes: the child's line was repeated"
    ! grep -q 9999999999 "$OUT/stdout" "$OUT/stderr" "$OUT/events" || fail "the child's number literal was repeated"
    assert_equal "$(tail -1 "$OUT/events" | json_get .type)" error
}

@test "an error message with terminal escapes and line separators reaches stdout and stderr escaped" {
    hostile_pull after-drop:wire-esc "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    grep -q "hostile: wire-esc: sent" "$OUT/stderr" || fail "the hostile action did not run"
    assert_equal "$rc" 6 # network, the child's code
    no_controls "$OUT/stdout" "$OUT/stderr"
    # Still there, escaped, and on one line.
    [[ $(json_get .error.message <"$OUT/stdout") == *'\x1b[1A\x1b[2K\x1b]0;owned\apullhelper: pulled OK'* ]] ||
        fail "message: $(json_get .error.message <"$OUT/stdout")"
    assert_equal "$(grep -c 'pulled OK' "$OUT/stderr")" 1
}

@test "the child's stderr, --log-format json: every line is a parent record, the child's text only its line field, bounded" {
    hostile_pull after-drop:wire-stderr --log-format json "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_equal "$rc" 0
    no_controls "$OUT/stderr"
    (($(wc -c <"$OUT/stderr") < 2 << 20)) || fail "stderr is $(wc -c <"$OUT/stderr") bytes: the child's 3 MiB were relayed"
    "$PH_PYTHON" - "$OUT/stderr" <<'PY'
import json, sys
child = []
for line in open(sys.argv[1]):
    r = json.loads(line)
    assert r.get("msg") != "forged parent record", "a record forged by the child: %r" % line
    if r.get("msg") == "child":
        child.append(r["line"])
assert any("forged parent record" in l for l in child), "the child's line is not relayed as a field"
assert any("forged text record" in l for l in child), child[:3]
assert "child output truncated" in child[-1], child[-1][:80]
PY
}

@test "the child's stderr, text log format: every relayed line is prefixed as the child's and escaped" {
    hostile_pull after-drop:wire-stderr "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest"
    assert_equal "$rc" 0
    no_controls "$OUT/stderr"
    ! grep -q '^time=2030' "$OUT/stderr" || fail "a line forged by the child starts a line of its own"
    grep -q '^pullhelper-child: .*forged text record' "$OUT/stderr" || fail "the child's line was not relayed, prefixed"
    (($(wc -c <"$OUT/stderr") < 2 << 20)) || fail "stderr is $(wc -c <"$OUT/stderr") bytes: the child's 3 MiB were relayed"
}

@test "a report's tally and endpoints: the result has the verified counts and only the plan's hosts; events after the report are ignored" {
    hostile_pull after-copy:wire-tally --progress-fd 5 "$REGISTRY_HOST/fixtures/tiny" "oci:$OUT/dest" 5>"$OUT/events"
    grep -q "hostile: wire-tally: sent" "$OUT/stderr" || fail "the hostile action did not run"
    assert_equal "$rc" 0
    local res want_bytes
    res=$(cat "$OUT/stdout")
    echo "$res"
    want_bytes=$(registry_manifest fixtures/tiny:latest | "$PH_PYTHON" -c '
import json, sys
m = json.load(sys.stdin)
print(m["config"]["size"] + sum(l["size"] for l in m["layers"]))')
    assert_equal "$(json_get .layers <<<"$res")" 1
    assert_equal "$(json_get .bytes <<<"$res")" "$want_bytes"
    [[ $res != *attacker* ]] || fail "a host the plan never named reached the result"
    "$PH_PYTHON" - "$res" "$REGISTRY_HOST" "$want_bytes" <<'PY'
import json, sys
res, host, total = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
eps = res.get("endpoints") or []
assert [e["host"] for e in eps] == [host], eps
assert eps[0]["blobs"] <= 2 and eps[0]["bytes"] <= total, eps
PY
    local done
    done=$(grep '"type":"done"' "$OUT/events")
    assert_equal "$(json_get .layers <<<"$done")" 1
    assert_equal "$(json_get .bytes <<<"$done")" "$want_bytes"
    ! grep -q bbbbbbbbbbbbbbbb "$OUT/events" || fail "an event the child sent after its report was relayed"
}
