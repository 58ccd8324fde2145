# -*- bash -*-
#
# Shared helpers for the pullhelper system tests. Every tests/NNN-*.bats
# starts with `load helpers`.
#
# Needs: bats >= 1.5 with bats-support and bats-assert, docker-registry
# (distribution 2.8), skopeo, htpasswd (apache2-utils), openssl, python3, go;
# curl is used when present.
#
# Secrets: the registry password is generated into $REGISTRY_DIR/password
# (mode 0600) and only ever handed to tools through files or stdin (auth.json,
# curl config, htpasswd -i). It is never exported, put in argv or printed.

bats_require_minimum_version 1.5.0

PH_BATS_LIB=${PH_BATS_LIB:-/usr/lib/bats}
load "$PH_BATS_LIB/bats-support/load"
load "$PH_BATS_LIB/bats-assert/load"

# Tests dir and repo root (all .bats files live in tests/).
PH_TESTS_DIR=$(cd "$BATS_TEST_DIRNAME" && pwd)
PH_ROOT=$(cd "$PH_TESTS_DIR/.." && pwd)

PULLHELPER=${PULLHELPER:-$BATS_TEST_DIRNAME/../bin/pullhelper}
# The test-only build whose child plays a compromised child ($PULLHELPER_HOSTILE
# names the actions; reexec/hostile.go). make test-system builds it.
PULLHELPER_HOSTILE_BIN=${PULLHELPER_HOSTILE_BIN:-$BATS_TEST_DIRNAME/../bin/pullhelper-hostile}
PH_TIMEOUT=${PH_TIMEOUT:-300}
# Fixture and tool cache; gitignored (tests/.gitignore).
PH_CACHE=${PH_CACHE:-$BATS_TEST_DIRNAME/.cache}
# Seconds start_registry waits for the registry to answer.
PH_REGISTRY_WAIT=${PH_REGISTRY_WAIT:-20}
# Upper bound on a registry's life, in case teardown_file never runs.
PH_REGISTRY_LIFETIME=${PH_REGISTRY_LIFETIME:-3600}
# python3 for helpers; prefer the system one (a pyenv shim costs ~0.4 s a call).
if [[ -z ${PH_PYTHON:-} ]]; then
    if [[ -x /usr/bin/python3 ]]; then
        PH_PYTHON=/usr/bin/python3
    else
        PH_PYTHON=python3
    fi
fi
# Timeout for each skopeo call made by the helpers.
PH_SKOPEO_TIMEOUT=${PH_SKOPEO_TIMEOUT:-300}

###############################################################################
# Small utilities

# skip_if_not_root REASON: skip the test unless running as root.
skip_if_not_root() {
    if [[ $(id -u) -ne 0 ]]; then
        skip "not root: ${1:-this test needs root}"
    fi
}

# skip_unless_cmd CMD [REASON]: skip the test unless CMD is in $PATH.
skip_unless_cmd() {
    if ! command -v "$1" >/dev/null 2>&1; then
        skip "command '$1' not installed${2:+: $2}"
    fi
}

# _ph_go: path of the go tool.
_ph_go() {
    if command -v go >/dev/null 2>&1; then
        command -v go
    elif [[ -x /usr/local/go/bin/go ]]; then
        echo /usr/local/go/bin/go
    else
        fail "go toolchain not found (PATH or /usr/local/go/bin/go)"
    fi
}

# _ph_lock / _ph_unlock: serialize cache updates between bats processes.
_ph_lock() {
    mkdir -p "$PH_CACHE"
    exec {_PH_LOCK_FD}>"$PH_CACHE/.lock"
    flock -w 900 "$_PH_LOCK_FD" || fail "could not lock $PH_CACHE/.lock"
}
_ph_unlock() {
    if [[ -n ${_PH_LOCK_FD:-} ]]; then
        exec {_PH_LOCK_FD}>&-
        unset _PH_LOCK_FD
    fi
}

###############################################################################
# Running pullhelper

# run_pullhelper [EXPECTED_RC|'?'] ARGS...
#
# Runs `timeout $PH_TIMEOUT $PULLHELPER ARGS...` through bats' `run
# --separate-stderr`: afterwards $status is the exit code, $output/$lines
# stdout and $stderr/$stderr_lines stderr. EXPECTED_RC (default 0) is checked;
# '?' accepts any. On a mismatch the command, exit code, stdout and stderr are
# printed and the test fails. A pullhelper argument that is a bare number must
# therefore be preceded by an explicit expected code.
run_pullhelper() {
    local expected_rc=0
    case "${1:-}" in
        '?') expected_rc='?'; shift ;;
        '' | *[!0-9]*) ;;
        *) expected_rc=$1; shift ;;
    esac
    if [[ ! -x $PULLHELPER ]]; then
        fail "pullhelper binary not found or not executable: $PULLHELPER (build it first, or set PULLHELPER)"
        return
    fi
    echo "\$ pullhelper $*"
    run --separate-stderr timeout --kill-after=10 "$PH_TIMEOUT" "$PULLHELPER" "$@"
    if [[ -n $output ]]; then
        echo "$output"
    fi
    if [[ -n $stderr ]]; then
        echo "[stderr] $stderr"
    fi
    if [[ $expected_rc != '?' && $status -ne $expected_rc ]]; then
        local why=""
        if [[ $status -eq 124 || $status -eq 137 ]]; then
            why=" (timed out after ${PH_TIMEOUT}s)"
        fi
        batslib_print_kv_single_or_multi 8 \
            command "$PULLHELPER $*" \
            "exit code" "$status$why" \
            expected "$expected_rc" \
            stdout "$output" \
            stderr "$stderr" |
            batslib_decorate "pullhelper exited with an unexpected code" |
            fail
        return
    fi
}

###############################################################################
# JSON

# json_get PATH: read JSON from stdin and print the value at PATH, jq-style:
# strings raw, everything else as compact JSON, null for a missing key or
# index. PATH is `.` or a chain of `.key`, `[N]` (negative counts from the
# end), `."any key"` or `["any key"]`, e.g. `.error.code`, `.layers[0].digest`,
# `.annotations."org.opencontainers.image.ref.name"`. Several JSON documents
# on stdin (JSON lines) give one result line each. Implemented in python3 so
# that it does not depend on jq being installed.
json_get() {
    local path=${1:?json_get: missing PATH}
    "$PH_PYTHON" -c '
import json, re, sys

path = sys.argv[1]
TOKEN = re.compile(r"""\.([A-Za-z_$][\w$-]*)|\.?\[(-?\d+)\]|\.?\[("(?:[^"\\]|\\.)*")\]|\.("(?:[^"\\]|\\.)*")""")
steps, i = [], 0
if path != ".":
    while i < len(path):
        m = TOKEN.match(path, i)
        if not m:
            sys.exit("json_get: bad path %r at offset %d" % (path, i))
        key, idx, qk1, qk2 = m.groups()
        if key is not None:
            steps.append(key)
        elif idx is not None:
            steps.append(int(idx))
        else:
            steps.append(json.loads(qk1 or qk2))
        i = m.end()
    if not steps:
        sys.exit("json_get: bad path %r" % path)

def get(v):
    for s in steps:
        if v is None:
            return None
        if isinstance(s, int):
            if not isinstance(v, list):
                sys.exit("json_get: cannot index %s with %d" % (type(v).__name__, s))
            v = v[s] if -len(v) <= s < len(v) else None
        else:
            if not isinstance(v, dict):
                sys.exit("json_get: cannot index %s with %r" % (type(v).__name__, s))
            v = v.get(s)
    return v

text = sys.stdin.read()
dec = json.JSONDecoder()
pos, n = 0, 0
while True:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    if pos >= len(text):
        break
    try:
        doc, pos = dec.raw_decode(text, pos)
    except ValueError as e:
        sys.exit("json_get: invalid JSON input: %s" % e)
    n += 1
    v = get(doc)
    print(v if isinstance(v, str) else json.dumps(v, separators=(",", ":"), ensure_ascii=False))
if n == 0:
    sys.exit("json_get: no JSON input")
' "$path"
}

