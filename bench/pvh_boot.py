"""hugelab's own guest booted from the bzImage and from its uncompressed PVH kernel, in pairs
(ABBA order), timed to the agent's first answer, with the guest's own uptime at that moment.

    .venv/bin/python bench/pvh_boot.py [--pairs 5] [--accel tcg]

Prints each boot and the medians; the CPU model with them. Run it alone under the host test
lock (flock /run/lock/hugelab-tests-host.lock ...): guests share the host's CPUs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from hugelab.host.inspect import cpu_model
from hugelab.host.paths import REAL
from hugelab.vm.common.spec import VmSpec
from hugelab.vm.own.guest import Guest


class BzImageGuest(Guest):
    """The guest as it booted before hugelab.vm.common.pvh: QEMU given the bzImage."""

    def boot_image(self, kernel: Path) -> Path:
        return kernel


def boot(cls: type[Guest], accel: str) -> tuple[float, float]:
    spec = VmSpec(mem_mib=512, vcpus=1, accel=accel, backing="anon")
    t0 = time.monotonic()
    with cls(spec) as g:
        wall = time.monotonic() - t0
        uptime = float(g.target.exec(["/bin/cat", "/proc/uptime"]).stdout.split()[0])
    return wall, uptime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--accel", default="tcg")
    args = ap.parse_args()
    boot(Guest, args.accel)  # the PVH kernel extracted and cached first, untimed
    got: dict[str, list[tuple[float, float]]] = {"bzImage": [], "pvh": []}
    for i in range(args.pairs):
        order = [("bzImage", BzImageGuest), ("pvh", Guest)]
        for name, cls in order if i % 2 == 0 else order[::-1]:
            wall, up = boot(cls, args.accel)
            got[name].append((wall, up))
            print(f"{name:8s} to the agent {wall:5.2f} s, guest uptime then {up:5.2f} s",
                  flush=True)
    print(f"CPU: {cpu_model(REAL)}, accel {args.accel}, {args.pairs} pairs")
    for name, xs in got.items():
        print(f"{name:8s} median to the agent {statistics.median(w for w, _ in xs):.2f} s, "
              f"guest uptime {statistics.median(u for _, u in xs):.2f} s")


if __name__ == "__main__":
    main()
