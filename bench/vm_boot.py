"""Guest boot time and per-trial overhead of the agent channel (image-less guests).

    .venv/bin/python bench/vm_boot.py [--boots 3] [--execs 50] [--mem 256] [--accel tcg]

Prints a Markdown table and writes the raw numbers as JSON (--json PATH). Under TCG these are
functional numbers only: they say what a trial's fixed cost is here, not what KVM would show.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hugelab.trial.native import NativeTarget  # noqa: E402
from hugelab.vm.common.spec import VmSpec  # noqa: E402
from hugelab.vm.own.accel import probe_reason
from hugelab.vm.own.guest import (
    Guest,  # noqa: E402
    probe_accel,  # noqa: E402
)
from hugelab.vm.own.initramfs import default_kernel  # noqa: E402


def q(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"n": len(xs), "median": statistics.median(xs), "min": xs[0], "max": xs[-1],
            "p90": xs[int(0.9 * (len(xs) - 1))]}


def one_guest(spec: VmSpec, execs: int) -> dict[str, object]:
    t0 = time.monotonic()
    g = Guest(spec)
    g.start()
    start_s = time.monotonic() - t0
    rt, inner, reads = [], [], []
    try:
        for _ in range(execs):
            t = time.perf_counter()
            r = g.target.exec(["/bin/true"])
            rt.append(time.perf_counter() - t)
            inner.append(r.wall_s)
        for _ in range(execs):
            t = time.perf_counter()
            g.target.read_file("/proc/meminfo")
            reads.append(time.perf_counter() - t)
    finally:
        t = time.monotonic()
        g.close()
        close_s = time.monotonic() - t
    return {"start_s": start_s, "boot_s": g.boot_s, "close_s": close_s,
            "exec_roundtrip_s": rt, "exec_wall_s": inner, "read_s": reads}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--boots", type=int, default=3)
    ap.add_argument("--execs", type=int, default=50)
    ap.add_argument("--mem", type=int, default=256)
    ap.add_argument("--accel", default="tcg")
    ap.add_argument("--backings", default="anon,memfd")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    kernel = str(default_kernel())
    t = time.monotonic()
    auto = probe_accel(kernel)
    probe_s = time.monotonic() - t
    results: dict[str, object] = {"kernel": kernel, "accel": a.accel, "mem_mib": a.mem,
                                  "probe": {"accel": auto, "reason": probe_reason(kernel),
                                            "seconds": probe_s}}
    native = NativeTarget()
    nat = []
    for _ in range(a.execs):
        t0 = time.perf_counter()
        native.exec(["/bin/true"])
        nat.append(time.perf_counter() - t0)
    results["native_exec_s"] = q(nat)
    print(f"accel probe: {auto} in {probe_s:.2f}s ({probe_reason(kernel)})")
    print("\n| backing | boot to agent (s) | close (s) | exec /bin/true round trip (ms) "
          "| in-guest wall (ms) | read /proc/meminfo (ms) |\n|---|---|---|---|---|---|")
    for backing in a.backings.split(","):
        runs = [one_guest(VmSpec(mem_mib=a.mem, backing=backing, kernel=kernel, accel=a.accel),
                          a.execs) for _ in range(a.boots)]
        boot = q([r["boot_s"] for r in runs])
        close = q([r["close_s"] for r in runs])
        rt = q([x * 1e3 for r in runs for x in r["exec_roundtrip_s"]])
        wall = q([x * 1e3 for r in runs for x in r["exec_wall_s"]])
        rd = q([x * 1e3 for r in runs for x in r["read_s"]])
        results[backing] = {"boot_s": boot, "close_s": close, "exec_roundtrip_ms": rt,
                            "exec_wall_ms": wall, "read_ms": rd}
        print(f"| {backing} | {boot['median']:.2f} ({boot['min']:.2f}-{boot['max']:.2f}) "
              f"| {close['median']:.2f} | {rt['median']:.1f} (p90 {rt['p90']:.1f}) "
              f"| {wall['median']:.1f} | {rd['median']:.1f} |")
    print(f"\nnative exec /bin/true: {results['native_exec_s']['median'] * 1e3:.2f} ms median")
    if a.json:
        a.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
