#!/bin/bash
# tests/vm/systemd/guest-tests.sh: the systemd cgroup driver proofs, run by
# pullhelper-vmtest.service inside the make test-vm-systemd guest (Debian
# bookworm, Debian's systemd as PID 1, dbus, pure cgroup v2, Debian's kernel).
#
# Talks to the host's registry ($REG) and stalling proxy ($TARPIT) through
# QEMU's user network (10.0.2.2 = the host's loopback). Prints on the serial
# console, between "PHVM BEGIN" and "PHVM END":
#   PHVM RESULT <name> pass|fail|skip <evidence or what failed>   (one a test)
#   PHVM TIME <name> <ms>          PHVM JSON <name> <pullhelper's stdout>
#   PHVM LOG <name>: <detail>      PHVM DIAG <what a stuck test was doing>
# tests/vm/run.sh --systemd asserts the RESULT lines. Every check compares
# against a value that a regression would change.
#
# /etc/phvm/env (per-run overlay): REG, TARPIT, DIGEST_<fixture>, ONLY.
. /etc/phvm/env
export PATH=/usr/sbin:/usr/bin:/sbin:/bin

PH=/phvm/pullhelper
AUTH="--authfile /etc/phvm/auth.json --cert-dir /etc/phvm/certs"
CG=/sys/fs/cgroup
TR=/sys/kernel/tracing
W=/run/phvm         # tmpfs: logs and outputs
D=/var/phvm         # on the root disk (/dev/vda, ext4): the pulls' DEST
mkdir -p "$W" "$D"
# The slice the per-pull scopes go under (cgroup.parent, a nested slice).
SLICE_PARENT=/phvm.slice/phvm-pulls.slice
SLICE=phvm-pulls.slice
# A pod as the kubelet's systemd driver lays it out: a pod slice under the
# QoS slice, a container scope in it.
POD_SLICE=kubepods-besteffort-podphvm.slice
POD_SLICE_CG=/kubepods.slice/kubepods-besteffort.slice/$POD_SLICE
POD_SCOPE=cri-containerd-phvm.scope

# The harness: run_test, pull, bad, ev, reap, diag... (tests/vm/harness.sh).
. /phvm/harness.sh

# prop UNIT NAME: one property as systemctl show prints it.
prop() { systemctl show -P "$2" "$1" 2>/dev/null; }
# pull_units: the pullhelper-*.scope units systemd has loaded.
pull_units() { systemctl list-units --all --plain --no-legend --type=scope 'pullhelper-*' 2>/dev/null | awk '{ print $1 }'; }
# active_pull_units: those of them that are active.
active_pull_units() { systemctl list-units --plain --no-legend --type=scope --state=active 'pullhelper-*' 2>/dev/null | awk '{ print $1 }'; }
pull_children() {
    for p in /proc/[0-9]*; do
        [ "$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)" = "pullhelper-child " ] && echo "${p#/proc/}"
    done
}
# gone UNIT: the unit is not active (stopped, or already collected).
gone() {
    s=$(prop "$1" ActiveState)
    [ "$s" = inactive ] || [ "$s" = "" ] || [ "$s" = failed ]
}

# start_stalled NAME DEST ARGS...: pull fixtures/medium through the tarpit
# (which stops forwarding after 2 MB a connection) in the background, with
# progress events; returns once a layer has started. Sets BG (the parent),
# CHILD (the pull child) and CHILD_CG (its cgroup, from /proc).
start_stalled() {
    n=$1 d=$2
    shift 2
    : >"$W/$n.ev"
    "$PH" pull --progress-fd 5 $AUTH --stall-timeout 5m "$@" "$TARPIT/fixtures/medium" "oci:$d" \
        >"$W/$n.out" 2>"$W/$n.err" 5>"$W/$n.ev" &
    BG=$!
    i=0
    until grep -q '"type":"layer_start"' "$W/$n.ev"; do
        i=$((i + 1))
        if [ $i -gt 600 ] || ! kill -0 "$BG" 2>/dev/null; then
            kill -KILL "$BG" 2>/dev/null
            reap "$BG" 30
            bad "the stalled pull never started a layer (exit $?)"
            show_err "$n"
            BG=""
            return 1
        fi
        sleep 0.1
    done
    CHILD=$(pull_children)
    if [ -z "$CHILD" ] || [ "$(echo "$CHILD" | wc -l)" != 1 ]; then
        bad "want exactly one pullhelper-child, got: $(echo "$CHILD" | oneline)"
        return 1
    fi
    CHILD_CG=$(sed -n 's/^0:://p' "/proc/$CHILD/cgroup")
    return 0
}

