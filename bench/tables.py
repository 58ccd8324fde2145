"""Prints README "Performance"'s tables (Markdown) from a make bench results
file: python3 bench/tables.py [bench/results.json]. The text around them
(what limits each ratio) is the README's own; only the numbers come from here.
"""
import json
import sys

ISO, NOISO, SKOPEO, CRANE, FLOOR, CTR = ("pullhelper", "pullhelper --no-isolation", "skopeo copy", "crane pull",
                                         "floor (durable)", "ctr images pull")
NAMES = {ISO: "pullhelper (isolated)", NOISO: "pullhelper `--no-isolation`", SKOPEO: "skopeo copy",
         CRANE: "crane pull --format oci", FLOOR: "floor (durable)", CTR: "ctr images pull"}
DAEMON = "(the daemon's)"  # ctr's CPU is its client's; containerd does the pull


def mib(x):
    return f"{x:.1f}" if x is not None else "-"


def cpu(s, tool):
    return f"{s['self_cpu_s']:.2f} + {s['desc_cpu_s']:.2f} s" if tool == ISO else f"{s['cpu_s']:.2f} s"


def rss(s, tool):
    if tool == ISO:
        return f"{mib(s['self_peak_rss_mib'])} \\| {mib(s['desc_peak_rss_mib'])} MiB"
    return f"{mib(s['peak_rss_mib'])} MiB"


def phases(s):
    p = s.get("phases_ms") or {}
    return ", ".join(f"{k} {v:.0f}" for k, v in p.items() if v is not None)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "bench/results.json"
    with open(path) as f:
        r = json.load(f)
    m, v = r["machine"], r["versions"]
    print(f"{r['date']}: {m['cpus']} CPUs ({m['cpu']}), {m['mem_gib']} GiB, kernel {m['kernel']}; "
          f"skopeo {v['skopeo']}, crane {v['crane']}, containerd {v.get('containerd') or '-'}; "
          f"load average {m['loadavg_start'][0]} at the start, {m['loadavg_end'][0]} at the end; {r['duration_s']:.0f} s\n")

    print(f"`oci:` ({r['rounds']} rounds):\n")
    print("| image | tool | median wall | ÷ skopeo | ÷ crane | ÷ floor | CPU | peak RSS parent \\| child |")
    print("|---|---|---|---|---|---|---|---|")
    for img, o in r["images"].items():
        for i, (tool, s) in enumerate(o["tools"].items()):
            print(f"| {img if i == 0 else ''} | {NAMES[tool]} | {s['wall_s']:.3f} s | {s['ratio_to_skopeo']:.2f} | "
                  f"{s['ratio_to_crane']:.2f} | {s['ratio_to_floor']:.2f} | {cpu(s, tool)} | {rss(s, tool)} |")
    print("\nThe result's `timings` (median ms, isolated / `--no-isolation`): " + "; ".join(
        f"{img} " + ", ".join(f"{k} {o['tools'][ISO]['phases_ms'][k]:.0f} / {o['tools'][NOISO]['phases_ms'][k]:.0f}"
                              for k in ("setup", "copy", "verify", "commit"))
        for img, o in r["images"].items()) + ". Isolated ÷ `--no-isolation`: " + ", ".join(
        f"{img} {o['isolation_ratio']:.2f} (paired difference median {o['isolation_overhead_s'] * 1000:.0f} ms)"
        for img, o in r["images"].items()) + ".")

    cs = r["containers_storage"]
    print(f"\n`containers-storage:[{cs['driver']}@…]` (a fresh store each pull, {cs['rounds']} rounds"
          + (f"; vfs because {cs['overlay_unavailable']}" if cs.get("overlay_unavailable") else "") + "):\n")
    print("| image | tool | median wall | ÷ skopeo | CPU | peak RSS parent \\| child | pullhelper's timings (ms) |")
    print("|---|---|---|---|---|---|---|")
    for img, o in cs["images"].items():
        for i, (tool, s) in enumerate(o["tools"].items()):
            print(f"| {img if i == 0 else ''} | {NAMES[tool]} | {s['wall_s']:.3f} s | "
                  f"{s['wall_s'] / o['tools'][SKOPEO]['wall_s']:.2f} | {cpu(s, tool)} | {rss(s, tool)} | "
                  f"{phases(s) if tool == ISO else ''} |")

    c, cri = r["containerd"], r.get("cri") or {}
    if "skipped" in c:
        print(f"\n`containerd:` skipped: {c['skipped']}")
        return
    print(f"\n`containerd:` (containerd {v.get('containerd')}, {c['snapshotter']} snapshotter, unpacked, "
          f"{c['rounds']} rounds; big):\n")
    print("| tool | median wall | ÷ ctr | CPU | peak RSS parent \\| child | pullhelper's timings (ms) |")
    print("|---|---|---|---|---|---|")
    o = c["images"]["big"]
    for tool, s in o["tools"].items():
        print(f"| {NAMES[tool]} | {s['wall_s']:.3f} s | {s['wall_s'] / o['tools'][CTR]['wall_s']:.2f} | "
              f"{cpu(s, tool) if tool == ISO else DAEMON} | {rss(s, tool) if tool == ISO else ''} | "
              f"{phases(s) if tool == ISO else ''} |")
    if "ratio" in cri:
        print(f"| `crictl pull` through `pullhelper cri` ÷ straight to containerd's CRI ({cri['rounds']} rounds) | "
              f"{cri['pullhelper_cri_wall_s']:.3f} / {cri['containerd_cri_wall_s']:.3f} s | {cri['ratio']:.2f} | | | |")


if __name__ == "__main__":
    main()
