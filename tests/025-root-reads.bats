#!/usr/bin/env bats
#
# Files root reads on the caller's behalf, and the pull uid's range (security
# issue 22, findings 7 and 10). A path the caller names may lie in a
# directory another user (uid 65534) can write: that user plants a FIFO, a
# device or a symlink to a root-only file there. Root refuses anything but a
# regular file without blocking (a FIFO) or reading without end
# (/dev/zero), and its errors never quote the file (the root-only file's
# marker never reaches stdout or stderr). A uid outside 1-4294967294 is a
# usage error (exit 2) before anything runs, from a flag, the policy file or
# a profile, in pull, explain and policy check.
#
# Network: none. The image names 127.0.0.1:1, where nothing listens; every
# case here must stop before the network (a pull that got that far would
# exit 6, not 2).

load helpers

IMAGE=127.0.0.1:1/fixtures/tiny:latest

setup() {
    skip_if_not_root "the attacks need another uid and a root-only file"
    OUT=$BATS_TEST_TMPDIR/out
    mkdir -p "$OUT"
    # The attacker's directory: uid 65534's own, in a directory anyone may
    # traverse (as /tmp or /var/tmp are).
    VT=$(mktemp -d /var/tmp/pullhelper-test-XXXXXX)
    chmod 755 "$VT"
    mkdir "$VT/attic"
    chown 65534:65534 "$VT/attic"
    # Root-only files the attacker cannot read, with a marker where a
    # decoder would quote it: a shadow entry's first line, a key, a value,
    # a kind, a table, a JSON field.
    MARKER="MARK$(openssl rand -hex 8)"
    mkdir -m 700 "$VT/root"
    local i=0 doc
    for doc in "root:$MARKER:19000:0:99999:7:::\nbin:*:19000:0:99999:7:::" "$MARKER = 1" "a = $MARKER" \
        "kind: $MARKER\napiVersion: v1" "{\"$MARKER\": 1}" "[$MARKER]\nx = 1\nx = 2"; do
        i=$((i + 1))
        printf '%b\n' "$doc" >"$VT/root/secret$i"
        chmod 600 "$VT/root/secret$i"
    done
    NSECRETS=$i
}

teardown() {
    [[ -n ${VT:-} && -d $VT ]] && rm -rf "$VT"
}

# as_nobody CMD...: run CMD as uid 65534 (the attacker).
as_nobody() {
    setpriv --reuid 65534 --regid 65534 --clear-groups -- "$@"
}

# plant_link NAME TARGET: the attacker's symlink $VT/attic/NAME -> TARGET.
plant_link() {
    as_nobody ln -s "$2" "$VT/attic/$1"
}

# assert_no_marker: neither stdout nor stderr of the last run carries the
# root-only file's marker.
assert_no_marker() {
    [[ $output != *"$MARKER"* ]] || fail "stdout quotes the root-only file: $output"
    [[ $stderr != *"$MARKER"* ]] || fail "stderr quotes the root-only file: $stderr"
}

@test "a symlink to a root-only file as the caller's config: exit 2, its content in no error" {
    local n flag
    for n in $(seq "$NSECRETS"); do
        plant_link "secret$n" "$VT/root/secret$n"
        if as_nobody cat "$VT/attic/secret$n" >/dev/null 2>&1; then
            fail "setup: uid 65534 can read the root-only file"
        fi
        for flag in --credential-provider-config --policy --registries-conf --kubelet-config --pull-secret --containerd-config; do
            run_pullhelper '?' explain "$flag" "$VT/attic/secret$n" "$IMAGE" "oci:$OUT/dest"
            assert_no_marker
            # A file that happens to decode in the flag's format (a shadow
            # file is one YAML string, which a KubeletConfiguration
            # ignores) gives a plan; any other is a usage error naming it.
            [[ $status -eq 0 ]] && continue
            [[ $status -eq 2 ]] || fail "$flag, file $n: exit $status, want 2"
            assert_json_error usage
            [[ $ph_error_message == *"$VT/attic/secret$n"* ]] || fail "$flag: the error does not name the file: $ph_error_message"
        done
        # policy check reads the file the same way.
        run_pullhelper 2 policy check "$VT/attic/secret$n"
        assert_no_marker
    done
    # pull plans as explain does: exit 2 before anything, DEST untouched.
    for flag in --credential-provider-config --policy --registries-conf --kubelet-config --pull-secret --containerd-config; do
        run_pullhelper '?' pull --retries 0 "$flag" "$VT/attic/secret3" "$IMAGE" "oci:$OUT/dest"
        assert_no_marker
        [[ $status -eq 2 ]] || fail "pull $flag: exit $status, want 2"
        assert_json_error usage
        [[ ! -e $OUT/dest ]] || fail "$flag: DEST was created"
    done
}