# stop_bg NAME: SIGTERM the background pull, wait for it; sets BGRC.
stop_bg() {
    kill -TERM "$BG" 2>/dev/null
    reap "$BG"
    BGRC=$?
    echo "PHVM JSON $CUR/$1 $(oneline <"$W/$1.out")"
    BG=""
}

###############################################################################
# Setup: the network (QEMU user networking; no udev, so the NIC is eth0).

echo "PHVM BEGIN uptime $(cut -d' ' -f1 /proc/uptime)"
CUR=setup
ip link set lo up
ip addr add 10.0.2.15/24 dev eth0 && ip link set eth0 up && ip route add default via 10.0.2.2 ||
    log "FAIL configuring eth0"
i=0
while [ "$(cat /sys/class/net/eth0/carrier 2>/dev/null)" != 1 ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
DEV=$(cat /sys/block/vda/dev)
[ -d "$TR/events" ] || mount -t tracefs tracefs "$TR" || log "FAIL no tracefs"
# Enabled on the kernel's command line (trace_event=), not here: see run.sh.
[ "$(cat "$TR/events/cgroup/cgroup_attach_task/enable" 2>/dev/null)" = 1 ] || log "FAIL trace event cgroup_attach_task is not enabled"
log "root $(findmnt -n -o SOURCE,FSTYPE /) device $DEV; $(systemctl --version | head -1)"
log "$(systemd-analyze time 2>&1 | head -1); slowest: $(systemd-analyze blame --no-pager 2>/dev/null | head -4 | oneline)"

###############################################################################
# Tests

# systemd is PID 1 with the unified hierarchy, and reachable over D-Bus:
# the premise of every other test.
t_systemd_pid1() {
    [ "$(cat /proc/1/comm)" = systemd ] || bad "PID 1 is $(cat /proc/1/comm), want systemd"
    ev "pid1=$(readlink /proc/1/exe)"
    [ -d /run/systemd/system ] || bad "/run/systemd/system missing (sd_booted)"
    [ "$(stat -fc %T "$CG")" = cgroup2fs ] || bad "$CG is $(stat -fc %T "$CG"), want cgroup2fs"
    own=$(sed -n 's/^0:://p' /proc/self/cgroup)
    [ "$own" = /system.slice/pullhelper-vmtest.service ] || bad "the tests run in $own, want /system.slice/pullhelper-vmtest.service"
    ev "tests_cgroup=$own"
    v=$(busctl get-property org.freedesktop.systemd1 /org/freedesktop/systemd1 org.freedesktop.systemd1.Manager Version 2>&1)
    case "$v" in 's "'*) ev "systemd_over_dbus=$v" ;; *) bad "systemd's Version over D-Bus: $v" ;; esac
    [ -z "$(pull_units)" ] || bad "pullhelper scopes before any pull: $(pull_units | oneline)"
}

