"""make bench driver (started by bench/bench.sh with the registry running).

Every pull runs under bench/meter, which reports wall time, wait4 rusage (CPU
of the whole process tree) and, from the kernel's taskstats exit records, CPU
and peak RSS (hiwater_rss: resident anonymous and file-mapped pages, not the
page cache) of the command's own process apart from its descendants: for
pullhelper, the root parent apart from the pullhelper-child. Three
destination kinds, each against the owners' own tools:

- oci: a fresh directory each pull; pullhelper isolated and --no-isolation,
  skopeo copy, crane pull --format oci and the durable floor (bench/floor),
  on big, medium and many-small, ROUNDS rounds.
- containers-storage: a fresh overlay store each pull (vfs when overlay does
  not work here, said so); pullhelper isolated against skopeo copy into the
  same kind of store, on big and medium, STORE_ROUNDS rounds.
- containerd: the containerd 2.4.2 bench.sh started, native snapshotter,
  unpacked; pullhelper isolated into containerd:REF against ctr images pull,
  on big, STORE_ROUNDS rounds, the image removed (and collected) between
  pulls. Then crictl pull through pullhelper cri against containerd's own CRI.

Tools run interleaved, the order rotating each round, after one warm-up
round; medians are reported. Nothing here is asserted: the targets of issue
26 are printed as met or NOT MET.
"""
import json, os, platform, shutil, statistics, subprocess, sys, time

E = os.environ
ROUNDS, TTFB_ROUNDS, MEM_ROUNDS = int(E["BENCH_ROUNDS"]), int(E["BENCH_TTFB_ROUNDS"]), int(E["BENCH_MEM_ROUNDS"])
STORE_ROUNDS = int(E.get("BENCH_STORE_ROUNDS", "5"))
TMP, BIN, CRANE, PH = E["BENCH_TMP"], E["BENCH_BIN"], E["BENCH_CRANE"], E["BENCH_PULLHELPER"]
HOST, AUTHFILE, CERTDIR, CA = E["REGISTRY_HOST"], E["REGISTRY_AUTHFILE"], E["REGISTRY_CERT_DIR"], E["REGISTRY_CA"]
PROXY = "127.0.0.1:" + E["BENCH_PROXY_PORT"]
IMAGES = ["big", "medium", "many-small"]
TOOLS = ["pullhelper", "pullhelper --no-isolation", "skopeo copy", "crane pull", "floor (durable)"]
ISO, NOISO, SKOPEO, CRANE_T, FLOOR = TOOLS
# containers-storage: pullhelper (isolated) and skopeo copy, into a fresh
# store each pull; containerd: pullhelper (isolated) and ctr images pull.
STORE_IMAGES = ["big", "medium"]
LAYERS = {"big": 4, "medium": 8, "many-small": 64}  # as bench.sh generates them
CS_TOOLS = [ISO, SKOPEO]
CTR_T = "ctr images pull"
CTRD_TOOLS = [ISO, CTR_T]
# A subprocess that runs longer than this is killed and the bench fails.
CMD_TIMEOUT = 600

policy = os.path.join(TMP, "policy.json")
with open(policy, "w") as f:
    f.write('{"default":[{"type":"insecureAcceptAnything"}]}')
# One auth file for the registry and the timing proxy; crane reads it as a
# docker config.json. The credential only ever sits in these 0600 files.
with open(AUTHFILE) as f:
    auths = json.load(f)
auths["auths"][PROXY] = auths["auths"][HOST]
dockercfg = os.path.join(TMP, "docker")
os.makedirs(dockercfg, mode=0o700, exist_ok=True)
both = os.path.join(dockercfg, "config.json")


