"""tests/libvirtd_reaper.py: the daemons it starts are below it, and it reaps what they
orphan at once (the reason it exists: this machine's PID 1 reaps every ~1.9 s)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.hostguard import parent_pid
from tests.libvirtd_reaper import TITLE

pytestmark = pytest.mark.tools
ROOT = Path(__file__).resolve().parents[1]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_what_the_daemons_orphan_is_reaped_below_the_reaper_and_it_ends_with_them(tmp_path):
    # stand-ins for `virtlogd -d` and `libvirtd -d`: each daemonizes (its parent exits at
    # once); the "libvirtd" then starts a child through an intermediate that exits, as
    # libvirt starts its QEMUs, which so is orphaned
    pids = tmp_path / "pids"
    pids.mkdir()
    fake = (f"#!{sys.executable}\n"
            "import os, sys, time\n"
            "name = os.path.basename(sys.argv[0])\n"
            "if os.fork():\n    sys.exit(0)\n"
            f"open('{pids}/' + name, 'w').write(str(os.getpid()))\n"
            "if name == 'libvirtd':\n"
            "    middle = os.fork()\n"
            "    if middle == 0:\n"
            "        if os.fork() == 0:\n"
            f"            open('{pids}/orphan', 'w').write(str(os.getpid()))\n"
            "            time.sleep(0.5)\n"
            "        os._exit(0)\n"
            "    os.waitpid(middle, 0)\n"
            "time.sleep(1.5)\n")
    for name in ("virtlogd", "libvirtd"):
        (tmp_path / name).write_text(fake)
        (tmp_path / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    reaper = subprocess.Popen([sys.executable, "-m", "tests.libvirtd_reaper", "--serve", TITLE],
                              cwd=ROOT, env=env)
    try:
        deadline = time.monotonic() + 10
        while not all((pids / n).exists() for n in ("virtlogd", "libvirtd", "orphan")):
            assert time.monotonic() < deadline, list(pids.iterdir())
            time.sleep(0.02)
        for name in ("virtlogd", "libvirtd", "orphan"):
            pid = int((pids / name).read_text())
            # its own parent may still be exiting when it writes its pid: once that parent
            # is gone it is the reaper's child, never PID 1's
            deadline = time.monotonic() + 5
            while parent_pid(pid) != reaper.pid and time.monotonic() < deadline:
                assert parent_pid(pid) != 1, name
                time.sleep(0.01)
            assert parent_pid(pid) == reaper.pid, (name, parent_pid(pid))  # below it, not PID 1's
        orphan = int((pids / "orphan").read_text())
        while _state(orphan) not in ("Z", "gone"):  # it exits after 0.5 s
            time.sleep(0.01)
        deadline = time.monotonic() + 0.5  # PID 1 here takes up to ~1.9 s; the reaper, none
        while _state(orphan) == "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _state(orphan) == "gone"
        assert reaper.wait(timeout=10) == 0  # the daemons ended: nothing left below it
    finally:
        if reaper.poll() is None:
            reaper.kill()
            reaper.wait()