# json_field PATH: same as json_get.
json_field() {
    json_get "$@"
}

###############################################################################
# Fixtures (deterministic OCI layouts made by tests/imagegen)

# Generator arguments of the named fixtures.
_ph_fixture_args() {
    case "$1" in
        tiny) echo "-layers 1 -layer-size 4096 -compressible 0.5 -seed 1" ;;
        big) echo "-layers 4 -layer-size 26214400 -compressible 0.5 -seed 2" ;;
        many) echo "-layers 32 -layer-size 8192 -compressible 0.5 -seed 3" ;;
        multi) echo "-layers 2 -layer-size 4096 -compressible 0.5 -seed 4 -platforms linux/amd64,linux/arm64,linux/arm/v7" ;;
        *) return 1 ;;
    esac
}

# Identifies the generator: its sources (tests excluded) and the Go version.
_ph_imagegen_stamp() {
    local f
    {
        "$(_ph_go)" env GOVERSION
        for f in "$PH_ROOT"/tests/imagegen/*.go; do
            [[ $f == *_test.go ]] && continue
            echo "${f##*/}"
            cat "$f"
        done
    } | sha256sum | cut -d' ' -f1
}

# build_imagegen: build tests/imagegen to $PH_CACHE/imagegen unless the cached
# binary was built from the same sources.
build_imagegen() {
    local stamp bin="$PH_CACHE/imagegen"
    stamp=$(_ph_imagegen_stamp)
    _ph_lock
    if [[ -x $bin && -f $bin.stamp && $(<"$bin.stamp") == "$stamp" ]]; then
        _ph_unlock
        return 0
    fi
    local tmp="$PH_CACHE/.imagegen.tmp.$$" out
    if ! out=$(cd "$PH_ROOT" && "$(_ph_go)" build -o "$tmp" ./tests/imagegen 2>&1); then
        rm -f "$tmp"
        _ph_unlock
        fail "go build ./tests/imagegen failed: $out"
        return
    fi
    mv -f "$tmp" "$bin"
    echo "$stamp" >"$bin.stamp"
    _ph_unlock
}