# One stalled pull carries every limit: scope_in_slice, scope_limits and
# sigterm look at it in turn.
UNIT=""
t_scope_in_slice() {
    mkdir -p "$D/sig"
    cat >"$W/policy.toml" <<EOF
version = 1
[cgroup]
driver = "systemd"
parent = "$SLICE_PARENT"
cpu_weight = 200
io_weight = 300
memory_high = "200Mi"
memory_swap_max = "16Mi"
EOF
    echo >"$TR/trace"
    start_stalled stalled "$D/sig/dest" --policy "$W/policy.toml" --cpu-quota 0.5 --memory-max 256Mi \
        --pids-max 64 --io-read-bps "$D=10MB/s" --io-write-bps "$D=1Mi/s" || return
    UNIT=$(pull_units)
    if [ -z "$UNIT" ] || [ "$(echo "$UNIT" | wc -l)" != 1 ]; then
        bad "want exactly one pullhelper-*.scope unit, got: $(echo "$UNIT" | oneline)"
        UNIT=""
        return
    fi
    case "$UNIT" in pullhelper-pull-[0-9]*-[0-9]*-*.scope) ;; *) bad "unit name $UNIT" ;; esac
    ev "unit=$UNIT"
    want_cg=$SLICE_PARENT/$UNIT
    for kv in "ActiveState=active" "Slice=$SLICE" "ControlGroup=$want_cg" "Delegate=yes" "Transient=yes"; do
        got=$(prop "$UNIT" "${kv%%=*}")
        [ "$got" = "${kv#*=}" ] || bad "systemctl show $UNIT: ${kv%%=*}=$got, want ${kv#*=}"
    done
    ev "Slice=$SLICE ControlGroup=$want_cg"
    [ "$CHILD_CG" = "$want_cg" ] || bad "/proc/$CHILD/cgroup is $CHILD_CG, want $want_cg"
    got=$(readlink "/proc/$CHILD/exe")
    [ "$got" = "$PH-child" ] || bad "the child runs $got, want $PH-child (the child-only binary beside $PH)"
    # The scope holds the child and the anchor (the process that keeps the
    # scope, which systemd stops once it is empty, until pullhelper is done
    # with it), both the parent's.
    procs=$(sort -n "$CG$want_cg/cgroup.procs" | oneline)
    ANCHOR=""
    for p in $procs; do
        [ "$p" = "$CHILD" ] && continue
        [ "$(tr '\0' ' ' <"/proc/$p/cmdline")" = "pullhelper-cgroup-anchor " ] && ANCHOR=$p
    done
    [ -n "$ANCHOR" ] && [ "$(echo "$procs" | wc -w)" = 2 ] ||
        bad "the scope's cgroup.procs is '$procs', want the child $CHILD and the anchor"
    for p in "$CHILD" "$ANCHOR"; do
        [ -z "$p" ] || [ "$(awk '/^PPid:/ { print $2 }' "/proc/$p/status")" = "$BG" ] || bad "$p is not the parent's child"
    done
    ev "procs=$procs (child $CHILD, anchor $ANCHOR with $(ls "/proc/$ANCHOR/task" 2>/dev/null | wc -l) threads, $(awk '/^RssAnon:/ { print $2 $3 }' "/proc/$ANCHOR/status") anonymous memory)"
    # Born in the scope (CLONE_INTO_CGROUP), never moved there: the kernel
    # traces every move into a cgroup (systemd moving the anchor is one).
    moved=$(grep 'cgroup_attach_task:' "$TR/trace" | grep "dst_path=$want_cg " | grep -v "pid=$ANCHOR ")
    if [ -n "$moved" ]; then
        bad "a task other than the anchor was moved into the scope: $(echo "$moved" | head -3 | oneline)"
    elif ! grep 'cgroup_attach_task:' "$TR/trace" | grep -q "dst_path=$want_cg pid=$ANCHOR "; then
        bad "the anchor's move into the scope was not traced (the born-inside check proves nothing): $(grep -c cgroup_attach_task "$TR/trace") attach events"
    else
        ev "child born in the scope: the only traced move into it is the anchor's;"
    fi
    for t in /proc/"$CHILD"/task/*; do
        [ "$(cat "$t/cgroup")" = "0::$want_cg" ] || bad "child thread ${t##*/} is in $(cat "$t/cgroup")"
    done
    # systemd knows the child as the scope's process.
    grep -qx "$CHILD" < <(systemd-cgls --no-pager -l -u "$UNIT" 2>/dev/null | grep -oE '[0-9]+ pullhelper-child' | cut -d' ' -f1) ||
        bad "systemd-cgls -u $UNIT does not show the child $CHILD: $(systemd-cgls --no-pager -u "$UNIT" 2>&1 | oneline)"
    ev "child=$CHILD in the scope (systemd-cgls)"
    pcg=$(sed -n 's/^0:://p' "/proc/$BG/cgroup")
    [ "$pcg" = /system.slice/pullhelper-vmtest.service ] || bad "the parent is in $pcg, want the caller's service cgroup"
    ev "parent=$BG in $pcg"
}