@test "a FIFO as --policy: exit 2 at once, root never waits in open()" {
    as_nobody mkfifo "$VT/attic/policy.toml"
    # timeout is a hang guard: without the fix root blocks in open() until
    # a writer comes (none does), past SIGTERM.
    run --separate-stderr timeout --kill-after=5 60 "$PULLHELPER" pull --policy "$VT/attic/policy.toml" "$IMAGE" "oci:$OUT/dest"
    [[ $status -eq 2 ]] || fail "exit $status, want 2 (124/137: root blocked on the FIFO); stderr: $stderr"
    assert_json_error usage
    [[ $ph_error_message == *"$VT/attic/policy.toml"*"FIFO, not a regular file"* ]] || fail "message: $ph_error_message"
    run --separate-stderr timeout --kill-after=5 60 "$PULLHELPER" policy check "$VT/attic/policy.toml"
    [[ $status -eq 2 ]] || fail "policy check: exit $status, want 2; stderr: $stderr"
    # A symlink to the FIFO is refused the same way, and so are the
    # other configs.
    plant_link fifo-link "$VT/attic/policy.toml"
    local flag
    for flag in --policy --registries-conf --credential-provider-config --kubelet-config --pull-secret --containerd-config --authfile; do
        run --separate-stderr timeout --kill-after=5 60 "$PULLHELPER" explain "$flag" "$VT/attic/fifo-link" "$IMAGE"
        [[ $status -ne 124 && $status -ne 137 ]] || fail "$flag: root blocked on the FIFO"
        [[ $output$stderr == *"$VT/attic/fifo-link"*"FIFO, not a regular file"* ]] ||
            fail "$flag: the FIFO is not refused as such: $output $stderr"
    done
}

@test "/dev/zero as --pull-secret: exit 2, not read until memory runs out" {
    plant_link zero /dev/zero
    local f
    for f in /dev/zero "$VT/attic/zero"; do
        # Without the fix the read only ends when memory does: the address
        # space limit keeps that bounded, and the JSON error is then missing.
        run --separate-stderr bash -c 'ulimit -v 2097152; exec timeout --kill-after=5 120 "$@"' _ \
            "$PULLHELPER" pull --pull-secret "$f" "$IMAGE" "oci:$OUT/dest"
        [[ $status -eq 2 ]] || fail "$f: exit $status, want 2; stderr: ${stderr:0:300}"
        assert_json_error usage
        [[ $ph_error_message == *"$f"*"character device, not a regular file"* ]] || fail "message: $ph_error_message"
        [[ ! -e $OUT/dest ]] || fail "DEST was created"
    done
}

@test "a config over the 4 MiB bound is refused by name, without reading it all" {
    truncate -s 5M "$VT/attic/big.json"
    chown 65534:65534 "$VT/attic/big.json"
    run_pullhelper 2 explain --pull-secret "$VT/attic/big.json" "$IMAGE"
    assert_json_error usage
    [[ $ph_error_message == *"$VT/attic/big.json"*"larger than 4 MiB"* ]] || fail "message: $ph_error_message"
}

# uid_refused CMD...: CMD exits 2 with a usage error naming the uid setting.
uid_refused() {
    run_pullhelper 2 "$@"
    assert_json_error usage
    [[ $ph_error_message == *privileges.user* || $ph_error_message == *--user* ]] ||
        fail "the error does not name privileges.user or --user: $ph_error_message"
    [[ $ph_error_message == *"1-4294967294"* ]] || fail "the error does not give the range: $ph_error_message"
}

