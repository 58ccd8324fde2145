# tests/cri.bash: the setup the `pullhelper cri` bats files share (150-157):
# start the service and wait until it serves, crictl against it, hold the
# registry, and the teardown of the service and of the pull cgroups under
# the test's parent. Loaded after helpers (and containerd-cases where
# containerd runs): `load cri`.

# cri_setup NAME: the per-test state: T, no containerd or service yet, and
# the cgroup parent /pullhelper-bats-NAME-PID-TEST of this test's pulls.
cri_setup() {
    ph_test_setup
    T=$BATS_TEST_TMPDIR
    CTRD_DIR=""
    CRI_PID=""
    CG_PARENT="/pullhelper-bats-$1-$$-${BATS_TEST_NUMBER}"
}

# cri_stop: stop the service cri_start started (SIGTERM, then SIGKILL).
cri_stop() {
    [[ -z ${CRI_PID:-} ]] || _ph_stop_pid "$CRI_PID" "pullhelper cri"
}

# cri_cgroups_rm PARENT...: kill what runs in the cgroups below each
# PARENT (in the unified hierarchy and every v1 controller) and remove them,
# deepest first (rmdir: only empty cgroups go).
cri_cgroups_rm() {
    local parent d p
    for parent in "$@"; do
        for d in /sys/fs/cgroup/"${parent#/}" /sys/fs/cgroup/*/"${parent#/}"; do
            [[ -d $d ]] || continue
            for p in $(cat "$d"/*/cgroup.procs 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
            find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
        done
    done
    return 0
}

# cri_start RUNTIME_SOCK [FLAGS...]: pullhelper cri (CRI_BIN, default
# $PULLHELPER; in the mount namespace file CRI_MNTNS when set) on
# PH_SOCK=${CRI_SOCK_DIR:-$T/ph}/cri.sock in front of RUNTIME_SOCK, its
# pulls under $CG_PARENT, logging JSON to $T/cri.log (truncated first
# unless CRI_APPEND is set: a restart keeps the earlier lines); sets
# CRI_PID and waits (at most 30 s, failing when the process exits) until
# the socket exists and the log has one more "serving" line than before.
cri_start() {
    local rt=$1 serving
    shift
    PH_SOCK="${CRI_SOCK_DIR:-$T/ph}/cri.sock"
    [[ -n ${CRI_APPEND:-} ]] || { : >"$T/cri.out"; : >"$T/cri.log"; }
    serving=$(grep -c '"msg":"serving"' "$T/cri.log" 2>/dev/null || true)
    local -a wrap=()
    # nsenter execs: the pid is pullhelper's own.
    [[ -z ${CRI_MNTNS:-} ]] || wrap=(nsenter --mount="$CRI_MNTNS" --)
    "${wrap[@]}" "${CRI_BIN:-$PULLHELPER}" cri --listen "unix://$PH_SOCK" --runtime-endpoint "unix://$rt" \
        --cgroup-parent "$CG_PARENT" --log-format json "$@" </dev/null >>"$T/cri.out" 2>>"$T/cri.log" 3>&- &
    CRI_PID=$!
    local deadline=$((SECONDS + 30))
    until [[ -S $PH_SOCK ]] && (($(grep -c '"msg":"serving"' "$T/cri.log") > ${serving:-0})); do
        if ! _ph_pid_alive "$CRI_PID"; then
            fail "pullhelper cri exited: $(cat "$T/cri.log")"
            return
        fi
        ((SECONDS < deadline)) || { fail "pullhelper cri did not listen within 30 s: $(cat "$T/cri.log")"; return; }
        sleep 0.05
    done
}

# cri_serve RUNTIME_SOCK [FLAGS...]: $T/ph-crictl.yaml (pcrictl's config:
# the image service at PH_SOCK, the runtime at RUNTIME_SOCK), then
# cri_start.
cri_serve() {
    local rt=$1
    PH_SOCK="${CRI_SOCK_DIR:-$T/ph}/cri.sock"
    printf 'image-endpoint: unix://%s\nruntime-endpoint: unix://%s\ntimeout: 60\n' "$PH_SOCK" "$rt" >"$T/ph-crictl.yaml"
    cri_start "$@"
}

# cri_up_on RUNTIME_SOCK [FLAGS...]: cri_serve in front of a containerd
# (the registry's certificates, the native snapshotter, staging in
# $T/staging).
cri_up_on() {
    local rt=$1
    shift
    cri_serve "$rt" --cert-dir "$REGISTRY_CERT_DIR" --containerd-snapshotter native --containerd-staging "$T/staging" "$@"
}

# cri_up [FLAGS...]: containerd (ctrd_up) and pullhelper cri in front of
# it (cri_up_on).
cri_up() {
    ctrd_up
    cri_up_on "$SOCK" "$@"
}

# pcrictl ARGS...: crictl with the image service at pullhelper, the runtime
# at the runtime endpoint ($T/ph-crictl.yaml).
pcrictl() {
    timeout --kill-after=5 120 "$CRICTL" --config "$T/ph-crictl.yaml" "$@"
}

# reg_stop, reg_cont: stop (SIGSTOP) and continue the registry, to hold a
# pull in flight (the kernel still accepts its connections).
reg_stop() {
    REG_STOPPED=$(pgrep -P "$REGISTRY_PID" || true)
    [[ -n $REG_STOPPED ]] || REG_STOPPED=$REGISTRY_PID
    kill -STOP $REG_STOPPED
}

reg_cont() {
    [[ -z ${REG_STOPPED:-} ]] || kill -CONT $REG_STOPPED 2>/dev/null || true
    REG_STOPPED=""
}

# creds: USER:PASSWORD of the htpasswd registry (crictl --creds).
creds() {
    printf '%s:%s' "$REGISTRY_USER" "$(tr -d '\n' <"$REGISTRY_DIR/password")"
}

# pull_lines: the log's per-pull lines (JSON).
pull_lines() {
    grep '"msg":"pull"' "$T/cri.log" || true
}