t_scope_limits() {
    [ -n "$UNIT" ] || { bad "no scope (scope_in_slice failed)"; return; }
    dir=$CG$SLICE_PARENT/$UNIT
    # What systemd holds for the scope: it owns these limits, so a later
    # realisation of the unit (e.g. set-property, below) keeps them.
    sprop() {
        got=$(prop "$UNIT" "$1")
        if [ "$got" = "$2" ]; then ev "$1=$got"; else bad "systemctl show $UNIT: $1='$got', want '$2'"; fi
    }
    files() {
        chk() {
            got=$(oneline <"$dir/$1")
            if [ "$got" = "$2" ]; then ev "$1='$got'"; else bad "$3$1 is '$got', want '$2'"; fi
        }
        chk cpu.max "50000 100000" "$1"
        chk cpu.weight 200 "$1"
        chk memory.max $((256 << 20)) "$1"
        chk memory.high $((200 << 20)) "$1"
        chk memory.swap.max $((16 << 20)) "$1"
        chk pids.max 64 "$1"
        got=$(head -1 "$dir/io.weight")
        if [ "$got" = "default 300" ]; then ev "io.weight='$got'"; else bad "${1}io.weight is '$got', want 'default 300'"; fi
        chk io.max "$DEV rbps=10000000 wbps=1048576 riops=max wiops=max" "$1"
    }
    sprop CPUQuotaPerSecUSec 500ms
    sprop CPUWeight 200
    sprop MemoryMax $((256 << 20))
    sprop MemoryHigh $((200 << 20))
    sprop MemorySwapMax $((16 << 20))
    sprop TasksMax 64
    sprop IOWeight 300
    sprop IOReadBandwidthMax "$D 10000000"
    sprop IOWriteBandwidthMax "$D 1048576"
    files ""
    # systemd rewrites a unit's cgroup attributes from its own properties
    # whenever it realises the unit again (here: set-property of the
    # accounting switches, as a daemon-reload or a later set-property
    # would): a limit written behind systemd's back would be reset.
    systemctl set-property --runtime "$UNIT" CPUAccounting=yes MemoryAccounting=yes TasksAccounting=yes IOAccounting=yes ||
        bad "systemctl set-property $UNIT failed"
    EVID="$EVID; after set-property:"
    files "after systemd re-applied the unit's properties: "
}

t_sigterm() {
    [ -n "$BG" ] && [ -n "$UNIT" ] || { bad "no stalled pull (scope_in_slice failed)"; return; }
    dir=$CG$SLICE_PARENT/$UNIT
    # A second process in the scope that only a kill of the whole cgroup
    # reaches: pullhelper only knows its child.
    sleep 600 &
    extra=$!
    echo "$extra" >"$dir/cgroup.procs"
    [ "$(sed -n 's/^0:://p' "/proc/$extra/cgroup")" = "$SLICE_PARENT/$UNIT" ] || bad "could not put an extra process into $UNIT"
    stop_bg stalled
    ev "exit=$BGRC"
    [ "$BGRC" = 143 ] || bad "exit $BGRC, want 143"
    code=$(jget code "$W/stalled.out")
    [ "$code" = interrupted ] || bad "error code '$code', want interrupted"
    reap "$extra" 30
    xrc=$?
    [ "$xrc" = 137 ] || bad "the extra process in the scope ended with $xrc, want 137 (SIGKILL)"
    ev "extra process in the scope: SIGKILLed (wait=$xrc)"
    [ ! -e "/proc/$CHILD" ] || bad "the child $CHILD still exists"
    [ -z "$(pull_children)" ] || bad "pullhelper-child processes left: $(pull_children | oneline)"
    gone "$UNIT" || bad "$UNIT is still $(prop "$UNIT" ActiveState) after the pull ended"
    [ ! -d "$dir" ] || bad "the scope's cgroup $dir still exists (procs: $(oneline <"$dir/cgroup.procs"))"
    [ -z "$(active_pull_units)" ] || bad "active pullhelper scopes left: $(active_pull_units | oneline)"
    ev "scope stopped ($(prop "$UNIT" ActiveState | sed 's/^$/collected/')), cgroup removed"
    j=$(journalctl --no-pager -o cat -u "$UNIT" 2>/dev/null | oneline)
    case "$j" in *Started*"$UNIT"*) ev "journal: $j" ;; *) bad "the journal has no start of $UNIT: '$j'" ;; esac
    [ ! -e "$D/sig/dest" ] || bad "the interrupted pull committed DEST"
}

