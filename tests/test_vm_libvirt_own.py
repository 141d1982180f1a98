"""hugelab's own image-less guests under libvirtd (vm manager = "libvirt"), for real: a 2-arm
experiment (anonymous vs memfd 2 MiB guest RAM) runs in transient domains with evidence from
QEMU's smaps and libvirt's monitor; a SIGKILL during a trial then `hugelab recover` leaves no
domain, directory, QEMU or pool."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import HUGELAB
from tests.hostguard import host_state
from tests.vmhelpers import libvirt_missing, virsh

pytestmark = [pytest.mark.host, pytest.mark.vm, pytest.mark.slow]
PREFIX = "hugelab-own-"

EXPERIMENT = """\
name = "own-guest-libvirt"
seed = 4
blocks = 1

[vm]
manager = "libvirt"
mem = "256M"

[workload]
{workload}

[[arms]]
name = "anon"
backing = "4k"
vm = {{ backing = "anon" }}

[[arms]]
name = "memfd-2M"
backing = "4k"
vm = {{ backing = "memfd", page_size = "2M" }}
"""


@pytest.fixture(autouse=True)
def _libvirtd():
    reason = libvirt_missing()
    if reason:
        pytest.fail(reason)  # a real component this feature needs: never a silent skip


def domains() -> list[str]:
    return [n for n in virsh("list", "--all", "--name").stdout.split() if n.startswith(PREFIX)]


def directories() -> list[Path]:
    from hugelab.vm.common.libvirtd import OVERLAY_ROOT
    return list(OVERLAY_ROOT.glob(f"{PREFIX}*")) if OVERLAY_ROOT.exists() else []


def test_two_arms_in_libvirt_owned_guests(tmp_path):
    env = {**os.environ, "HUGELAB_STATE_DIR": str(tmp_path / "state")}
    before = host_state()
    exp = tmp_path / "e.toml"
    exp.write_text(EXPERIMENT.format(workload='kind = "hugelab-mem"\nworkload = "chase"\n'
                                     'size = "32M"\nduration = 1.0'))
    r = subprocess.run([*HUGELAB, "run", str(exp), "--store", "s.db"], capture_output=True,
                       text=True, cwd=tmp_path, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    shown = json.loads(subprocess.run([*HUGELAB, "show", "1", "--store", "s.db", "--json"],
                                      capture_output=True, text=True, cwd=tmp_path, env=env,
                                      check=True).stdout)
    for t in shown["trials"]:
        assert t["status"] == "ok", f"{t['arm']}: {t['error']}"
        ev = t["evidence"]
        assert ev["checks"]["vm"]["status"] == "verified", ev["checks"]
        assert ev["qemu"]["domain"]["manager"] == "libvirt"
        assert ev["qemu"]["domain"]["transient"].startswith(PREFIX)
        memdev = ev["qemu"]["memdev"]  # QEMU's own account, through libvirt's monitor
        assert memdev and memdev[0]["size"] == 256 << 20, memdev
        want = 2048 if t["arm"] == "memfd-2M" else 4
        assert ev["qemu"]["kernel_page_size_kb"] == want, ev["qemu"]
        assert ev["tree"].get("samples"), ev["tree"]
    assert domains() == [] and directories() == []
    assert not list((tmp_path / "state" / "domains").glob("*.json"))
    assert host_state() == before


def test_sigkill_during_a_trial_then_recover_leaves_nothing(tmp_path):
    env = {**os.environ, "HUGELAB_STATE_DIR": str(tmp_path / "state")}
    before = host_state()
    exp = tmp_path / "e.toml"
    exp.write_text(EXPERIMENT.format(workload='kind = "hugelab-mem"\nworkload = "chase"\n'
                                     'size = "32M"\nduration = 120.0'))
    proc = subprocess.Popen([*HUGELAB, "run", str(exp), "--store", "s.db"], cwd=tmp_path,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    try:
        while not domains():
            assert proc.poll() is None, "the run ended before its guest started"
            assert time.monotonic() < deadline, "no domain appeared"
            time.sleep(0.5)
        time.sleep(3)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 30  # autodestroy: libvirtd ends the domain
    while domains() and time.monotonic() < deadline:
        time.sleep(0.5)
    r = subprocess.run([*HUGELAB, "recover"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert domains() == [] and directories() == []
    assert not list((tmp_path / "state" / "domains").glob("*.json"))
    assert host_state() == before


def test_manager_is_for_hugelabs_own_guests_only(tmp_path):
    exp = tmp_path / "e.toml"
    exp.write_text('[vm]\ndomain = "x"\nmanager = "libvirt"\n[workload]\nkind = "hugelab-mem"\n'
                   '[[arms]]\nname = "a"\nbacking = "4k"\nvm = { backing = "anon" }\n')
    r = subprocess.run([*HUGELAB, "run", str(exp), "--dry-run"], capture_output=True, text=True)
    assert r.returncode != 0 and "manager goes with hugelab's own guests" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
