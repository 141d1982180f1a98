"""Boot time of the demo domain (`hugelab vm demo-domain`) under TCG, as trials boot it: a
transient copy through hugelab.vm.domains.libvirt_guest.DomainGuest (512 MiB), seconds until
qemu-guest-agent answers (`boot_s`), and from the guest's kernel log when /init ran, the root
was mounted and systemd started. Root; run it under the host lock:

    flock /run/lock/hugelab-tests-host.lock .venv/bin/python bench/demo_domain_boot.py --boots 3

docs/benchmarks.md ("Your own VMs", the image's initrd)."""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hugelab.vm.common.spec import VmSpec  # noqa: E402
from hugelab.vm.domains.libvirt_guest import DomainGuest  # noqa: E402

MARKS = {"init": r"Run /init", "root": r"EXT4-fs \(vda\): mounted",
         "systemd": r"systemd\[1\]: systemd \d"}


def marks(dmesg: str) -> dict[str, float]:
    """Seconds since the kernel started at which each of MARKS first shows in `dmesg`."""
    out = {}
    for name, pattern in MARKS.items():
        m = re.search(r"^\[\s*([\d.]+)\] .*" + pattern, dmesg, re.MULTILINE)
        if m:
            out[name] = float(m.group(1))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--boots", type=int, default=3)
    ap.add_argument("--domain", default="hugelab-demo-debian")
    ap.add_argument("--uri", default="qemu:///system")
    args = ap.parse_args()
    times = []
    for _ in range(args.boots):
        with DomainGuest(VmSpec(mem_mib=512, accel="tcg"), domain=args.domain,
                         uri=args.uri) as g:
            boot = g.boot_s
            assert boot is not None, "the guest answered but says no boot time"
            times.append(boot)
            seen = marks(g.target.exec(["dmesg"], timeout=60).stdout)
        print(f"boot_s {boot:.2f}  " + "  ".join(f"{k} {v:.2f}" for k, v in seen.items()),
              flush=True)
    print(f"median boot_s {statistics.median(times):.2f} of {len(times)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