# A plain pull with the systemd driver and the default parent: the result
# reports the scope and its usage, and the scope is gone afterwards.
t_usage_and_removal() {
    mkdir -p "$D/usage"
    pull medium --cgroup-parent /pullhelper "$REG/fixtures/medium" "oci:$D/usage/dest"
    [ "$RC" = 0 ] || { bad "pull exited $RC"; show_err medium; return; }
    o=$W/medium.out
    for k in cpu_usage_ns memory_peak_bytes io_write_bytes pids_peak; do
        v=$(jget "$k" "$o")
        if isnum "$v" && [ "$v" -gt 0 ]; then ev "$k=$v"; else bad "usage.$k = '$v', want > 0"; fi
    done
    bytes=$(jget bytes "$o")
    wr=$(jget io_write_bytes "$o")
    isnum "$wr" && isnum "$bytes" && [ "$wr" -ge $((bytes / 2)) ] ||
        bad "io_write_bytes $wr for $bytes bytes pulled onto $DEV"
    [ "$(jget oom_kills "$o")" = 0 ] || bad "oom_kills $(jget oom_kills "$o")"
    [ "$(jget cgroup_version "$o")" = v2 ] || bad "cgroup_version $(jget cgroup_version "$o"), want v2"
    [ "$(jget cgroup_driver "$o")" = systemd ] || bad "cgroup_driver $(jget cgroup_driver "$o"), want systemd (the driver auto chose)"
    [ "$(jget digest "$o")" = "$DIGEST_medium" ] || bad "digest $(jget digest "$o"), registry serves $DIGEST_medium"
    cgp=$(jget cgroup "$o")
    unit=${cgp##*/}
    case "$cgp" in /pullhelper.slice/pullhelper-pull-*.scope) ev "isolation.cgroup=$cgp" ;; *) bad "isolation.cgroup '$cgp', want /pullhelper.slice/pullhelper-pull-*.scope" ;; esac
    j=$(journalctl --no-pager -o cat -u "$unit" 2>/dev/null | oneline)
    case "$j" in *Started*"$unit"*) ev "journal: $j" ;; *) bad "the journal has no start of $unit: '$j'" ;; esac
    gone "$unit" || bad "$unit is still $(prop "$unit" ActiveState) after the pull"
    [ ! -d "$CG$cgp" ] || bad "the scope's cgroup $cgp still exists"
    [ -z "$(active_pull_units)" ] || bad "active pullhelper scopes left: $(active_pull_units | oneline)"
    [ -z "$(pull_children)" ] || bad "pullhelper-child processes left"
    ! grep -q 'removing the pull cgroup' "$W/medium.err" || bad "stderr: $(grep 'removing the pull cgroup' "$W/medium.err" | oneline)"
    ev "bytes=$bytes ms=$DUR; scope removed"
}

# The parent SIGKILLed mid-pull (no cleanup of its own): the child and the
# anchor die with it (Pdeathsig), and systemd stops the empty scope and
# removes its cgroup by itself.
t_parent_killed() {
    mkdir -p "$D/killed"
    start_stalled killed "$D/killed/dest" || return
    unit=$(pull_units)
    [ -n "$unit" ] || { bad "no scope for the stalled pull"; return; }
    anchor=$(grep -vx "$CHILD" "$CG$CHILD_CG/cgroup.procs" | head -1)
    kill -KILL "$BG"
    reap "$BG" 30
    BG=""
    i=0
    until gone "$unit" && [ ! -d "$CG$CHILD_CG" ]; do
        i=$((i + 1))
        [ $i -lt 100 ] || break
        sleep 0.1
    done
    gone "$unit" || bad "$unit is still $(prop "$unit" ActiveState) 10 s after the parent was killed"
    [ ! -d "$CG$CHILD_CG" ] || bad "the scope's cgroup still exists: $(oneline <"$CG$CHILD_CG/cgroup.procs")"
    [ ! -e "/proc/$CHILD" ] || bad "the child $CHILD survived its parent"
    [ -n "$anchor" ] && [ ! -e "/proc/$anchor" ] || bad "the anchor '$anchor' survived its parent"
    [ -z "$(pull_children)" ] || bad "pullhelper-child processes left"
    ev "parent SIGKILLed: child $CHILD and anchor $anchor gone, $unit collected by systemd (polls: $i)"
}

# The pod: a container scope (Delegate=yes, MemoryMax from systemd) in a pod
# slice, with a process in it, as the kubelet's systemd cgroup driver and
# the runtime make them.
POD_PID=""
make_pod() {
    [ -n "$POD_PID" ] && return 0
    systemd-run --quiet --scope --unit="$POD_SCOPE" --slice="$POD_SLICE" -p Delegate=yes -p MemoryMax=300M \
        sleep 900 &
    POD_PID=$!
    i=0
    until [ "$(prop "$POD_SCOPE" ActiveState)" = active ] && [ "$(sed -n 's/^0:://p' "/proc/$POD_PID/cgroup")" = "$POD_SLICE_CG/$POD_SCOPE" ]; do
        i=$((i + 1))
        [ $i -lt 300 ] || { bad "the pod scope $POD_SCOPE never became active"; return 1; }
        sleep 0.1
    done
}