@test "a uid beyond uid_t (4294967295, 2^32, more) or negative is a usage error everywhere, before anything runs" {
    local u
    for u in 4294967295 4294967296 18446744073709551616 -1; do
        # The flag.
        uid_refused explain --user "$u" "$IMAGE" "oci:$OUT/dest"
        uid_refused pull --user "$u" "$IMAGE" "oci:$OUT/dest"
        [[ ! -e $OUT/dest ]] || fail "--user $u: DEST was created"
        # The policy file.
        printf 'version = 1\n[privileges]\nuser = "%s"\n' "$u" >"$OUT/p.toml"
        uid_refused policy check "$OUT/p.toml"
        [[ $ph_error_message == "$OUT/p.toml:3: privileges.user"* ]] || fail "not FILE:LINE: KEY: $ph_error_message"
        uid_refused explain --policy "$OUT/p.toml" "$IMAGE" "oci:$OUT/dest"
        uid_refused pull --policy "$OUT/p.toml" "$IMAGE" "oci:$OUT/dest"
        # A profile.
        printf 'version = 1\n[profiles.p.privileges]\nuser = "%s"\n' "$u" >"$OUT/prof.toml"
        uid_refused policy check "$OUT/prof.toml"
        uid_refused explain --policy "$OUT/prof.toml" --profile p "$IMAGE" "oci:$OUT/dest"
        uid_refused pull --policy "$OUT/prof.toml" --profile p "$IMAGE" "oci:$OUT/dest"
        [[ ! -e $OUT/dest ]] || fail "user $u: DEST was created"
    done
    # The largest uid is accepted by the checks.
    run_pullhelper 0 explain --user 4294967294 "$IMAGE" "oci:$OUT/dest"
    [[ $(json_get .plan.isolation.user <<<"$output") == 4294967294 ]] || fail "explain: $output"
}

# swap_after_read NAME: as uid 65534, replace $VT/attic/NAME by a FIFO as
# soon as root has read it once (inotify IN_CLOSE_NOWRITE: safefile's
# check), in the background; returns once the watch is in place. The
# swapper prints "swapped" to $OUT/swap-NAME.
swap_after_read() {
    local name=$1
    mkdir -p "$VT/swap"
    chmod 755 "$VT/swap"
    cat >"$VT/swap/swap.py" <<'PY'
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
d, name, ready = sys.argv[1], sys.argv[2], sys.argv[3]
os.mkfifo(os.path.join(d, "." + name + ".fifo"), 0o644)
fd = libc.inotify_init()
if fd < 0 or libc.inotify_add_watch(fd, d.encode(), 0x10) < 0:  # IN_CLOSE_NOWRITE
    sys.exit("inotify: errno %d" % ctypes.get_errno())
with open(ready, "w") as r:
    r.write("ready\n")
while True:
    buf = os.read(fd, 4096)
    i, hit = 0, False
    while i < len(buf):
        _, _, _, ln = struct.unpack_from("iIII", buf, i)
        hit = hit or buf[i + 16:i + 16 + ln].rstrip(b"\0").decode() == name
        i += 16 + ln
    if hit:
        os.rename(os.path.join(d, "." + name + ".fifo"), os.path.join(d, name))
        print("swapped", flush=True)
        break
PY
    rm -f "$VT/swap/ready-$name"
    mkfifo "$VT/swap/ready-$name"
    chown 65534 "$VT/swap/ready-$name"
    as_nobody /usr/bin/python3 "$VT/swap/swap.py" "$VT/attic" "$name" "$VT/swap/ready-$name" >"$OUT/swap-$name" 2>&1 &
    SWAPPER=$!
    local line fd
    # Opened read-write, which never blocks; -t is a hang guard for a
    # swapper that died before writing, not a wait for it.
    exec {fd}<>"$VT/swap/ready-$name"
    read -r -t 120 -u "$fd" line || true
    exec {fd}<&-
    [[ $line == ready ]] || fail "the swapper did not start: $(cat "$OUT/swap-$name")"
}