def write_private(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


write_private(both, json.dumps(auths))
mem_policy = os.path.join(TMP, "memory-policy.toml")
with open(mem_policy, "w") as f:
    f.write('version = 1\n\n[cgroup]\nmemory_max = "64Mi"\n')


def die(msg):
    sys.exit("bench: " + msg)


def argv(tool, host, img, dst, extra=()):
    ref = f"{host}/bench/{img}:latest"
    if tool in (ISO, NOISO):
        a = [PH, "pull", "--signature-policy", policy, "--authfile", both, "--cert-dir", CERTDIR, "--progress-fd", "3"]
        if tool == NOISO:
            a.append("--no-isolation")
        return a + list(extra) + [ref, f"oci:{dst}:latest"], {}
    if tool == SKOPEO:
        return ["skopeo", "--policy", policy, "copy", "--quiet", "--src-authfile", both, "--src-cert-dir", CERTDIR,
                f"docker://{ref}", f"oci:{dst}:latest"], {}
    if tool == CRANE_T:
        return [CRANE, "pull", "--format", "oci", ref, dst], {"SSL_CERT_FILE": CA, "DOCKER_CONFIG": dockercfg}
    if tool == FLOOR:
        return [os.path.join(BIN, "floor"), "-ca", CA, "-authfile", both, ref, dst], {}
    raise KeyError(tool)


def err_tail(stderr):
    """The last two lines of a failed command's stderr that are not warnings
    (ctr prints containerd's deprecation warnings before its error), on one
    line, at most 600 characters."""
    if isinstance(stderr, bytes):
        stderr = stderr.decode(errors="replace")
    lines = [ln.strip() for ln in stderr.split("\n")
             if ln.strip() and "level=warning" not in ln]
    return " / ".join(lines[-2:])[-600:]


def measure(a, env=None, pullhelper=False, proxy=False):
    """Runs a under bench/meter; returns the measurements (and, for
    pullhelper, its result's usage, bytes and timings, and the post-copy
    phase from its progress events)."""
    rep, prog, out = (os.path.join(TMP, n) for n in ("meter.json", "progress.jsonl", "stdout"))
    m = [os.path.join(BIN, "meter"), "-o", rep]
    if pullhelper:
        m += ["-fd3", prog]
    if proxy:
        m += ["-proxy-listen", PROXY, "-proxy-to", HOST]
    # Untimed: the writeback of what earlier pulls (or their cleanup) left
    # dirty is not charged to this one (crane's unsynced blobs used to be
    # flushed during whichever pull came next).
    os.sync()
    with open(out, "wb") as so:
        try:
            p = subprocess.run(m + ["--"] + a, stdout=so, stderr=subprocess.PIPE, env={**E, **(env or {})},
                               stdin=subprocess.DEVNULL, timeout=CMD_TIMEOUT)
        except subprocess.TimeoutExpired:
            die(f"{a[0]} did not finish within {CMD_TIMEOUT} s: {' '.join(a[:2])}")
    ok = p.returncode == 0
    r = {"ok": ok, "exit_code": p.returncode}
    if not ok:
        r["stderr"] = err_tail(p.stderr)
    if os.path.exists(rep):
        with open(rep) as f:
            mr = json.load(f)
        os.unlink(rep)
        desc = mr.get("descendants") or []
        r.update(wall_s=mr["wall_s"], cpu_s=mr["rusage"]["cpu_s"], peak_rss_mib=mr["rusage"]["max_rss_kib"] / 1024,
                 self_cpu_s=mr["self"]["cpu_s"], self_peak_rss_mib=mr["self"]["peak_rss_kib"] / 1024,
                 desc_cpu_s=sum(d["cpu_s"] for d in desc),
                 desc_peak_rss_mib=max((d["peak_rss_kib"] for d in desc), default=0) / 1024,
                 descendants=[d["comm"] for d in desc],
                 first_request_s=mr.get("first_request_s"), first_response_s=mr.get("first_response_s"))
    elif ok:
        r.update(ok=False, stderr="meter wrote no report: " + p.stderr.decode(errors="replace")[-400:])
    if pullhelper and r["ok"]:
        with open(out) as f:
            res = json.loads(f.read())
        r["usage"] = res.get("usage")
        r["bytes"] = res.get("bytes")
        r["timings"] = res.get("timings")
        r["image_id"] = res.get("image_id")
        # Every pull here fetches every byte: none from a partial-blob cache.
        if res.get("kept_bytes"):
            r.update(ok=False, stderr=f"{res['kept_bytes']} bytes came from the partial-blob cache, not the registry")
        # The phase after the last blob arrived (parent's verification,
        # signature re-check, commit): done's ts minus the last progress ts.
        with open(prog) as f:
            evs = [json.loads(line) for line in f if line.strip()]
        copy_end = [parse_ts(e["ts"]) for e in evs if e["type"] in ("layer_done", "config_done")]
        done = [parse_ts(e["ts"]) for e in evs if e["type"] == "done"]
        if copy_end and done:
            r["post_copy_s"] = done[-1] - max(copy_end)
    return r


def run(tool, img, proxy=False, extra=()):
    """One pull into a fresh oci: directory; returns the measurements."""
    dst = os.path.join(TMP, "dst")
    shutil.rmtree(dst, ignore_errors=True)
    a, env = argv(tool, PROXY if proxy else HOST, img, dst, extra)
    r = measure(a, env, pullhelper=tool in (ISO, NOISO), proxy=proxy)
    shutil.rmtree(dst, ignore_errors=True)
    return r


def parse_ts(s):
    # RFC 3339 with nanoseconds; Python's fromisoformat takes microseconds.
    from datetime import datetime
    main, _, frac = s.partition(".")
    if frac:
        digits = "".join(c for c in frac if c.isdigit())
        tz = frac[len(digits):]
        s = f"{main}.{digits[:6].ljust(6, '0')}{tz}"
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def interleaved(tools, rounds, pull):
    """pull(tool) for each tool, rounds + 1 times, the order rotating each
    round; the first (warm-up) round is dropped. A failed pull ends the
    bench naming it."""
    got = {t: [] for t in tools}
    for rnd in range(rounds + 1):
        k = rnd % len(tools)
        for tool in tools[k:] + tools[:k]:
            r = pull(tool)
            if rnd > 0:
                got[tool].append(r)
    return got


t_start = time.monotonic()
load_start = open("/proc/loadavg").read().split()[:3]
results = {"date": time.strftime("%Y-%m-%d"), "rounds": ROUNDS,
           "machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                       "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
                       "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")},
           "versions": {"skopeo": subprocess.run(["skopeo", "--version"], capture_output=True, text=True).stdout.split()[-1],
                        "crane": subprocess.run([CRANE, "version"], capture_output=True, text=True).stdout.strip(),
                        "pullhelper": subprocess.run([PH, "version"], capture_output=True, text=True).stdout.strip(),
                        "containerd": E.get("BENCH_CTRD_VERSION")},
           "images": {}}
