# tests/vm/harness.sh: the harness both VM guests source (/phvm/harness.sh):
# tests/vm/guest-tests.sh under busybox sh and tests/vm/systemd/guest-tests.sh
# under bash, so it is POSIX sh. The sourcing script sets PH (pullhelper),
# AUTH (its credential flags), W (a directory for outputs) and ONLY (from
# /etc/phvm/env) first.
#
# Lines on the serial console, asserted by tests/vm/run.sh:
#   PHVM RESULT <name> pass|fail|skip <evidence or what failed>   (one a test)
#   PHVM TIME <name> <ms>          PHVM JSON <name> <pullhelper's stdout>
#   PHVM LOG <name>: <detail>      PHVM DIAG <what a stuck test was doing>

ms() { awk '{ printf "%d", $1 * 1000 }' /proc/uptime; }
log() { echo "PHVM LOG $CUR: $*"; }
# bad MSG: record a failed check of the current test.
bad() {
    FAILS="$FAILS; $*"
    log "FAIL $*"
}
# ev TEXT: add to the current test's evidence.
ev() { EVID="$EVID $*"; }
oneline() { tr '\n' ' ' | sed 's/  */ /g; s/ $//'; }
# want NAME: the test is selected (ONLY empty or listing it).
want() { [ -z "$ONLY" ] || case " $ONLY " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
# jget KEY FILE: the first value of "KEY": in a one-line JSON document (a
# string without its quotes, or a number/true/false). Keys used here are
# unique in pullhelper's output.
jget() { sed -nE "s/.*\"$1\":(\"[^\"]*\"|[^,}]*).*/\1/p" "$2" | head -1 | tr -d '"'; }
# isnum X: X is a non-negative integer.
isnum() { case "$1" in '' | *[!0-9]*) return 1 ;; esac; }
# proc_state PID: the process's state letter (R, S, D, Z...), empty if gone.
proc_state() { awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null; }

# pull NAME ARGS...: run pullhelper pull with the registry credentials (at
# most 240 s); stdout in $W/NAME.out (echoed as PHVM JSON), stderr in
# $W/NAME.err; sets RC and DUR (ms).
pull() {
    n=$1
    shift
    s=$(ms)
    timeout 240 "$PH" pull $AUTH "$@" >"$W/$n.out" 2>"$W/$n.err"
    RC=$?
    DUR=$(($(ms) - s))
    echo "PHVM JSON $CUR/$n $(oneline <"$W/$n.out")"
}
# show_err NAME: the pull's stderr as log lines (after a failure).
show_err() { tail -n 15 "$W/$1.err" | while IFS= read -r l; do log "stderr: $l"; done; }

# diag WHY: what the guest is doing, for a test that is stuck: one PHVM DIAG
# line per thread of a user process or in uninterruptible sleep (name,
# state, wchan, kernel stack), then the kernel's recent reports of hung
# tasks, RCU stalls and lockups. It reads nothing that takes a process's
# memory lock (not cmdline), so a stuck process cannot stop it.
diag() {
    echo "PHVM DIAG $CUR: $*"
    for p in /proc/[0-9]*; do
        user=0
        [ -e "$p/exe" ] && user=1
        for t in "$p"/task/*; do
            st=$(sed -E 's/^[0-9]+ \((.*)\) ([A-Z]) .*/\1 \2/' "$t/stat" 2>/dev/null) || continue
            [ "$user" = 1 ] || [ "${st##* }" = D ] || continue
            echo "PHVM DIAG ${p#/proc/}/${t##*/} $st wchan=$(cat "$t/wchan" 2>/dev/null)" \
                "stack: $(sed -E 's/^\[<[0-9a-f]+>\] //; s/\+0x[0-9a-f]+\/0x[0-9a-f]+//' "$t/stack" 2>/dev/null | oneline)"
        done
    done
    dmesg | grep -E 'blocked for more than|rcu.*stall|lockup|BUG:|WARNING:' | tail -n 10 |
        while IFS= read -r l; do echo "PHVM DIAG klog $l"; done
}

# reap PID [SECS]: wait for the background process PID, at most SECS (default
# 120), and return its exit status. One still there after that is a failure
# of the test, with diag's account of what it is blocked in, and reap
# returns 124: no test waits without bound.
reap() {
    rp_n=$((${2:-120} * 10))
    while [ "$rp_n" -gt 0 ]; do
        case "$(proc_state "$1")" in
        '' | Z)
            wait "$1"
            return
            ;;
        esac
        rp_n=$((rp_n - 1))
        sleep 0.1
    done
    bad "process $1 did not end within ${2:-120} s"
    diag "process $1 did not end within ${2:-120} s"
    return 124
}

# watchdog NAME: run in the background by run_test. A test still running
# after TEST_BUDGET seconds is stuck (the slowest takes about 90 s): its
# PHVM DIAG lines and a failed result are printed and the guest is powered
# off, so that the host learns why at once rather than at its timeout.
TEST_BUDGET=300
watchdog() {
    sleep "$TEST_BUDGET" &
    wd_s=$!
    trap 'kill "$wd_s" 2>/dev/null; exit 0' TERM
    wait "$wd_s"
    diag "$1 still running after $TEST_BUDGET s"
    echo "PHVM RESULT $1 fail still running after $TEST_BUDGET s: stuck (see the PHVM DIAG lines)"
    sync
    echo o >/proc/sysrq-trigger
}

# run_test NAME: run t_NAME (if selected) under the watchdog and print its
# TIME and RESULT lines.
run_test() {
    want "$1" || return 0
    CUR=$1 FAILS="" EVID=""
    t0=$(ms)
    watchdog "$1" &
    wd=$!
    "t_$1"
    kill "$wd" 2>/dev/null
    wait "$wd"
    echo "PHVM TIME $1 $(($(ms) - t0))"
    if [ -z "$FAILS" ]; then
        echo "PHVM RESULT $1 pass$(echo "$EVID" | oneline)"
    else
        echo "PHVM RESULT $1 fail ${FAILS#; }"
    fi
}
