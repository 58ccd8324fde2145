#!/usr/bin/env bats
#
# What the root parent takes from the child's messages (issue 22 findings 4
# and 6): a compromised child (bin/pullhelper-hostile, actions in
# reexec/hostile_wire.go) sending fat events cannot grow the parent's
# memory, whatever the progress format or however slow its reader, and its
# report's claims never reach the result: image_id, store and media_type
# are what the parent verified.

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