runs = {img: {t: [] for t in TOOLS} for img in IMAGES}
pairs = {img: [] for img in IMAGES}
print(f"bench: {ROUNDS} rounds (+1 warm-up) x {len(TOOLS)} tools x {len(IMAGES)} images, interleaved", file=sys.stderr)
for img in IMAGES:
    for rnd in range(ROUNDS + 1):
        order = TOOLS[rnd % len(TOOLS):] + TOOLS[:rnd % len(TOOLS)]
        this = {}
        for tool in order:
            r = run(tool, img)
            if not r["ok"]:
                die(f"{tool} pulling {img} failed (exit {r['exit_code']}): {r.get('stderr', '')}")
            this[tool] = r
            if rnd > 0:
                runs[img][tool].append(r)
        if rnd > 0:
            pairs[img].append(this[ISO]["wall_s"] - this[NOISO]["wall_s"])
    print(f"bench: {img} done ({time.monotonic() - t_start:.0f} s)", file=sys.stderr)

# Time to first registry byte, through the relay, on medium.
ttfb = {t: [] for t in TOOLS}
for rnd in range(TTFB_ROUNDS):
    for tool in TOOLS:
        r = run(tool, "medium", proxy=True)
        if not r["ok"]:
            die(f"{tool} through the timing relay failed: {r.get('stderr', '')}")
        ttfb[tool].append(r)

# big under memory_max = 64Mi (policy file).
mem = [run(ISO, "big", extra=["--policy", mem_policy]) for _ in range(MEM_ROUNDS)]

# ---- containers-storage: pullhelper (isolated) against skopeo copy, each
# into a fresh store of the same driver, the same storage.conf (the bench's
# own: nothing from the host's /etc/containers), unmounted and removed after
# each pull as tests/130-containers-storage.bats' teardown does (skopeo
# leaves the driver's home mounted, GRAPHROOT/overlay; innermost first).
def mounts_under(path):
    p = subprocess.run(["findmnt", "-rn", "-o", "TARGET"], capture_output=True, text=True, timeout=60)
    return sorted((m for m in p.stdout.split("\n") if m == path or m.startswith(path + "/")), reverse=True)


def remove_store(path):
    for m in mounts_under(path):
        if subprocess.run(["umount", m], capture_output=True, timeout=60).returncode != 0:
            p = subprocess.run(["umount", "-l", m], capture_output=True, text=True, timeout=60)
            if p.returncode != 0:
                die(f"unmounting {m} of a bench store failed: {p.stderr.strip()}")
    left = mounts_under(path)
    if left:
        die(f"still mounted after umount: {' '.join(left)}")
    shutil.rmtree(path, ignore_errors=True)
    if os.path.exists(path):
        die(f"removing the bench store {path} failed")


def storage_files(driver):
    """The storage.conf both tools read (skopeo: $CONTAINERS_STORAGE_CONF;
    pullhelper: dest.storage_conf of a policy file) and that policy file.
    DEST's [DRIVER@GRAPHROOT+RUNROOT] names the roots."""
    conf = os.path.join(TMP, f"storage-{driver}.conf")
    with open(conf, "w") as f:
        f.write(f'[storage]\ndriver = "{driver}"\nrunroot = "{TMP}/unused-store/run"\ngraphroot = "{TMP}/unused-store/graph"\n')
    pol = os.path.join(TMP, f"store-policy-{driver}.toml")
    with open(pol, "w") as f:
        f.write(f'version = 1\n\n[dest]\nstorage_conf = "{conf}"\n')
    return conf, pol


