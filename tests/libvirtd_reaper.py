"""libvirtd for the tests, under a parent that reaps its QEMUs the moment they exit.

libvirt's `destroy` sends SIGTERM to a domain's QEMU and polls every 200 ms until the pid is
gone, and a daemonized QEMU's parent is PID 1, so the pid is gone only once PID 1 reaps it.
systemd reaps at once. This CI machine's PID 1 (a sandbox agent) reaps orphans about every
1.9 s (`orphan_reap_s()`: 1.57-1.90 s measured), so every destroy took 1.4-1.8 s more than on a
user's host: about a minute of the suite. Here libvirtd runs under a small process that is a
child subreaper (prctl PR_SET_CHILD_SUBREAPER) and reaps every orphan below it at once, as
systemd does; the daemons and what they start are otherwise as before (`virtlogd -d`,
`libvirtd -d`).

    python -m tests.libvirtd_reaper --ensure   # ./bootstrap test, before the lanes start

`--ensure` leaves a libvirtd alone when PID 1 reaps promptly, or when it already runs under
this reaper, or when any domain runs (restarting it would orphan them); otherwise it stops that
libvirtd and starts one under a reaper. `start()` is what tests/vmhelpers.start_daemons uses
when no libvirtd answers.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.hostguard import parent_pid

PR_SET_CHILD_SUBREAPER = 36
VIRSH = ["virsh", "-c", "qemu:///system"]
DAEMONS = ("virtlogd", "libvirtd")
TITLE = "hugelab-tests-libvirtd-reaper"  # in the reaper's argv: how --ensure recognises it


def _daemon(name: str) -> str | None:
    return shutil.which(name) or (f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists()
                                  else None)


def _pids(comm: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "comm").read_text().strip() == comm:
                    out.append(int(d.name))
            except OSError:
                continue
    return out


def _under_reaper(pid: int) -> bool:
    parent = parent_pid(pid)
    try:
        return TITLE.encode() in Path(f"/proc/{parent}/cmdline").read_bytes()
    except OSError:
        return False


def orphan_reap_s(limit_s: float = 3.0) -> float:
    """How long PID 1 took to reap an orphan after it exited (up to `limit_s`): a `sleep 0.1`
    whose shell has already gone."""
    out = subprocess.run(["sh", "-c", "sleep 0.1 & echo $!"], capture_output=True, text=True,
                         check=True).stdout
    pid, t0 = int(out), time.monotonic()
    while time.monotonic() - t0 < limit_s + 0.1:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.01)
    return max(0.0, time.monotonic() - t0 - 0.1)


def _answers() -> bool:
    try:
        return subprocess.run([*VIRSH, "uri"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _running_domains() -> list[str]:
    r = subprocess.run([*VIRSH, "list", "--name"], capture_output=True, text=True, timeout=60)
    return [n for n in r.stdout.split() if n] if r.returncode == 0 else ["?"]


def start(wait_s: float = 20.0) -> bool:
    """Start the reaper (detached), which starts virtlogd and libvirtd under it; True once
    libvirtd answers."""
    subprocess.Popen([sys.executable, "-m", "tests.libvirtd_reaper", "--serve", TITLE],
                     cwd=Path(__file__).resolve().parents[1], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if _answers():
            return True
        time.sleep(0.2)
    return False


def ensure() -> str:
    """What --ensure did, in words."""
    if os.geteuid() != 0 or _daemon("libvirtd") is None:
        return "not root or no libvirtd: nothing to do"
    running = _pids("libvirtd")
    if running and all(_under_reaper(p) for p in running):
        return "libvirtd already runs under the reaper"
    slow = orphan_reap_s()
    if slow < 0.2:
        return f"PID 1 reaps orphans in {slow:.2f}s: libvirtd left as it is"
    if running:
        busy = _running_domains()
        if busy:
            return f"libvirtd left as it is: domains running ({', '.join(busy)})"
        for pid in running:
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while _pids("libvirtd") and time.monotonic() < deadline:
            time.sleep(0.1)
    ok = start()
    return (f"PID 1 reaps orphans after {slow:.2f}s: libvirtd "
            f"{'started' if ok else 'did not answer'} under the reaper")


def serve() -> int:
    """Become a child subreaper, start the daemons, reap until nothing is left below."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return 1
    for name in DAEMONS:
        path = _daemon(name)
        if path:  # a second virtlogd beside a running one exits at once (its pid file)
            subprocess.run([path, "-d"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=60)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return 0  # the daemons are gone, and so is everything they started
        except InterruptedError:
            continue


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        sys.exit(serve())
    if sys.argv[1:2] == ["--ensure"]:
        print(f"libvirtd: {ensure()}")
        sys.exit(0)
    sys.exit("usage: python -m tests.libvirtd_reaper --ensure")
