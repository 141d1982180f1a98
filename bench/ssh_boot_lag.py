"""How long after a copy's way in is ready hugelab's first command runs in it: boots a copy of a
domain (the demo domain by default) reached through its agent or over SSH, and compares the
guest's uptime at hugelab's first command with the moment systemd says the way in (ssh.service
or qemu-guest-agent.service) became active: the guest's own clock on both sides.

    flock /run/lock/hugelab-tests-host.lock .venv/bin/python bench/ssh_boot_lag.py ssh|agent \
        [--domain NAME] [--boots N] [--probe-connect S]

(--probe-connect 5: the boot's SSH probe as it was before it got its own short timeout.)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hugelab.owned import state_dir  # noqa: E402
from hugelab.vm.common.spec import VmSpec  # noqa: E402
from hugelab.vm.domains import ssh  # noqa: E402
from hugelab.vm.domains.libvirt_guest import Access, DomainGuest  # noqa: E402


def one(mode: str, domain: str) -> dict[str, float]:
    spec = VmSpec(mem_mib=512, vcpus=2, accel="tcg")
    access = Access(mode, "root", str(state_dir() / "ssh" / "id_ed25519"))
    t0 = time.monotonic()
    guest = DomainGuest(spec, domain=domain, uri="qemu:///system", name="lag", access=access)
    with guest:
        up = float(guest.target.exec(["cat", "/proc/uptime"]).stdout.split()[0])
        unit = "ssh.service" if mode == "ssh" else "qemu-guest-agent.service"
        shown = guest.target.exec(["systemctl", "show", unit, "-p",
                                   "ActiveEnterTimestampMonotonic"]).stdout
        active = int(shown.strip().split("=")[1]) / 1e6
    return {"boot_s": round(guest.boot_s, 2), "way_in_active_s": round(active, 2),
            "first_command_uptime_s": round(up, 2), "lag_s": round(up - active, 2),
            "wall_s": round(time.monotonic() - t0, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("ssh", "agent"))
    ap.add_argument("--domain", default="hugelab-demo-debian")
    ap.add_argument("--boots", type=int, default=2)
    ap.add_argument("--probe-connect", type=int, default=ssh.PROBE_CONNECT_S)
    args = ap.parse_args()
    ssh.PROBE_CONNECT_S = args.probe_connect
    for _ in range(args.boots):
        print(json.dumps({"mode": args.mode, "probe_connect_s": ssh.PROBE_CONNECT_S, **one(args.mode, args.domain)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