def cs_pull(tool, img, driver):
    store = os.path.join(TMP, "cs-store")
    remove_store(store)
    os.makedirs(store, mode=0o700)
    graph, runroot = os.path.join(store, "graph"), os.path.join(store, "run")
    ref, name = f"{HOST}/bench/{img}:latest", f"bench/{img}:latest"
    dest = f"containers-storage:[{driver}@{graph}+{runroot}]{name}"
    conf, pol = storage_files(driver)
    if tool == ISO:
        r = measure([PH, "pull", "--signature-policy", policy, "--policy", pol, "--authfile", both, "--cert-dir", CERTDIR,
                     "--progress-fd", "3", ref, dest], pullhelper=True)
    else:
        r = measure(["skopeo", "--policy", policy, "copy", "--quiet", "--src-authfile", both, "--src-cert-dir", CERTDIR,
                     f"docker://{ref}", dest], {"CONTAINERS_STORAGE_CONF": conf})
    if r["ok"]:
        # The image is in the store under its name (the driver's images.json).
        try:
            with open(os.path.join(graph, f"{driver}-images", "images.json")) as f:
                names = [n for i in json.load(f) for n in i.get("names") or []]
        except (OSError, ValueError) as e:
            names = [f"({e})"]
        if "docker.io/" + name not in names:
            r.update(ok=False, stderr=f"the store does not list docker.io/{name}: {names}")
    remove_store(store)
    return r