# fixture NAME [IMAGEGEN_ARGS...]: make sure the OCI layout
# $PH_CACHE/images/NAME exists (tag `latest`). NAME is one of tiny, big, many,
# multi, or any other name when generator arguments are given. A layout is
# reused while its stamp (generator build + arguments) matches; it is
# generated into a temporary directory and renamed into place.
fixture() {
    local name=${1:?fixture: missing NAME}
    shift
    [[ $name =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || {
        fail "fixture: bad name '$name'"
        return
    }
    local -a args
    if (($#)); then
        args=("$@")
    else
        local a
        a=$(_ph_fixture_args "$name") || {
            fail "fixture: unknown fixture '$name' (tiny, big, many, multi, or give imagegen args)"
            return
        }
        read -ra args <<<"$a"
    fi
    build_imagegen
    local images="$PH_CACHE/images"
    local dir="$images/$name" stampfile="$images/$name.stamp" stamp
    stamp="$(<"$PH_CACHE/imagegen.stamp") ${args[*]}"
    mkdir -p "$images"
    _ph_lock
    if [[ -f $dir/index.json && -f $stampfile && $(<"$stampfile") == "$stamp" ]]; then
        _ph_unlock
        return 0
    fi
    rm -rf "$dir" "$stampfile"
    local tmp out
    tmp=$(mktemp -d "$images/.tmp-$name.XXXXXX")
    if ! out=$("$PH_CACHE/imagegen" -out "$tmp/layout" "${args[@]}" 2>&1); then
        rm -rf "$tmp"
        _ph_unlock
        fail "imagegen ${args[*]} failed: $out"
        return
    fi
    mv "$tmp/layout" "$dir"
    rm -rf "$tmp"
    echo "$stamp" >"$stampfile"
    _ph_unlock
}

# fixture_dir NAME: path of the fixture's OCI layout (call fixture first).
fixture_dir() {
    echo "$PH_CACHE/images/${1:?fixture_dir: missing NAME}"
}

# fixture_ref NAME: containers-transports reference of the fixture.
fixture_ref() {
    echo "oci:$(fixture_dir "$1"):latest"
}

# fixture_digest NAME: digest of the tagged manifest (an image index for
# multi) as recorded in the layout's index.json.
fixture_digest() {
    local idx
    idx="$(fixture_dir "$1")/index.json"
    [[ -f $idx ]] || {
        fail "fixture_digest: $idx missing (call fixture $1 first)"
        return
    }
    json_get '.manifests[0].digest' <"$idx"
}

# fixture_blob NAME DIGEST: path of a blob inside the fixture's layout.
fixture_blob() {
    echo "$(fixture_dir "$1")/blobs/sha256/${2#sha256:}"
}

###############################################################################
# Local registry (docker-registry / distribution 2.8)

# _ph_free_port [IP NETNS]: a TCP port on 127.0.0.1 that was free a moment
# ago. With IP and NETNS (a name under /run/netns), the port was also free on
# IP inside that network namespace (so a registry there can take it while
# nothing on the host's 127.0.0.1 answers on it).
_ph_free_port() {
    local ip=${1:-} netns=${2:-} port attempt
    for attempt in $(seq 1 50); do
        port=$("$PH_PYTHON" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()') || return
        if [[ -z $netns ]] || nsenter --net="/run/netns/$netns" "$PH_PYTHON" -c '
import socket, sys
s = socket.socket()
s.bind((sys.argv[1], int(sys.argv[2])))
s.close()' "$ip" "$port" 2>/dev/null; then
            echo "$port"
            return 0
        fi
    done
    echo "_ph_free_port: no port free on both 127.0.0.1 and $ip in netns $netns" >&2
    return 1
}

# registry_ns_exec CMD ARGS...: run the program CMD (not a shell function) in
# the registry's network namespace ($REGISTRY_NETNS, see start_registry), or
# directly when the registry runs in the host's. Only the network namespace
# changes (nsenter --net, not `ip netns exec`, which remounts /sys).
registry_ns_exec() {
    if [[ -n ${REGISTRY_NETNS:-} ]]; then
        nsenter --net="/run/netns/$REGISTRY_NETNS" "$@"
    else
        "$@"
    fi
}

# _ph_http_status URL [CAFILE]: HTTP status of an unauthenticated GET, or 000
# (made from the registry's network namespace, see registry_ns_exec).
_ph_http_status() {
    local url=$1 ca=${2:-}
    if command -v curl >/dev/null 2>&1; then
        registry_ns_exec curl -s -o /dev/null -w '%{http_code}' --max-time 2 ${ca:+--cacert "$ca"} "$url" || true
    else
        registry_ns_exec "$PH_PYTHON" -c '
import ssl, sys, urllib.request, urllib.error
ctx = ssl.create_default_context(cafile=sys.argv[2]) if len(sys.argv) > 2 else None
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=2, context=ctx)
    print(r.status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception:
    print("000")
' "$url" ${ca:+"$ca"}
    fi
}

# _ph_make_certs DIR [SAN...]: per-run CA and a server certificate for
# 127.0.0.1 and localhost signed by it, plus the subjectAltName entries given
# (e.g. IP:10.213.7.2) and those in $PH_REGISTRY_EXTRA_SANS (comma-separated,
# e.g. DNS:registry.testns.svc.cluster.local,IP:10.213.7.2).
_ph_make_certs() {
    local d=$1 out san
    shift
    local sans="IP:127.0.0.1,DNS:localhost${PH_REGISTRY_EXTRA_SANS:+,$PH_REGISTRY_EXTRA_SANS}"
    for san in "$@"; do
        [[ ,$sans, == *",$san,"* ]] || sans+=",$san"
    done
    cat >"$d/ca.cnf" <<EOF
[req]
distinguished_name = dn
prompt = no
x509_extensions = v3_ca
[dn]
CN = pullhelper test CA $(date +%s)-$$
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
EOF
    cat >"$d/server.ext" <<EOF
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = $sans
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
EOF
    if ! out=$(
        set -e
        umask 077
        openssl req -x509 -config "$d/ca.cnf" -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
            -nodes -keyout "$d/ca.key" -out "$d/ca.crt" -days 7 -sha256 2>&1
        openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
            -keyout "$d/server.key" -out "$d/server.csr" -subj "/CN=127.0.0.1" 2>&1
        openssl x509 -req -in "$d/server.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" \
            -set_serial "0x$(openssl rand -hex 8)" -days 7 -sha256 \
            -extfile "$d/server.ext" -out "$d/server.crt" 2>&1
        chmod 0644 "$d/ca.crt" "$d/server.crt"
    ); then
        fail "generating certificates failed: $out"
        return
    fi
    mkdir -p "$d/certs"
    cp "$d/ca.crt" "$d/certs/ca.crt"
}

# _ph_write_registry_files: config.yml, auth.json, badauth.json, curlrc for
# the current REGISTRY_* settings and port.
_ph_write_registry_files() {
    local tls=$1 auth=$2 d=$REGISTRY_DIR
    {
        cat <<EOF
version: 0.1
log:
  level: info
  formatter: text
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: $REGISTRY_DATA
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: $REGISTRY_HOST
  secret: $(openssl rand -hex 16)
  headers:
    X-Content-Type-Options: [nosniff]
EOF
        if ((tls)); then
            cat <<EOF
  tls:
    certificate: $d/server.crt
    key: $d/server.key
EOF
        fi
        if ((auth)) && [[ -n ${PH_REGISTRY_TOKEN_REALM:-} ]]; then
            cat <<EOF
auth:
  token:
    realm: $PH_REGISTRY_TOKEN_REALM
    service: pullhelper-tests
    issuer: pullhelper-token
    rootcertbundle: $PH_REGISTRY_TOKEN_BUNDLE
EOF
        elif ((auth)); then
            cat <<EOF
auth:
  htpasswd:
    realm: pullhelper-tests
    path: $d/htpasswd
EOF
        fi
        if [[ -n ${PH_REGISTRY_PROXY_URL:-} ]]; then
            cat <<EOF
proxy:
  remoteurl: $PH_REGISTRY_PROXY_URL
EOF
        fi
        cat <<EOF
health:
  storagedriver:
    enabled: false
EOF
    } >"$d/config.yml"

    # Credentials files; the password only passes through pipes.
    local good bad
    good=$({ printf '%s:' "$REGISTRY_USER"; tr -d '\n' <"$d/password"; } | base64 -w0)
    bad=$({ printf '%s:' "$REGISTRY_USER"; echo -n "wrong-"; tr -d '\n' <"$d/password"; } | base64 -w0)
    (
        umask 077
        printf '{"auths":{"%s":{"auth":"%s"}}}\n' "$REGISTRY_HOST" "$good" >"$d/auth.json"
        printf '{"auths":{"%s":{"auth":"%s"}}}\n' "$REGISTRY_HOST" "$bad" >"$d/badauth.json"
        { printf 'user = "%s:' "$REGISTRY_USER"; tr -d '\n' <"$d/password"; printf '"\n'; } >"$d/curlrc"
    )
}

# _ph_pid_alive PID: the process exists and is not a zombie.
_ph_pid_alive() {
    local state
    state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [[ -n $state && $state != Z && $state != X ]]
}

# _ph_stop_pid PID NAME [SECONDS]: SIGTERM, wait (bounded, default 10 s)
# until PID is gone, then SIGKILL its process group (or PID) and say so.
_ph_stop_pid() {
    local pid=$1 name=$2 deadline=$((SECONDS + ${3:-10}))
    kill -TERM "$pid" 2>/dev/null || true
    while _ph_pid_alive "$pid" && ((SECONDS < deadline)); do
        sleep 0.05
    done
    if _ph_pid_alive "$pid"; then
        echo "# $name (pid $pid) ignored SIGTERM; killing its process group" >&2
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
}

# _ph_pid_is_ours PID: PID is a live (non-zombie) process started by
# start_registry (timeout wrapping docker-registry with our config).
_ph_pid_is_ours() {
    local pid=$1 state
    [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 1
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
    [[ $state != Z && $state != X ]] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "docker-registry serve $REGISTRY_DIR/config.yml"
}

# start_registry [--no-tls] [--no-auth]
#
# Starts docker-registry on a free port of 127.0.0.1 with TLS (per-run CA)
# and htpasswd auth (random user and password) unless disabled, and waits for
# it to answer GET /v2/.
#
# Environment (read at start; unset means the defaults above):
#   PH_REGISTRY_NETNS=NAME  run the registry in the network namespace
#                           /run/netns/NAME (nsenter --net); its readiness
#                           check, push_fixture, registry_manifest and
#                           registry_curl then run there too
#   PH_REGISTRY_LISTEN=IP   listen on IP instead of 127.0.0.1 (REGISTRY_HOST
#                           becomes IP:PORT; the certificate gets IP:IP). The
#                           port chosen is also free on the host's 127.0.0.1.
#   PH_REGISTRY_PORT=N      listen on port N instead of a free one (e.g. 80
#                           in a namespace of the test's own)
#   PH_REGISTRY_EXTRA_SANS  more subjectAltName entries for the server
#                           certificate, e.g. DNS:registry.ns.svc.cluster.local
#   PH_REGISTRY_EXTRA_USERS more htpasswd users, space-separated NAME=FILE
#                           pairs: NAME's password is the first line of FILE
#                           (read by htpasswd -i on stdin, never in argv),
#                           e.g. serviceaccount=$BATS_FILE_TMPDIR/sa-token
#   PH_REGISTRY_PROXY_URL   make it a pull-through cache of this upstream
#                           (distribution's proxy.remoteurl, e.g.
#                           https://127.0.0.1:PORT); it then refuses pushes.
#                           Start the upstream with --no-auth: distribution
#                           2.8's proxy sends its proxy.username/password
#                           only to token-auth (Bearer realm) upstreams,
#                           never to an htpasswd (Basic) one
#   PH_REGISTRY_TOKEN_REALM token auth instead of htpasswd: the registry's
#                           bearer realm (a tests/tokenserver URL; service
#                           pullhelper-tests, issuer pullhelper-token), with
#   PH_REGISTRY_TOKEN_BUNDLE the token signer's certificate (rootcertbundle)
#   PH_REGISTRY_PROXY_CA    CA file the cache trusts for the upstream
#                           (SSL_CERT_FILE of docker-registry: its proxy
#                           uses the system pool, which this replaces)
# Exports:
#   REGISTRY_HOST        127.0.0.1:PORT (IP:PORT) REGISTRY_PORT  PORT
#   REGISTRY_URL         https://127.0.0.1:PORT (http:// with --no-tls)
#   REGISTRY_NETNS       the namespace name, or empty
#   REGISTRY_LISTEN      the listen address (127.0.0.1 by default)
#   REGISTRY_TLS         1 or 0                  REGISTRY_AUTH   1 or 0
#   REGISTRY_DIR         everything below lives here
#   REGISTRY_CA          CA certificate (PEM)
#   REGISTRY_CERT_DIR    dir holding only ca.crt (skopeo/c-image --cert-dir)
#   REGISTRY_USER        user name (the password is in $REGISTRY_DIR/password)
#   REGISTRY_AUTHFILE    containers auth.json with the right password (0600)
#   REGISTRY_BADAUTHFILE same user, wrong password (0600)
#   REGISTRY_LOG         registry stdout+stderr
#   REGISTRY_DATA        filesystem storage root
#   REGISTRY_PID         pid to stop (a `timeout` wrapper; own process group)
# With --no-tls the CA files still exist but the registry speaks plain HTTP;
# with --no-auth the auth files still exist but are not checked.
start_registry() {
    local tls=1 auth=1
    while (($#)); do
        case "$1" in
            --no-tls) tls=0 ;;
            --no-auth) auth=0 ;;
            *)
                fail "start_registry: unknown option $1"
                return
                ;;
        esac
        shift
    done
    if [[ -n ${REGISTRY_PID:-} && -n ${REGISTRY_DIR:-} ]] && _ph_pid_is_ours "$REGISTRY_PID"; then
        fail "start_registry: a registry is already running (pid $REGISTRY_PID); stop_registry first"
        return
    fi
    local cmd
    for cmd in docker-registry openssl htpasswd "$PH_PYTHON" timeout; do
        command -v "$cmd" >/dev/null || {
            fail "start_registry: $cmd not installed"
            return
        }
    done
    local netns=${PH_REGISTRY_NETNS:-} listen=${PH_REGISTRY_LISTEN:-127.0.0.1}
    local -a nsx=()
    if [[ -n $netns ]]; then
        command -v nsenter >/dev/null || {
            fail "start_registry: nsenter not installed (PH_REGISTRY_NETNS=$netns)"
            return
        }
        [[ -e /run/netns/$netns ]] || {
            fail "start_registry: no network namespace /run/netns/$netns (PH_REGISTRY_NETNS)"
            return
        }
        nsx=(nsenter "--net=/run/netns/$netns")
    fi
    REGISTRY_NETNS=$netns
    REGISTRY_LISTEN=$listen
    export REGISTRY_NETNS REGISTRY_LISTEN

    local parent=${BATS_FILE_TMPDIR:-${TMPDIR:-/tmp}}
    REGISTRY_DIR=$(mktemp -d "$parent/registry.XXXXXX")
    chmod 0700 "$REGISTRY_DIR"
    REGISTRY_DATA="$REGISTRY_DIR/data"
    REGISTRY_LOG="$REGISTRY_DIR/registry.log"
    REGISTRY_CA="$REGISTRY_DIR/ca.crt"
    REGISTRY_CERT_DIR="$REGISTRY_DIR/certs"
    REGISTRY_AUTHFILE="$REGISTRY_DIR/auth.json"
    REGISTRY_BADAUTHFILE="$REGISTRY_DIR/badauth.json"
    REGISTRY_TLS=$tls
    REGISTRY_AUTH=$auth
    export REGISTRY_DIR REGISTRY_DATA REGISTRY_LOG REGISTRY_CA REGISTRY_CERT_DIR \
        REGISTRY_AUTHFILE REGISTRY_BADAUTHFILE REGISTRY_TLS REGISTRY_AUTH
    mkdir -p "$REGISTRY_DATA"

    # Certificates are made in every mode so that REGISTRY_CA always exists.
    local -a sans=()
    [[ $listen == 127.0.0.1 ]] || sans=("IP:$listen")
    _ph_make_certs "$REGISTRY_DIR" "${sans[@]}" || return

    REGISTRY_USER="phuser$(openssl rand -hex 4)"
    export REGISTRY_USER
    (
        umask 077
        openssl rand -hex 24 >"$REGISTRY_DIR/password"
    )
    if ! htpasswd -iBn "$REGISTRY_USER" <"$REGISTRY_DIR/password" 2>"$REGISTRY_DIR/htpasswd.err" |
        grep -v '^$' >"$REGISTRY_DIR/htpasswd"; then
        fail "htpasswd failed: $(cat "$REGISTRY_DIR/htpasswd.err")"
        return
    fi
    local extra_user
    for extra_user in ${PH_REGISTRY_EXTRA_USERS:-}; do
        if [[ $extra_user != ?*=?* || ! -r ${extra_user#*=} ]]; then
            fail "start_registry: PH_REGISTRY_EXTRA_USERS: '$extra_user' is not NAME=READABLE_FILE"
            return
        fi
        if ! htpasswd -iBn "${extra_user%%=*}" <"${extra_user#*=}" 2>"$REGISTRY_DIR/htpasswd.err" |
            grep -v '^$' >>"$REGISTRY_DIR/htpasswd"; then
            fail "htpasswd failed for extra user ${extra_user%%=*}: $(cat "$REGISTRY_DIR/htpasswd.err")"
            return
        fi
    done

    : >>"$REGISTRY_LOG"
    local scheme=https
    ((tls)) || scheme=http
    local attempt port pid deadline code logstart
    for attempt in 1 2 3 4 5; do
        if [[ -n ${PH_REGISTRY_PORT:-} ]]; then
            port=$PH_REGISTRY_PORT
        elif [[ -n $netns ]]; then
            port=$(_ph_free_port "$listen" "$netns")
        else
            port=$(_ph_free_port)
        fi || {
            fail "could not find a free port"
            return
        }
        REGISTRY_PORT=$port
        REGISTRY_HOST="$listen:$port"
        REGISTRY_URL="$scheme://$REGISTRY_HOST"
        export REGISTRY_PORT REGISTRY_HOST REGISTRY_URL
        _ph_write_registry_files "$tls" "$auth"
        logstart=$(($(wc -l <"$REGISTRY_LOG") + 1))
        echo "--- start attempt $attempt on $REGISTRY_HOST ---" >>"$REGISTRY_LOG"

        # env -i: distribution treats every REGISTRY_* environment variable
        # as a config override (REGISTRY_LOG, REGISTRY_AUTH, ... would break
        # it). timeout bounds its life and puts it in its own process group;
        # the subshell makes it an orphan so nobody here has to reap it; fd 3
        # is closed so that bats does not wait for it. nsx (PH_REGISTRY_NETNS)
        # is an nsenter that execs env, so the pid stays timeout's child.
        (
            cd "$REGISTRY_DIR" || exit 1
            timeout --kill-after=10 "$PH_REGISTRY_LIFETIME" "${nsx[@]}" \
                env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME="$REGISTRY_DIR" \
                ${PH_REGISTRY_PROXY_CA:+SSL_CERT_FILE="$PH_REGISTRY_PROXY_CA"} \
                docker-registry serve "$REGISTRY_DIR/config.yml" \
                </dev/null >>"$REGISTRY_LOG" 2>&1 3>&- &
            echo $! >"$REGISTRY_DIR/registry.pid"
        )
        pid=$(<"$REGISTRY_DIR/registry.pid")
        REGISTRY_PID=$pid
        export REGISTRY_PID

        deadline=$((SECONDS + PH_REGISTRY_WAIT))
        while :; do
            if ! _ph_pid_is_ours "$pid"; then
                if _ph_pid_alive "$pid" && ((SECONDS < deadline)); then
                    # Forked but not yet exec'd: its cmdline is still the
                    # subshell's (a busy machine shows it for a while).
                    sleep 0.05
                    continue
                fi
                rm -f "$REGISTRY_DIR/registry.pid"
                if tail -n "+$logstart" "$REGISTRY_LOG" | grep -q 'address already in use'; then
                    continue 2
                fi
                fail "docker-registry exited during startup; log tail:
$(tail -n 30 "$REGISTRY_LOG")"
                return
            fi
            # Ready once it logged its listener and answers /v2/.
            if grep -q "listening on $REGISTRY_HOST" "$REGISTRY_LOG"; then
                code=$(_ph_http_status "$REGISTRY_URL/v2/" "$REGISTRY_CA")
                if [[ $code == 200 || $code == 401 ]]; then
                    return 0
                fi
            fi
            if ((SECONDS >= deadline)); then
                stop_registry
                fail "docker-registry did not answer on $REGISTRY_URL/v2/ within ${PH_REGISTRY_WAIT}s; log tail:
$(tail -n 30 "$REGISTRY_LOG")"
                return
            fi
            sleep 0.1
        done
    done
    fail "start_registry: no free port after 5 attempts; log tail:
$(tail -n 30 "$REGISTRY_LOG")"
}

# stop_registry: stop the registry started by start_registry (TERM, wait up
# to 10 s, then KILL its process group). Idempotent; keeps REGISTRY_DIR (log,
# storage) so that tests can still look at it.
stop_registry() {
    [[ -n ${REGISTRY_DIR:-} && -f $REGISTRY_DIR/registry.pid ]] || return 0
    local pid
    pid=$(<"$REGISTRY_DIR/registry.pid")
    if _ph_pid_is_ours "$pid"; then
        # timeout forwards TERM to docker-registry and exits with it. (While
        # exiting, /proc/PID/cmdline reads empty: _ph_stop_pid waits on liveness.)
        _ph_stop_pid "$pid" docker-registry
    fi
    rm -f "$REGISTRY_DIR/registry.pid"
}

# registry_log_tail [N]: last N (default 40) lines of the registry log.
registry_log_tail() {
    tail -n "${1:-40}" "$REGISTRY_LOG"
}

###############################################################################
# Talking to the registry

# registry_skopeo_opts [src|dest|-] [--anon|--bad-creds]: skopeo options to
# reach the registry: cert dir (or --tls-verify=false without TLS) and auth
# file, prefixed for copy (src/dest) or unprefixed (- or nothing) for
# inspect and friends. Paths contain no spaces, so $(...) can be unquoted.
registry_skopeo_opts() {
    local p=${1:--} creds=${2:-}
    [[ $p == - ]] && p="" || p="$p-"
    if ((REGISTRY_TLS)); then
        echo -n "--${p}cert-dir $REGISTRY_CERT_DIR "
    else
        echo -n "--${p}tls-verify=false "
    fi
    case "$creds" in
        --anon) echo "--${p}no-creds" ;;
        --bad-creds) echo "--${p}authfile $REGISTRY_BADAUTHFILE" ;;
        '') echo "--${p}authfile $REGISTRY_AUTHFILE" ;;
        *) echo "registry_skopeo_opts: bad option $creds" >&2; return 1 ;;
    esac
}

# _ph_skopeo_policy: path of a private accept-anything policy.json.
_ph_skopeo_policy() {
    local policy="$PH_CACHE/policy.json"
    if [[ ! -f $policy ]]; then
        mkdir -p "$PH_CACHE"
        echo '{"default":[{"type":"insecureAcceptAnything"}]}' >"$policy.$$"
        mv -f "$policy.$$" "$policy"
    fi
    echo "$policy"
}

# ph_skopeo ARGS...: skopeo with a private accept-anything policy and a timeout.
ph_skopeo() {
    local policy
    policy=$(_ph_skopeo_policy)
    timeout --kill-after=10 "$PH_SKOPEO_TIMEOUT" skopeo --policy "$policy" "$@"
}

# registry_skopeo ARGS...: ph_skopeo in the registry's network namespace
# (registry_ns_exec), for commands that talk to $REGISTRY_HOST.
registry_skopeo() {
    local policy
    policy=$(_ph_skopeo_policy)
    registry_ns_exec timeout --kill-after=10 "$PH_SKOPEO_TIMEOUT" skopeo --policy "$policy" "$@"
}

_ph_skopeo_supports_preserve_digests() {
    if [[ -z ${_PH_PRESERVE_DIGESTS+x} ]]; then
        if skopeo copy --help 2>/dev/null | grep -q -- '--preserve-digests'; then
            _PH_PRESERVE_DIGESTS=1
        else
            _PH_PRESERVE_DIGESTS=0
        fi
    fi
    ((_PH_PRESERVE_DIGESTS))
}

# push_fixture NAME [REPO[:TAG]]: generate the fixture if needed and copy it
# (all platforms, digests preserved) to $REGISTRY_HOST/REPO:TAG (default
# fixtures/NAME:latest).
push_fixture() {
    local name=${1:?push_fixture: missing NAME} ref=${2:-fixtures/$1}
    [[ $ref == *:* || $ref == *@* ]] || ref+=":latest"
    fixture "$name"
    local -a opts=(--all)
    _ph_skopeo_supports_preserve_digests && opts+=(--preserve-digests)
    local out
    # shellcheck disable=SC2046
    if ! out=$(registry_skopeo copy --quiet "${opts[@]}" $(registry_skopeo_opts dest) \
        "$(fixture_ref "$name")" "docker://$REGISTRY_HOST/$ref" 2>&1); then
        fail "push_fixture $name $ref: skopeo copy failed: $out
registry log tail:
$(registry_log_tail 20)"
        return
    fi
}

# push_docker_fixtures: fixtures/v2s2 (tiny as a Docker schema 2 image) and
# fixtures/multiv2 (multi as a Docker manifest list of Docker schema 2
# instances), as skopeo copy --format v2s2 pushes them.
push_docker_fixtures() {
    local list=application/vnd.docker.distribution.manifest.list.v2+json
    local v2s2=application/vnd.docker.distribution.manifest.v2+json
    # shellcheck disable=SC2046
    registry_skopeo copy --quiet --format v2s2 $(registry_skopeo_opts dest) \
        "$(fixture_ref tiny)" "docker://$REGISTRY_HOST/fixtures/v2s2:latest" || fail "pushing fixtures/v2s2"
    # shellcheck disable=SC2046
    registry_skopeo copy --quiet --all --format v2s2 $(registry_skopeo_opts dest) \
        "$(fixture_ref multi)" "docker://$REGISTRY_HOST/fixtures/multiv2:latest" || fail "pushing fixtures/multiv2"
    assert_equal "$(registry_manifest fixtures/v2s2:latest | json_get .mediaType)" "$v2s2"
    assert_equal "$(registry_manifest fixtures/multiv2:latest | json_get .mediaType)" "$list"
}

# push_docker_config_fixture: fixtures/dockercfg:latest, a Docker schema 2
# image whose config is as docker build writes one (container_config,
# docker_version, a Docker config block: fields an OCI config has not, so
# containers/image re-encodes it when it stores the image as OCI), pushed
# with its digests as they are.
push_docker_config_fixture() {
    push_layout_fixture dockercfg
    assert_equal "$(registry_manifest fixtures/dockercfg:latest | json_get .mediaType)" application/vnd.docker.distribution.manifest.v2+json
}

# push_layout_fixture KIND: fixtures/KIND:latest, an image of a shape the
# generated fixtures have not (tests/fixture-layouts.py: dockercfg,
# uncompressed, duplayers), pushed with its digests as they are.
push_layout_fixture() {
    local kind=${1:?push_layout_fixture: missing KIND} dir="$BATS_FILE_TMPDIR/layout-$1"
    rm -rf "$dir"
    "$PH_PYTHON" "$PH_TESTS_DIR/fixture-layouts.py" "$kind" "$dir" || fail "writing the $kind layout"
    # shellcheck disable=SC2046
    registry_skopeo copy --quiet --preserve-digests $(registry_skopeo_opts dest) \
        "dir:$dir" "docker://$REGISTRY_HOST/fixtures/$kind:latest" || fail "pushing fixtures/$kind"
}

# registry_manifest REPO:TAG|REPO@DIGEST: the raw manifest bytes the registry
# serves (authenticated).
registry_manifest() {
    local ref=${1:?registry_manifest: missing REPO:TAG}
    # shellcheck disable=SC2046
    registry_skopeo inspect --raw $(registry_skopeo_opts) "docker://$REGISTRY_HOST/$ref"
}

# registry_digest REPO:TAG: digest (sha256:...) of the manifest the registry
# serves for the reference, i.e. sha256 of the raw bytes; for a multi-platform
# image that is the index digest, not a platform image's.
registry_digest() {
    local ref=${1:?registry_digest: missing REPO:TAG} tmp sum
    tmp=$(mktemp "${BATS_TEST_TMPDIR:-${TMPDIR:-/tmp}}/manifest.XXXXXX")
    if ! registry_manifest "$ref" >"$tmp" 2>"$tmp.err"; then
        fail "registry_digest $ref: skopeo inspect --raw failed: $(cat "$tmp.err")"
        rm -f "$tmp" "$tmp.err"
        return
    fi
    sum=$(sha256sum <"$tmp" | cut -d' ' -f1)
    rm -f "$tmp" "$tmp.err"
    echo "sha256:$sum"
}

# index_instance INDEX_JSON OS/ARCH[/VARIANT]: the digest of the one
# manifest of the index whose platform is exactly that (fails otherwise).
index_instance() {
    "$PH_PYTHON" -c '
import json, sys
idx, want = json.loads(sys.argv[1]), sys.argv[2].split("/")
def key(p):
    return [p.get("os"), p.get("architecture")] + ([p["variant"]] if p.get("variant") else [])
m = [m["digest"] for m in idx["manifests"] if key(m.get("platform") or {}) == want]
if len(m) != 1:
    sys.exit("index_instance: %d manifests for %s" % (len(m), sys.argv[2]))
print(m[0])' "$1" "$2"
}

# registry_curl [--anon] CURL_ARGS... PATH: curl $REGISTRY_URL$PATH with the
# registry's CA and (unless --anon) its credentials from a config file, from
# the registry's network namespace (registry_ns_exec).
# PATH is the last argument and starts with /.
registry_curl() {
    local anon=0
    if [[ ${1:-} == --anon ]]; then
        anon=1
        shift
    fi
    local path=${*: -1}
    local -a args=("${@:1:$#-1}")
    [[ $path == /* ]] || {
        echo "registry_curl: last argument must be a path starting with /" >&2
        return 2
    }
    ((REGISTRY_TLS)) && args+=(--cacert "$REGISTRY_CA")
    ((anon)) || args+=(-K "$REGISTRY_DIR/curlrc")
    registry_ns_exec curl -sS --max-time 60 "${args[@]}" "$REGISTRY_URL$path"
}

# registry_blob_path DIGEST: the blob's data file in the registry storage.
registry_blob_path() {
    local hex=${1#sha256:}
    echo "$REGISTRY_DATA/docker/registry/v2/blobs/sha256/${hex:0:2}/$hex/data"
}

# corrupt_blob DIGEST: invert every byte of the blob's data file in the
# registry storage (same length, every byte different), so clients see a
# digest mismatch (or a gzip error first if they decompress while reading).
# Blobs are shared by all repositories of the registry. A backup is kept for
# restore_blob.
corrupt_blob() {
    local digest=${1:?corrupt_blob: missing DIGEST} hex f
    hex=${digest#sha256:}
    [[ $hex =~ ^[0-9a-f]{64}$ ]] || {
        fail "corrupt_blob: bad digest '$digest'"
        return
    }
    f=$(registry_blob_path "$digest")
    [[ -f $f ]] || {
        fail "corrupt_blob: $digest not in registry storage ($f)"
        return
    }
    mkdir -p "$REGISTRY_DIR/blob-backup"
    [[ -f $REGISTRY_DIR/blob-backup/$hex ]] || cp "$f" "$REGISTRY_DIR/blob-backup/$hex"
    "$PH_PYTHON" -c '
import sys
path = sys.argv[1]
with open(path, "r+b") as f:
    data = f.read()
    f.seek(0)
    f.write(data.translate(bytes(range(255, -1, -1))))
' "$f"
}

# restore_blob DIGEST: undo corrupt_blob.
restore_blob() {
    local hex=${1#sha256:}
    local b="$REGISTRY_DIR/blob-backup/$hex"
    [[ -f $b ]] || {
        fail "restore_blob: no backup of $1"
        return
    }
    cat "$b" >"$(registry_blob_path "$1")"
    rm -f "$b"
}

# registry_auth_alias DST HOST[:PORT]...: write the containers auth.json DST
# (0600) holding the registry's credential (the auth field of
# $REGISTRY_AUTHFILE for $REGISTRY_HOST) under each key given, e.g. the DNS
# name a test pulls by: keys must match the image reference's host:port
# exactly. The secret is copied by python, never printed or put in argv.
registry_auth_alias() {
    local dst=${1:?registry_auth_alias: missing DST}
    shift
    (($#)) || {
        echo "registry_auth_alias: no key given" >&2
        return 2
    }
    (
        umask 077
        "$PH_PYTHON" -c '
import json, sys
src, key_from, dst = sys.argv[1:4]
with open(src) as f:
    auth = json.load(f)["auths"][key_from]["auth"]
with open(dst, "w") as f:
    json.dump({"auths": {k: {"auth": auth} for k in sys.argv[4:]}}, f)
' "$REGISTRY_AUTHFILE" "$REGISTRY_HOST" "$dst" "$@"
    )
}

###############################################################################
# Several registries in one file

# Every variable start_registry sets.
_PH_REGISTRY_VARS=(REGISTRY_DIR REGISTRY_DATA REGISTRY_LOG REGISTRY_CA REGISTRY_CERT_DIR
    REGISTRY_AUTHFILE REGISTRY_BADAUTHFILE REGISTRY_TLS REGISTRY_AUTH REGISTRY_USER
    REGISTRY_PORT REGISTRY_HOST REGISTRY_URL REGISTRY_PID REGISTRY_NETNS REGISTRY_LISTEN)

# registry_save SLOT: save the current REGISTRY_* variables under SLOT (a
# file in $BATS_FILE_TMPDIR, so setup_file can save and tests restore).
registry_save() {
    local slot=${1:?registry_save: missing SLOT} v
    [[ $slot =~ ^[A-Za-z0-9_-]+$ ]] || {
        fail "registry_save: bad slot name '$slot'"
        return
    }
    for v in "${_PH_REGISTRY_VARS[@]}"; do
        printf 'export %s=%q\n' "$v" "${!v-}"
    done >"${BATS_FILE_TMPDIR:?}/registry-$slot.env"
}

# registry_restore SLOT: make the registry saved under SLOT the current one
# (push_fixture, registry_curl, stop_registry, ... act on it).
registry_restore() {
    local f="${BATS_FILE_TMPDIR:?}/registry-${1:?registry_restore: missing SLOT}.env"
    [[ -f $f ]] || {
        fail "registry_restore: nothing saved under '$1'"
        return
    }
    # shellcheck disable=SC1090
    source "$f"
}

# registry_clear: forget the current registry (without stopping it), so that
# start_registry can start another one; save it first.
registry_clear() {
    unset "${_PH_REGISTRY_VARS[@]}"
}

###############################################################################
# Fault injection: tests/tarpit.py, a TCP proxy in front of the registry

# start_tarpit STALL_BYTES [TARPIT_ARGS...]: start tests/tarpit.py on a free
# port of 127.0.0.1, forwarding to $REGISTRY_HOST; after STALL_BYTES
# server->client bytes on a connection it stops forwarding the server's data
# (-1: never; further arguments, e.g. --rate BYTES_PER_SEC, are passed on).
# Waits (bounded) until it listens. Exports:
#   TARPIT_HOST      127.0.0.1:PORT (the registry's certificate is for
#                    127.0.0.1, so it verifies with $REGISTRY_CERT_DIR)
#   TARPIT_PID       pid of the proxy
#   TARPIT_DIR       its directory (port file, log)
#   TARPIT_LOG       connection log
#   TARPIT_AUTHFILE  auth.json with the registry's credential keyed by
#                    $TARPIT_HOST (0600; the secret is copied by python, never
#                    printed)
# Only one tarpit at a time per test process; stop_tarpit stops it.
start_tarpit() {
    local stall=${1:?start_tarpit: missing STALL_BYTES}
    shift
    if [[ -n ${TARPIT_PID:-} ]] && _ph_tarpit_is_ours "$TARPIT_PID"; then
        fail "start_tarpit: a tarpit is already running (pid $TARPIT_PID); stop_tarpit first"
        return
    fi
    [[ -n ${REGISTRY_HOST:-} ]] || {
        fail "start_tarpit: no registry (start_registry first)"
        return
    }
    local parent=${BATS_TEST_TMPDIR:-${BATS_FILE_TMPDIR:-${TMPDIR:-/tmp}}}
    TARPIT_DIR=$(mktemp -d "$parent/tarpit.XXXXXX")
    TARPIT_LOG="$TARPIT_DIR/tarpit.log"
    : >"$TARPIT_LOG"
    (
        "$PH_PYTHON" "$PH_TESTS_DIR/tarpit.py" --listen-port-file "$TARPIT_DIR/port" \
            --target "$REGISTRY_HOST" --stall-after "$stall" --log "$TARPIT_LOG" \
            --lifetime "${PH_TARPIT_LIFETIME:-600}" "$@" \
            </dev/null >>"$TARPIT_DIR/tarpit.out" 2>&1 3>&- &
        echo $! >"$TARPIT_DIR/pid"
    )
    TARPIT_PID=$(<"$TARPIT_DIR/pid")
    export TARPIT_DIR TARPIT_LOG TARPIT_PID
    local deadline=$((SECONDS + 10))
    until [[ -s $TARPIT_DIR/port ]]; do
        if ! _ph_pid_alive "$TARPIT_PID"; then
            fail "tarpit.py exited during startup: $(cat "$TARPIT_DIR/tarpit.out")"
            return
        fi
        if ((SECONDS >= deadline)); then
            stop_tarpit
            fail "tarpit.py did not write its port within 10s"
            return
        fi
        sleep 0.05
    done
    TARPIT_HOST="127.0.0.1:$(<"$TARPIT_DIR/port")"
    TARPIT_AUTHFILE="$TARPIT_DIR/auth.json"
    export TARPIT_HOST TARPIT_AUTHFILE
    registry_auth_alias "$TARPIT_AUTHFILE" "$TARPIT_HOST" || {
        stop_tarpit
        fail "start_tarpit: could not write $TARPIT_DIR/auth.json"
        return
    }
}

# _ph_tarpit_is_ours PID: PID is a live tarpit.py started by start_tarpit.
_ph_tarpit_is_ours() {
    local pid=$1
    [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline && -n ${TARPIT_DIR:-} ]] || return 1
    _ph_pid_alive "$pid" || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "tarpit.py --listen-port-file $TARPIT_DIR/port"
}

# stop_tarpit: stop the proxy started by start_tarpit (TERM, then KILL after
# 5 s). Idempotent; keeps TARPIT_DIR (the log) for inspection.
stop_tarpit() {
    [[ -n ${TARPIT_PID:-} ]] || return 0
    if _ph_tarpit_is_ours "$TARPIT_PID"; then
        _ph_stop_pid "$TARPIT_PID" tarpit.py 5
    fi
    unset TARPIT_PID
    return 0
}

###############################################################################
# More assertions and helpers for the pullhelper system tests

# push_fixture_args NAME REF IMAGEGEN_ARGS...: like push_fixture, for a
# fixture that is not one of the named ones (generated with the given
# arguments).
push_fixture_args() {
    local name=${1:?push_fixture_args: missing NAME} ref=${2:?push_fixture_args: missing REF}
    shift 2
    [[ $ref == *:* || $ref == *@* ]] || ref+=":latest"
    fixture "$name" "$@" || return
    local -a opts=(--all)
    _ph_skopeo_supports_preserve_digests && opts+=(--preserve-digests)
    local out
    # shellcheck disable=SC2046
    if ! out=$(registry_skopeo copy --quiet "${opts[@]}" $(registry_skopeo_opts dest) \
        "$(fixture_ref "$name")" "docker://$REGISTRY_HOST/$ref" 2>&1); then
        fail "push_fixture_args $name $ref: skopeo copy failed: $out"
        return
    fi
}

# assert_json_error CODE: the last run_pullhelper printed exactly one line on
# stdout, a JSON object {"error":{"code":CODE,"message":...}} with a
# non-empty message (printed as $ph_error_message for further checks).
assert_json_error() {
    local want=${1:?assert_json_error: missing CODE}
    [[ ${#lines[@]} -eq 1 ]] || {
        fail "stdout is not exactly one line (${#lines[@]} lines): $output"
        return 1
    }
    local got
    got=$("$PH_PYTHON" -c '
import json, sys
doc = json.loads(sys.argv[1])
if not isinstance(doc, dict) or set(doc) != {"error"}:
    sys.exit("not an {\"error\": ...} object: %r" % sys.argv[1])
e = doc["error"]
if not isinstance(e, dict) or not isinstance(e.get("message"), str) or not e["message"]:
    sys.exit("error has no message: %r" % sys.argv[1])
print(e.get("code"))
' "$output") || { fail "stdout is not a JSON error object: $output"; return 1; }
    [[ $got == "$want" ]] || { fail "error code is '$got', want '$want'; stdout: $output"; return 1; }
    ph_error_message=$(json_get .error.message <<<"$output")
}

# assert_json_result: the last run_pullhelper printed exactly one line, a
# JSON object without an "error" key.
assert_json_result() {
    [[ ${#lines[@]} -eq 1 ]] || {
        fail "stdout is not exactly one line (${#lines[@]} lines): $output"
        return 1
    }
    "$PH_PYTHON" -c '
import json, sys
doc = json.loads(sys.argv[1])
assert isinstance(doc, dict) and "error" not in doc, doc
' "$output" || { fail "stdout is not a JSON result object: $output"; return 1; }
}

# assert_no_staging DIR: no .pullhelper-staging-* entry is left in DIR.
assert_no_staging() {
    local dir=${1:?assert_no_staging: missing DIR} left
    left=$(find "$dir" -maxdepth 1 -name '.pullhelper-staging-*' 2>/dev/null)
    [[ -z $left ]] || { fail "staging left behind in $dir: $left"; return 1; }
}

# assert_secret_absent TEXT...: none of the texts (or files, with -f) contains
# the registry password; never prints the password.
assert_secret_absent() {
    local pw f
    pw=$(tr -d '\n' <"$REGISTRY_DIR/password")
    [[ -n $pw ]] || { fail "assert_secret_absent: empty password file"; return 1; }
    if [[ ${1:-} == -f ]]; then
        shift
        for f in "$@"; do
            if grep -qF -- "$pw" "$f"; then
                fail "the registry password appears in $f"
                return 1
            fi
            # Also its base64 auth field.
            if grep -qF -- "$(_ph_auth_field)" "$f"; then
                fail "the registry auth field appears in $f"
                return 1
            fi
        done
    else
        for f in "$@"; do
            [[ $f != *"$pw"* ]] || { fail "the registry password appears in the output"; return 1; }
            [[ $f != *"$(_ph_auth_field)"* ]] || { fail "the registry auth field appears in the output"; return 1; }
        done
    fi
}

# _ph_auth_field: the base64 auth field of $REGISTRY_AUTHFILE (for absence
# checks only; never print it).
_ph_auth_field() {
    "$PH_PYTHON" -c '
import json, sys
print(json.load(open(sys.argv[1]))["auths"][sys.argv[2]]["auth"])' "$REGISTRY_AUTHFILE" "$REGISTRY_HOST"
}

# registry_request_count: number of HTTP requests the registry has logged
# (access-log lines) so far.
registry_request_count() {
    grep -cE '"(GET|HEAD|POST|PUT|PATCH|DELETE) /' "$REGISTRY_LOG" || true
}

# wait_for_file_match FILE REGEX SECONDS: poll until a line of FILE matches
# REGEX (grep -E), at most SECONDS; fails on timeout.
wait_for_file_match() {
    local file=$1 re=$2 secs=${3:-30}
    local deadline=$((SECONDS + secs))
    until grep -qE -- "$re" "$file" 2>/dev/null; do
        if ((SECONDS >= deadline)); then
            fail "no line matching /$re/ in $file after ${secs}s"
            return
        fi
        sleep 0.05
    done
}

# registry_log_barrier: make one request of our own and wait (bounded) until
# its access-log line is written, so that the log holds every line of the
# requests that finished before; then print the log's line count. Use it as
# the "before" of a "this sent nothing to the registry" check.
registry_log_barrier() {
    local tag
    tag="barrier-$(openssl rand -hex 6)"
    registry_curl -o /dev/null "/v2/?$tag=1" || {
        fail "registry_log_barrier: request failed"
        return
    }
    wait_for_file_match "$REGISTRY_LOG" "GET /v2/\?$tag=1 " 10 || return
    wc -l <"$REGISTRY_LOG"
}

# ph_test_setup: the common per-test setup of the suites against one
# registry: PH_OPTS (its CA and the right credentials) and an empty $OUT.
ph_test_setup() {
    PH_OPTS=(--authfile "$REGISTRY_AUTHFILE" --cert-dir "$REGISTRY_CERT_DIR")
    OUT=$BATS_TEST_TMPDIR/out
    mkdir -p "$OUT"
}

###############################################################################
# containerd (Debian's 1.6) and crictl, started by a test below its own
# directory: tests/080-credentials.bats, tests/100-mirrors.bats

# ctrd_require: skip unless containerd and crictl are available; sets CRICTL.
ctrd_require() {
    [[ $(id -u) == 0 ]] || skip "containerd needs root"
    command -v containerd >/dev/null ||
        skip "containerd not installed (Debian 12: apt-get install containerd, 1.6.20)"
    CRICTL=$(command -v crictl || true)
    [[ -n $CRICTL ]] || CRICTL="$PH_CACHE/bin/crictl"
    [[ -x $CRICTL ]] ||
        skip "crictl not found in PATH or $PH_CACHE/bin (GOBIN=$PH_CACHE/bin GOFLAGS= CGO_ENABLED=0 go install sigs.k8s.io/cri-tools/cmd/crictl@v1.34.0)"
}

# The containerd 2.x that `make deps` builds (Makefile CONTAINERD2_VERSION;
# keep the two in step): its containerd, ctr and containerd-shim-runc-v2 in
# one versioned directory.
PH_CONTAINERD2_VERSION=${PH_CONTAINERD2_VERSION:-v2.4.2}
PH_CONTAINERD2_DIR=${PH_CONTAINERD2_DIR:-$PH_CACHE/bin/containerd-$PH_CONTAINERD2_VERSION}

# ctrd2_require: as ctrd_require, for the containerd 2.x of make deps; sets
# CTRD_BIN (ctrd_start starts it) and CTRD_CONFIG_VERSION=3 (its config:
# `cred containerd ... --version "$CTRD_CONFIG_VERSION"`).
ctrd2_require() {
    [[ $(id -u) == 0 ]] || skip "containerd needs root"
    [[ -x $PH_CONTAINERD2_DIR/containerd ]] ||
        skip "no containerd $PH_CONTAINERD2_VERSION in $PH_CONTAINERD2_DIR (make deps builds it)"
    CTRD_BIN=$PH_CONTAINERD2_DIR/containerd
    CTRD_CONFIG_VERSION=3
    CRICTL=$(command -v crictl || true)
    [[ -n $CRICTL ]] || CRICTL="$PH_CACHE/bin/crictl"
    [[ -x $CRICTL ]] ||
        skip "crictl not found in PATH or $PH_CACHE/bin (make deps builds it)"
}

# _ctrd_is_ours PID DIR: PID is the timeout wrapper ctrd_start started for DIR.
_ctrd_is_ours() {
    [[ $1 =~ ^[0-9]+$ ]] && _ph_pid_alive "$1" &&
        tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF "containerd --config $2/config.toml"
}

# ctrd_start DIR: start containerd with DIR/config.toml (written by
# `cred containerd DIR/config.toml --state-dir DIR ...`: root, state and
# socket below DIR) and wait, at most 30 s, until the CRI image service
# answers. crictl is configured by DIR/crictl.yaml (ctrd_crictl). The
# daemon is $CTRD_BIN (ctrd2_require) if set, else `containerd` from PATH;
# its own directory comes first in its PATH, so that it runs the
# containerd-shim-runc-v2 of its own version.
ctrd_start() {
    local d=$1 bin=${CTRD_BIN:-containerd} path=$PATH
    [[ -z ${CTRD_BIN:-} ]] || path=$(dirname "$CTRD_BIN"):$PATH
    [[ -f $d/config.toml ]] || fail "ctrd_start: no $d/config.toml"
    printf 'runtime-endpoint: unix://%s/c.sock\nimage-endpoint: unix://%s/c.sock\ntimeout: 10\n' "$d" "$d" >"$d/crictl.yaml"
    : >>"$d/containerd.log"
    echo "--- start $bin ---" >>"$d/containerd.log"
    (
        PATH=$path timeout --kill-after=10 "${PH_CONTAINERD_LIFETIME:-900}" "$bin" --config "$d/config.toml" \
            </dev/null >>"$d/containerd.log" 2>&1 3>&- &
        echo $! >"$d/containerd.pid"
    )
    echo "$d" >>"$BATS_FILE_TMPDIR/containerd.dirs"
    local pid deadline=$((SECONDS + 30))
    pid=$(<"$d/containerd.pid")
    until [[ -S $d/c.sock ]] && ctrd_crictl images >/dev/null 2>&1; do
        if ! _ph_pid_alive "$pid"; then
            fail "containerd exited during startup; log tail:
$(tail -n 30 "$d/containerd.log")"
            return
        fi
        if ((SECONDS >= deadline)); then
            ctrd_stop "$d"
            fail "containerd did not answer on $d/c.sock within 30 s; log tail:
$(tail -n 30 "$d/containerd.log")"
            return
        fi
        sleep 0.1
    done
}

# ctrd_stop DIR: stop the containerd of DIR (TERM, then KILL after 10 s).
ctrd_stop() {
    local d=$1 pid
    [[ -f $d/containerd.pid ]] || return 0
    pid=$(<"$d/containerd.pid")
    if _ctrd_is_ours "$pid" "$d"; then
        _ph_stop_pid "$pid" containerd
    fi
    rm -f "$d/containerd.pid"
}

# ctrd_stop_all: stop every containerd this file started (teardown_file).
ctrd_stop_all() {
    local d
    [[ -f $BATS_FILE_TMPDIR/containerd.dirs ]] || return 0
    while read -r d; do
        ctrd_stop "$d"
    done <"$BATS_FILE_TMPDIR/containerd.dirs"
}

# ctrd_crictl ARGS...: crictl against the containerd of $CTRD_DIR.
ctrd_crictl() {
    timeout --kill-after=5 120 "$CRICTL" --config "$CTRD_DIR/crictl.yaml" "$@"
}

###############################################################################
# A registries.conf mirror with each host's own credential and CA

# mirror_policy DIR REG REG_CA REG_AUTH MIRROR MIRROR_CA MIRROR_AUTH: in DIR
# (which holds registries.conf), one auth.json merging REG_AUTH and
# MIRROR_AUTH (containers auth files, each keyed by its host), a certs.d with
# each host's own CA, and policy.toml naming the three (all root-only, as a
# node's configuration would be: only the parent may read them).
mirror_policy() {
    local d=$1 reg=$2 reg_ca=$3 reg_auth=$4 mir=$5 mir_ca=$6 mir_auth=$7
    "$PH_PYTHON" -c '
import json, sys
auths = {}
for f in sys.argv[1:3]:
    auths.update(json.load(open(f))["auths"])
json.dump({"auths": auths}, open(sys.argv[3], "w"))' "$reg_auth" "$mir_auth" "$d/auth.json"
    mkdir -p "$d/certs.d/$reg" "$d/certs.d/$mir"
    cp "$reg_ca" "$d/certs.d/$reg/ca.crt"
    cp "$mir_ca" "$d/certs.d/$mir/ca.crt"
    chmod 600 "$d/registries.conf" "$d/auth.json" "$d"/certs.d/*/ca.crt
    chmod 700 "$d/certs.d" "$d"/certs.d/*
    cat >"$d/policy.toml" <<EOF
version = 1
[pull]
registries_conf = "$d/registries.conf"
[auth]
authfile = "$d/auth.json"
[trust]
certs_d = ["$d/certs.d"]
EOF
    chmod 600 "$d/policy.toml"
}
