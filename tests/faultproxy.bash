# -*- bash -*-
#
# Helpers for tests/faultproxy, the fault-injecting reverse proxy (see the
# doc comment of tests/faultproxy/main.go for the rules and the log format).
# Load after helpers:
#
#     load helpers
#     load faultproxy
#
#     teardown()      { stop_all_faultproxies; }   # proxies started by the test
#     teardown_file() { stop_all_faultproxies; ... } # proxies started in setup_file
#
# start_faultproxy NAME UPSTREAM_URL sets, and exports, for NAME (letters,
# digits, _):
#   FP_<NAME>_HOST      127.0.0.1:PORT
#   FP_<NAME>_URL       https://127.0.0.1:PORT (http:// with --plain)
#   FP_<NAME>_DIR       its directory (certificates, rules, log, pid, out)
#   FP_<NAME>_CA        CA of its certificate (for 127.0.0.1 and localhost)
#   FP_<NAME>_CERT_DIR  a directory holding only ca.crt (pullhelper --cert-dir)
#   FP_<NAME>_RULES     the rules file (replace it with faultproxy_rules)
#   FP_<NAME>_LOG       the access log, one JSON line per request
#   FP_<NAME>_AUTHFILE  auth.json with the registry's credential keyed by
#                       FP_<NAME>_HOST (only when $REGISTRY_AUTHFILE exists)
#   FP_<NAME>_PID       the proxy's pid
# Plain variables rather than an associative array, so that a proxy started
# in setup_file is visible to the tests (bats exports only plain variables).

# Where the binary is built (once per file).
FAULTPROXY=${FAULTPROXY:-${BATS_FILE_TMPDIR:-${TMPDIR:-/tmp}}/faultproxy}
# Upper bound on a proxy's life, in case no teardown runs.
PH_FAULTPROXY_LIFETIME=${PH_FAULTPROXY_LIFETIME:-15m}

# build_faultproxy: build tests/faultproxy to $FAULTPROXY unless it exists.
build_faultproxy() {
    [[ -x $FAULTPROXY ]] && return 0
    local out
    out=$(cd "$PH_ROOT" && CGO_ENABLED=0 GOFLAGS= "$(_ph_go)" build -o "$FAULTPROXY.tmp.$$" ./tests/faultproxy 2>&1) || {
        rm -f "$FAULTPROXY.tmp.$$"
        fail "go build ./tests/faultproxy failed: $out"
        return
    }
    mv -f "$FAULTPROXY.tmp.$$" "$FAULTPROXY"
}

# _fp_var NAME FIELD: the value of FP_<NAME>_<FIELD> (fails if unset).
_fp_var() {
    local v="FP_${1}_$2"
    [[ -n ${!v:-} ]] || {
        echo "faultproxy: no proxy named '$1' (start_faultproxy $1 first)" >&2
        return 1
    }
    echo "${!v}"
}

# _fp_scope_file: where the started proxies are recorded: the test's tmpdir
# inside a test, the file's in setup_file/teardown_file.
_fp_scope_file() {
    echo "${BATS_TEST_TMPDIR:-${BATS_FILE_TMPDIR:?}}/faultproxy.dirs"
}

# start_faultproxy NAME UPSTREAM_URL [--plain] [--upstream-ca FILE]
#                  [--log-header H1,H2] [--max-hold DURATION]
# Start a proxy forwarding to UPSTREAM_URL, serving https with its own CA
# (or http with --plain). An https upstream is verified with --upstream-ca
# (default $REGISTRY_CA). --log-header names request headers whose values
# the log records; --max-hold bounds a stall_after (default 60s). Starts
# with no rules (a clean proxy) and waits, at most 10 s, until it listens.
start_faultproxy() {
    local name=${1:?start_faultproxy: missing NAME} upstream=${2:?start_faultproxy: missing UPSTREAM_URL}
    shift 2
    [[ $name =~ ^[A-Za-z0-9_]+$ ]] || {
        fail "start_faultproxy: bad name '$name' (letters, digits, _)"
        return
    }
    local plain=0 ca=${REGISTRY_CA:-}
    local -a extra=()
    while (($#)); do
        case "$1" in
            --plain) plain=1 ;;
            --upstream-ca) ca=$2; shift ;;
            --log-header) extra+=(-log-header "$2"); shift ;;
            --max-hold) extra+=(-max-hold "$2"); shift ;;
            *)
                fail "start_faultproxy: unknown option $1"
                return
                ;;
        esac
        shift
    done
    local pidvar="FP_${name}_PID"
    if [[ -n ${!pidvar:-} ]] && _fp_is_ours "$name"; then
        fail "start_faultproxy: proxy '$name' is already running (pid ${!pidvar}); stop_faultproxy $name first"
        return
    fi
    build_faultproxy || return
    local parent=${BATS_TEST_TMPDIR:-${BATS_FILE_TMPDIR:?}} d
    d=$(mktemp -d "$parent/faultproxy-$name.XXXXXX")
    local -a tls=(-tls-cert "$d/server.crt" -tls-key "$d/server.key")
    _ph_make_certs "$d" || return
    ((plain)) && tls=(-plain)
    [[ $upstream != https:* || -z $ca ]] || extra+=(-upstream-ca "$ca")
    : >"$d/log"
    (
        "$FAULTPROXY" -upstream "$upstream" -port-file "$d/port" "${tls[@]}" -rules "$d/rules.json" \
            -log "$d/log" -lifetime "$PH_FAULTPROXY_LIFETIME" "${extra[@]}" \
            </dev/null >"$d/out" 2>&1 3>&- &
        echo $! >"$d/pid"
    )
    echo "$name $d" >>"$(_fp_scope_file)"
    local pid deadline=$((SECONDS + 10))
    pid=$(<"$d/pid")
    until [[ -s $d/port ]]; do
        if ! _ph_pid_alive "$pid"; then
            fail "faultproxy $name exited during startup: $(cat "$d/out")"
            return
        fi
        if ((SECONDS >= deadline)); then
            _ph_stop_pid "$pid" "faultproxy $name" 5
            fail "faultproxy $name did not write its port within 10s"
            return
        fi
        sleep 0.05
    done
    local host="127.0.0.1:$(<"$d/port")" scheme=https
    ((plain)) && scheme=http
    printf -v "FP_${name}_HOST" %s "$host"
    printf -v "FP_${name}_URL" %s "$scheme://$host"
    printf -v "FP_${name}_DIR" %s "$d"
    printf -v "FP_${name}_CA" %s "$d/ca.crt"
    printf -v "FP_${name}_CERT_DIR" %s "$d/certs"
    printf -v "FP_${name}_RULES" %s "$d/rules.json"
    printf -v "FP_${name}_LOG" %s "$d/log"
    printf -v "FP_${name}_PID" %s "$pid"
    export "FP_${name}_HOST" "FP_${name}_URL" "FP_${name}_DIR" "FP_${name}_CA" "FP_${name}_CERT_DIR" \
        "FP_${name}_RULES" "FP_${name}_LOG" "FP_${name}_PID"
    if [[ -n ${REGISTRY_AUTHFILE:-} && -f $REGISTRY_AUTHFILE ]]; then
        registry_auth_alias "$d/auth.json" "$host" || {
            fail "start_faultproxy: could not write $d/auth.json"
            return
        }
        printf -v "FP_${name}_AUTHFILE" %s "$d/auth.json"
        export "FP_${name}_AUTHFILE"
    fi
}