@test "registries.conf and storage.conf swapped for a FIFO right after root's check: the pull reads what was checked and ends" {
    # A regular file when root checks it, a FIFO from then on: without the
    # fix containers/image opens the path again and root blocks in open()
    # (timeout is the hang guard, 124/137).
    printf 'unqualified-search-registries = ["127.0.0.1:1"]\n[[registry]]\nprefix = "127.0.0.1:1"\nlocation = "127.0.0.1:1"\n[[registry.mirror]]\nlocation = "127.0.0.1:2"\n' >"$VT/attic/registries.conf"
    chown 65534:65534 "$VT/attic/registries.conf"
    swap_after_read registries.conf
    run --separate-stderr timeout --kill-after=5 120 "$PULLHELPER" explain --registries-conf "$VT/attic/registries.conf" fixtures/tiny "oci:$OUT/dest"
    wait "$SWAPPER" || fail "swapper: $(cat "$OUT/swap-registries.conf")"
    [[ $(cat "$OUT/swap-registries.conf") == swapped ]] || fail "the file was not swapped"
    [[ -p $VT/attic/registries.conf ]] || fail "registries.conf is not the FIFO"
    [[ $status -eq 0 ]] || fail "explain: exit $status, want 0 (124/137: root blocked on the FIFO); stderr: $stderr"
    # The checked content: the short name and the mirror it gives.
    assert_equal "$(json_get .plan.reference <<<"$output")" "127.0.0.1:1/fixtures/tiny:latest"
    assert_equal "$(json_get .plan.endpoints[0].host <<<"$output")" "127.0.0.1:2"

    # A pull the same way: it gets to the network (nothing listens: exit 6).
    printf 'unqualified-search-registries = ["127.0.0.1:1"]\n' >"$VT/attic/registries.conf.new"
    chown 65534:65534 "$VT/attic/registries.conf.new"
    mv -f "$VT/attic/registries.conf.new" "$VT/attic/registries.conf"
    swap_after_read registries.conf
    run --separate-stderr timeout --kill-after=5 120 "$PULLHELPER" pull --retries 0 --registries-conf "$VT/attic/registries.conf" fixtures/tiny "oci:$OUT/dest"
    wait "$SWAPPER" || fail "swapper: $(cat "$OUT/swap-registries.conf")"
    [[ -p $VT/attic/registries.conf ]] || fail "registries.conf is not the FIFO"
    [[ $status -eq 6 ]] || fail "pull: exit $status, want 6 (124/137: root blocked on the FIFO); stderr: $stderr"

    # storage.conf (dest.storage_conf): containers/storage would open it
    # right after the check, too soon for a watcher to win every time, so
    # the test build swaps it at that very point (the hostile hook).
    printf '[storage]\ndriver = "vfs"\ngraphroot = "%s/graph"\nrunroot = "%s/run"\n' "$OUT" "$OUT" >"$VT/attic/storage.conf"
    chown 65534:65534 "$VT/attic/storage.conf"
    printf 'version = 1\n[dest]\nstorage_conf = "%s"\n' "$VT/attic/storage.conf" >"$OUT/policy.toml"
    PULLHELPER_HOSTILE_CHECKED=fifo-after-check run --separate-stderr timeout --kill-after=5 120 "$PULLHELPER_HOSTILE_BIN" explain --policy "$OUT/policy.toml" "$IMAGE" "containers-storage:h.example/t/x:v1"
    [[ $stderr == *"storage.conf is now a FIFO"* ]] || fail "the hook did not swap storage.conf: $stderr"
    [[ -p $VT/attic/storage.conf ]] || fail "storage.conf is not the FIFO"
    [[ $status -eq 0 ]] || fail "explain containers-storage: exit $status, want 0 (124/137: root blocked on the FIFO); stderr: $stderr"
    [[ $output == *"$OUT/graph"* ]] || fail "the plan lacks storage.conf's graphroot: $output"
}