def overlay_probe():
    """None if the kernel mounts overlay on the bench directory's filesystem
    in a mount namespace of its own (tests/130's overlay_or_skip), else why not."""
    d = os.path.join(TMP, "ovl-probe")
    for sub in ("lower", "upper", "work", "merged"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    p = subprocess.run(["unshare", "-m", "sh", "-c",
                        'mount -t overlay overlay -o "lowerdir=$1/lower,upperdir=$1/upper,workdir=$1/work" "$1/merged"', "sh", d],
                       capture_output=True, text=True, timeout=60)
    fs = subprocess.run(["stat", "-fc", "%T", TMP], capture_output=True, text=True).stdout.strip()
    shutil.rmtree(d, ignore_errors=True)
    return None if p.returncode == 0 else f"overlay cannot be mounted on {fs} here: {p.stderr.strip()}"


cs_driver, cs_note = "overlay", overlay_probe()
if cs_note is None:
    # Both tools must manage overlay here too (a warm-up pull each).
    for tool in CS_TOOLS:
        r = cs_pull(tool, "medium", "overlay")
        if not r["ok"]:
            cs_note = f"{tool} into an overlay store failed (exit {r['exit_code']}): {r.get('stderr', '').strip()[-300:]}"
            break
if cs_note is not None:
    cs_driver = "vfs"
    print(f"bench: containers-storage with the vfs driver for both tools: {cs_note}", file=sys.stderr)


def cs_checked(tool, img):
    r = cs_pull(tool, img, cs_driver)
    if not r["ok"]:
        die(f"{tool} pulling {img} into containers-storage ({cs_driver}) failed (exit {r['exit_code']}): {r.get('stderr', '')}")
    return r


cs_runs = {img: interleaved(CS_TOOLS, STORE_ROUNDS, lambda t, img=img: cs_checked(t, img)) for img in STORE_IMAGES}
print(f"bench: containers-storage pulls done ({time.monotonic() - t_start:.0f} s)", file=sys.stderr)

# ---- containerd: pullhelper (isolated) into containerd:REF against ctr
# images pull (containerd 2.x: its transfer service fetches, stores and
# unpacks in the daemon), both into the containerd bench.sh started, native
# snapshotter, unpacked, in a namespace of the bench's own (the CRI watches
# k8s.io and would add its own image-ID reference after ctr returned). ctr's
# credential: ctr takes one only on its command line (--user) or from a
# terminal, so it gets the registry's CA and an HTTP Basic Authorization
# header in a hosts.toml (0600, in a 0700 directory) named by --hosts-dir,
# which containerd's hosts loader (core/remotes/docker/config) sends with
# every request; nothing secret is on a command line. Before each pull every
# image of the namespace is removed with `ctr images rm --sync` (the
# synchronous GC takes content and snapshots) and the namespace checked
# empty.
CTR, CTRD_SOCK = E.get("BENCH_CTR"), E.get("BENCH_CTRD_SOCK")
CTRD_NS = "pullhelper-bench"
ctr_hosts = os.path.join(TMP, "ctr-hosts")


def ctr(*args):
    try:
        return subprocess.run([CTR, "--address", CTRD_SOCK, "--namespace", CTRD_NS, *args], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=CMD_TIMEOUT)
    except subprocess.TimeoutExpired:
        die(f"ctr {' '.join(args[:2])} did not finish within {CMD_TIMEOUT} s")


def ctrd_state():
    """The namespace's images, content and native snapshots."""
    out = {}
    for what, args, skip in (("images", ("images", "ls", "-q"), 0), ("content", ("content", "ls", "-q"), 0),
                             ("snapshots", ("snapshots", "--snapshotter", "native", "ls"), 1)):
        p = ctr(*args)
        if p.returncode != 0:
            die(f"ctr {' '.join(args)} failed: {err_tail(p.stderr)}")
        out[what] = [line.split()[0] for line in p.stdout.split("\n")[skip:] if line.strip()]
    return out


def ctrd_empty():
    deadline = time.monotonic() + 30
    while True:
        s = ctrd_state()
        if not any(s.values()):
            return
        if time.monotonic() > deadline:
            die(f"containerd namespace {CTRD_NS} not empty 30 s after ctr images rm --sync: {s}")
        if s["images"]:
            p = ctr("images", "rm", "--sync", *s["images"])
            if p.returncode != 0:
                die(f"ctr images rm --sync failed: {err_tail(p.stderr)}")
        else:
            time.sleep(0.1)


def ctrd_pull(tool, img):
    ctrd_empty()
    ref = f"{HOST}/bench/{img}:latest"
    if tool == ISO:
        r = measure([PH, "pull", "--signature-policy", policy, "--authfile", both, "--cert-dir", CERTDIR, "--progress-fd", "3",
                     "--containerd-address", CTRD_SOCK, "--containerd-namespace", CTRD_NS, "--containerd-snapshotter", "native",
                     "--containerd-staging", os.path.join(TMP, "ctrd-staging"), ref, "containerd:" + ref], pullhelper=True)
    else:
        r = measure([CTR, "--address", CTRD_SOCK, "--namespace", CTRD_NS, "images", "pull", "--hosts-dir", ctr_hosts,
                     "--snapshotter", "native", ref])
    if not r["ok"]:
        die(f"{tool} pulling {img} into containerd failed (exit {r['exit_code']}): {r.get('stderr', '')}")
    s = ctrd_state()
    if ref not in s["images"] or len(s["snapshots"]) != LAYERS[img]:
        die(f"{tool}: after the pull containerd has not got {ref} unpacked (native, {LAYERS[img]} snapshots): {s}")
    r["snapshots"] = len(s["snapshots"])
    return r


ctrd_runs = {}
if CTR:
    d = os.path.join(ctr_hosts, HOST)
    os.mkdir(ctr_hosts, 0o700)
    os.mkdir(d, 0o700)
    basic = auths["auths"][HOST]["auth"]
    write_private(os.path.join(d, "hosts.toml"),
                  f'server = "https://{HOST}"\n[host."https://{HOST}"]\n  capabilities = ["pull", "resolve"]\n'
                  f'  ca = "{CA}"\n  [host."https://{HOST}".header]\n    Authorization = "Basic {basic}"\n')
    ctrd_runs = {"big": interleaved(CTRD_TOOLS, STORE_ROUNDS, lambda t: ctrd_pull(t, "big"))}
    ctrd_empty()
    print(f"bench: containerd pulls done ({time.monotonic() - t_start:.0f} s)", file=sys.stderr)

# crictl pull of big through pullhelper cri against crictl pull straight to
# containerd's own CRI (bench.sh started both; same containerd, native
# snapshotter, unpacked). Before each pull the image is removed through the
# CRI (containerd's RemoveImage deletes every reference of the image, the
# last with a synchronous GC: content and snapshots go), so each pull
# fetches, stores and unpacks all of it. Interleaved, the order swapped each
# round, after one warm-up round; wall time of the crictl command.
CRI_SOCK, CRICTL = E.get("BENCH_CRI_SOCK"), E.get("BENCH_CRICTL")
CRI_ROUNDS = int(E.get("BENCH_CRI_ROUNDS", "3"))
CRI_PATHS = {"containerd CRI": CTRD_SOCK, "pullhelper cri": CRI_SOCK}


def crictl(image_sock, *args):
    return subprocess.run([CRICTL, "--runtime-endpoint", "unix://" + CTRD_SOCK, "--image-endpoint", "unix://" + image_sock,
                           "--timeout", "600s", *args], capture_output=True, text=True, stdin=subprocess.DEVNULL)


def cri_pull(path):
    ref = f"{HOST}/bench/big:latest"
    crictl(CTRD_SOCK, "rmi", ref)  # absent the first time
    if crictl(CTRD_SOCK, "inspecti", ref).returncode == 0:
        die(f"crictl rmi {ref} left the image in containerd")
    os.sync()  # untimed, as in measure
    t0 = time.monotonic()
    p = crictl(CRI_PATHS[path], "pull", ref)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        die(f"crictl pull through {path} failed: {err_tail(p.stdout + p.stderr)}")
    return wall


cri_walls = {k: [] for k in CRI_PATHS}
if CRI_SOCK:
    for rnd in range(CRI_ROUNDS + 1):
        order = list(CRI_PATHS) if rnd % 2 == 0 else list(CRI_PATHS)[::-1]
        for path in order:
            w = cri_pull(path)
            if rnd > 0:
                cri_walls[path].append(w)
    print(f"bench: crictl pulls done ({time.monotonic() - t_start:.0f} s)", file=sys.stderr)

# ---- summary
def summary(rs):
    s = {k: med(r.get(k) for r in rs) for k in
         ("wall_s", "cpu_s", "peak_rss_mib", "self_cpu_s", "self_peak_rss_mib", "desc_cpu_s", "desc_peak_rss_mib", "post_copy_s")}
    s["walls_s"] = [round(r["wall_s"], 4) for r in rs]
    ts = [r.get("timings") or {} for r in rs]
    if any(ts):
        s["phases_ms"] = {k: med(x.get(k + "_ms") for x in ts) for k in ("setup", "copy", "verify", "commit")}
    return s


for img in IMAGES:
    s = {t: summary(runs[img][t]) for t in TOOLS}
    for t in TOOLS:
        for base in (SKOPEO, CRANE_T, FLOOR):
            s[t][f"ratio_to_{base.split()[0]}"] = s[t]["wall_s"] / s[base]["wall_s"]
    for t in (ISO, NOISO):
        u = [r.get("usage") or {} for r in runs[img][t]]
        s[t]["cgroup_memory_peak_mib"] = med((x.get("memory_peak_bytes") or 0) / 2**20 for x in u if x) if any(u) else None
        s[t]["cgroup_cpu_s"] = med((x.get("cpu_usage_ns") or 0) / 1e9 for x in u if x) if any(u) else None
    results["images"][img] = {"tools": s, "isolation_ratio": s[ISO]["wall_s"] / s[NOISO]["wall_s"],
                              "isolation_overhead_s": med(pairs[img]),
                              "isolation_overhead_pairs_s": [round(x, 4) for x in pairs[img]]}
results["ttfb"] = {t: {"first_request_s": med(r["first_request_s"] for r in ttfb[t]),
                       "first_response_s": med(r["first_response_s"] for r in ttfb[t])} for t in TOOLS}
results["memory_max_64Mi"] = {"image": "big", "runs": [
    {k: r.get(k) for k in ("ok", "exit_code", "wall_s", "self_peak_rss_mib", "desc_peak_rss_mib", "usage", "stderr")} for r in mem]}

cs = {"driver": cs_driver, "rounds": STORE_ROUNDS, "images": {}}
if cs_note:
    cs["overlay_unavailable"] = cs_note
for img in STORE_IMAGES:
    s = {t: summary(cs_runs[img][t]) for t in CS_TOOLS}
    cs["images"][img] = {"tools": s, "ratio_to_skopeo": s[ISO]["wall_s"] / s[SKOPEO]["wall_s"]}
results["containers_storage"] = cs

if ctrd_runs:
    s = {t: summary(ctrd_runs["big"][t]) for t in CTRD_TOOLS}
    results["containerd"] = {"namespace": CTRD_NS, "snapshotter": "native", "rounds": STORE_ROUNDS,
                             "images": {"big": {"tools": s, "ratio_to_ctr": s[ISO]["wall_s"] / s[CTR_T]["wall_s"]}}}
else:
    results["containerd"] = {"skipped": E.get("BENCH_CRI_SKIP") or "not started"}
if CRI_SOCK:
    c, p = med(cri_walls["containerd CRI"]), med(cri_walls["pullhelper cri"])
    results["cri"] = {"image": "big", "rounds": CRI_ROUNDS, "snapshotter": "native",
                      "containerd_cri_wall_s": c, "pullhelper_cri_wall_s": p, "ratio": p / c,
                      "walls_s": {k: [round(x, 4) for x in v] for k, v in cri_walls.items()}}
else:
    results["cri"] = {"skipped": E.get("BENCH_CRI_SKIP") or "not started"}

# ---- targets (issue 26): ratios of medians within this invocation.
targets = []


def target(name, ok, detail):
    targets.append({"target": name, "met": None if ok is None else bool(ok), "detail": detail})


for img in ("big", "medium"):
    s = results["images"][img]["tools"][ISO]
    for base, key, limit in ((FLOOR, "floor", 1.15), (CRANE_T, "crane", 0.85), (SKOPEO, "skopeo", 0.75)):
        b = results["images"][img]["tools"][base]
        target(f"oci: {img}: isolated <= {limit} x {base}", s[f"ratio_to_{key}"] <= limit,
               f"{s[f'ratio_to_{key}']:.2f} x ({s['wall_s']:.3f} / {b['wall_s']:.3f} s)")
s, b = results["images"]["many-small"]["tools"][ISO], results["images"]["many-small"]["tools"][SKOPEO]
target("oci: many-small: isolated <= 0.8 x skopeo copy", s["ratio_to_skopeo"] <= 0.8,
       f"{s['ratio_to_skopeo']:.2f} x ({s['wall_s']:.3f} / {b['wall_s']:.3f} s)")
for img in IMAGES:
    o = results["images"][img]
    target(f"isolation: {img}: isolated / --no-isolation <= 1.05", o["isolation_ratio"] <= 1.05,
           f"{o['isolation_ratio']:.2f} x ({o['tools'][ISO]['wall_s']:.3f} / {o['tools'][NOISO]['wall_s']:.3f} s; "
           f"paired difference median {o['isolation_overhead_s'] * 1000:.0f} ms)")
# Memory on big, for each destination kind pullhelper pulled it into: the
# medians of taskstats' hiwater_rss (resident anonymous and file-mapped
# pages: an upper bound of the anonymous memory, without the page cache the
# cgroup's memory.peak counts).
big_iso = {"oci": results["images"]["big"]["tools"][ISO], f"containers-storage ({cs_driver})": cs["images"]["big"]["tools"][ISO]}
if ctrd_runs:
    big_iso["containerd"] = results["containerd"]["images"]["big"]["tools"][ISO]
for kind, s in big_iso.items():
    target(f"memory: big into {kind}: root parent peak RSS <= 48 MiB", s["self_peak_rss_mib"] <= 48,
           f"{s['self_peak_rss_mib']:.1f} MiB (taskstats hiwater_rss: anonymous + file-mapped, not page cache)")
    target(f"memory: big into {kind}: child peak RSS <= 64 MiB", s["desc_peak_rss_mib"] <= 64,
           f"{s['desc_peak_rss_mib']:.1f} MiB (taskstats hiwater_rss: anonymous + file-mapped, not the cgroup's page cache)")
for img in STORE_IMAGES:
    c = cs["images"][img]
    target(f"containers-storage ({cs_driver}): {img}: isolated <= 0.75 x skopeo copy", c["ratio_to_skopeo"] <= 0.75,
           f"{c['ratio_to_skopeo']:.2f} x ({c['tools'][ISO]['wall_s']:.3f} / {c['tools'][SKOPEO]['wall_s']:.3f} s)")
if ctrd_runs:
    c = results["containerd"]["images"]["big"]
    target("containerd (native, unpacked): big: isolated <= 1.1 x ctr images pull", c["ratio_to_ctr"] <= 1.1,
           f"{c['ratio_to_ctr']:.2f} x ({c['tools'][ISO]['wall_s']:.3f} / {c['tools'][CTR_T]['wall_s']:.3f} s)")
else:
    target("containerd (native, unpacked): big: isolated <= 1.1 x ctr images pull", None,
           f"not measured: {results['containerd']['skipped']}")
results["targets"] = targets
results["duration_s"] = round(time.monotonic() - t_start, 1)
results["machine"]["loadavg_start"] = load_start
results["machine"]["loadavg_end"] = open("/proc/loadavg").read().split()[:3]


# ---- stdout
def mib(x):
    return f"{x:.1f}" if x is not None else "-"


def phases(s):
    p = s.get("phases_ms")
    return ", ".join(f"{k} {v:.0f}" if v is not None else f"{k} -" for k, v in p.items()) if p else ""


def split(s):
    """CPU and peak RSS of pullhelper's root parent | its child."""
    return (f"{s['self_cpu_s']:.2f} s {mib(s['self_peak_rss_mib'])} MiB | "
            f"{s['desc_cpu_s']:.2f} s {mib(s['desc_peak_rss_mib'])} MiB")


v = results["versions"]
print(f"\nmake bench, {results['date']}: {results['machine']['cpus']} CPUs ({results['machine']['cpu']}), "
      f"{results['machine']['mem_gib']} GiB, kernel {results['machine']['kernel']}; pullhelper {v['pullhelper']}, "
      f"skopeo {v['skopeo']}, crane {v['crane']}, containerd {v.get('containerd') or '-'}; "
      f"interleaved rounds after a warm-up, medians; load average {' '.join(results['machine']['loadavg_start'])} at start, "
      f"{' '.join(results['machine']['loadavg_end'])} at end")
print(f"\noci: (a fresh directory each pull, {ROUNDS} rounds)")
hdr = f"{'image':10} {'tool':26} {'wall s':>7} {'/skopeo':>7} {'/crane':>7} {'/floor':>7} {'CPU s':>6} {'RSS MiB':>8}  parent | child"
print(hdr)
print("-" * len(hdr))
for img in IMAGES:
    for t in TOOLS:
        s = results["images"][img]["tools"][t]
        extra = f"  {split(s)}" if t == ISO else (f"  {s['self_cpu_s']:.2f} s {mib(s['self_peak_rss_mib'])} MiB" if t == NOISO else "")
        print(f"{img:10} {t:26} {s['wall_s']:7.3f} {s['ratio_to_skopeo']:7.2f} {s['ratio_to_crane']:7.2f} "
              f"{s['ratio_to_floor']:7.2f} {s['cpu_s']:6.2f} {mib(s['peak_rss_mib']):>8}{extra}")
    o = results["images"][img]
    print(f"{img:10} isolated / --no-isolation {o['isolation_ratio']:.2f} x; paired difference median "
          f"{o['isolation_overhead_s'] * 1000:.0f} ms; post-copy phase (verify, re-check, commit) isolated "
          f"{o['tools'][ISO]['post_copy_s'] * 1000:.0f} ms, --no-isolation {o['tools'][NOISO]['post_copy_s'] * 1000:.0f} ms")
print("pullhelper's own account of its wall time (result timings, median ms):")
for img in IMAGES:
    for t in (ISO, NOISO):
        print(f"  {img:10} {t:26} {phases(results['images'][img]['tools'][t])}")
print("time to first registry byte (relay, medium, median of %d): " % TTFB_ROUNDS +
      "; ".join(f"{t} {x['first_request_s'] * 1000:.0f} ms (response {x['first_response_s'] * 1000:.0f} ms)"
                for t, x in results["ttfb"].items()))
for i, r in enumerate(results["memory_max_64Mi"]["runs"]):
    u = r.get("usage") or {}
    print(f"big under memory_max = 64Mi, run {i + 1}: {'ok' if r['ok'] else 'FAILED exit %s' % r['exit_code']}"
          + (f", {r['wall_s']:.2f} s, child peak RSS {mib(r.get('desc_peak_rss_mib'))} MiB, parent {mib(r.get('self_peak_rss_mib'))} MiB, "
             f"cgroup memory peak (incl. page cache) {(u.get('memory_peak_bytes') or 0) / 2**20:.1f} MiB, oom_kills {u.get('oom_kills')}" if r.get("wall_s") else "")
          + ("" if r["ok"] else ": " + (r.get("stderr") or "").strip()[-300:]))

print(f"\ncontainers-storage:[{cs_driver}@...] (a fresh store each pull, the same storage.conf, {STORE_ROUNDS} rounds)"
      + (f" -- vfs because {cs_note}" if cs_note else ""))
hdr = f"{'image':10} {'tool':26} {'wall s':>7} {'/skopeo':>7} {'CPU s':>6} {'RSS MiB':>8}  parent | child; phases ms"
print(hdr)
print("-" * len(hdr))
for img in STORE_IMAGES:
    for t in CS_TOOLS:
        s = cs["images"][img]["tools"][t]
        extra = f"  {split(s)}; {phases(s)}" if t == ISO else ""
        print(f"{img:10} {t:26} {s['wall_s']:7.3f} {s['wall_s'] / cs['images'][img]['tools'][SKOPEO]['wall_s']:7.2f} "
              f"{s['cpu_s']:6.2f} {mib(s['peak_rss_mib']):>8}{extra}")

if ctrd_runs:
    c = results["containerd"]["images"]["big"]
    print(f"\ncontainerd: (containerd {v.get('containerd')}, native snapshotter, unpacked, namespace {CTRD_NS}, "
          f"image removed and collected before each pull, {STORE_ROUNDS} rounds; ctr's CPU is the client's only)")
    hdr = f"{'image':10} {'tool':26} {'wall s':>7} {'/ctr':>7} {'CPU s':>6}  parent | child; phases ms"
    print(hdr)
    print("-" * len(hdr))
    for t in CTRD_TOOLS:
        s = c["tools"][t]
        extra = f"  {split(s)}; {phases(s)}" if t == ISO else ""
        print(f"{'big':10} {t:26} {s['wall_s']:7.3f} {s['wall_s'] / c['tools'][CTR_T]['wall_s']:7.2f} {s['cpu_s']:6.2f}{extra}")
else:
    print(f"\ncontainerd: skipped ({results['containerd']['skipped']})")
cri = results["cri"]
if "skipped" in cri:
    print(f"crictl pull, pullhelper cri vs containerd's own CRI: skipped ({cri['skipped']})")
else:
    print(f"crictl pull of big, unpacked (native), median of {cri['rounds']}: straight to containerd's CRI "
          f"{cri['containerd_cri_wall_s']:.3f} s, through pullhelper cri {cri['pullhelper_cri_wall_s']:.3f} s: "
          f"{cri['ratio']:.2f} x (the service path's overhead)")

print("\ntargets (issue 26):")
for t in targets:
    state = "skipped" if t["met"] is None else ("met    " if t["met"] else "NOT MET")
    print(f"  {state}  {t['target']}: {t['detail']}")
print(f"\n{results['duration_s']} s; results in {E['BENCH_RESULTS']}")
with open(E["BENCH_RESULTS"], "w") as f:
    json.dump(results, f, indent=1)
    f.write("\n")