# _fp_is_ours NAME [DIR]: the recorded pid of NAME is a live faultproxy
# started for its directory.
_fp_is_ours() {
    local d=${2:-} pid
    [[ -n $d ]] || d=$(_fp_var "$1" DIR 2>/dev/null) || return 1
    [[ -f $d/pid ]] || return 1
    pid=$(<"$d/pid")
    [[ $pid =~ ^[0-9]+$ ]] && _ph_pid_alive "$pid" &&
        tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "-port-file $d/port "
}

# faultproxy_rules NAME JSON: replace the rules of NAME (a JSON array, see
# tests/faultproxy/main.go); checked first, so a bad rule fails the test
# here. The file is renamed into place: the next request sees the new rules,
# with fresh counts.
faultproxy_rules() {
    local name=${1:?faultproxy_rules: missing NAME} json=${2:?faultproxy_rules: missing JSON} rules out
    rules=$(_fp_var "$name" RULES) || { fail "faultproxy_rules: no proxy '$name'"; return; }
    printf '%s\n' "$json" >"$rules.tmp"
    out=$("$FAULTPROXY" -check "$rules.tmp" 2>&1) || {
        rm -f "$rules.tmp"
        fail "faultproxy_rules $name: $out"
        return
    }
    mv -f "$rules.tmp" "$rules"
}

# faultproxy_log NAME: print the access log of NAME.
faultproxy_log() {
    local log
    log=$(_fp_var "${1:?faultproxy_log: missing NAME}" LOG) || { fail "faultproxy_log: no proxy '$1'"; return; }
    cat "$log"
}

# _fp_log_query NAME PATH_REGEX FIELD [METHOD]: count (FIELD=count) or sum a
# numeric FIELD (e.g. bytes) over the log lines of NAME whose path matches
# PATH_REGEX (Python re.search) and, if given, whose method is METHOD.
_fp_log_query() {
    local log
    log=$(_fp_var "$1" LOG) || { fail "faultproxy: no proxy '$1'"; return; }
    "$PH_PYTHON" -c '
import json, re, sys
log, pat, field = sys.argv[1:4]
method = sys.argv[4] if len(sys.argv) > 4 else ""
total = 0
for line in open(log):
    e = json.loads(line)
    if re.search(pat, e["path"]) and (not method or e["method"] == method):
        total += 1 if field == "count" else e[field]
print(total)' "$log" "$2" "$3" "${@:4}"
}

# faultproxy_count NAME PATH_REGEX [METHOD]: number of requests NAME logged
# whose path matches PATH_REGEX (and method is METHOD).
faultproxy_count() {
    _fp_log_query "${1:?faultproxy_count: missing NAME}" "${2:?faultproxy_count: missing PATH_REGEX}" count "${@:3}"
}

# faultproxy_bytes NAME PATH_REGEX [METHOD]: body bytes NAME sent for those
# requests.
faultproxy_bytes() {
    _fp_log_query "${1:?faultproxy_bytes: missing NAME}" "${2:?faultproxy_bytes: missing PATH_REGEX}" bytes "${@:3}"
}

# stop_faultproxy NAME: stop NAME (TERM, then KILL after 5 s). Idempotent;
# keeps its directory (log, out) for inspection.
stop_faultproxy() {
    local name=${1:?stop_faultproxy: missing NAME} d
    d=$(_fp_var "$name" DIR 2>/dev/null) || return 0
    _fp_stop_dir "$name" "$d"
    unset "FP_${name}_PID"
}

_fp_stop_dir() {
    if _fp_is_ours "$1" "$2"; then
        _ph_stop_pid "$(<"$2/pid")" "faultproxy $1" 5
    fi
}

# stop_all_faultproxies: stop every proxy started in this scope (in
# teardown: the test's; in teardown_file: setup_file's).
stop_all_faultproxies() {
    local f name d
    f=$(_fp_scope_file)
    [[ -f $f ]] || return 0
    while read -r name d; do
        _fp_stop_dir "$name" "$d"
    done <"$f"
}