# searched XDG ARGS...: run pullhelper ARGS with no storage.conf named, so
# that containers/storage's search starts in XDG/containers, under a hang
# guard (124/137: root blocked) and, with ULIMIT_V, that address space
# limit (KiB).
searched() {
    local xdg=$1
    shift
    run --separate-stderr bash -c 'ulimit -v "${ULIMIT_V:-unlimited}"; exec timeout --kill-after=5 120 "$@"' _ \
        env -u CONTAINERS_STORAGE_CONF -u CONTAINERS_STORAGE_CONF_OVERRIDE XDG_CONFIG_HOME="$xdg" "$PULLHELPER" "$@"
}

@test "the system's storage.conf search: the user's file and drop-ins are honoured; another user's directory, a FIFO or a device there is exit 2 at once" {
    # No dest.storage_conf: containers/storage's own search, which starts in
    # the user's directory ($XDG_CONFIG_HOME/containers): root's here.
    local user=$VT/cfg/containers
    mkdir -p "$user/storage.conf.d"
    printf '[storage]\ndriver = "vfs"\ngraphroot = "%s/graph-user"\nrunroot = "%s/run-main"\n' "$OUT" "$OUT" >"$user/storage.conf"
    printf '[storage]\nrunroot = "%s/run-dropin"\n' "$OUT" >"$user/storage.conf.d/10-run.conf"
    searched "$VT/cfg" explain "$IMAGE" "containers-storage:h.example/t/x:v1"
    [[ $status -eq 0 ]] || fail "explain: exit $status; stderr: $stderr"
    [[ $output == *"$OUT/graph-user"* ]] || fail "the plan lacks the user's graphroot: $output"
    [[ $output == *"$OUT/run-dropin"* && $output != *"$OUT/run-main"* ]] || fail "the plan lacks the drop-in's runroot: $output"

    # The same files in uid 65534's directory: containers/storage would
    # open them by path after any check, so its owner could swap one for a
    # FIFO in between. Refused before anything is read.
    cp -a "$VT/cfg/containers" "$VT/attic/containers"
    chown -R 65534:65534 "$VT/attic/containers"
    searched "$VT/attic" pull "$IMAGE" "containers-storage:h.example/t/x:v1"
    [[ $status -eq 2 ]] || fail "another user's directory: exit $status, want 2; stderr: $stderr"
    assert_json_error usage
    [[ $ph_error_message == *"$VT/attic/containers"*"owned by uid 65534, not root"*"dest.storage_conf"* ]] || fail "message: $ph_error_message"

    # A FIFO as the user's storage.conf: without the fix containers/storage
    # opens it and root blocks in open() (timeout is the hang guard, 124/137).
    rm "$user/storage.conf"
    mkfifo "$user/storage.conf"
    searched "$VT/cfg" pull "$IMAGE" "containers-storage:h.example/t/x:v1"
    [[ $status -eq 2 ]] || fail "exit $status, want 2 (124/137: root blocked on the FIFO); stderr: $stderr"
    assert_json_error usage
    [[ $ph_error_message == *"$user/storage.conf"*"FIFO, not a regular file"* ]] || fail "message: $ph_error_message"

    # A FIFO as a drop-in directory, and /dev/zero as a drop-in.
    rm "$user/storage.conf"
    mv "$user/storage.conf.d" "$user/old.d"
    mkfifo "$user/storage.conf.d"
    searched "$VT/cfg" pull "$IMAGE" "containers-storage:h.example/t/x:v1"
    [[ $status -eq 2 ]] || fail "drop-in directory: exit $status, want 2; stderr: $stderr"
    assert_json_error usage
    [[ $ph_error_message == *"$user/storage.conf.d"*"cannot be listed"* ]] || fail "message: $ph_error_message"
    rm "$user/storage.conf.d"
    mv "$user/old.d" "$user/storage.conf.d"
    ln -s /dev/zero "$user/storage.conf.d/20-zero.conf"
    # The address space limit bounds a read that would only end with memory.
    ULIMIT_V=2097152 searched "$VT/cfg" pull "$IMAGE" "containers-storage:h.example/t/x:v1"
    [[ $status -eq 2 ]] || fail "/dev/zero drop-in: exit $status, want 2; stderr: ${stderr:0:300}"
    assert_json_error usage
    [[ $ph_error_message == *"$user/storage.conf.d/20-zero.conf"*"character device, not a regular file"* ]] || fail "message: $ph_error_message"
}
