"""Boot time of a copy of hugelab's Debian image under TCG, as the demo domain boots it (2 vCPUs,
512 MiB, `quiet`): wall seconds to the guest agent, QEMU's CPU seconds until then, and with
--blame systemd-analyze (time, blame, critical-chain) from inside the guest. --mask UNITS and
--cmd SHELL apply in a first boot of the same overlay, then the second boot is measured (to try
a change without rebuilding the image). --image DIR boots a cached image other than the
current recipe's. --pvh alternates the bzImage with its uncompressed PVH kernel
(hugelab.vm.common.pvh), ABBA, as the demo domain boots it since DOMAIN_VERSION 4. Root;
docs/benchmarks.md ("A faster boot of the image", issue 40)."""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_vm_image import _wait_for_agent  # noqa: E402

from hugelab import proc  # noqa: E402
from hugelab.vm.common.pvh import boot_image  # noqa: E402
from hugelab.vm.domains import imageboot, imagebuild  # noqa: E402
from hugelab.vm.domains.image import GuestImage, load_image  # noqa: E402

REPORTS = (["systemd-analyze"], ["systemd-analyze", "blame"],
           ["systemd-analyze", "critical-chain", "qemu-guest-agent.service"],
           ["systemd-analyze", "critical-chain", "ssh.service"])


def boot(image: GuestImage, tmp: Path, overlay: Path, extra: list[str]
         ) -> tuple[Any, Any, float, float]:
    """QEMU, its agent, seconds to the agent, QEMU's CPU seconds until then."""
    sock, serial = tmp / "qga.sock", tmp / "serial.log"
    sock.unlink(missing_ok=True)
    argv = imageboot.boot_argv(image, mem_mib=512, agent_socket=sock, serial_log=serial,
                               accel="tcg", overlay=overlay, vcpus=2, extra_cmdline=extra)
    t0 = time.monotonic()
    qemu = proc.spawn(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL)
    agent = _wait_for_agent(sock, qemu, serial, timeout=300)
    wall = time.monotonic() - t0
    stat = Path(f"/proc/{qemu.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return qemu, agent, wall, (int(stat[11]) + int(stat[12])) / 100


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--extra", default="quiet", help="kernel command line words to add")
    ap.add_argument("--mask", default="", help="units to mask in a first boot")
    ap.add_argument("--cmd", action="append", default=[], help="shell, in a first boot")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--blame", action="store_true")
    ap.add_argument("--image", default="", help="a cached image's directory")
    ap.add_argument("--pvh", action="store_true",
                    help="alternate the bzImage and its PVH kernel (ABBA), medians at the end")
    a = ap.parse_args()
    bz = load_image(Path(a.image)) if a.image else imagebuild.build_image()
    assert bz is not None, f"no complete image in {a.image}"
    elf = boot_image(bz.kernel) if a.pvh else None
    assert elf is not None or not a.pvh, "this image's kernel has no PVH entry"
    extra = a.extra.split()
    walls: dict[str, list[float]] = {"bzImage": [], "pvh": []}
    for r in range(a.runs):
        kind = "pvh" if a.pvh and (r % 4 in (1, 2)) else "bzImage"
        image = dataclasses.replace(bz, kernel=elf) if kind == "pvh" and elf else bz
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            overlay = imageboot.make_overlay(image, tmp / "overlay.qcow2")
            if a.mask or a.cmd:
                qemu, agent, _, _ = boot(image, tmp, overlay, extra)
                for c in a.cmd:
                    print(agent.exec("/bin/sh", "-c", c, timeout=200))
                if a.mask:
                    print(agent.exec("/usr/bin/systemctl", "mask", *a.mask.split()))
                agent.exec("/bin/sync")
                agent.close()
                qemu.kill()
                qemu.wait()
            qemu, agent, wall, cpu = boot(image, tmp, overlay, extra)
            up = float(agent.exec("/usr/bin/cat", "/proc/uptime")[1].split()[0])
            walls[kind].append(wall)
            print(f"run {r} ({kind}): agent after {wall:.1f}s (guest uptime {up:.1f}s) "
                  f"qemu cpu {cpu:.1f}s", flush=True)
            if a.blame:
                agent.exec("/usr/bin/systemctl", "is-system-running", "--wait", timeout=180)
                for argv in REPORTS:
                    print(agent.exec(f"/usr/bin/{argv[0]}", *argv[1:])[1][:3500])
            agent.close()
            qemu.kill()
            qemu.wait()
    from hugelab.host.inspect import cpu_model
    from hugelab.host.paths import REAL
    print(f"CPU: {cpu_model(REAL)}, TCG")
    for kind, xs in walls.items():
        if xs:
            print(f"{kind:8s} {len(xs)} boots, median to the agent {statistics.median(xs):.2f} s")


if __name__ == "__main__":
    main()