t_join_pod_scope() {
    make_pod || return
    scope=$POD_SLICE_CG/$POD_SCOPE
    before=$(systemctl show "$POD_SCOPE" -p ActiveState,ControlGroup,MemoryMax,Delegate | oneline)
    ev "pod scope: $before;"
    mkdir -p "$D/join"
    start_stalled joined "$D/join/dest" --cgroup "$scope" || return
    case "$CHILD_CG" in
        "$scope"/pull-*) ev "child=$CHILD in $CHILD_CG" ;;
        *) bad "the child is in $CHILD_CG, want a sub-cgroup $scope/pull-*" ;;
    esac
    [ -z "$(pull_units)" ] || bad "joining created a scope of its own: $(pull_units | oneline)"
    [ "$(cat "$CG$scope/memory.max")" = $((300 << 20)) ] || bad "the pod scope's memory.max is $(cat "$CG$scope/memory.max")"
    stop_bg joined
    [ "$BGRC" = 143 ] || bad "exit $BGRC after SIGTERM, want 143"
    [ -z "$(pull_children)" ] || bad "pullhelper-child processes left"
    [ ! -d "$CG$CHILD_CG" ] || bad "the pull's sub-cgroup $CHILD_CG still exists"
    after=$(systemctl show "$POD_SCOPE" -p ActiveState,ControlGroup,MemoryMax,Delegate | oneline)
    [ "$after" = "$before" ] || bad "the pod scope changed: $after"
    kill -0 "$POD_PID" 2>/dev/null || bad "the pod's process $POD_PID was killed"
    [ "$(sed -n 's/^0:://p' "/proc/$POD_PID/cgroup")" = "$scope" ] || bad "the pod's process moved"
    ev "after SIGTERM: sub-cgroup removed, pod scope and its process untouched"
}

t_join_pod_slice() {
    make_pod || return
    mkdir -p "$D/joinslice"
    peak0=$(cat "$CG$POD_SLICE_CG/memory.peak" 2>/dev/null)
    pull slice --cgroup "$POD_SLICE_CG" "$REG/fixtures/tiny" "oci:$D/joinslice/dest"
    [ "$RC" = 0 ] || { bad "pull exited $RC"; show_err slice; return; }
    o=$W/slice.out
    [ "$(jget cgroup "$o")" = "$POD_SLICE_CG" ] || bad "isolation.cgroup $(jget cgroup "$o"), want $POD_SLICE_CG"
    [ "$(jget cgroup_joined "$o")" = true ] || bad "isolation.cgroup_joined $(jget cgroup_joined "$o")"
    [ "$(jget digest "$o")" = "$DIGEST_tiny" ] || bad "digest $(jget digest "$o")"
    c=$(jget cpu_usage_ns "$o")
    isnum "$c" && [ "$c" -gt 0 ] || bad "usage.cpu_usage_ns '$c'"
    ev "cgroup=$(jget cgroup "$o") joined cpu_usage_ns=$c memory.peak of the slice before=$peak0"
    [ -z "$(ls -d "$CG$POD_SLICE_CG"/pull-* 2>/dev/null)" ] || bad "sub-cgroup left in the pod slice"
    [ -z "$(pull_units)" ] || bad "joining created a scope: $(pull_units | oneline)"
    [ "$(prop "$POD_SLICE" ActiveState)" = active ] || bad "the pod slice is $(prop "$POD_SLICE" ActiveState)"
    [ "$(prop "$POD_SCOPE" ActiveState)" = active ] || bad "the pod scope is $(prop "$POD_SCOPE" ActiveState)"
}

###############################################################################

run_test systemd_pid1
run_test scope_in_slice
run_test scope_limits
run_test sigterm
[ -z "$BG" ] || stop_bg stalled
run_test usage_and_removal
run_test parent_killed
run_test join_pod_scope
run_test join_pod_slice
[ -z "$POD_PID" ] || kill "$POD_PID" 2>/dev/null
journalctl --no-pager -b -p warning -o short-monotonic 2>/dev/null | tail -n 30 |
    while IFS= read -r l; do echo "PHVM KLOG $l"; done
echo "PHVM END uptime $(cut -d' ' -f1 /proc/uptime)"
